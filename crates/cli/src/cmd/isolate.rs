//! The isolated-op half of `lockstep diff` (`--isolate`, and automatically after a DIVERGE
//! verdict): every op of side B recomputed on the reference from B's own recorded inputs.

use anyhow::{bail, Result};
use lockstep_gguf::GgufFile;
use lockstep_verify::isolate::{
    isolate_engine, isolate_trace_with, render_isolation, Arithmetic, IsolationReport,
};
use lockstep_verify::{AnyEngine, DiffReport, RunSpec, Trace};

/// B's arithmetic: `--arithmetic` or what B's name declares.
pub fn arithmetic(flag: Option<&str>, backend_b: &str) -> Result<Arithmetic> {
    match flag {
        None => Ok(Arithmetic::for_backend(backend_b)),
        Some(s) => match Arithmetic::parse(s) {
            Some(a) => Ok(a),
            None => bail!("unknown arithmetic `{s}` (exact, quant8, float, ggml-cpu)"),
        },
    }
}

/// Isolates a saved trace of B; the model file must be the one the trace was made with.
/// `x86_quantizer`: B (`ggml-cpu`) quantizes with ggml's x86 AVX code (from its trace).
pub fn from_trace(
    b: &Trace,
    file: &GgufFile,
    arith: Arithmetic,
    x86_quantizer: bool,
) -> Result<IsolationReport> {
    if !b.meta.model_sha256.is_empty() {
        let sha = lockstep_verify::trace::sha256_file(file.path())?;
        if sha != b.meta.model_sha256 {
            bail!(
                "trace {} was made with model sha256 {}, but {} has {sha}: pass the trace's model with -m",
                b.meta.backend,
                b.meta.model_sha256,
                file.path().display()
            );
        }
    }
    Ok(isolate_trace_with(b, file, arith, x86_quantizer)?)
}

/// Re-runs engine B on the tokens of every step of `whole` and isolates each step.
pub fn from_engine(
    b: &mut dyn AnyEngine,
    whole: &DiffReport,
    spec: &RunSpec,
    file: &GgufFile,
    arith: Arithmetic,
) -> Result<IsolationReport> {
    let steps: Vec<Vec<u32>> = whole.steps.iter().map(|s| s.tokens.clone()).collect();
    Ok(isolate_engine(
        b,
        &steps,
        spec.filter.clone(),
        spec.mask,
        file,
        arith,
    )?)
}

/// Prints the isolation report and how it bears on the whole-run verdict.
pub fn print(iso: &IsolationReport, whole: &DiffReport) {
    print!("{}", render_isolation(iso));
    println!("isolated vs whole-run: {}", iso.relate(whole));
}
