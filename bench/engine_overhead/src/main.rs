//! The engine's own cost per decode step (session 39): `Engine::forward_lend` of one token,
//! 128 steps a round, on a backend whose `replay_step` returns at once (the reference backend's
//! ops, never run). What is left is the engine (validation, the batch, its bookkeeping) and
//! the model graph's preamble: what the CUDA replay clock's "between" would be if nothing
//! else were there. Rounds: steps back to back; with a 340 us spin between steps (a replay's
//! wait); with the spin and 4 MiB written (caches disturbed).
//!
//!   cargo build --release --manifest-path bench/engine_overhead/Cargo.toml
//!   target/release/engine-overhead MODEL.gguf      (any llama/qwen2/gemma3 GGUF)
//!
//! Session 39, the H200 machine's host (a VM, "Intel Xeon Processor"): 0.27-0.57 us a step
//! back to back, 0.59-0.84 with the spin, 1.36-1.40 with the spin and the writes; the CI-like
//! machine (2 cores) 0.19-0.31 / 0.70-0.87 / 2.36-2.67. The replay clock's "between" on the
//! H200's host: 6-10 us (bench/session39/runs.txt).

use std::time::{Duration, Instant};

use lockstep_backend_ref::RefBackend;
use lockstep_engine::{Engine, EngineConfig, Logits, SeqInput};
use lockstep_graph::{
    Activation, AttentionParams, Backend, BackendError, Batch, HostTensor, KvLayout, LogitsOut,
    RopeParams, StepKey, StepOut, Taps, WeightView,
};

/// The reference backend with every step "replayed" at once.
struct NoopReplay(RefBackend);

type T = <RefBackend as Backend>::Tensor;
type W = <RefBackend as Backend>::Weight;
type K = <RefBackend as Backend>::KvCache;

impl Backend for NoopReplay {
    type Tensor = T;
    type Weight = W;
    type KvCache = K;
    fn name(&self) -> &str {
        "noop-replay"
    }
    fn replay_step(
        &self,
        _key: StepKey,
        _cache: &mut K,
        batch: &Batch,
        out: LogitsOut<'_>,
    ) -> Result<Option<StepOut>, BackendError> {
        static ROW: [f32; 8] = [0.0; 8];
        std::hint::black_box(batch.seqs.first().map(|s| s.kv_slots.len()));
        if let LogitsOut::Lend(to) = out {
            to.lend(&ROW);
        }
        Ok(Some(StepOut::Lent {
            rows: 1,
            n_vocab: ROW.len(),
        }))
    }
    fn load_weight(&self, w: WeightView<'_>) -> Result<W, BackendError> {
        self.0.load_weight(w)
    }
    fn alloc_kv(&self, l: KvLayout) -> Result<K, BackendError> {
        self.0.alloc_kv(l)
    }
    fn to_host(&self, t: &T) -> HostTensor {
        self.0.to_host(t)
    }
    fn embed(&self, a: &W, b: &[u32]) -> Result<T, BackendError> {
        self.0.embed(a, b)
    }
    fn matmul(&self, a: &T, b: &W) -> T {
        self.0.matmul(a, b)
    }
    fn add_bias(&self, a: &T, b: &W) -> T {
        self.0.add_bias(a, b)
    }
    fn rms_norm(&self, a: &T, b: &W, e: f32) -> T {
        self.0.rms_norm(a, b, e)
    }
    fn add(&self, a: &T, b: &T) -> T {
        self.0.add(a, b)
    }
    fn scale(&self, a: &T, s: f32) -> T {
        self.0.scale(a, s)
    }
    fn act_mul(&self, a: &T, b: &T, c: Activation) -> T {
        self.0.act_mul(a, b, c)
    }
    fn rope(&self, a: &T, p: &[u32], r: RopeParams) -> T {
        self.0.rope(a, p, r)
    }
    fn select_rows(&self, a: &T, r: &[usize]) -> T {
        self.0.select_rows(a, r)
    }
    fn kv_store(&self, c: &mut K, l: usize, k: &T, v: &T, b: &Batch) -> Result<(), BackendError> {
        self.0.kv_store(c, l, k, v, b)
    }
    fn attention(
        &self,
        c: &K,
        l: usize,
        q: &T,
        b: &Batch,
        p: AttentionParams,
        t: &mut Taps<'_>,
    ) -> Result<T, BackendError> {
        self.0.attention(c, l, q, b, p, t)
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::args().nth(1).ok_or("usage: engine-overhead MODEL.gguf")?;
    let file = lockstep_gguf::GgufFile::open(&path)?;
    let backend = NoopReplay(RefBackend::default());
    let model = lockstep_models::Model::load(&file, &backend)?;
    let mut engine = Engine::new(backend, model, EngineConfig::default())?;
    let receive = |r: &[f32]| {
        std::hint::black_box(r.last());
    };
    let t = Instant::now();
    let mut x = t;
    for _ in 0..100_000 {
        x = std::hint::black_box(Instant::now());
    }
    println!(
        "Instant::now: {:.1} ns",
        (x - t).as_secs_f64() * 1e9 / 100_000.0
    );
    let names = [
        "back to back",
        "a 340 us spin between steps",
        "the spin and 4 MiB written",
    ];
    for round in 0..2 {
        for (mode, name) in names.iter().enumerate() {
            let seq = engine.new_sequence();
            let mut tok = [1u32];
            let mut total = 0.0;
            for i in 0..128u32 {
                let s = Instant::now();
                let junk = if mode == 2 { vec![1u8; 4 << 20] } else { Vec::new() };
                if mode > 0 {
                    while s.elapsed() < Duration::from_micros(340) {
                        std::hint::spin_loop();
                    }
                }
                std::hint::black_box(&junk);
                let t0 = Instant::now();
                engine.forward_lend(
                    &[SeqInput {
                        seq,
                        tokens: &tok,
                        logits: Logits::Last,
                        mask: None,
                    }],
                    &mut Taps::none(),
                    &receive,
                )?;
                total += t0.elapsed().as_secs_f64();
                tok[0] = (i * 7 + 3) % 1000;
            }
            engine.free_sequence(seq);
            println!(
                "round {round}, {name}: {:.3} us a step",
                total * 1e6 / 128.0
            );
        }
    }
    Ok(())
}
