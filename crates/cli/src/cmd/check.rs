//! `lockstep check`: the invariances a backend must hold, on any backend and model: one
//! prefill vs prefix + incremental decode, batch vs alone, explicit all-true mask vs none,
//! other KV block sizes, fragmented block tables. Exit 0 when all hold, 1 otherwise.

use anyhow::Result;
use clap::Args;
use lockstep_backend_cpu::{CpuBackend, CpuOptions};
use lockstep_backend_ref::RefBackend;
use lockstep_engine::Engine;
use lockstep_models::Model;
use lockstep_verify::check::{run_tap_checks, EngineVariant, TapCheckResult};
use lockstep_verify::diff::fmt_e;
use lockstep_verify::{parse_ids, AnyEngine, VerifyError};

use super::trace::{engine_config, open_model, VerifyModelArgs, BACKENDS};

#[derive(Args, Debug)]
pub struct CheckArgs {
    #[command(flatten)]
    pub model: VerifyModelArgs,
    /// Compute backend.
    #[arg(long, default_value = "ref", value_parser = BACKENDS.to_vec())]
    pub backend: String,
    /// Prompt texts (repeatable); default: three built-in prompts of different lengths.
    #[arg(short = 'p', long = "prompt")]
    pub prompts: Vec<String>,
    /// A prompt as token ids (repeatable), e.g. `--ids 1,2,3`.
    #[arg(long)]
    pub ids: Vec<String>,
    /// NMSE allowed per tap for invariances the backend does not declare bitwise (default 0:
    /// bitwise equality).
    #[arg(long, default_value_t = 0.0)]
    pub tolerance: f64,
    /// Seed of the batch placements and block scrambles.
    #[arg(long, default_value_t = 0x5eed)]
    pub seed: u64,
    /// Print the results as JSON.
    #[arg(long)]
    pub json: bool,
    /// Op-level harness instead: every op of the backend interface on random inputs against
    /// the reference, over many shapes and every weight type (no model needed).
    #[arg(long)]
    pub ops: bool,
    /// With --ops: only ops matching these comma-separated globs (`matmul`, `attention`,
    /// `matmul.Q4_K`; `-` excludes).
    #[arg(long, default_value = "")]
    pub filter: String,
}

const DEFAULT_PROMPTS: &[&str] = &[
    "The capital of France is",
    "def fibonacci(n):\n    if n < 2:\n        return n",
    "Once upon a time, in a land far away, there lived a king who had three daughters.",
];

pub fn run(args: CheckArgs) -> Result<i32> {
    if args.ops {
        return run_ops(&args);
    }
    let m = open_model(&args.model)?;
    let mut prompts: Vec<Vec<u32>> = Vec::new();
    for p in &args.prompts {
        prompts.push(m.tokenizer.encode(p, true, true));
    }
    for i in &args.ids {
        prompts.push(parse_ids(i)?);
    }
    if prompts.is_empty() {
        prompts = DEFAULT_PROMPTS
            .iter()
            .map(|p| m.tokenizer.encode(p, true, true))
            .collect();
    }
    let base = engine_config(&args.model);
    let file = &m.file;
    let backend = args.backend.clone();
    let inject = args.model.inject.clone();
    if inject.is_some() && backend != "cpu" {
        anyhow::bail!("--inject plants faults in the cpu backend's kernels: use `--backend cpu`");
    }
    let mut open = |v: &EngineVariant| -> Result<Box<dyn AnyEngine + Send>, VerifyError> {
        let cfg = v.config.clone();
        let err = |e: String| VerifyError::Input(e);
        match backend.as_str() {
            "ref" => {
                let b = RefBackend::new();
                let model = Model::load(file, &b).map_err(|e| err(e.to_string()))?;
                Ok(Box::new(Engine::new(b, model, cfg)?))
            }
            "cpu" => {
                let b = super::trace::cpu_backend(inject.as_deref(), v.threads)
                    .map_err(|e| err(format!("{e:#}")))?;
                let model = Model::load(file, &b).map_err(|e| err(e.to_string()))?;
                Ok(Box::new(Engine::new(b, model, cfg)?))
            }
            #[cfg(feature = "cuda")]
            "cuda" | "cuda-exact" => {
                // One GPU: the thread-count variant has no meaning there and runs as the default.
                let b = super::trace::cuda_backend(&backend).map_err(|e| err(format!("{e:#}")))?;
                let model = Model::load(file, &b).map_err(|e| err(e.to_string()))?;
                Ok(Box::new(Engine::new(b, model, cfg)?))
            }
            other => Err(err(format!(
                "check runs on `ref`, `cpu`, `cuda` or `cuda-exact`, not `{other}`"
            ))),
        }
    };
    let t0 = std::time::Instant::now();
    let reported = super::trace::reported_backend_name(&backend);
    let results = run_tap_checks(
        &mut open,
        &reported,
        base,
        &prompts,
        args.tolerance,
        args.seed,
    )?;
    let ok = results.iter().all(|r| r.pass);
    if args.json {
        println!("{}", serde_json::to_string_pretty(&results)?);
    } else {
        let lens: Vec<String> = prompts.iter().map(|p| p.len().to_string()).collect();
        println!(
            "lockstep check: backend {backend}, {} prompts ({} tokens), every tap compared; bitwise where the backend declares it, else {}",
            prompts.len(),
            lens.join("/"),
            if args.tolerance == 0.0 {
                "bitwise".to_string()
            } else {
                format!("NMSE {}", fmt_e(args.tolerance))
            }
        );
        for r in &results {
            println!(
                "  {:<4}  {:<34} {:>8} taps  worst NMSE {:>9}  {}",
                if r.pass { "ok" } else { "FAIL" },
                r.name,
                r.compared,
                fmt_e(r.worst.nmse),
                if r.bitwise { "(declared bitwise)" } else { "" }
            );
            if let Some(f) = &r.first_break {
                println!(
                    "        first break: {} at prompt {} position {} ({}): NMSE {}, max|d| {}, {} of {} elements differ",
                    f.tap,
                    f.prompt,
                    f.position,
                    f.variant,
                    fmt_e(f.metrics.nmse),
                    fmt_e(f.metrics.max_abs),
                    f.metrics.n_diff,
                    f.metrics.n
                );
            }
        }
        if let Some(note) = undeclared_note(&results, &reported, args.tolerance) {
            println!("{note}");
        }
        println!(
            "result: {} ({:.1}s)",
            if ok {
                "all invariances hold"
            } else {
                "INVARIANCE BROKEN"
            },
            t0.elapsed().as_secs_f64()
        );
    }
    Ok(if ok { 0 } else { 1 })
}

