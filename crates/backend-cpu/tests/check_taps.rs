//! `lockstep check` on every tap: the reference and the cpu backend declare every invariance
//! bitwise (prefill vs decode, batches of 2/8/32 at random placements and slots vs alone,
//! an all-true mask vs none, KV block sizes and fragmented tables, 1 thread vs default,
//! repeated runs), and hold it on both real models; a backend whose explicit-mask path drifts
//! by an ulp is caught at the first tap it touches, and only by the mask invariance.

mod common;

use common::*;
use lockstep_backend_cpu::{CpuBackend, CpuOptions};
use lockstep_backend_ref::RefBackend;
use lockstep_engine::{Engine, EngineConfig};
use lockstep_gguf::GgufFile;
use lockstep_graph::{
    Activation, AttentionParams, Backend, BackendError, Batch, HostTensor, KvLayout, RopeParams,
    Taps, WeightView,
};
use lockstep_models::Model;
use lockstep_verify::check::{
    bitwise_invariances, run_tap_checks, EngineVariant, Invariance, TapCheckResult, ALL_INVARIANCES,
};
use lockstep_verify::{AnyEngine, VerifyError};

fn cfg() -> EngineConfig {
    EngineConfig {
        n_ctx: 256,
        cache_tokens: 1024,
        ..EngineConfig::default()
    }
}

/// Two short fixture prompts (the check runs each many times, in batches of up to 32).
fn prompts(model: &str) -> Vec<Vec<u32>> {
    let mut ps: Vec<Vec<u32>> = fixture_prompts(model)
        .into_iter()
        .filter(|p| p.len() <= 8)
        .take(2)
        .collect();
    assert_eq!(ps.len(), 2, "{model}: expected two short fixture prompts");
    ps.sort();
    ps
}

fn run<B, F>(model: &str, name: &str, make: F) -> Vec<TapCheckResult>
where
    B: Backend + Send + 'static,
    B::Weight: Send,
    B::KvCache: Send,
    F: Fn(Option<usize>) -> B,
{
    let path = model_path(model);
    let file = GgufFile::open(&path).expect("open");
    let mut open = |v: &EngineVariant| -> Result<Box<dyn AnyEngine + Send>, VerifyError> {
        let b = make(v.threads);
        let m = Model::load(&file, &b).map_err(|e| VerifyError::Input(e.to_string()))?;
        Ok(Box::new(Engine::new(b, m, v.config.clone())?))
    };
    run_tap_checks(&mut open, name, cfg(), &prompts(model), 0.0, 0x5eed).expect("checks")
}

fn assert_all_hold(model: &str, backend: &str, r: &[TapCheckResult]) {
    assert_eq!(bitwise_invariances(backend), ALL_INVARIANCES);
    assert_eq!(r.len(), ALL_INVARIANCES.len());
    for c in r {
        assert!(
            c.bitwise,
            "{model} {backend}: {} not declared bitwise",
            c.name
        );
        // The untapped run has only its logits to compare (every position of every prompt,
        // twice); the others compare every tap.
        let least = if c.invariance == Invariance::Untapped {
            20
        } else {
            1000
        };
        assert!(
            c.compared >= least,
            "{model} {backend}: {} compared {}",
            c.name,
            c.compared
        );
        assert!(
            c.pass && c.worst.n_diff == 0,
            "{model} {backend}: {} broken: {:?}",
            c.name,
            c.first_break
        );
    }
}

fn cpu_threads(threads: Option<usize>) -> CpuBackend {
    CpuBackend::new(CpuOptions {
        threads: Some(threads.unwrap_or(2)),
        ..CpuOptions::default()
    })
}

/// The checks size the cache for their largest batch (32 copies of the longest prompt) instead
/// of failing "KV cache full" when the caller's cache is smaller (`lockstep check` on a model
/// whose vocabulary makes long prompts).
#[test]
fn checks_make_room_for_their_batches() {
    let path = model_path("smollm2");
    let file = GgufFile::open(&path).expect("open");
    let mut open = |v: &EngineVariant| -> Result<Box<dyn AnyEngine + Send>, VerifyError> {
        let b = cpu_threads(v.threads);
        let m = Model::load(&file, &b).map_err(|e| VerifyError::Input(e.to_string()))?;
        Ok(Box::new(Engine::new(b, m, v.config.clone())?))
    };
    let small = EngineConfig {
        n_ctx: 64,
        cache_tokens: 64,
        ..EngineConfig::default()
    };
    let ps = prompts("smollm2");
    // 32 copies of the longer prompt need more than the 64 tokens given.
    assert!(32 * ps.iter().map(Vec::len).max().unwrap() > small.cache_tokens);
    let r = run_tap_checks(&mut open, "cpu", small, &ps, 0.0, 0x5eed).expect("checks");
    assert_all_hold("smollm2", "cpu", &r);
}

