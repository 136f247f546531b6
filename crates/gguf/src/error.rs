//! Every way a GGUF file can be wrong, each naming where.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum GgufError {
    #[error("cannot open {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "bad magic \"{}\" ({found:02x?}) at offset 0: not a GGUF file (expected \"GGUF\")",
        found.escape_ascii()
    )]
    BadMagic { found: [u8; 4] },
    #[error(
        "unsupported GGUF version {version} at offset 4{hint} (lockstep reads versions 2 and 3)"
    )]
    BadVersion { version: u32, hint: &'static str },
    #[error("truncated file: {what} needs {needed} bytes at offset {offset}, but the file ends at {file_len}")]
    Truncated {
        what: String,
        offset: u64,
        needed: u64,
        file_len: u64,
    },
    #[error("{what} count {count} at offset {offset} is impossible: the remaining {remaining} bytes could hold at most {max}")]
    CountTooLarge {
        what: &'static str,
        count: u64,
        offset: u64,
        remaining: u64,
        max: u64,
    },
    #[error("invalid UTF-8 in {what} at offset {offset}")]
    InvalidUtf8 { what: String, offset: u64 },
    #[error("unknown metadata value type {type_id} for key `{key}` at offset {offset}")]
    UnknownValueType {
        key: String,
        type_id: u32,
        offset: u64,
    },
    #[error("metadata key `{key}` at offset {offset}: arrays nested deeper than {max_depth}")]
    NestingTooDeep {
        key: String,
        offset: u64,
        max_depth: usize,
    },
    #[error("metadata key `{key}` at offset {offset}: the file holds more than {max} metadata values (refused to bound memory)")]
    TooManyValues { key: String, offset: u64, max: u64 },
    #[error("duplicate metadata key `{key}` at offset {offset}")]
    DuplicateKey { key: String, offset: u64 },
    #[error("general.alignment = {value} at offset {offset} is invalid (must be a non-zero power of two u32)")]
    BadAlignment { value: String, offset: u64 },
    #[error("metadata key `{key}`: bool byte {byte} at offset {offset} (must be 0 or 1)")]
    BadBool { key: String, byte: u8, offset: u64 },
    #[error("tensor `{name}` at offset {offset}: {n_dims} dimensions (at most 4 supported)")]
    TooManyDims {
        name: String,
        n_dims: u32,
        offset: u64,
    },
    #[error("tensor `{name}` at offset {offset}: invalid shape {dims:?} ({why})")]
    BadShape {
        name: String,
        dims: Vec<u64>,
        offset: u64,
        why: String,
    },
    #[error("tensor `{name}` at offset {offset}: unknown tensor type id {type_id}")]
    UnknownTensorType {
        name: String,
        type_id: u32,
        offset: u64,
    },
    #[error("tensor `{name}`: row length {row} is not a multiple of {ty}'s block size {block}")]
    ShapeTypeMismatch {
        name: String,
        ty: lockstep_quant::GgmlType,
        row: u64,
        block: usize,
    },
    #[error("duplicate tensor name `{name}` at offset {offset}")]
    DuplicateTensor { name: String, offset: u64 },
    #[error(
        "tensor `{name}`: data offset {data_offset} is not a multiple of the alignment {alignment}"
    )]
    MisalignedTensor {
        name: String,
        data_offset: u64,
        alignment: u64,
    },
    #[error("tensor `{name}`: data [{start}, {end}) lies outside the file (data section ends at {file_len})")]
    TensorOutOfBounds {
        name: String,
        start: u64,
        end: u64,
        file_len: u64,
    },
    #[error("tensor `{name}` data [{start}, {end}) overlaps tensor `{other}` data, which ends at {other_end}")]
    TensorOverlap {
        name: String,
        start: u64,
        end: u64,
        other: String,
        other_end: u64,
    },
    #[error("tensor `{0}` not found")]
    NoSuchTensor(String),
    #[error("writing GGUF: {0}")]
    Write(String),
}

impl GgufError {
    /// Attach a path to an I/O failure.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> GgufError {
        GgufError::Io {
            path: path.into(),
            source,
        }
    }
}
