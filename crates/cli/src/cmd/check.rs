//! `lockstep check`: the invariances a backend must hold, on any backend and model: one
//! prefill vs prefix + incremental decode, batch vs alone, explicit all-true mask vs none,
//! other KV block sizes, fragmented block tables. Exit 0 when all hold, 1 otherwise.

use anyhow::Result;
use clap::Args;
use lockstep_verify::check::run_checks;
use lockstep_verify::diff::fmt_e;
use lockstep_verify::{parse_ids, VerifyError};

use super::trace::{engine_config, open_engine, open_model, VerifyModelArgs, BACKENDS};

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
    /// NMSE allowed on the logits (default 0: bitwise equality).
    #[arg(long, default_value_t = 0.0)]
    pub tolerance: f64,
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
    let inject = args.model.inject.clone();
    let backend = args.backend.clone();
    let file = &m.file;
    let mut name = String::new();
    let mut open = |cfg| {
        let e = open_engine(&backend, inject.as_deref(), file, cfg)
            .map_err(|e| VerifyError::Input(format!("{e:#}")))?;
        name = e.backend_name();
        Ok(e)
    };
    let results = run_checks(&mut open, base, &prompts, args.tolerance)?;
    let ok = results.iter().all(|r| r.pass);
    if args.json {
        println!("{}", serde_json::to_string_pretty(&results)?);
    } else {
        let lens: Vec<String> = prompts.iter().map(|p| p.len().to_string()).collect();
        println!(
            "lockstep check: backend {name}, {} prompts ({} tokens), tolerance {}",
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
                "  {:<4}  {:<30} NMSE {:>9}  max|d| {:>9}  differing {:>7}/{:<8} {}",
                if r.pass { "ok" } else { "FAIL" },
                r.name,
                fmt_e(r.metrics.nmse),
                fmt_e(r.metrics.max_abs),
                r.metrics.n_diff,
                r.metrics.n,
                r.detail
            );
        }
        println!(
            "result: {}",
            if ok {
                "all invariances hold"
            } else {
                "INVARIANCE BROKEN"
            }
        );
    }
    Ok(if ok { 0 } else { 1 })
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
            &lockstep_backend_cpu::CpuBackend::new(lockstep_backend_cpu::CpuOptions::default()),
            "cpu",
            Arithmetic::Quant8,
            &args.filter,
        ),
        other => anyhow::bail!("check --ops runs on `ref` or `cpu`, not `{other}`"),
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
