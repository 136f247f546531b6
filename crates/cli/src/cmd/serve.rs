//! `lockstep serve` (an OpenAI-compatible server) and `lockstep loadgen` (its load generator).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::Args;
use lockstep_backend_ref::RefBackend;
use lockstep_engine::scheduler::{Scheduler, SchedulerConfig};
use lockstep_engine::{Engine, EngineConfig, MonitorConfig};
use lockstep_gguf::GgufFile;
use lockstep_graph::Backend;
use lockstep_models::Model;
use lockstep_server::{loadgen, Served, ServerConfig};
use lockstep_tokenizer::{ChatTemplate, Tokenizer};

#[derive(Args, Debug)]
pub struct ServeArgs {
    /// Model: a GGUF path or a short name (smollm2, gemma3); fetched if missing.
    #[arg(short = 'm', long = "model", default_value = "smollm2")]
    pub model: String,
    /// Where fetched models live (default: $LOCKSTEP_MODELS_DIR or ~/.cache/lockstep/models).
    #[arg(long)]
    pub models_dir: Option<PathBuf>,
    /// The model name clients must send (default: the -m argument).
    #[arg(long)]
    pub served_model_name: Option<String>,
    /// Compute backend: `cpu` (quantized kernels), `ref` (the reference), `cuda` (an NVIDIA
    /// GPU, quant8 numerics) or `cuda-exact` (the GPU, bitwise the reference); all
    /// batch-invariant bit for bit.
    #[arg(long, default_value = "cpu", value_parser = ["cpu", "ref", "cuda", "cuda-exact"])]
    pub backend: String,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    #[arg(long, default_value_t = 8080)]
    pub port: u16,
    /// Requests running at once (sequences in the batch).
    #[arg(long, default_value_t = 64)]
    pub max_seqs: usize,
    /// Tokens per forward step (decode tokens and prefill chunks together).
    #[arg(long, default_value_t = 512)]
    pub max_batch_tokens: usize,
    /// Requests waiting for a seat before new ones get 429.
    #[arg(long, default_value_t = 1024)]
    pub max_queue: usize,
    /// Longest sequence (prompt + generation), in tokens.
    #[arg(long = "ctx", default_value_t = 4096)]
    pub ctx: usize,
    /// KV cache capacity in tokens, shared by all requests.
    #[arg(long, default_value_t = 32768)]
    pub cache_tokens: usize,
    /// Turn block-level prefix caching off.
    #[arg(long)]
    pub no_prefix_cache: bool,
    /// Require `Authorization: Bearer KEY`.
    #[arg(long)]
    pub api_key: Option<String>,
    /// Replay this fraction of requests on the reference backend and compare logits.
    #[arg(long, default_value_t = 0.0)]
    pub audit: f64,
    /// Worker threads of the cpu backend (default: all cores).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Take every logits row to the host whole. By default, a step whose requests need only
    /// the largest logits (no penalties or logit bias) has its rows reduced where they were
    /// computed (on a GPU only those cross), with what the rest of the row gives made there
    /// too: a token drawn from the whole row (temperature without top-k), the row's total
    /// weight and a sorted prefix holding the top-p nucleus, the total for logprobs; the
    /// tokens and logprobs are the same.
    #[arg(long)]
    pub full_logits: bool,
}

fn scheduler<B: Backend>(
    path: &std::path::Path,
    backend: B,
    args_ctx: usize,
    cache_tokens: usize,
    prefix_cache: bool,
    cfg: SchedulerConfig,
    tokenizer: Arc<Tokenizer>,
) -> Result<Scheduler<B>> {
    let file = GgufFile::open(path).with_context(|| format!("{}", path.display()))?;
    let model = Model::load(&file, &backend).with_context(|| format!("{}", path.display()))?;
    let engine = Engine::new(
        backend,
        model,
        EngineConfig {
            n_ctx: args_ctx,
            cache_tokens,
            prefix_cache,
            ..EngineConfig::default()
        },
    )?;
    Ok(Scheduler::new(engine, tokenizer, cfg)?)
}

