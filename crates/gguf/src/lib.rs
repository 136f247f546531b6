//! GGUF: the file format of llama.cpp models.
//!
//! [`parse`] reads a header from bytes and validates every structural claim in it (counts,
//! lengths, offsets, sizes) against the bytes actually present, so a hostile or damaged file
//! produces a [`GgufError`] naming the problem and its byte offset (or tensor), never a panic,
//! a hang, or an allocation the file could not justify. [`GgufFile`] memory-maps a file and
//! hands out tensor bytes; [`GgufWriter`] writes files (tests and synthetic models).

mod error;
mod reader;
mod value;
mod writer;

pub use error::GgufError;
pub use reader::{
    parse, GgufFile, Header, TensorInfo, DEFAULT_ALIGNMENT, GGUF_MAGIC, MAX_METADATA_VALUES,
};
pub use value::{Metadata, MetadataError, Value, ValueType};
pub use writer::{GgufWriter, WriterTensor};

pub use lockstep_quant::GgmlType;
