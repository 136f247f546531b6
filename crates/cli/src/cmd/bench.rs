//! `lockstep bench`: prompt processing and generation speed with llama-bench's definitions.
//!
//! - `pp N`: N random prompt tokens evaluated in one batch (logits of the last one only), from an
//!   empty cache; tokens/s = N / time.
//! - `tg N`: N tokens evaluated one at a time from an empty cache, one forward per token; no
//!   sampling (the next token is random), tokens/s = N / time.
//! - `-d N` (llama-bench's depth): each test starts from a sequence already holding N random
//!   tokens of context (prefilled, untimed), so `tg128 @ d4096` times decode steps whose
//!   attention reads 4096 to 4223 keys; the test's name carries the depth, as llama-bench's.
//! - Like llama-bench's, every forward brings its logits row to host memory and waits for it;
//!   the row is lent where it landed (`Engine::forward_lend`: on a GPU the page-locked buffer
//!   the device copied it into, as llama.cpp's logits buffer), not copied again.
//! - Each test runs once untimed (warm-up), then `-r` times; mean +- sample standard deviation of
//!   the per-repetition tokens/s. Model loading, tokenization and sampling are never timed.
//! - Peak memory is the process's peak resident set (`VmHWM`) after the runs.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use clap::Args;
use lockstep_backend_cpu::{CpuBackend, CpuOptions, KvType};
use lockstep_backend_ref::RefBackend;
use lockstep_engine::{Engine, EngineConfig, Logits, SeqInput};
use lockstep_gguf::GgufFile;
use lockstep_graph::{Backend, Taps};
use lockstep_models::Model;

#[derive(Args, Debug, Clone)]
pub struct BenchArgs {
    /// Model: a GGUF path or a short name (smollm2, gemma3); fetched if missing.
    #[arg(short = 'm', long = "model", default_value = "smollm2")]
    pub model: String,
    /// Where fetched models live (default: $LOCKSTEP_MODELS_DIR or ~/.cache/lockstep/models).
    #[arg(long)]
    pub models_dir: Option<PathBuf>,
    /// Compute backend.
    #[arg(long, default_value = "cpu", value_parser = ["cpu", "ref", "cuda", "cuda-exact"])]
    pub backend: String,
    /// Prompt tokens of the pp test (0 = skip).
    #[arg(short = 'p', long = "n-prompt", default_value_t = 512)]
    pub n_prompt: usize,
    /// Generated tokens of the tg test (0 = skip).
    #[arg(short = 'n', long = "n-gen", default_value_t = 128)]
    pub n_gen: usize,
    /// Tokens of context each test starts from (prefilled untimed; llama-bench's `-d`).
    #[arg(short = 'd', long = "depth", default_value_t = 0)]
    pub depth: usize,
    /// Timed repetitions of each test.
    #[arg(short = 'r', long = "repetitions", default_value_t = 3)]
    pub repetitions: usize,
    /// Kernel threads (cpu backend; default: all cores).
    #[arg(short = 't', long = "threads")]
    pub threads: Option<usize>,
    /// KV cache element type (cpu backend).
    #[arg(long = "kv-type", default_value = "f16", value_parser = ["f16", "f32"])]
    pub kv_type: String,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
    /// After the timed runs, run each test once more with a per-op timer and print where the
    /// time goes: each op's time is the wall time from the previous tap point to its own tap
    /// (q/k/v share one point). Never part of the timed figures.
    #[arg(long)]
    pub profile: bool,
}

/// Attributes wall time to taps: whatever ran since the previous tap point belongs to this
/// one. It asks for no values, so no tensor is copied to the host.
/// (`wants` takes `&self`, hence the cells.)
struct OpTimer {
    last: std::cell::Cell<Instant>,
    /// `(op name without the layer prefix, seconds, count)` in first-seen order.
    ops: std::cell::RefCell<Vec<(String, f64, usize)>>,
}

impl OpTimer {
    fn new() -> OpTimer {
        OpTimer {
            last: std::cell::Cell::new(Instant::now()),
            ops: std::cell::RefCell::new(Vec::new()),
        }
    }

    fn restart(&self) {
        self.last.set(Instant::now());
    }

