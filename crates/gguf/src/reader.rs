//! Parsing and validating a GGUF header; memory-mapping the tensor data.

use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};

use lockstep_quant::GgmlType;
use memmap2::Mmap;

use crate::error::GgufError;
use crate::value::{Metadata, Value, ValueType};

/// "GGUF" read as a little-endian u32.
pub const GGUF_MAGIC: [u8; 4] = *b"GGUF";
/// Alignment of the data section and of each tensor when `general.alignment` is absent.
pub const DEFAULT_ALIGNMENT: u64 = 32;
/// ggml tensors have at most four dimensions.
const MAX_DIMS: u32 = 4;
/// A parsed value takes ~32 bytes of memory however few bytes it had in the file, so a file of
/// nothing but u8 arrays could make the parser allocate ~32x its size. Real files need far
/// fewer values (gemma3's 262k-token vocabulary, scores and types: under 1M), so the total is
/// capped at 16M (~512 MiB at most).
pub const MAX_METADATA_VALUES: u64 = 1 << 24;
/// Arrays of arrays are legal; bound the depth so a hostile file cannot exhaust the stack.
const MAX_ARRAY_DEPTH: usize = 8;

/// One tensor's description from the header.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorInfo {
    pub name: String,
    /// Dimensions in ggml order: `dims[0]` is the contiguous row length.
    pub dims: Vec<u64>,
    pub ty: GgmlType,
    /// Offset of the data relative to the start of the data section.
    pub offset: u64,
    /// Bytes of data, from the shape and type.
    pub size: u64,
    /// Where this tensor's info record starts in the file (for error messages and `inspect`).
    pub info_offset: u64,
}

impl TensorInfo {
    pub fn n_elements(&self) -> u64 {
        self.dims.iter().product()
    }

    /// Number of rows (product of all dimensions but the first).
    pub fn n_rows(&self) -> u64 {
        self.dims.iter().skip(1).product()
    }

    pub fn row_len(&self) -> u64 {
        self.dims.first().copied().unwrap_or(1)
    }
}

/// A parsed, validated header.
#[derive(Clone, Debug)]
pub struct Header {
    pub version: u32,
    pub metadata: Metadata,
    pub tensors: Vec<TensorInfo>,
    pub alignment: u64,
    /// Absolute offset of the data section.
    pub data_offset: u64,
    /// Length of the whole file the header was validated against.
    pub file_len: u64,
    tensor_index: HashMap<String, usize>,
}

impl Header {
    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.tensor_index.get(name).map(|&i| &self.tensors[i])
    }

    /// Absolute byte range of a tensor's data in the file.
    pub fn tensor_range(&self, t: &TensorInfo) -> std::ops::Range<usize> {
        let start = (self.data_offset + t.offset) as usize;
        start..start + t.size as usize
    }
}

/// A bounds-checked reader over the header bytes that knows its offset for error messages.
struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
    /// Metadata values still allowed (see [`MAX_METADATA_VALUES`]).
    values_left: u64,
}

impl<'a> Cursor<'a> {
    fn offset(&self) -> u64 {
        self.pos as u64
    }

    fn remaining(&self) -> u64 {
        (self.bytes.len() - self.pos) as u64
    }

