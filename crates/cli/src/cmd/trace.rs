//! `lockstep trace`: record the taps of a run (prefill, then decode steps) to a safetensors
//! file. Also the pieces `diff` and `check` share: backend selection (with `--inject` in
//! builds with the `faults` feature, planted in the cpu backend's kernels), prompts as text or
//! ids, teacher forcing.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::Args;
use lockstep_backend_ref::RefBackend;
use lockstep_engine::{Engine, EngineConfig};
use lockstep_gguf::GgufFile;
use lockstep_graph::Backend;
use lockstep_models::Model;
use lockstep_tokenizer::Tokenizer;
use lockstep_verify::{parse_ids, record, AnyEngine, MaskMode, RunSpec, TapFilter, TraceMeta};

/// The backends `--backend`, `--a` and `--b` accept.
/// `cuda` is the CUDA backend's fast numerics (quant8), `cuda-exact` its bitwise twin of `ref`.
pub const BACKENDS: &[&str] = &["ref", "cpu", "cuda", "cuda-exact"];

/// Model options of the verification commands.
#[derive(Args, Debug, Clone)]
pub struct VerifyModelArgs {
    /// Model: a GGUF path or a short name (smollm2, gemma3); fetched if missing.
    #[arg(short = 'm', long = "model", default_value = "smollm2")]
    pub model: String,
    /// Where fetched models live (default: $LOCKSTEP_MODELS_DIR or ~/.cache/lockstep/models).
    #[arg(long)]
    pub models_dir: Option<PathBuf>,
    /// Context length (tokens).
    #[arg(short = 'c', long = "ctx-size", default_value_t = 2048)]
    pub ctx_size: usize,
    /// Plant a seeded fault in the cpu backend's own kernels (only in builds with the
    /// `faults` feature; see `lockstep diff --list-faults`). The reference stays pristine.
    #[arg(long)]
    pub inject: Option<String>,
}

/// What to feed: a prompt (text or ids), decode steps, teacher forcing, mask.
#[derive(Args, Debug, Clone)]
pub struct PromptArgs {
    /// The prompt text (tokenized like `lockstep run`: BOS per the model, special tokens parsed).
    #[arg(short = 'p', long = "prompt", conflicts_with = "ids")]
    pub prompt: Option<String>,
    /// The prompt as token ids, e.g. `--ids 1,2,3`.
    #[arg(long)]
    pub ids: Option<String>,
    /// Decode steps after the prefill.
    #[arg(long, default_value_t = 0)]
    pub decode: usize,
    /// Teacher-force the decode steps with these ids (the rest are greedy).
    #[arg(long = "force-ids")]
    pub force_ids: Option<String>,
    /// Attention mask passed with every step: `none` or `all-true` (must change nothing).
    #[arg(long, default_value = "none", value_parser = ["none", "all-true"])]
    pub mask: String,
    /// Return (and compare) the logits of every prompt position, not just the last.
    #[arg(long)]
    pub all_logits: bool,
}

#[derive(Args, Debug)]
pub struct TraceArgs {
    #[command(flatten)]
    pub model: VerifyModelArgs,
    /// Compute backend.
    #[arg(long, default_value = "ref", value_parser = BACKENDS.to_vec())]
    pub backend: String,
    #[command(flatten)]
    pub prompt: PromptArgs,
    /// Record only taps matching these comma-separated globs (`-` excludes):
    /// `result_output` = the logits of every step.
    #[arg(long, default_value = "")]
    pub filter: String,
    /// Output file (safetensors).
    #[arg(short = 'o', long = "output")]
    pub output: PathBuf,
}

/// A model file opened and its tokenizer read, before any backend exists (every command opens
/// the model first: a wrong path or a damaged file is reported before a backend starts, and
/// the CUDA backend compiles its kernels at start, a minute or more uncached).
pub struct Opened {
    pub path: PathBuf,
    pub file: GgufFile,
    pub tokenizer: Tokenizer,
}

pub fn open_model(args: &VerifyModelArgs) -> Result<Opened> {
    open_model_file(&args.model, args.models_dir.as_deref())
}