    /// The table as text (printed to stdout, or to stderr under `--json`).
    fn report(&self, test: &str, total: f64) -> String {
        use std::fmt::Write as _;
        let mut o = String::new();
        let ops = self.ops.borrow();
        let _ = writeln!(
            o,
            "\n{test}: time per op (wall, summed over layers), {:.3} ms in all",
            total * 1e3
        );
        let seen: f64 = ops.iter().map(|op| op.1).sum();
        for (name, t, n) in ops.iter() {
            let _ = writeln!(
                o,
                "  {name:<16} {:>9.3} ms {:>5.1}%  ({n} calls)",
                t * 1e3,
                100.0 * t / total.max(1e-12)
            );
        }
        let _ = writeln!(
            o,
            "  {:<16} {:>9.3} ms {:>5.1}%  (logits to host, engine bookkeeping)",
            "(after taps)",
            (total - seen) * 1e3,
            100.0 * (total - seen) / total.max(1e-12)
        );
        o
    }
}

// On a shared reference, so that the tg loop can restart the clock while the taps hold it.
impl lockstep_graph::TapObserver for &OpTimer {
    fn wants(&self, name: &str) -> bool {
        let now = Instant::now();
        let dt = (now - self.last.get()).as_secs_f64();
        self.last.set(now);
        // `blk.12.ffn_up` and `blk.3.ffn_up` are one op.
        let op = match name.strip_prefix("blk.") {
            Some(rest) => rest.split_once('.').map_or(rest, |(_, op)| op),
            None => name,
        };
        let mut ops = self.ops.borrow_mut();
        match ops.iter_mut().find(|o| o.0 == op) {
            Some(o) => {
                o.1 += dt;
                o.2 += 1;
            }
            None => ops.push((op.to_string(), dt, 1)),
        }
        false
    }

    fn record(&mut self, _name: &str, _value: lockstep_graph::HostTensor) {}
}

/// The cpu backend with `threads` kernel threads (all cores when `None`) and an f16 KV cache.
pub fn make_cpu_backend(threads: Option<usize>) -> CpuBackend {
    CpuBackend::new(CpuOptions {
        threads,
        ..CpuOptions::default()
    })
}

struct TestResult {
    name: String,
    n_tokens: usize,
    samples: Vec<f64>,
}

impl TestResult {
    fn mean(&self) -> f64 {
        self.samples.iter().sum::<f64>() / self.samples.len().max(1) as f64
    }

    fn sd(&self) -> f64 {
        let n = self.samples.len();
        if n < 2 {
            return 0.0;
        }
        let m = self.mean();
        (self.samples.iter().map(|s| (s - m) * (s - m)).sum::<f64>() / (n - 1) as f64).sqrt()
    }
}

// `lockstep-backend-cpu`'s bench example compiles this file without a `cuda` feature.
#[allow(unexpected_cfgs)]
pub fn bench(args: BenchArgs) -> Result<()> {
    let path = lockstep_fetch::resolve_model(&args.model, args.models_dir.as_deref())?;
    if args.repetitions == 0 {
        bail!("--repetitions must be at least 1");
    }
    let kv_type = match args.kv_type.as_str() {
        "f32" => KvType::F32,
        _ => KvType::F16,
    };
    match args.backend.as_str() {
        "cpu" => {
            let b = CpuBackend::new(CpuOptions {
                threads: args.threads,
                kv_type,
                ..CpuOptions::default()
            });
            let threads = b.threads();
            run(&args, &path, b, threads, |_: &CpuBackend| None)
        }
        #[cfg(feature = "cuda")]
        name @ ("cuda" | "cuda-exact") => {
            let b = super::trace::cuda_backend(name)?;
            eprintln!(
                "{name}: {} (kernels from {})",
                b.device_name(),
                b.kernel_origin
            );
            run(
                &args,
                &path,
                b,
                1,
                |b: &lockstep_backend_cuda::CudaBackend| b.memory_used(),
            )
        }
        "ref" => {
            let threads = std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1);
            run(
                &args,
                &path,
                RefBackend::new(),
                threads,
                |_: &RefBackend| None,
            )
        }
        other => bail!("unknown backend `{other}`"),
    }
}