#[test]
fn cpu_holds_every_invariance_on_every_tap_smollm2() {
    assert_all_hold("smollm2", "cpu", &run("smollm2", "cpu", cpu_threads));
}

#[test]
fn cpu_holds_every_invariance_on_every_tap_gemma3() {
    assert_all_hold("gemma3", "cpu", &run("gemma3", "cpu", cpu_threads));
}

#[test]
fn ref_holds_every_invariance_on_every_tap_smollm2() {
    assert_all_hold(
        "smollm2",
        "ref",
        &run("smollm2", "ref", |_| RefBackend::new()),
    );
}

#[test]
fn ref_holds_every_invariance_on_every_tap_gemma3() {
    assert_all_hold(
        "gemma3",
        "ref",
        &run("gemma3", "ref", |_| RefBackend::new()),
    );
}

/// The cpu backend whose attention, when handed an explicit mask, scales the queries by
/// 1 + 2^-20 first (a few ulps): a drift no logit tolerance would notice.
struct MaskDrift(CpuBackend);

impl Backend for MaskDrift {
    type Tensor = <CpuBackend as Backend>::Tensor;
    type Weight = <CpuBackend as Backend>::Weight;
    type KvCache = <CpuBackend as Backend>::KvCache;
    fn name(&self) -> &str {
        "cpu"
    }
    fn load_weight(&self, w: WeightView<'_>) -> Result<Self::Weight, BackendError> {
        self.0.load_weight(w)
    }
    fn alloc_kv(&self, l: KvLayout) -> Result<Self::KvCache, BackendError> {
        self.0.alloc_kv(l)
    }
    fn to_host(&self, t: &Self::Tensor) -> HostTensor {
        self.0.to_host(t)
    }
    fn embed(&self, t: &Self::Weight, ids: &[u32]) -> Result<Self::Tensor, BackendError> {
        self.0.embed(t, ids)
    }
    fn matmul(&self, x: &Self::Tensor, w: &Self::Weight) -> Self::Tensor {
        self.0.matmul(x, w)
    }
    fn add_bias(&self, x: &Self::Tensor, b: &Self::Weight) -> Self::Tensor {
        self.0.add_bias(x, b)
    }
    fn rms_norm(&self, x: &Self::Tensor, w: &Self::Weight, eps: f32) -> Self::Tensor {
        self.0.rms_norm(x, w, eps)
    }
    fn add(&self, a: &Self::Tensor, b: &Self::Tensor) -> Self::Tensor {
        self.0.add(a, b)
    }
    fn scale(&self, x: &Self::Tensor, s: f32) -> Self::Tensor {
        self.0.scale(x, s)
    }
    fn act_mul(&self, g: &Self::Tensor, u: &Self::Tensor, act: Activation) -> Self::Tensor {
        self.0.act_mul(g, u, act)
    }
    fn rope(&self, x: &Self::Tensor, pos: &[u32], p: RopeParams) -> Self::Tensor {
        self.0.rope(x, pos, p)
    }
    fn select_rows(&self, x: &Self::Tensor, rows: &[usize]) -> Self::Tensor {
        self.0.select_rows(x, rows)
    }
    fn kv_store(
        &self,
        c: &mut Self::KvCache,
        l: usize,
        k: &Self::Tensor,
        v: &Self::Tensor,
        b: &Batch,
    ) -> Result<(), BackendError> {
        self.0.kv_store(c, l, k, v, b)
    }
    fn attention(
        &self,
        c: &Self::KvCache,
        l: usize,
        q: &Self::Tensor,
        b: &Batch,
        p: AttentionParams,
        t: &mut Taps<'_>,
    ) -> Result<Self::Tensor, BackendError> {
        if b.seqs.iter().any(|s| s.mask.is_some()) {
            let drifted = self.0.scale(q, 1.0 + 1.0 / 1_048_576.0);
            self.0.attention(c, l, &drifted, b, p, t)
        } else {
            self.0.attention(c, l, q, b, p, t)
        }
    }
}

#[test]
fn a_drifting_mask_path_is_named_at_its_first_tap() {
    let r = run("smollm2", "cpu", |t| MaskDrift(cpu_threads(t)));
    for c in &r {
        if c.invariance == Invariance::MaskAllTrue {
            let f = c
                .first_break
                .as_ref()
                .expect("the mask drift was not caught");
            assert!(!c.pass);
            // The queries are not a tap of their own here: the first tap computed from the
            // drifted queries is layer 0's scores.
            assert_eq!(f.tap, "blk.0.kq", "{f:?}");
            assert_eq!(f.position, 0);
            assert!(f.metrics.n_diff > 0 && f.metrics.nmse < 1e-9, "{f:?}");
        } else {
            assert!(c.pass, "{}: {:?}", c.name, c.first_break);
        }
    }
}
