//! Finding, shape-checking and loading a model's tensors into a backend.

use lockstep_gguf::GgufFile;
use lockstep_graph::{Backend, WeightView};

use crate::config::{Arch, ModelConfig};
use crate::ModelError;

/// One decoder block's weights. Optional fields exist only for some architectures.
pub struct LayerWeights<W> {
    pub attn_norm: W,
    pub wq: W,
    pub wk: W,
    pub wv: W,
    pub wo: W,
    pub bq: Option<W>,
    pub bk: Option<W>,
    pub bv: Option<W>,
    pub q_norm: Option<W>,
    pub k_norm: Option<W>,
    pub post_attn_norm: Option<W>,
    pub ffn_norm: W,
    pub ffn_gate: W,
    pub ffn_up: W,
    pub ffn_down: W,
    pub post_ffn_norm: Option<W>,
}

/// A model: its config and its weights as one backend holds them.
pub struct Model<B: Backend> {
    pub config: ModelConfig,
    pub token_embd: B::Weight,
    pub layers: Vec<LayerWeights<B::Weight>>,
    pub output_norm: B::Weight,
    /// `None` when the output projection is tied to `token_embd`.
    pub output: Option<B::Weight>,
}

struct Loader<'a, B: Backend> {
    file: &'a GgufFile,
    backend: &'a B,
}

impl<B: Backend> Loader<'_, B> {
    fn view(&self, name: &str, expected: &[u64]) -> Result<WeightView<'_>, ModelError> {
        let info = self
            .file
            .header()
            .tensor(name)
            .ok_or_else(|| ModelError::MissingTensor(name.to_string()))?;
        if info.dims != expected {
            return Err(ModelError::WrongShape {
                name: name.to_string(),
                found: info.dims.clone(),
                expected: expected.to_vec(),
            });
        }
        Ok(WeightView {
            name: &info.name,
            ty: info.ty,
            dims: &info.dims,
            data: self.file.tensor_data(info),
        })
    }

    fn load(&self, name: &str, expected: &[u64]) -> Result<B::Weight, ModelError> {
        let view = self.view(name, expected)?;
        Ok(self.backend.load_weight(view)?)
    }

    fn load_opt(&self, name: &str, expected: &[u64]) -> Result<Option<B::Weight>, ModelError> {
        if self.file.header().tensor(name).is_none() {
            return Ok(None);
        }
        self.load(name, expected).map(Some)
    }
}

impl<B: Backend> Model<B> {
    /// Reads the config, checks every tensor the graph will use, and loads them into `backend`.
    pub fn load(file: &GgufFile, backend: &B) -> Result<Model<B>, ModelError> {
        let mut config = ModelConfig::from_metadata(file.metadata())?;
        let embd = file
            .header()
            .tensor("token_embd.weight")
            .ok_or_else(|| ModelError::MissingTensor("token_embd.weight".into()))?;
        let rows = embd.dims.get(1).copied().unwrap_or(0) as usize;
        if config.n_vocab > rows || embd.dims.len() != 2 {
            return Err(ModelError::Config(format!(
                "vocabulary has {} tokens but token_embd.weight has shape {:?}",
                config.n_vocab, embd.dims
            )));
        }
        config.n_vocab = rows;
        let c = &config;
        let (d, q, kv, ff, v) = (
            c.n_embd as u64,
            c.q_dim() as u64,
            c.kv_dim() as u64,
            c.n_ff as u64,
            c.n_vocab as u64,
        );
        let hd = c.head_dim as u64;
        let l = Loader { file, backend };
        let token_embd = l.load("token_embd.weight", &[d, v])?;
        let mut layers = Vec::with_capacity(c.n_layers);
        for i in 0..c.n_layers {
            let n = |s: &str| format!("blk.{i}.{s}");
            let gemma = c.arch == Arch::Gemma3;
            let qwen = c.arch == Arch::Qwen2;
            let req_if = |cond: bool,
                          name: String,
                          shape: &[u64]|
             -> Result<Option<B::Weight>, ModelError> {
                if cond {
                    l.load(&name, shape).map(Some)
                } else {
                    l.load_opt(&name, shape)
                }
            };
            layers.push(LayerWeights {
                attn_norm: l.load(&n("attn_norm.weight"), &[d])?,
                wq: l.load(&n("attn_q.weight"), &[d, q])?,
                wk: l.load(&n("attn_k.weight"), &[d, kv])?,
                wv: l.load(&n("attn_v.weight"), &[d, kv])?,
                wo: l.load(&n("attn_output.weight"), &[q, d])?,
                bq: req_if(qwen, n("attn_q.bias"), &[q])?,
                bk: req_if(qwen, n("attn_k.bias"), &[kv])?,
                bv: req_if(qwen, n("attn_v.bias"), &[kv])?,
                q_norm: req_if(gemma, n("attn_q_norm.weight"), &[hd])?,
                k_norm: req_if(gemma, n("attn_k_norm.weight"), &[hd])?,
                post_attn_norm: req_if(gemma, n("post_attention_norm.weight"), &[d])?,
                ffn_norm: l.load(&n("ffn_norm.weight"), &[d])?,
                ffn_gate: l.load(&n("ffn_gate.weight"), &[d, ff])?,
                ffn_up: l.load(&n("ffn_up.weight"), &[d, ff])?,
                ffn_down: l.load(&n("ffn_down.weight"), &[ff, d])?,
                post_ffn_norm: req_if(gemma, n("post_ffw_norm.weight"), &[d])?,
            });
        }
        let output_norm = l.load("output_norm.weight", &[d])?;
        let output = l.load_opt("output.weight", &[d, v])?;
        Ok(Model {
            config,
            token_embd,
            layers,
            output_norm,
            output,
        })
    }
}