/// What a test does with a step's logits row on the host: nothing but make sure it was there
/// (llama-bench does not read it either).
/// A test's name as llama-bench prints it: `tg128`, or `tg128 @ d4096` at a depth.
fn test_name(kind: &str, n: usize, depth: usize) -> String {
    if depth == 0 {
        format!("{kind}{n}")
    } else {
        format!("{kind}{n} @ d{depth}")
    }
}

fn receive(rows: &[f32]) {
    std::hint::black_box(rows.last());
}

/// One pp test: `n` random tokens in one batch from an empty cache; returns the seconds taken.
fn pp_once<B: Backend>(
    engine: &mut Engine<B>,
    n: usize,
    depth: usize,
    rng: &mut Tokens,
    taps: &mut Taps<'_>,
) -> Result<f64> {
    let tokens: Vec<u32> = (0..n).map(|_| rng.next(engine.n_vocab())).collect();
    let seq = engine.new_sequence();
    prefill_depth(engine, seq, depth, rng)?;
    let t0 = Instant::now();
    engine.forward_lend(
        &[SeqInput {
            seq,
            tokens: &tokens,
            logits: Logits::Last,
            mask: None,
        }],
        taps,
        &receive,
    )?;
    let dt = t0.elapsed().as_secs_f64();
    engine.free_sequence(seq);
    Ok(dt)
}

/// The untimed context of a test at depth `depth`: that many random tokens in one batch.
fn prefill_depth<B: Backend>(
    engine: &mut Engine<B>,
    seq: lockstep_engine::SeqId,
    depth: usize,
    rng: &mut Tokens,
) -> Result<()> {
    if depth == 0 {
        return Ok(());
    }
    let tokens: Vec<u32> = (0..depth).map(|_| rng.next(engine.n_vocab())).collect();
    engine.forward_lend(
        &[SeqInput {
            seq,
            tokens: &tokens,
            logits: Logits::Last,
            mask: None,
        }],
        &mut Taps::none(),
        &receive,
    )?;
    Ok(())
}

/// One tg test: `n` random tokens one forward at a time from a cache holding `depth` tokens
/// of the sequence; returns the seconds spent in the forwards. `before_step` runs, untimed,
/// before each one.
fn tg_once<B: Backend>(
    engine: &mut Engine<B>,
    n: usize,
    depth: usize,
    rng: &mut Tokens,
    taps: &mut Taps<'_>,
    mut before_step: impl FnMut(),
) -> Result<f64> {
    let vocab = engine.n_vocab();
    let seq = engine.new_sequence();
    prefill_depth(engine, seq, depth, rng)?;
    let mut tok = [rng.next(vocab)];
    let mut total = 0.0;
    for _ in 0..n {
        before_step();
        let t0 = Instant::now();
        engine.forward_lend(
            &[SeqInput {
                seq,
                tokens: &tok,
                logits: Logits::Last,
                mask: None,
            }],
            taps,
            &receive,
        )?;
        total += t0.elapsed().as_secs_f64();
        tok[0] = rng.next(vocab);
    }
    engine.free_sequence(seq);
    Ok(total)
}

/// A deterministic stream of token ids (xorshift), as llama-bench feeds random tokens.
struct Tokens(u64);

impl Tokens {
    fn next(&mut self, vocab: usize) -> u32 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % vocab.max(1) as u64) as u32
    }
}

