//! Hyperparameters read from GGUF metadata, checked against each other.

use lockstep_gguf::{Metadata, MetadataError};
use lockstep_graph::{Activation, RopeStyle};

use crate::ModelError;

/// The architectures lockstep has a graph for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arch {
    Llama,
    Gemma3,
    Qwen2,
}

impl Arch {
    pub fn from_name(name: &str) -> Option<Arch> {
        match name {
            "llama" => Some(Arch::Llama),
            "gemma3" => Some(Arch::Gemma3),
            "qwen2" => Some(Arch::Qwen2),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Arch::Llama => "llama",
            Arch::Gemma3 => "gemma3",
            Arch::Qwen2 => "qwen2",
        }
    }
}

/// Everything the graph needs to know about a model, independent of any backend.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelConfig {
    pub arch: Arch,
    pub n_layers: usize,
    pub n_embd: usize,
    pub n_ff: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    pub n_vocab: usize,
    pub n_ctx_train: usize,
    pub rms_eps: f32,
    pub rope_style: RopeStyle,
    pub n_rot: usize,
    /// RoPE base of global-attention layers (all layers for llama/qwen2).
    pub rope_base: f32,
    /// RoPE base of sliding-window layers (gemma3).
    pub rope_base_local: f32,
    /// Sliding window width of local layers, `None` for models without one.
    pub sliding_window: Option<u32>,
    /// Every `swa_pattern`-th layer (index % pattern == pattern - 1) is global.
    pub swa_pattern: usize,
    pub activation: Activation,
    /// Multiplies q.k in attention.
    pub attn_scale: f32,
    /// Multiplies the embeddings (gemma: sqrt(n_embd)).
    pub embd_scale: Option<f32>,
}

impl ModelConfig {
    pub fn from_metadata(md: &Metadata) -> Result<ModelConfig, ModelError> {
        let arch_name = md.get_str("general.architecture")?;
        let arch = Arch::from_name(arch_name)
            .ok_or_else(|| ModelError::UnknownArchitecture(arch_name.to_string()))?;
        let a = arch_name;
        let key = |k: &str| format!("{a}.{k}");
        let usize_of = |k: &str| -> Result<usize, ModelError> {
            let v = md.get_u64(&key(k))?;
            usize::try_from(v)
                .map_err(|_| ModelError::Config(format!("{}: {v} is too large", key(k))))
        };
        let n_layers = usize_of("block_count")?;
        let n_embd = usize_of("embedding_length")?;
        let n_ff = usize_of("feed_forward_length")?;
        let n_heads = usize_of("attention.head_count")?;
        let n_kv_heads = match md.opt_u64(&key("attention.head_count_kv"))? {
            Some(v) => v as usize,
            None => n_heads,
        };
        if n_heads == 0 || n_kv_heads == 0 || n_heads % n_kv_heads != 0 {
            return Err(ModelError::Config(format!(
                "{a}.attention.head_count = {n_heads} is not a positive multiple of head_count_kv = {n_kv_heads}"
            )));
        }
        let head_dim = match md.opt_u64(&key("attention.key_length"))? {
            Some(v) => v as usize,
            None => {
                if n_embd % n_heads != 0 {
                    return Err(ModelError::Config(format!(
                        "{a}.embedding_length {n_embd} is not divisible by head_count {n_heads}"
                    )));
                }
                n_embd / n_heads
            }
        };
        if let Some(vl) = md.opt_u64(&key("attention.value_length"))? {
            if vl as usize != head_dim {
                return Err(ModelError::Config(format!(
                    "{a}.attention.value_length {vl} differs from key_length {head_dim} (unsupported)"
                )));
            }
        }
        let n_rot = match md.opt_u64(&key("rope.dimension_count"))? {
            Some(v) => v as usize,
            None => head_dim,
        };
        if n_rot > head_dim || n_rot % 2 != 0 {
            return Err(ModelError::Config(format!(
                "{a}.rope.dimension_count {n_rot} must be even and at most head_dim {head_dim}"
            )));
        }
        let n_vocab = match md.opt_u64(&key("vocab_size"))? {
            Some(v) => v as usize,
            None => md
                .get_array("tokenizer.ggml.tokens")
                .map(|(_, t)| t.len())
                .unwrap_or(0),
        };
        let n_ctx_train = usize_of("context_length")?;
        let rms_eps = md.get_f64(&key("attention.layer_norm_rms_epsilon"))? as f32;
        let rope_base = md.opt_f64(&key("rope.freq_base"))?.unwrap_or(10_000.0) as f32;
        let sliding_window = md
            .opt_u64(&key("attention.sliding_window"))?
            .map(|w| w as u32);

        let cfg = match arch {
            Arch::Llama | Arch::Qwen2 => ModelConfig {
                arch,
                n_layers,
                n_embd,
                n_ff,
                n_heads,
                n_kv_heads,
                head_dim,
                n_vocab,
                n_ctx_train,
                rms_eps,
                rope_style: if arch == Arch::Llama {
                    RopeStyle::Norm
                } else {
                    RopeStyle::Neox
                },
                n_rot,
                rope_base,
                rope_base_local: rope_base,
                sliding_window: None,
                swa_pattern: 1,
                activation: Activation::Silu,
                attn_scale: 1.0 / (head_dim as f32).sqrt(),
                embd_scale: None,
            },
            Arch::Gemma3 => ModelConfig {
                arch,
                n_layers,
                n_embd,
                n_ff,
                n_heads,
                n_kv_heads,
                head_dim,
                n_vocab,
                n_ctx_train,
                rms_eps,
                rope_style: RopeStyle::Neox,
                n_rot,
                rope_base,
                // llama.cpp hard-codes the local base for gemma3; the GGUF has no key for it.
                rope_base_local: 10_000.0,
                sliding_window,
                // llama.cpp's default pattern for gemma3: five local layers, then one global.
                swa_pattern: 6,
                activation: Activation::GeluTanh,
                attn_scale: 1.0 / (head_dim as f32).sqrt(),
                embd_scale: Some((n_embd as f32).sqrt()),
            },
        };
        Ok(cfg)
    }

    /// Whether `layer` uses the sliding window (and the local RoPE base).
    pub fn is_local_layer(&self, layer: usize) -> bool {
        self.sliding_window.is_some() && layer % self.swa_pattern != self.swa_pattern - 1
    }

    pub fn kv_dim(&self) -> usize {
        self.n_kv_heads * self.head_dim
    }

    pub fn q_dim(&self) -> usize {
        self.n_heads * self.head_dim
    }
}

impl From<MetadataError> for ModelError {
    fn from(e: MetadataError) -> ModelError {
        ModelError::Metadata(e)
    }
}
