//! Traces: the taps of a run, step by step, saved as safetensors.
//!
//! File layout: tensor `s{step}/{tap}` (f32, the tap's shape) for every recorded tap, e.g.
//! `s0/blk.3.k_read` (prefill) or `s2/result_output` (second decode step). The safetensors
//! `__metadata__` holds `lockstep.trace` (format version), `model`, `model_sha256`,
//! `backend`, `filter`, `hidden_taps` (comma-separated per-layer taps the backend's kernels
//! never hold, from `Backend::hidden_taps`; absent = none) and `steps`: a JSON list of
//! `{step, tokens, positions}`. Other engines write the same layout (`docs/trace-format.md`:
//! writers in `tools/writers`, importers `tools/hf_trace.py` and `tools/llama_cpp_trace.py`),
//! possibly in F16/BF16/F64 and under their own names with a name map ([`RawTrace`] keeps those
//! names; `crate::foreign` maps them).

use std::collections::HashMap;
use std::path::Path;

use lockstep_graph::HostTensor;
use lockstep_quant::blocks::{bf16_to_f32, fp16_to_f32};
use safetensors::tensor::TensorView;
use safetensors::{Dtype, SafeTensors};
use serde::{Deserialize, Serialize};

use crate::taps::cmp_taps;
use crate::VerifyError;

pub const TRACE_FORMAT: &str = "1";

/// sha256 of a file (lowercase hex), streamed, silently.
pub fn sha256_file(path: &Path) -> Result<String, VerifyError> {
    use sha2::{Digest, Sha256};
    use std::io::Read;
    let io = |e| VerifyError::Io(path.display().to_string(), e);
    let mut f = std::fs::File::open(path).map_err(io)?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf).map_err(io)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(h.finalize().iter().map(|b| format!("{b:02x}")).collect())
}

#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct TraceMeta {
    /// File name of the model.
    pub model: String,
    pub model_sha256: String,
    /// Backend that produced the trace (`ref`, `cpu`, `cpu[kv-wrong-layer]`, `hf-transformers`).
    pub backend: String,
    /// The tap filter the run used (empty = everything).
    pub filter: String,
    /// Per-layer taps (`kq`, `kq_softmax`) the backend does not expose because its kernels
    /// never hold them; `diff` localizes around them (`Backend::hidden_taps`).
    pub hidden_taps: Vec<String>,
}

/// One forward step: its input tokens, their positions, and the recorded taps in execution
/// order.
#[derive(Clone, Debug, Default)]
pub struct StepTrace {
    pub step: usize,
    pub tokens: Vec<u32>,
    pub positions: Vec<u32>,
    pub taps: Vec<(String, HostTensor)>,
}

impl StepTrace {
    pub fn get(&self, name: &str) -> Option<&HostTensor> {
        self.taps.iter().find(|(n, _)| n == name).map(|(_, t)| t)
    }

    /// The logits this step produced (`result_output`), if recorded.
    pub fn logits(&self) -> Option<&HostTensor> {
        self.get("result_output")
    }

    pub fn kind(&self) -> &'static str {
        if self.step == 0 {
            "prefill"
        } else {
            "decode"
        }
    }
}

#[derive(Clone, Debug, Default)]
pub struct Trace {
    pub meta: TraceMeta,
    pub steps: Vec<StepTrace>,
}

#[derive(Serialize, Deserialize)]
struct StepMeta {
    step: usize,
    tokens: Vec<u32>,
    positions: Vec<u32>,
}

fn key(step: usize, name: &str) -> String {
    format!("s{step}/{name}")
}

impl Trace {
    pub fn to_bytes(&self) -> Result<Vec<u8>, VerifyError> {
        let mut md = HashMap::new();
        md.insert("lockstep.trace".to_string(), TRACE_FORMAT.to_string());
        md.insert("model".to_string(), self.meta.model.clone());
        md.insert("model_sha256".to_string(), self.meta.model_sha256.clone());
        md.insert("backend".to_string(), self.meta.backend.clone());
        md.insert("filter".to_string(), self.meta.filter.clone());
        if !self.meta.hidden_taps.is_empty() {
            md.insert("hidden_taps".to_string(), self.meta.hidden_taps.join(","));
        }
        let steps: Vec<StepMeta> = self
            .steps
            .iter()
            .map(|s| StepMeta {
                step: s.step,
                tokens: s.tokens.clone(),
                positions: s.positions.clone(),
            })
            .collect();
        md.insert(
            "steps".to_string(),
            serde_json::to_string(&steps).map_err(|e| VerifyError::Trace(e.to_string()))?,
        );
        let mut bytes: Vec<(String, Vec<usize>, Vec<u8>)> = Vec::new();
        for s in &self.steps {
            for (name, t) in &s.taps {
                let b: Vec<u8> = t.data.iter().flat_map(|v| v.to_le_bytes()).collect();
                bytes.push((key(s.step, name), t.shape.clone(), b));
            }
        }
        let mut views = Vec::with_capacity(bytes.len());
        for (k, shape, b) in &bytes {
            let v = TensorView::new(Dtype::F32, shape.clone(), b)
                .map_err(|e| VerifyError::Trace(format!("{k}: {e}")))?;
            views.push((k.clone(), v));
        }
        safetensors::serialize(views, &Some(md)).map_err(|e| VerifyError::Trace(e.to_string()))
    }