fn run<B: Backend>(
    args: &BenchArgs,
    path: &std::path::Path,
    backend: B,
    threads: usize,
    device_memory: impl Fn(&B) -> Option<usize>,
) -> Result<()> {
    let file = GgufFile::open(path).with_context(|| format!("{}", path.display()))?;
    let model = Model::load(&file, &backend).with_context(|| format!("{}", path.display()))?;
    let arch = model.config.arch.name();
    let n_ctx = (args.n_prompt.max(args.n_gen) + args.depth + 16).max(64);
    let mut engine = Engine::new(
        backend,
        model,
        EngineConfig {
            n_ctx,
            cache_tokens: n_ctx,
            ..EngineConfig::default()
        },
    )?;
    drop(file);
    let mut rng = Tokens(0x9E37_79B9_7F4A_7C15);
    let mut results = Vec::new();

    if args.n_prompt > 0 {
        let mut r = TestResult {
            name: test_name("pp", args.n_prompt, args.depth),
            n_tokens: args.n_prompt,
            samples: Vec::new(),
        };
        for rep in 0..=args.repetitions {
            let dt = pp_once(
                &mut engine,
                args.n_prompt,
                args.depth,
                &mut rng,
                &mut Taps::none(),
            )?;
            if rep > 0 {
                r.samples.push(args.n_prompt as f64 / dt);
            }
        }
        results.push(r);
    }
    let mut device_peak = device_memory(&engine.backend);
    if args.n_gen > 0 {
        let mut r = TestResult {
            name: test_name("tg", args.n_gen, args.depth),
            n_tokens: args.n_gen,
            samples: Vec::new(),
        };
        for rep in 0..=args.repetitions {
            let dt = tg_once(
                &mut engine,
                args.n_gen,
                args.depth,
                &mut rng,
                &mut Taps::none(),
                || {},
            )?;
            if rep > 0 {
                r.samples.push(args.n_gen as f64 / dt);
            }
        }
        results.push(r);
    }

    let mut profiles = Vec::new();
    if args.profile {
        if args.n_prompt > 0 {
            let timer = OpTimer::new();
            let mut obs = &timer;
            let dt = pp_once(
                &mut engine,
                args.n_prompt,
                args.depth,
                &mut rng,
                &mut Taps::new(&mut obs),
            )?;
            profiles.push((test_name("pp", args.n_prompt, args.depth), timer, dt));
        }
        if args.n_gen > 0 {
            let timer = OpTimer::new();
            // Each step's clock starts at the forward, not at the previous step's last tap.
            let mut obs = &timer;
            let dt = tg_once(
                &mut engine,
                args.n_gen,
                args.depth,
                &mut rng,
                &mut Taps::new(&mut obs),
                || timer.restart(),
            )?;
            profiles.push((test_name("tg", args.n_gen, args.depth), timer, dt));
        }
    }

    device_peak = device_peak.max(device_memory(&engine.backend));
    let peak = proc_status_bytes("VmHWM:");
    let rss = proc_status_bytes("VmRSS:");
    let model_name = path
        .file_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let backend_name = engine.backend.name().to_string();
    if args.json {
        let tests: Vec<serde_json::Value> = results
            .iter()
            .map(|r| {
                serde_json::json!({
                    "test": r.name,
                    "n_tokens": r.n_tokens,
                    "tokens_per_s_mean": r.mean(),
                    "tokens_per_s_sd": r.sd(),
                    "samples": r.samples,
                })
            })
            .collect();
        let out = serde_json::json!({
            "model": model_name,
            "arch": arch,
            "backend": backend_name,
            "threads": threads,
            "kv_type": args.kv_type,
            "depth": args.depth,
            "repetitions": args.repetitions,
            "peak_rss_bytes": peak,
            "rss_bytes": rss,
            "device_memory_used_peak_bytes": device_peak,
            "tests": tests,
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        println!("| model | backend | threads | test | t/s |");
        println!("| --- | --- | ---: | ---: | ---: |");
        for r in &results {
            println!(
                "| {model_name} | {backend_name} | {threads} | {} | {:.2} ± {:.2} |",
                r.name,
                r.mean(),
                r.sd()
            );
        }
        match peak {
            Some(b) => println!(
                "\npeak memory (VmHWM): {:.1} MiB",
                b as f64 / (1024.0 * 1024.0)
            ),
            None => println!("\npeak memory: unavailable on this platform"),
        }
        if let Some(b) = device_peak {
            println!(
                "GPU memory in use (device total - free, incl. the CUDA context), max after each test: {:.1} MiB",
                b as f64 / (1024.0 * 1024.0)
            );
        }
    }
    for (test, timer, total) in &profiles {
        let text = timer.report(test, *total);
        if args.json {
            eprint!("{text}");
        } else {
            print!("{text}");
        }
    }
    Ok(())
}

/// A memory figure of this process (`VmHWM:` = peak resident set, `VmRSS:` = now), from
/// `/proc/self/status` (Linux).
fn proc_status_bytes(key: &str) -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with(key))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}
