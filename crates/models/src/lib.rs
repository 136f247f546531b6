//! Model graphs, written once against [`lockstep_graph::Backend`].
//!
//! The llama, qwen2 and gemma3 families share one decoder-block skeleton; where they differ
//! (biases, per-head Q/K norms, post-norms, embedding scale, activation, RoPE style and bases,
//! sliding window) the difference is a field of [`ModelConfig`] or an optional weight, decided
//! here and nowhere else. Backends see only ops.

mod config;
mod graph;
mod weights;

pub use config::{Arch, ModelConfig};
pub use graph::forward;
pub use weights::{LayerWeights, Model};

use lockstep_gguf::{GgufError, MetadataError};
use lockstep_graph::BackendError;

#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error("unknown architecture `{0}` (lockstep has graphs for llama, qwen2 and gemma3)")]
    UnknownArchitecture(String),
    #[error(transparent)]
    Metadata(MetadataError),
    #[error("model config: {0}")]
    Config(String),
    #[error("tensor `{0}` is missing from the model file")]
    MissingTensor(String),
    #[error("tensor `{name}` has shape {found:?}, expected {expected:?}")]
    WrongShape {
        name: String,
        found: Vec<u64>,
        expected: Vec<u64>,
    },
    #[error(transparent)]
    Gguf(#[from] GgufError),
    #[error(transparent)]
    Backend(#[from] BackendError),
}