    pub fn save(&self, path: &Path) -> Result<(), VerifyError> {
        let bytes = self.to_bytes()?;
        std::fs::write(path, bytes).map_err(|e| VerifyError::Io(path.display().to_string(), e))
    }

    pub fn load(path: &Path) -> Result<Trace, VerifyError> {
        let bytes =
            std::fs::read(path).map_err(|e| VerifyError::Io(path.display().to_string(), e))?;
        Trace::from_bytes(&bytes).map_err(|e| match e {
            VerifyError::Trace(m) => VerifyError::Trace(format!("{}: {m}", path.display())),
            other => other,
        })
    }

    pub fn from_bytes(bytes: &[u8]) -> Result<Trace, VerifyError> {
        let raw = RawTrace::from_bytes(bytes)?;
        let mut steps = raw.steps;
        for t in raw.tensors {
            let Some(s) = steps.iter_mut().find(|s| s.step == t.step) else {
                return Err(VerifyError::Trace(format!(
                    "tensor `s{}/{}`: step {} is not in `steps`",
                    t.step, t.name, t.step
                )));
            };
            s.taps.push((t.name, HostTensor::new(t.shape, t.data)));
        }
        steps.sort_by_key(|s| s.step);
        for s in &mut steps {
            s.taps.sort_by(|a, b| cmp_taps(&a.0, &b.0));
        }
        Ok(Trace {
            meta: raw.meta,
            steps,
        })
    }
}

/// One stored tensor of a trace file, by step, under the name it was stored with (a tap, or
/// a foreign engine's own name that a name map turns into a tap).
#[derive(Clone, Debug)]
pub struct RawTensor {
    pub step: usize,
    pub name: String,
    pub shape: Vec<usize>,
    /// The values as f32 (stored as F32, F16, BF16 or F64).
    pub data: Vec<f32>,
}

/// A trace file as stored: all metadata, the steps (without taps) and every tensor.
#[derive(Clone, Debug)]
pub struct RawTrace {
    pub meta: TraceMeta,
    /// Every `__metadata__` entry, including the ones `meta` holds.
    pub metadata: HashMap<String, String>,
    pub steps: Vec<StepTrace>,
    pub tensors: Vec<RawTensor>,
}