/// The model `model` names (a path or a short name, fetched if missing), opened.
pub fn open_model_file(model: &str, models_dir: Option<&std::path::Path>) -> Result<Opened> {
    let path = crate::resolve_model(model, models_dir)?;
    let file = GgufFile::open(&path).with_context(|| format!("{}", path.display()))?;
    let tokenizer = Tokenizer::from_metadata(file.metadata())
        .with_context(|| format!("{}: tokenizer", path.display()))?;
    Ok(Opened {
        path,
        file,
        tokenizer,
    })
}

pub fn engine_config(args: &VerifyModelArgs) -> EngineConfig {
    EngineConfig {
        n_ctx: args.ctx_size,
        cache_tokens: args.ctx_size,
        ..EngineConfig::default()
    }
}

fn boxed<B: Backend + 'static>(
    backend: B,
    file: &GgufFile,
    cfg: EngineConfig,
) -> Result<Box<dyn AnyEngine>> {
    let model =
        Model::load(file, &backend).with_context(|| format!("{}", file.path().display()))?;
    Ok(Box::new(Engine::new(backend, model, cfg)?))
}

/// An engine on the named backend. `inject` plants a seeded fault in the cpu backend.
pub fn open_engine(
    name: &str,
    inject: Option<&str>,
    file: &GgufFile,
    cfg: EngineConfig,
) -> Result<Box<dyn AnyEngine>> {
    if inject.is_some() && name != "cpu" {
        bail!("--inject plants faults in the `cpu` backend's kernels (the reference stays pristine); backend `{name}` was asked for");
    }
    match name {
        "ref" => boxed(RefBackend::new(), file, cfg),
        "cpu" => boxed(cpu_backend(inject, None)?, file, cfg),
        "cuda" | "cuda-exact" => boxed(cuda_backend(name)?, file, cfg),
        other => bail!("unknown backend `{other}` (known: {})", BACKENDS.join(", ")),
    }
}

#[cfg(feature = "faults")]
pub fn cpu_backend(
    inject: Option<&str>,
    threads: Option<usize>,
) -> Result<lockstep_backend_cpu::CpuBackend> {
    use lockstep_backend_cpu::{CpuBackend, CpuOptions, Fault};
    let fault = match inject {
        None => None,
        Some(s) => Some(Fault::parse(s).with_context(|| {
            format!("unknown fault `{s}` (known: {})", Fault::names().join(", "))
        })?),
    };
    let mut b = CpuBackend::new(CpuOptions {
        threads,
        ..CpuOptions::default()
    });
    b.set_fault(fault);
    Ok(b)
}

#[cfg(not(feature = "faults"))]
pub fn cpu_backend(
    inject: Option<&str>,
    threads: Option<usize>,
) -> Result<lockstep_backend_cpu::CpuBackend> {
    if inject.is_some() {
        bail!("this lockstep was built without fault injection (build with `--features faults`)");
    }
    Ok(lockstep_backend_cpu::CpuBackend::new(
        lockstep_backend_cpu::CpuOptions {
            threads,
            ..lockstep_backend_cpu::CpuOptions::default()
        },
    ))
}

/// The CUDA backend on GPU 0 by name: `cuda` (fast numerics, quant8) or `cuda-exact` (the
/// reference's operations, bitwise); a clear error without a driver or in builds without the
/// `cuda` feature.
#[cfg(feature = "cuda")]
pub fn cuda_backend(name: &str) -> Result<lockstep_backend_cuda::CudaBackend> {
    use lockstep_backend_cuda::{CudaBackend, CudaOptions, Numerics};
    let numerics = match name {
        "cuda" => Numerics::Fast,
        "cuda-exact" => Numerics::Exact,
        other => bail!("`{other}` is not a CUDA backend (cuda, cuda-exact)"),
    };
    Ok(CudaBackend::with_options(CudaOptions {
        numerics,
        deterministic: CUDA_DETERMINISTIC.load(std::sync::atomic::Ordering::Relaxed),
        step_graphs: true,
    })?)
}