pub fn serve(args: ServeArgs) -> Result<()> {
    if !(0.0..=1.0).contains(&args.audit) {
        bail!("--audit must be a fraction in [0, 1], got {}", args.audit);
    }
    let path = crate::resolve_model(&args.model, args.models_dir.as_deref())?;
    let file = GgufFile::open(&path).with_context(|| format!("{}", path.display()))?;
    let tokenizer = Arc::new(
        Tokenizer::from_metadata(file.metadata())
            .with_context(|| format!("{}: tokenizer", path.display()))?,
    );
    let template = match ChatTemplate::from_metadata(file.metadata(), &tokenizer) {
        Ok(t) => Some(t),
        Err(e) => {
            eprintln!("note: chat completions are off: {e}");
            None
        }
    };
    let listener = std::net::TcpListener::bind((args.host.as_str(), args.port))
        .with_context(|| format!("cannot listen on {}:{}", args.host, args.port))?;
    let sched_cfg = SchedulerConfig {
        max_seqs: args.max_seqs,
        max_batch_tokens: args.max_batch_tokens,
        max_queue: args.max_queue,
    };
    let cfg = ServerConfig {
        model_id: args.served_model_name.clone().unwrap_or(args.model.clone()),
        api_key: args.api_key.clone(),
        audit_rate: args.audit,
        audit_model: Some(path.clone()),
        monitor: MonitorConfig::default(),
        ..ServerConfig::default()
    };
    let served = Served {
        tokenizer: tokenizer.clone(),
        template,
    };
    let (ctx, cache, prefix) = (args.ctx, args.cache_tokens, !args.no_prefix_cache);
    let full_logits = args.full_logits;
    eprintln!(
        "loading {} on the {} backend ...",
        path.display(),
        args.backend
    );
    // The backend is made on the engine thread, which owns it from then on.
    macro_rules! start_on {
        ($make_backend:expr) => {
            lockstep_server::start(
                move || {
                    scheduler(
                        &path,
                        $make_backend,
                        ctx,
                        cache,
                        prefix,
                        sched_cfg,
                        tokenizer,
                    )
                    .map(|mut s| {
                        s.set_full_logits(full_logits);
                        s
                    })
                },
                served,
                cfg,
                listener,
            )?
        };
    }
    let handle = match args.backend.as_str() {
        "cpu" => {
            let threads = args.threads;
            start_on!(super::bench::make_cpu_backend(threads))
        }
        "ref" => start_on!(RefBackend::new()),
        #[cfg(feature = "cuda")]
        name @ ("cuda" | "cuda-exact") => {
            // Continuous batching changes every step's batch: only batch-invariant kernels
            // keep each request's tokens independent of the others.
            super::trace::set_cuda_deterministic(true);
            // Step graphs on (the backend's default; `LOCKSTEP_CUDA_GRAPHS=0` turns them off).
            // Session 5's GPU run found NaN logits at 256 streams with graphs on: the recording
            // step of a shape too large to keep ran its attention into 1-value score buffers.
            // Fixed by `steps::score_room`; `bench/serve_diag_gpu.sh` (256 streams, `--check`,
            // 32768- and 131072-token caches) then ran with 0 errors and 0 differing replies.
            // Fail here, with the driver's message, rather than inside the engine thread.
            drop(super::trace::cuda_backend(name)?);
            let name = name.to_string();
            start_on!(super::trace::cuda_backend(&name)?)
        }
        other => bail!("unknown or unavailable backend `{other}`"),
    };
    eprintln!(
        "serving `{}` on http://{}",
        args.served_model_name.unwrap_or(args.model),
        handle.addr
    );
    handle.wait();
    Ok(())
}

