//! `lockstep diff`: run two backends on identical token streams (or load two traces) and
//! compare every tap; name the first op that diverges. Exit 0 when they agree, 1 when not.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, Result};
use clap::Args;
use lockstep_verify::{diff_engines, diff_traces, render, Profile, Trace};

use super::isolate;
use super::trace::{
    engine_config, fault_names, open_engine, open_model, run_spec, PromptArgs, VerifyModelArgs,
    BACKENDS,
};

#[derive(Args, Debug)]
pub struct DiffArgs {
    /// Two trace files to compare (instead of running backends); or one trace another engine
    /// wrote, with `--ref` (docs/trace-format.md).
    #[arg(num_args = 0..=2)]
    pub files: Vec<PathBuf>,
    #[command(flatten)]
    pub model: VerifyModelArgs,
    /// Backend A (the reference side).
    #[arg(long = "a", default_value = "ref", value_parser = BACKENDS.to_vec())]
    pub a: String,
    /// Backend B (the side under test; fed A's tokens).
    #[arg(long = "b", default_value = "ref", value_parser = BACKENDS.to_vec())]
    pub b: String,
    #[command(flatten)]
    pub prompt: PromptArgs,
    /// Compare only taps matching these comma-separated globs (`-` excludes).
    #[arg(long, default_value = "")]
    pub filter: String,
    /// Tolerance profile (`exact`, `float`, `quant`); default: calibrated for the backend pair.
    #[arg(long)]
    pub profile: Option<String>,
    /// Print the whole report as JSON.
    #[arg(long)]
    pub json: bool,
    /// Show every tap of the diverging step.
    #[arg(long)]
    pub verbose: bool,
    /// Compare one foreign trace with this backend run on the trace's own tokens
    /// (`diff -m MODEL --ref ref TRACE`).
    #[arg(long = "ref", value_parser = BACKENDS.to_vec())]
    pub reference: Option<String>,
    /// Name map for the foreign trace's tensor names: `llama.cpp`, `transformers` or a map
    /// file (default: the map the trace's metadata names, if any).
    #[arg(long)]
    pub map: Option<String>,
    /// List the seeded faults of this build and exit.
    #[arg(long)]
    pub list_faults: bool,
    /// Also recompute every op of B on the reference from B's own recorded inputs (isolated-op
    /// verdicts). Runs by itself after a DIVERGE verdict unless `--no-isolate`.
    #[arg(long, conflicts_with = "no_isolate")]
    pub isolate: bool,
    /// Skip the isolated-op pass after a DIVERGE verdict.
    #[arg(long)]
    pub no_isolate: bool,
    /// B's arithmetic for the isolated bounds (`exact`, `quant8`, `float`, `ggml-cpu`); default:
    /// what B's backend name (a foreign trace: its metadata) declares.
    #[arg(long)]
    pub arithmetic: Option<String>,
}

pub fn run(args: DiffArgs) -> Result<i32> {
    if args.list_faults {
        let names = fault_names();
        if names.is_empty() {
            println!("this lockstep was built without fault injection (`--features faults`)");
        }
        for n in names {
            println!("{n}");
        }
        return Ok(0);
    }
    if let Some(reference) = &args.reference {
        let [trace] = args.files.as_slice() else {
            bail!("--ref compares one foreign trace: lockstep diff -m MODEL --ref ref TRACE");
        };
        return super::diff_foreign::run(&args, reference, trace);
    }
    let t0 = Instant::now();
    let mut isolation = None;
    let report = match args.files.as_slice() {
        [fa, fb] => {
            for f in [fa, fb] {
                if let Some(map) = lockstep_verify::foreign::namemap_of(f)? {
                    bail!(
                        "{} holds another engine's names (name map `{map}`): compare it with \
                         `lockstep diff -m MODEL --ref ref {}`",
                        f.display(),
                        f.display()
                    );
                }
            }
            let a = Trace::load(fa)?;
            let b = Trace::load(fb)?;
            if !a.meta.model_sha256.is_empty()
                && !b.meta.model_sha256.is_empty()
                && a.meta.model_sha256 != b.meta.model_sha256
            {
                eprintln!(
                    "warning: the traces are of different model files ({} vs {})",
                    a.meta.model_sha256, b.meta.model_sha256
                );
            }
            let profile = pick_profile(&args, &a.meta.backend, &b.meta.backend)?;
            let report = diff_traces(&a, &b, profile);
            if args.isolate || (!report.agree() && !args.no_isolate) {
                let file = open_model(&args.model)?.file;
                let arith = isolate::arithmetic(args.arithmetic.as_deref(), &b.meta.backend)?;
                isolation = Some(isolate::from_trace(&b, &file, arith, false)?);
            }
            report
        }
        [] => {
            let m = open_model(&args.model)?;
            let cfg = engine_config(&args.model);
            // The fault goes to the side under test: B when it is the cpu backend, else A.
            let inject = args.model.inject.as_deref();
            let inject_b = inject.filter(|_| args.b == "cpu");
            let inject_a = inject.filter(|_| args.a == "cpu" && inject_b.is_none());
            if inject.is_some() && inject_a.is_none() && inject_b.is_none() {
                bail!("--inject plants faults in the cpu backend: use `--b cpu` (or `--a cpu`)");
            }
            let mut ea = open_engine(&args.a, inject_a, &m.file, cfg.clone())?;
            let mut eb = open_engine(&args.b, inject_b, &m.file, cfg)?;
            let spec = run_spec(&m.tokenizer, &args.prompt, &args.filter, ea.n_vocab())?;
            let profile = pick_profile(&args, &ea.backend_name(), &eb.backend_name())?;
            let report = diff_engines(ea.as_mut(), eb.as_mut(), &spec, profile)?;
            if args.isolate || (!report.agree() && !args.no_isolate) {
                drop(ea);
                let arith = isolate::arithmetic(args.arithmetic.as_deref(), &eb.backend_name())?;
                isolation = Some(isolate::from_engine(
                    eb.as_mut(),
                    &report,
                    &spec,
                    &m.file,
                    arith,
                )?);
            }
            report
        }
        _ => bail!("give two trace files, or none and a model (-m) with --a/--b"),
    };
    if args.json {
        match &isolation {
            Some(iso) => println!(
                "{}",
                serde_json::to_string_pretty(
                    &serde_json::json!({"diff": report, "isolated": iso})
                )?
            ),
            None => println!("{}", serde_json::to_string_pretty(&report)?),
        }
    } else {
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
    // A wrong op found in isolation is a divergence even when the whole run agrees.
    let isolated_ok = isolation.as_ref().is_none_or(|i| i.agree());
    Ok(if report.agree() && isolated_ok { 0 } else { 1 })
}

fn pick_profile(args: &DiffArgs, a: &str, b: &str) -> Result<Profile> {
    let calibrated = Profile::for_backends(a, b);
    match &args.profile {
        None => Ok(calibrated),
        Some(p) => {
            let Some(p) = Profile::parse(p) else {
                bail!("unknown profile `{p}` (exact, float, quant)");
            };
            let rank = |p: Profile| match p {
                Profile::Exact => 0,
                Profile::Float => 1,
                Profile::Quant => 2,
            };
            if rank(p) > rank(calibrated) {
                eprintln!(
                    "note: profile `{}` is looser than the one calibrated for {a} vs {b} (`{}`)",
                    p.name(),
                    calibrated.name()
                );
            }
            Ok(p)
        }
    }
}
