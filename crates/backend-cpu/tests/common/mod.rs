//! The shared test support (`lockstep-testkit`) plus constructors for the cpu backend.
#![allow(dead_code, unused_imports)]

use std::path::Path;

use lockstep_backend_cpu::{CpuBackend, CpuOptions, Isa, KvType};
use lockstep_engine::{Engine, EngineConfig};

pub use lockstep_testkit::*;

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