#[derive(Args, Debug)]
pub struct LoadgenArgs {
    /// Server address (loopback only).
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub addr: std::net::SocketAddr,
    /// Model name the server serves.
    #[arg(short = 'm', long = "model", default_value = "smollm2")]
    pub model: String,
    /// Concurrent streams; a comma-separated list runs one load per value.
    #[arg(short = 'c', long, value_delimiter = ',', default_values_t = [8usize])]
    pub concurrency: Vec<usize>,
    /// Requests per load (default: 4 x concurrency, at least 16).
    #[arg(short = 'n', long)]
    pub requests: Option<usize>,
    /// Tokens generated per request (end-of-generation ignored, so all are generated).
    #[arg(long, default_value_t = 32)]
    pub max_tokens: usize,
    /// Distinct (prompt, seed) pairs the requests cycle through.
    #[arg(long, default_value_t = 32)]
    pub distinct: usize,
    /// Stop starting requests after this many seconds (per load).
    #[arg(long, default_value_t = 300)]
    pub time_limit: u64,
    /// Run each distinct request alone first and check every response against it.
    #[arg(long)]
    pub check: bool,
    /// Ask for no logprobs (the server may then reduce logits on the GPU; `--check` compares
    /// texts only).
    #[arg(long)]
    pub no_logprobs: bool,
    /// Send this `top_k` with every request (by default none: the whole row is sampled).
    #[arg(long)]
    pub top_k: Option<usize>,
    /// Send this `top_p` with every request (by default none: the server's default, 1).
    #[arg(long)]
    pub top_p: Option<f32>,
    /// Send this `frequency_penalty` with every request (by default none: 0).
    #[arg(long, allow_hyphen_values = true)]
    pub frequency_penalty: Option<f32>,
    /// Send this `presence_penalty` with every request (by default none: 0).
    #[arg(long, allow_hyphen_values = true)]
    pub presence_penalty: Option<f32>,
    /// Goodput SLOs in milliseconds.
    #[arg(long)]
    pub slo_ttft_ms: Option<u64>,
    #[arg(long)]
    pub slo_tpot_ms: Option<u64>,
    /// Print JSON lines instead of text.
    #[arg(long)]
    pub json: bool,
    /// First wait up to this many seconds for the server's /health to answer 200.
    #[arg(long, default_value_t = 0)]
    pub wait_ready: u64,
}

pub fn loadgen_cmd(args: LoadgenArgs) -> Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(async move {
        if args.wait_ready > 0 {
            let deadline = std::time::Instant::now() + Duration::from_secs(args.wait_ready);
            loop {
                let r = loadgen::request(
                    args.addr,
                    "GET",
                    "/health",
                    None,
                    &[],
                    Duration::from_secs(5),
                )
                .await;
                if r.as_ref().is_ok_and(|r| r.status == 200) {
                    break;
                }
                if std::time::Instant::now() > deadline {
                    bail!(
                        "the server at {} was not ready within {} s",
                        args.addr,
                        args.wait_ready
                    );
                }
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        }
        for &c in &args.concurrency {
            let n = args.requests.unwrap_or((4 * c).max(16));
            let mut reqs = loadgen::synthetic_requests(n, args.distinct, args.max_tokens);
            for r in &mut reqs {
                r.logprobs = !args.no_logprobs;
                r.top_k = args.top_k;
                r.top_p = args.top_p;
                r.frequency_penalty = args.frequency_penalty;
                r.presence_penalty = args.presence_penalty;
            }
            let limit = Duration::from_secs(args.time_limit);
            let report = if args.check {
                loadgen::check_against_solo(args.addr, &args.model, &reqs, c, limit).await?
            } else {
                let slo = loadgen::Slo {
                    ttft: args.slo_ttft_ms.map(Duration::from_millis),
                    tpot: args.slo_tpot_ms.map(Duration::from_millis),
                    e2e: None,
                };
                loadgen::run_load(args.addr, &args.model, &reqs, c, limit, limit, slo)
                    .await?
                    .0
            };
            if args.json {
                println!("{}", report.to_json());
            } else {
                print!("{report}");
            }
        }
        Ok(())
    })
}