/// A line under the results when invariances the backend does not declare bitwise broke at
/// the default tolerance of 0: they are the backend's declared behaviour, not a fault, and the
/// line says how to hold them (a tolerance; cuda's batch-invariant kernels).
fn undeclared_note(results: &[TapCheckResult], backend: &str, tolerance: f64) -> Option<String> {
    if tolerance != 0.0 {
        return None;
    }
    let names: Vec<&str> = results
        .iter()
        .filter(|r| !r.pass && !r.bitwise)
        .map(|r| r.name.as_str())
        .collect();
    if names.is_empty() {
        return None;
    }
    let mut note = format!(
        "note: backend {backend} does not declare {} bitwise (its results may depend on the step's shape); \
         `--tolerance NMSE` holds them to a bound",
        names.join(", ")
    );
    if backend == "cuda" {
        note.push_str(
            ", `--deterministic` runs the batch-invariant kernels that declare every invariance",
        );
    }
    Some(note)
}

/// `check --ops`: the op harness on the named backend.
fn run_ops(args: &CheckArgs) -> Result<i32> {
    use lockstep_verify::isolate::Arithmetic;
    use lockstep_verify::ops::{check_ops, render_ops};
    let report = match args.backend.as_str() {
        "ref" => check_ops(
            &lockstep_backend_ref::RefBackend::new(),
            "ref",
            Arithmetic::Exact,
            &args.filter,
        ),
        "cpu" => check_ops(
            &CpuBackend::new(CpuOptions::default()).with_output_guards(),
            "cpu",
            Arithmetic::Quant8,
            &args.filter,
        ),
        // `cuda-exact` keeps the reference's operation order (bitwise): held to the exact
        // arithmetic; `cuda` (fast numerics) declares quant8 for its matmuls (f32 KV cache).
        #[cfg(feature = "cuda")]
        name @ ("cuda" | "cuda-exact") => {
            // Every op output between guard regions, as on the cpu backend.
            let b = super::trace::cuda_backend(name)?.with_output_guards();
            check_ops(&b, name, Arithmetic::for_backend(name), &args.filter)
        }
        other => {
            anyhow::bail!("check --ops runs on `ref`, `cpu`, `cuda` or `cuda-exact`, not `{other}`")
        }
    };
    if report.cases.is_empty() {
        anyhow::bail!("no op matches the filter `{}`", args.filter);
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", render_ops(&report, true));
    }
    Ok(if report.pass() { 0 } else { 1 })
}

#[cfg(test)]
mod tests {
    use super::*;
    use lockstep_verify::check::Invariance;
    use lockstep_verify::metrics::Metrics;

    fn result(name: &str, bitwise: bool, pass: bool) -> TapCheckResult {
        TapCheckResult {
            invariance: Invariance::BatchVsAlone,
            name: name.into(),
            detail: String::new(),
            compared: 10,
            bitwise,
            worst: Metrics::default(),
            first_break: None,
            pass,
        }
    }

    #[test]
    fn undeclared_breaks_get_a_note_declared_ones_do_not() {
        let rs = [
            result("prefill vs decode", false, false),
            result("batch vs alone", false, false),
            result("repeated run", true, true),
        ];
        let n = undeclared_note(&rs, "cuda", 0.0).expect("a note");
        assert!(
            n.contains("does not declare prefill vs decode, batch vs alone bitwise"),
            "{n}"
        );
        assert!(n.contains("--deterministic"), "{n}");
        assert!(!undeclared_note(&rs, "cpu", 0.0)
            .unwrap()
            .contains("--deterministic"));
        // With a tolerance the user chose the bound; a declared invariance that broke is a
        // fault, not a declaration, and gets no note.
        assert!(undeclared_note(&rs, "cuda", 1e-6).is_none());
        assert!(undeclared_note(&[result("batch vs alone", true, false)], "cuda", 0.0).is_none());
        assert!(undeclared_note(&[result("batch vs alone", false, true)], "cuda", 0.0).is_none());
    }
}
