//! Verification: traces of every tap, diffs that name the first diverging op, invariance
//! checks any backend must pass, and a model doctor. See `docs/verification.md`.

pub mod check;
pub mod diff;
pub mod doctor;
pub mod foreign;
pub mod ggml_cpu;
pub mod isolate;
pub mod metrics;
pub mod namemap;
pub mod ops;
pub mod run;
pub mod taps;
pub mod tolerance;
pub mod trace;

pub use diff::{diff_engine_vs_trace, diff_engines, diff_traces, render, DiffReport, Verdict};
pub use run::{parse_ids, record, AnyEngine, MaskMode, RunSpec, Stepper};
pub use taps::TapFilter;
pub use tolerance::Profile;
pub use trace::{StepTrace, Trace, TraceMeta};

#[derive(Debug, thiserror::Error)]
pub enum VerifyError {
    #[error("{0}: {1}")]
    Io(String, std::io::Error),
    #[error("trace: {0}")]
    Trace(String),
    #[error("{0}")]
    Input(String),
    #[error(transparent)]
    Engine(#[from] lockstep_engine::EngineError),
}
