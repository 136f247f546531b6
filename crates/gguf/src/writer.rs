//! Writing GGUF v3 files: used by tests (malformed corpora start from real headers written
//! back out) and to build synthetic models of any quant type.

use std::io::Write;

use lockstep_quant::GgmlType;

use crate::error::GgufError;
use crate::reader::DEFAULT_ALIGNMENT;
use crate::value::{Metadata, Value};

/// A tensor to write: its data must already be encoded in `ty`.
#[derive(Clone, Debug)]
pub struct WriterTensor {
    pub name: String,
    pub dims: Vec<u64>,
    pub ty: GgmlType,
    pub data: Vec<u8>,
}

#[derive(Clone, Debug, Default)]
pub struct GgufWriter {
    pub metadata: Metadata,
    pub tensors: Vec<WriterTensor>,
}

impl GgufWriter {
    pub fn new() -> GgufWriter {
        GgufWriter::default()
    }

    pub fn set(&mut self, key: impl Into<String>, value: Value) -> &mut Self {
        self.metadata.insert(key, value);
        self
    }

    /// Adds a tensor after checking that its byte length matches its shape and type.
    pub fn add_tensor(
        &mut self,
        name: impl Into<String>,
        dims: &[u64],
        ty: GgmlType,
        data: Vec<u8>,
    ) -> Result<&mut Self, GgufError> {
        let name = name.into();
        // The reader requires every row (dims[0]) to be whole blocks, not just the total, so
        // refuse here what could never be read back.
        let row = dims.first().copied().unwrap_or(1);
        if row % ty.block_size() as u64 != 0 {
            return Err(GgufError::Write(format!(
                "tensor `{name}`: row length {row} is not a multiple of {ty}'s block size {}",
                ty.block_size()
            )));
        }
        let n: u64 = dims.iter().product();
        let expected = ty.row_bytes(n).ok_or_else(|| {
            GgufError::Write(format!(
                "tensor `{name}`: {n} elements is not a multiple of {ty}'s block size"
            ))
        })?;
        if expected != data.len() as u64 {
            return Err(GgufError::Write(format!(
                "tensor `{name}`: {} bytes given, shape {dims:?} of {ty} needs {expected}",
                data.len()
            )));
        }
        self.tensors.push(WriterTensor {
            name,
            dims: dims.to_vec(),
            ty,
            data,
        });
        Ok(self)
    }

    fn alignment(&self) -> u64 {
        match self.metadata.get("general.alignment") {
            Some(Value::U32(a)) if *a != 0 && a.is_power_of_two() => u64::from(*a),
            _ => DEFAULT_ALIGNMENT,
        }
    }

    /// Encodes the whole file into memory.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(b"GGUF");
        out.extend_from_slice(&3u32.to_le_bytes());
        out.extend_from_slice(&(self.tensors.len() as u64).to_le_bytes());
        out.extend_from_slice(&(self.metadata.len() as u64).to_le_bytes());
        for (k, v) in self.metadata.iter() {
            write_str(&mut out, k);
            out.extend_from_slice(&(v.value_type() as u32).to_le_bytes());
            write_value(&mut out, v);
        }
        let align = self.alignment();
        let mut offset = 0u64;
        let mut offsets = Vec::with_capacity(self.tensors.len());
        for t in &self.tensors {
            write_str(&mut out, &t.name);
            out.extend_from_slice(&(t.dims.len() as u32).to_le_bytes());
            for d in &t.dims {
                out.extend_from_slice(&d.to_le_bytes());
            }
            out.extend_from_slice(&t.ty.id().to_le_bytes());
            out.extend_from_slice(&offset.to_le_bytes());
            offsets.push(offset);
            offset = (offset + t.data.len() as u64).next_multiple_of(align);
        }
        let data_start = (out.len() as u64).next_multiple_of(align);
        out.resize(data_start as usize, 0);
        for (t, off) in self.tensors.iter().zip(offsets) {
            out.resize((data_start + off) as usize, 0);
            out.extend_from_slice(&t.data);
        }
        out
    }

    pub fn write_to(&self, mut w: impl Write) -> std::io::Result<()> {
        w.write_all(&self.to_bytes())
    }

    pub fn write_file(&self, path: impl AsRef<std::path::Path>) -> Result<(), GgufError> {
        let path = path.as_ref();
        std::fs::write(path, self.to_bytes()).map_err(|e| GgufError::io(path, e))
    }
}

fn write_str(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

fn write_value(out: &mut Vec<u8>, v: &Value) {
    match v {
        Value::U8(x) => out.push(*x),
        Value::I8(x) => out.push(*x as u8),
        Value::U16(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::I16(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::U32(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::I32(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::F32(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::Bool(x) => out.push(u8::from(*x)),
        Value::String(s) => write_str(out, s),
        Value::Array(t, items) => {
            out.extend_from_slice(&(*t as u32).to_le_bytes());
            out.extend_from_slice(&(items.len() as u64).to_le_bytes());
            for item in items {
                write_value(out, item);
            }
        }
        Value::U64(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::I64(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::F64(x) => out.extend_from_slice(&x.to_le_bytes()),
    }
}