impl RawTrace {
    pub fn from_bytes(bytes: &[u8]) -> Result<RawTrace, VerifyError> {
        let bad = |m: String| VerifyError::Trace(m);
        let (_, header) =
            SafeTensors::read_metadata(bytes).map_err(|e| bad(format!("not safetensors: {e}")))?;
        let md = header.metadata().clone().unwrap_or_default();
        let get = |k: &str| md.get(k).cloned().unwrap_or_default();
        if !md.contains_key("lockstep.trace") {
            return Err(bad("no `lockstep.trace` metadata: not a trace file".into()));
        }
        let meta = TraceMeta {
            model: get("model"),
            model_sha256: get("model_sha256"),
            backend: get("backend"),
            filter: get("filter"),
            hidden_taps: get("hidden_taps")
                .split(',')
                .map(str::trim)
                .filter(|t| !t.is_empty())
                .map(String::from)
                .collect(),
        };
        let step_meta: Vec<StepMeta> = serde_json::from_str(&get("steps"))
            .map_err(|e| bad(format!("metadata `steps`: {e}")))?;
        let st = SafeTensors::deserialize(bytes).map_err(|e| bad(e.to_string()))?;
        let steps: Vec<StepTrace> = step_meta
            .into_iter()
            .map(|s| StepTrace {
                step: s.step,
                tokens: s.tokens,
                positions: s.positions,
                taps: Vec::new(),
            })
            .collect();
        let mut tensors = Vec::new();
        for (name, view) in st.tensors() {
            let Some((sp, tap)) = name.split_once('/') else {
                return Err(bad(format!("tensor `{name}` is not named s<step>/<tap>")));
            };
            let step: usize = sp
                .strip_prefix('s')
                .and_then(|n| n.parse().ok())
                .ok_or_else(|| bad(format!("tensor `{name}`: bad step `{sp}`")))?;
            let b = view.data();
            let data: Vec<f32> = match view.dtype() {
                Dtype::F32 => b
                    .chunks_exact(4)
                    .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                    .collect(),
                Dtype::F16 => b
                    .chunks_exact(2)
                    .map(|b| fp16_to_f32(u16::from_le_bytes([b[0], b[1]])))
                    .collect(),
                Dtype::BF16 => b
                    .chunks_exact(2)
                    .map(|b| bf16_to_f32(u16::from_le_bytes([b[0], b[1]])))
                    .collect(),
                Dtype::F64 => b
                    .chunks_exact(8)
                    .map(|b| {
                        f64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]) as f32
                    })
                    .collect(),
                other => {
                    return Err(bad(format!(
                        "tensor `{name}` is {other:?}; traces hold F32, F16, BF16 or F64"
                    )))
                }
            };
            let shape = view.shape().to_vec();
            if shape.iter().product::<usize>() != data.len() {
                return Err(bad(format!(
                    "tensor `{name}`: shape {shape:?} vs {} values",
                    data.len()
                )));
            }
            tensors.push(RawTensor {
                step,
                name: tap.to_string(),
                shape,
                data,
            });
        }
        Ok(RawTrace {
            meta,
            metadata: md,
            steps,
            tensors,
        })
    }

    pub fn load(path: &Path) -> Result<RawTrace, VerifyError> {
        let bytes =
            std::fs::read(path).map_err(|e| VerifyError::Io(path.display().to_string(), e))?;
        RawTrace::from_bytes(&bytes).map_err(|e| match e {
            VerifyError::Trace(m) => VerifyError::Trace(format!("{}: {m}", path.display())),
            other => other,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let t = Trace {
            meta: TraceMeta {
                model: "m.gguf".into(),
                model_sha256: "ab".into(),
                backend: "ref".into(),
                filter: "".into(),
                hidden_taps: vec!["kq".into(), "kq_softmax".into()],
            },
            steps: vec![
                StepTrace {
                    step: 0,
                    tokens: vec![1, 2],
                    positions: vec![0, 1],
                    taps: vec![
                        (
                            "inp_embd".into(),
                            HostTensor::matrix(2, 2, vec![1.0, 2.0, 3.0, 4.0]),
                        ),
                        (
                            "blk.0.kq".into(),
                            HostTensor::new(vec![2], vec![f32::NEG_INFINITY, 0.5]),
                        ),
                    ],
                },
                StepTrace {
                    step: 1,
                    tokens: vec![3],
                    positions: vec![2],
                    taps: vec![(
                        "result_output".into(),
                        HostTensor::matrix(1, 3, vec![0.0, 1.0, 2.0]),
                    )],
                },
            ],
        };
        let back = Trace::from_bytes(&t.to_bytes().expect("bytes")).expect("parse");
        assert_eq!(back.meta, t.meta);
        assert_eq!(back.steps.len(), 2);
        assert_eq!(back.steps[0].tokens, vec![1, 2]);
        assert_eq!(back.steps[0].taps[0].0, "inp_embd");
        assert_eq!(back.steps[0].get("blk.0.kq"), t.steps[0].get("blk.0.kq"));
        assert_eq!(back.steps[1].logits(), t.steps[1].logits());
        assert!(Trace::from_bytes(b"garbage").is_err());
    }

    #[test]
    fn half_and_double_tensors_read_as_f32() {
        use lockstep_quant::blocks::{f32_to_bf16, f32_to_fp16};
        let vals = [1.5f32, -0.25, 384.0];
        let f16: Vec<u8> = vals
            .iter()
            .flat_map(|v| f32_to_fp16(*v).to_le_bytes())
            .collect();
        let bf16: Vec<u8> = vals
            .iter()
            .flat_map(|v| f32_to_bf16(*v).to_le_bytes())
            .collect();
        let f64b: Vec<u8> = vals
            .iter()
            .flat_map(|v| f64::from(*v).to_le_bytes())
            .collect();
        let i32b = vec![0u8; 12];
        fn view(dt: Dtype, b: &[u8]) -> TensorView<'_> {
            TensorView::new(dt, vec![3], b).expect("view")
        }
        let mut md = HashMap::new();
        md.insert("lockstep.trace".to_string(), "1".to_string());
        md.insert(
            "steps".to_string(),
            r#"[{"step":0,"tokens":[1,2,3],"positions":[0,1,2]}]"#.to_string(),
        );
        let bytes = safetensors::serialize(
            vec![
                ("s0/a".to_string(), view(Dtype::F16, &f16)),
                ("s0/b".to_string(), view(Dtype::BF16, &bf16)),
                ("s0/c".to_string(), view(Dtype::F64, &f64b)),
            ],
            &Some(md.clone()),
        )
        .expect("serialize");
        let t = Trace::from_bytes(&bytes).expect("parse");
        for name in ["a", "b", "c"] {
            assert_eq!(t.steps[0].get(name).expect(name).data, vals, "{name}");
        }
        let bytes = safetensors::serialize(
            vec![("s0/i".to_string(), view(Dtype::I32, &i32b))],
            &Some(md),
        )
        .expect("serialize");
        let e = Trace::from_bytes(&bytes).expect_err("integers are not a trace dtype");
        assert!(e.to_string().contains("s0/i"), "{e}");
    }
}