// The isolated pass knows which steps the cuda backend multiplies on the tensor cores.
#[cfg(feature = "cuda")]
const _: () =
    assert!(lockstep_verify::isolate::CUDA_GEMM_MIN_ROWS == lockstep_backend_cuda::GEMM_MIN_ROWS);

/// The global `--deterministic` flag, for every command that opens the CUDA backend.
static CUDA_DETERMINISTIC: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

/// The name backend `name` reports (and is judged by): `cuda` under `--deterministic` is
/// `cuda-det`.
pub fn reported_backend_name(name: &str) -> String {
    if name == "cuda" && CUDA_DETERMINISTIC.load(std::sync::atomic::Ordering::Relaxed) {
        "cuda-det".into()
    } else {
        name.into()
    }
}

pub fn set_cuda_deterministic(on: bool) {
    CUDA_DETERMINISTIC.store(on, std::sync::atomic::Ordering::Relaxed);
}

#[cfg(not(feature = "cuda"))]
pub fn cuda_backend(_name: &str) -> Result<std::convert::Infallible> {
    bail!("this lockstep was built without the CUDA backend (build with `--features cuda`)")
}

/// The fault names, if this build has them.
pub fn fault_names() -> Vec<&'static str> {
    #[cfg(feature = "faults")]
    {
        lockstep_backend_cpu::Fault::names()
    }
    #[cfg(not(feature = "faults"))]
    {
        Vec::new()
    }
}

/// Builds the run from the prompt options.
pub fn run_spec(
    tokenizer: &Tokenizer,
    p: &PromptArgs,
    filter: &str,
    n_vocab: usize,
) -> Result<RunSpec> {
    let prompt = match (&p.prompt, &p.ids) {
        (Some(text), None) => {
            if text.is_empty() {
                bail!("the prompt is empty");
            }
            tokenizer.encode(text, true, true)
        }
        (None, Some(ids)) => parse_ids(ids)?,
        (None, None) => bail!("no prompt: give -p TEXT or --ids 1,2,3"),
        (Some(_), Some(_)) => bail!("give either -p or --ids, not both"),
    };
    if prompt.is_empty() {
        bail!("the prompt has no tokens");
    }
    let force = match &p.force_ids {
        Some(s) => parse_ids(s)?,
        None => Vec::new(),
    };
    if let Some(&bad) = prompt
        .iter()
        .chain(&force)
        .find(|&&t| t as usize >= n_vocab)
    {
        bail!("token id {bad} is outside the vocabulary ({n_vocab} tokens)");
    }
    let decode = p.decode.max(force.len());
    Ok(RunSpec {
        prompt,
        decode,
        force,
        filter: TapFilter::parse(filter),
        mask: MaskMode::parse(&p.mask).unwrap_or_default(),
        all_logits: p.all_logits,
    })
}

/// The model's sha256, recorded in traces.
pub fn model_sha256(path: &Path) -> Result<String> {
    Ok(lockstep_verify::trace::sha256_file(path)?)
}

pub fn run(args: TraceArgs) -> Result<()> {
    let m = open_model(&args.model)?;
    let mut engine = open_engine(
        &args.backend,
        args.model.inject.as_deref(),
        &m.file,
        engine_config(&args.model),
    )?;
    let spec = run_spec(&m.tokenizer, &args.prompt, &args.filter, engine.n_vocab())?;
    let meta = TraceMeta {
        model: m
            .path
            .file_name()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default(),
        model_sha256: model_sha256(&m.path)?,
        backend: engine.backend_name(),
        filter: spec.filter.spec(),
        hidden_taps: engine.hidden_taps(),
    };
    let trace = record(engine.as_mut(), &spec, meta)?;
    trace.save(&args.output)?;
    let n: usize = trace.steps.iter().map(|s| s.taps.len()).sum();
    let toks: Vec<String> = trace
        .steps
        .iter()
        .skip(1)
        .flat_map(|s| s.tokens.iter().map(|t| t.to_string()))
        .collect();
    eprintln!(
        "wrote {}: {} steps ({} prompt tokens, decode ids [{}]), {n} tensors, backend {}",
        args.output.display(),
        trace.steps.len(),
        spec.prompt.len(),
        toks.join(","),
        trace.meta.backend
    );
    Ok(())
}