    fn take(&mut self, n: u64, what: &dyn Fn() -> String) -> Result<&'a [u8], GgufError> {
        if n > self.remaining() {
            return Err(GgufError::Truncated {
                what: what(),
                offset: self.offset(),
                needed: n,
                file_len: self.bytes.len() as u64,
            });
        }
        let n = n as usize;
        let s = &self.bytes[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    fn array<const N: usize>(&mut self, what: &dyn Fn() -> String) -> Result<[u8; N], GgufError> {
        let s = self.take(N as u64, what)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }

    fn u32(&mut self, what: &dyn Fn() -> String) -> Result<u32, GgufError> {
        self.array(what).map(u32::from_le_bytes)
    }

    fn u64(&mut self, what: &dyn Fn() -> String) -> Result<u64, GgufError> {
        self.array(what).map(u64::from_le_bytes)
    }

    /// Refuses a count of items that cannot fit in the rest of the file.
    fn check_count(
        &self,
        what: &'static str,
        count: u64,
        min_item_size: u64,
        at: u64,
    ) -> Result<(), GgufError> {
        let max = self.remaining() / min_item_size.max(1);
        if count > max {
            return Err(GgufError::CountTooLarge {
                what,
                count,
                offset: at,
                remaining: self.remaining(),
                max,
            });
        }
        Ok(())
    }

    fn string(&mut self, what: &dyn Fn() -> String) -> Result<String, GgufError> {
        let at = self.offset();
        let len = self.u64(&|| format!("length of {}", what()))?;
        let bytes = self.take(len, what)?;
        match std::str::from_utf8(bytes) {
            Ok(s) => Ok(s.to_string()),
            Err(e) => Err(GgufError::InvalidUtf8 {
                what: what(),
                offset: at + 8 + e.valid_up_to() as u64,
            }),
        }
    }

    fn value(&mut self, ty: ValueType, key: &str, depth: usize) -> Result<Value, GgufError> {
        let what = || format!("value of `{key}`");
        if self.values_left == 0 {
            return Err(GgufError::TooManyValues {
                key: key.to_string(),
                offset: self.offset(),
                max: MAX_METADATA_VALUES,
            });
        }
        self.values_left -= 1;
        Ok(match ty {
            ValueType::U8 => Value::U8(self.array::<1>(&what)?[0]),
            ValueType::I8 => Value::I8(self.array::<1>(&what)?[0] as i8),
            ValueType::U16 => Value::U16(u16::from_le_bytes(self.array(&what)?)),
            ValueType::I16 => Value::I16(i16::from_le_bytes(self.array(&what)?)),
            ValueType::U32 => Value::U32(u32::from_le_bytes(self.array(&what)?)),
            ValueType::I32 => Value::I32(i32::from_le_bytes(self.array(&what)?)),
            ValueType::F32 => Value::F32(f32::from_le_bytes(self.array(&what)?)),
            ValueType::U64 => Value::U64(u64::from_le_bytes(self.array(&what)?)),
            ValueType::I64 => Value::I64(i64::from_le_bytes(self.array(&what)?)),
            ValueType::F64 => Value::F64(f64::from_le_bytes(self.array(&what)?)),
            ValueType::Bool => {
                let at = self.offset();
                match self.array::<1>(&what)?[0] {
                    0 => Value::Bool(false),
                    1 => Value::Bool(true),
                    byte => {
                        return Err(GgufError::BadBool {
                            key: key.to_string(),
                            byte,
                            offset: at,
                        })
                    }
                }
            }
            ValueType::String => Value::String(self.string(&what)?),
            ValueType::Array => {
                let at = self.offset();
                if depth >= MAX_ARRAY_DEPTH {
                    return Err(GgufError::NestingTooDeep {
                        key: key.to_string(),
                        offset: at,
                        max_depth: MAX_ARRAY_DEPTH,
                    });
                }
                let type_id = self.u32(&|| format!("array type of `{key}`"))?;
                let elem =
                    ValueType::from_id(type_id).ok_or_else(|| GgufError::UnknownValueType {
                        key: key.to_string(),
                        type_id,
                        offset: at,
                    })?;
                let count_at = self.offset();
                let count = self.u64(&|| format!("array length of `{key}`"))?;
                self.check_count("array element", count, elem.min_encoded_size(), count_at)?;
                let mut items = Vec::with_capacity(count as usize);
                for _ in 0..count {
                    items.push(self.value(elem, key, depth + 1)?);
                }
                Value::Array(elem, items)
            }
        })
    }
}

/// Parses and validates the header of a GGUF file held in `bytes` (the whole file).
///
/// Every tensor's data range is checked against `bytes.len()`, so after this succeeds,
/// slicing tensor data cannot go out of bounds.
pub fn parse(bytes: &[u8]) -> Result<Header, GgufError> {
    let mut c = Cursor {
        bytes,
        pos: 0,
        values_left: MAX_METADATA_VALUES,
    };
    let file_len = bytes.len() as u64;

    let magic: [u8; 4] = c.array(&|| "magic".to_string())?;
    if magic != GGUF_MAGIC {
        return Err(GgufError::BadMagic { found: magic });
    }
    let version = c.u32(&|| "version".to_string())?;
    if version != 2 && version != 3 {
        let hint = if version == 1 {
            " (version 1 used 32-bit counts and is obsolete)"
        } else if version.swap_bytes() == 2 || version.swap_bytes() == 3 {
            " (the file looks big-endian)"
        } else {
            ""
        };
        return Err(GgufError::BadVersion { version, hint });
    }
    let tensors_at = c.offset();
    let n_tensors = c.u64(&|| "tensor count".to_string())?;
    let kv_at = c.offset();
    let n_kv = c.u64(&|| "metadata count".to_string())?;
    // A key/value pair needs at least a key length, a type and one byte; a tensor info at
    // least a name length, n_dims, a type and an offset.
    c.check_count("metadata", n_kv, 8 + 4 + 1, kv_at)?;
    c.check_count("tensor", n_tensors, 8 + 4 + 4 + 8, tensors_at)?;

    let mut metadata = Metadata::new();
    // Where `general.alignment` sits, so a bad value can be reported with its offset.
    let mut alignment_at = None;
    for i in 0..n_kv {
        let at = c.offset();
        let key = c.string(&|| format!("metadata key #{i}"))?;
        let type_at = c.offset();
        let type_id = c.u32(&|| format!("type of `{key}`"))?;
        let ty = ValueType::from_id(type_id).ok_or_else(|| GgufError::UnknownValueType {
            key: key.clone(),
            type_id,
            offset: type_at,
        })?;
        let value = c.value(ty, &key, 0)?;
        if metadata.contains(&key) {
            return Err(GgufError::DuplicateKey { key, offset: at });
        }
        if key == "general.alignment" {
            alignment_at = Some(at);
        }
        metadata.insert(key, value);
    }

    let alignment = match metadata.get("general.alignment") {
        None => DEFAULT_ALIGNMENT,
        Some(Value::U32(a)) if *a != 0 && a.is_power_of_two() => u64::from(*a),
        Some(v) => {
            return Err(GgufError::BadAlignment {
                value: format!("{} ({})", v.summary(4), v.value_type()),
                offset: alignment_at.unwrap_or(0),
            })
        }
    };

    let mut tensors = Vec::with_capacity(n_tensors as usize);
    let mut tensor_index = HashMap::with_capacity(n_tensors as usize);
    for i in 0..n_tensors {
        let info_offset = c.offset();
        let name = c.string(&|| format!("name of tensor #{i}"))?;
        let n_dims = c.u32(&|| format!("n_dims of tensor `{name}`"))?;
        if n_dims > MAX_DIMS {
            return Err(GgufError::TooManyDims {
                name,
                n_dims,
                offset: info_offset,
            });
        }
        let mut dims = Vec::with_capacity(n_dims as usize);
        for d in 0..n_dims {
            dims.push(c.u64(&|| format!("dimension {d} of tensor `{name}`"))?);
        }
        let type_at = c.offset();
        let type_id = c.u32(&|| format!("type of tensor `{name}`"))?;
        let offset = c.u64(&|| format!("data offset of tensor `{name}`"))?;
        let ty = GgmlType::from_id(type_id).ok_or_else(|| GgufError::UnknownTensorType {
            name: name.clone(),
            type_id,
            offset: type_at,
        })?;
        let size = tensor_size(&name, &dims, ty, info_offset)?;
        if tensor_index.contains_key(&name) {
            return Err(GgufError::DuplicateTensor {
                name,
                offset: info_offset,
            });
        }
        tensor_index.insert(name.clone(), tensors.len());
        tensors.push(TensorInfo {
            name,
            dims,
            ty,
            offset,
            size,
            info_offset,
        });
    }

    let data_offset = c.offset().next_multiple_of(alignment);
    for t in &tensors {
        if t.offset % alignment != 0 {
            return Err(GgufError::MisalignedTensor {
                name: t.name.clone(),
                data_offset: t.offset,
                alignment,
            });
        }
        // Checked on absolute offsets, start included: a zero-byte tensor still has to start
        // inside the file, or slicing its (empty) data would panic when the file ends inside
        // the padding before the data section.
        let start = data_offset.checked_add(t.offset);
        let end = start.and_then(|s| s.checked_add(t.size));
        match end {
            Some(end) if end <= file_len => {}
            _ => {
                return Err(GgufError::TensorOutOfBounds {
                    name: t.name.clone(),
                    start: data_offset.saturating_add(t.offset),
                    end: data_offset.saturating_add(t.offset).saturating_add(t.size),
                    file_len,
                })
            }
        }
    }
    let mut by_offset: Vec<&TensorInfo> = tensors.iter().filter(|t| t.size > 0).collect();
    by_offset.sort_by_key(|t| t.offset);
    for pair in by_offset.windows(2) {
        let (a, b) = (pair[0], pair[1]);
        if a.offset + a.size > b.offset {
            return Err(GgufError::TensorOverlap {
                name: b.name.clone(),
                start: data_offset + b.offset,
                end: data_offset + b.offset + b.size,
                other: a.name.clone(),
                other_end: data_offset + a.offset + a.size,
            });
        }
    }

    Ok(Header {
        version,
        metadata,
        tensors,
        alignment,
        data_offset,
        file_len,
        tensor_index,
    })
}

fn tensor_size(name: &str, dims: &[u64], ty: GgmlType, at: u64) -> Result<u64, GgufError> {
    let bad = |why: String| GgufError::BadShape {
        name: name.to_string(),
        dims: dims.to_vec(),
        offset: at,
        why,
    };
    let mut n: u64 = 1;
    for &d in dims {
        // ggml stores dimensions as int64_t.
        if d > i64::MAX as u64 {
            return Err(bad(format!("dimension {d} exceeds i64")));
        }
        n = n
            .checked_mul(d)
            .filter(|&n| n <= i64::MAX as u64)
            .ok_or_else(|| bad("element count overflows".into()))?;
    }
    let row = dims.first().copied().unwrap_or(1);
    if row % ty.block_size() as u64 != 0 {
        return Err(GgufError::ShapeTypeMismatch {
            name: name.to_string(),
            ty,
            row,
            block: ty.block_size(),
        });
    }
    (n / ty.block_size() as u64)
        .checked_mul(ty.type_size() as u64)
        .ok_or_else(|| bad("byte size overflows".into()))
}

/// A memory-mapped GGUF file with its validated header.
pub struct GgufFile {
    path: PathBuf,
    mmap: Mmap,
    header: Header,
}

impl GgufFile {
    pub fn open(path: impl AsRef<Path>) -> Result<GgufFile, GgufError> {
        let path = path.as_ref().to_path_buf();
        let file = File::open(&path).map_err(|e| GgufError::io(&path, e))?;
        // SAFETY: the map is read-only and private to this process. Another process truncating
        // or rewriting the file while it is mapped is outside what any mmap-based loader can
        // defend against (llama.cpp makes the same assumption); lockstep never writes to files it
        // has mapped.
        let mmap = unsafe { Mmap::map(&file) }.map_err(|e| GgufError::io(&path, e))?;
        let header = parse(&mmap)?;
        Ok(GgufFile { path, mmap, header })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn header(&self) -> &Header {
        &self.header
    }

    pub fn metadata(&self) -> &Metadata {
        &self.header.metadata
    }

    pub fn tensors(&self) -> &[TensorInfo] {
        &self.header.tensors
    }

    pub fn tensor_info(&self, name: &str) -> Result<&TensorInfo, GgufError> {
        self.header
            .tensor(name)
            .ok_or_else(|| GgufError::NoSuchTensor(name.to_string()))
    }

    /// The raw bytes of a tensor (in its stored type). In bounds by construction: `parse`
    /// checked every range against the file length.
    pub fn tensor_data(&self, t: &TensorInfo) -> &[u8] {
        &self.mmap[self.header.tensor_range(t)]
    }

    /// The whole file's bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.mmap
    }

    /// Total bytes of tensor data.
    pub fn tensor_bytes(&self) -> u64 {
        self.header.tensors.iter().map(|t| t.size).sum()
    }
}
