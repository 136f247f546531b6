//! Where tests find fixtures and models (a missing file fails with instructions), engine
//! constructors for both backends, and logit comparisons.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use lockstep_backend_cpu::{CpuBackend, CpuOptions, Isa, KvType};
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

pub fn models_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("LOCKSTEP_MODELS_DIR") {
        return PathBuf::from(d);
    }
    let home = std::env::var_os("HOME").expect("HOME is not set");
    PathBuf::from(home).join(".cache/lockstep/models")
}

pub fn model_path(name: &str) -> PathBuf {
    let file = match name {
        "smollm2" => "SmolLM2-135M-Instruct.Q4_1.gguf",
        "gemma3" => "gemma-3-270m-q4_k_m.gguf",
        other => panic!("unknown model {other}"),
    };
    let p = models_dir().join(file);
    assert!(
        p.is_file(),
        "model {} missing: run `lockstep fetch {name}` (or `cargo run --release -- fetch all`)",
        p.display()
    );
    p
}

pub fn engine<B: Backend>(path: &Path, backend: B, cfg: EngineConfig) -> Engine<B> {
    let file = GgufFile::open(path).expect("open model");
    let model = Model::load(&file, &backend).expect("load model");
    Engine::new(backend, model, cfg).expect("engine")
}

pub fn ref_engine(path: &Path, cfg: EngineConfig) -> Engine<RefBackend> {
    engine(path, RefBackend::new(), cfg)
}

pub fn cpu(threads: usize) -> CpuBackend {
    CpuBackend::new(CpuOptions {
        threads: Some(threads),
        ..CpuOptions::default()
    })
}

pub fn cpu_with(threads: usize, kv_type: KvType, isa: Option<Isa>) -> CpuBackend {
    CpuBackend::new(CpuOptions {
        threads: Some(threads),
        kv_type,
        isa,
    })
}

pub fn cpu_engine(path: &Path, threads: usize, cfg: EngineConfig) -> Engine<CpuBackend> {
    engine(path, cpu(threads), cfg)
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

pub fn bits(x: &[f32]) -> Vec<u32> {
    x.iter().map(|v| v.to_bits()).collect()
}
