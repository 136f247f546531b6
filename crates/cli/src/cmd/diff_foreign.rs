//! `lockstep diff -m MODEL --ref ref TRACE`: a trace another engine wrote (docs/trace-format.md),
//! against lockstep's reference run on the trace's own tokens. Exit 0 agree, 1 diverge.

use std::path::Path;
use std::time::Instant;

use anyhow::{Context, Result};
use lockstep_models::ModelConfig;
use lockstep_verify::foreign::{
    diff_reference_vs_foreign, foreign_profile, lacked_taps, load_foreign, render_coverage,
};
use lockstep_verify::namemap::MapContext;
use lockstep_verify::{render, Profile, TapFilter};

use super::diff::DiffArgs;
use super::isolate;
use super::trace::{engine_config, model_sha256, open_engine, open_model};

pub fn run(args: &DiffArgs, reference: &str, trace: &Path) -> Result<i32> {
    let t0 = Instant::now();
    let m = open_model(&args.model)?;
    let cfg = ModelConfig::from_metadata(m.file.metadata())
        .with_context(|| format!("{}: model config", m.path.display()))?;
    let arch = m
        .file
        .metadata()
        .get_str("general.architecture")
        .context("general.architecture")?
        .to_string();
    let ctx = MapContext {
        arch,
        head_dim: cfg.head_dim,
    };
    let foreign = load_foreign(trace, args.map.as_deref(), &ctx)?;
    let sha = model_sha256(&m.path)?;
    let theirs = &foreign.trace.meta.model_sha256;
    if theirs.is_empty() {
        eprintln!(
            "note: the trace records no model_sha256; assuming it is of {}",
            m.path.display()
        );
    } else if *theirs != sha {
        eprintln!(
            "warning: the trace is of another model file (sha256 {theirs}, {} is {sha}): every tap may differ",
            m.path.display()
        );
    }
    let mut engine = open_engine(reference, None, &m.file, engine_config(&args.model))?;
    let profile = match &args.profile {
        Some(p) => Profile::parse(p)
            .with_context(|| format!("unknown profile `{p}` (exact, float, quant)"))?,
        None => foreign_profile(&foreign, &engine.backend_name())?,
    };
    let report = diff_reference_vs_foreign(
        engine.as_mut(),
        &foreign.trace,
        TapFilter::parse(&args.filter),
        profile,
    )?;
    // Isolated-op verdicts: every foreign op recomputed on the reference from the foreign
    // trace's own recorded inputs, so the op that is wrong is named even when errors have
    // accumulated upstream. The bounds follow from the engine's arithmetic: f32 for
    // transformers (and any engine that declares nothing), ggml-cpu's for llama.cpp traces
    // computed by ggml's CPU backend (metadata `ggml_backend` = `CPU`). A llama.cpp trace of
    // another ggml backend has no derived bounds and is isolated only when `--arithmetic`
    // says what to hold it to.
    let engine = foreign.trace.meta.backend.clone();
    let declared =
        lockstep_verify::isolate::Arithmetic::for_foreign(&engine, foreign.ggml_backend.as_deref());
    let underived = declared.is_none() && args.arithmetic.is_none();
    let wanted = args.isolate || (!report.agree() && !args.no_isolate);
    let isolation = if wanted && underived {
        eprintln!(
            "note: no isolated-op bounds are derived for {engine} on ggml backend `{}`; pass --arithmetic ggml-cpu|quant8|float to isolate anyway",
            foreign.ggml_backend.as_deref().unwrap_or("(not recorded)")
        );
        None
    } else if wanted {
        let arith = match (args.arithmetic.as_deref(), declared) {
            (None, Some(a)) => a,
            (flag, _) => isolate::arithmetic(flag, &engine)?,
        };
        let x86 = foreign
            .ggml_cpu_features
            .as_deref()
            .is_some_and(lockstep_verify::ggml_cpu::x86_avx_quantizer);
        Some(isolate::from_trace(&foreign.trace, &m.file, arith, x86)?)
    } else {
        None
    };
    if args.json {
        let j = serde_json::json!({
            "report": report,
            "lacked": lacked_taps(&report),
            "unmapped": foreign.unmapped,
            "skipped": foreign.skipped,
            "map": foreign.map.as_ref().map(|m| m.engine.clone()),
            "isolated": isolation,
        });
        println!("{}", serde_json::to_string_pretty(&j)?);
    } else {
        print!("{}", render_coverage(&foreign, &report));
        print!("{}", render(&report, args.verbose));
        if let Some(iso) = &isolation {
            isolate::print(iso, &report);
        }
        eprintln!(
            "time: {:.2}s total, {:.3}s comparing",
            t0.elapsed().as_secs_f64(),
            report.compare_seconds
        );
    }
    let isolated_ok = isolation.as_ref().is_none_or(|i| i.agree());
    Ok(if report.agree() && isolated_ok { 0 } else { 1 })
}
