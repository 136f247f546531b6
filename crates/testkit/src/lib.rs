//! Test support shared by the tests of every backend, so each backend is held to the very same
//! checks: where fixtures and models are (a missing file fails with instructions; nothing is
//! skipped silently), engine construction, error measures, and the llama.cpp reference cases.

pub mod reference_cases;

use std::path::PathBuf;

use lockstep_backend_ref::RefBackend;
use lockstep_engine::{Engine, EngineConfig};
use lockstep_gguf::GgufFile;
use lockstep_graph::Backend;
use lockstep_models::Model;

pub fn fixtures() -> PathBuf {
    let p = PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../shared/fixtures"
    ));
    assert!(
        p.is_dir(),
        "fixtures not found at {} (the project expects ../shared beside it)",
        p.display()
    );
    p
}

/// A real model by short name, fetched (and verified) first if it is not in the cache, so
/// `cargo test` works on a fresh machine.
pub fn model_path(name: &str) -> PathBuf {
    lockstep_fetch::resolve_model(name, None).unwrap_or_else(|e| {
        panic!("model {name} is not available ({e}); run `lockstep fetch {name}`")
    })
}

/// The prompt token ids of a model's llama.cpp reference cases
/// (`reference/<model>/cases.json`), in case order.
pub fn fixture_prompts(model: &str) -> Vec<Vec<u32>> {
    let p = fixtures().join(format!("reference/{model}/cases.json"));
    let j: serde_json::Value = serde_json::from_slice(&std::fs::read(&p).expect("read cases.json"))
        .expect("parse cases.json");
    j["cases"]
        .as_array()
        .expect("cases")
        .iter()
        .map(|c| {
            c["prompt_ids"]
                .as_array()
                .expect("prompt_ids")
                .iter()
                .map(|v| v.as_u64().expect("id") as u32)
                .collect()
        })
        .collect()
}

pub fn ref_engine(path: &std::path::Path, cfg: EngineConfig) -> Engine<RefBackend> {
    engine(path, RefBackend::new(), cfg)
}

/// An engine on any backend with the model at `path`.
pub fn engine<B: Backend>(path: &std::path::Path, backend: B, cfg: EngineConfig) -> Engine<B> {
    let file = GgufFile::open(path).expect("open model");
    let model = Model::load(&file, &backend).expect("load model");
    Engine::new(backend, model, cfg).expect("engine")
}

pub fn read_f32(st: &safetensors::SafeTensors<'_>, name: &str) -> Vec<f32> {
    let t = st
        .tensor(name)
        .unwrap_or_else(|e| panic!("tensor {name}: {e}"));
    assert_eq!(t.dtype(), safetensors::Dtype::F32, "{name} dtype");
    t.data()
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect()
}

/// sum((a-b)^2) / sum(b^2), in f64.
pub fn nmse(a: &[f32], b: &[f32]) -> f64 {
    assert_eq!(a.len(), b.len());
    let mut num = 0f64;
    let mut den = 0f64;
    for (&x, &y) in a.iter().zip(b) {
        let d = f64::from(x) - f64::from(y);
        num += d * d;
        den += f64::from(y) * f64::from(y);
    }
    num / den
}

/// The bit patterns of `x`, for bitwise comparisons with readable failures.
pub fn bits(x: &[f32]) -> Vec<u32> {
    x.iter().map(|v| v.to_bits()).collect()
}
