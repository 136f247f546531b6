//! The fault table: where `lockstep diff --a ref --b cpu --inject FAULT` must localise each
//! fault planted in the cpu backend's own kernels (`lockstep_backend_cpu::Fault`, feature
//! `faults`). The tests in `tests/` hold the backend to it on both real models; the table in
//! `docs/verification.md` is this one. [`BetweenOps`] plants faults between the ops of any
//! backend.

pub use lockstep_backend_cpu::Fault;
use lockstep_graph::{
    Activation, AttentionParams, Backend, BackendError, Batch, HostTensor, KvLayout, RopeParams,
    Taps, WeightView,
};

/// What a whole-run diff must say about a fault.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Expect {
    /// DIVERGE, first at `tap` of `step` (0 = prefill), with every input of it agreeing.
    At { step: usize, tap: String },
    /// The fault cannot change this model's numbers (why); the diff must AGREE.
    NoEffect(&'static str),
    /// Below the whole-run noise floor of 8-bit activations and an f16 cache: the diff must
    /// AGREE today; the isolated-op verdict (`lockstep diff --isolate`) must name `op`.
    NeedsIsolate { op: String },
}

/// The facts of a model the table depends on.
#[derive(Clone, Debug)]
pub struct ModelFacts {
    pub n_kv_heads: usize,
    /// The first tap, in execution order, made by a matmul with a Q8_0 weight.
    pub first_q8_matmul: String,
}

pub fn expected(f: Fault, m: &ModelFacts) -> Expect {
    let at = |step: usize, tap: &str| Expect::At {
        step,
        tap: tap.to_string(),
    };
    match f {
        Fault::PrefillNoKvWrite => at(1, "blk.0.k_read"),
        Fault::KvWrongLayer => at(0, "blk.1.k_read"),
        Fault::AttnOutSwapped => at(0, "blk.0.attn_out"),
        Fault::KvF16AsF32 => at(0, "blk.0.k_read"),
        Fault::EmbedZeros => at(0, "inp_embd"),
        Fault::Q8WrongScale => at(0, &m.first_q8_matmul),
        Fault::HeadOffset => at(0, "blk.0.kq"),
        Fault::MaskDrift => Expect::NeedsIsolate {
            op: "blk.0.kq_softmax".into(),
        },
        Fault::LmHeadSkipped => at(0, "result_output"),
        Fault::SoftmaxScale => at(0, "blk.0.kq"),
        Fault::RopeDecodeOffByOne => at(1, "blk.0.q_rope"),
        Fault::FfnDownZero => at(0, "blk.1.ffn_out"),
        Fault::EmbedBroadcast => at(0, "inp_embd"),
        Fault::CausalOffByOne => at(0, "blk.0.kq"),
        Fault::OutputNormZero => at(0, "result_norm"),
        Fault::SoftmaxFlat => at(0, "blk.0.kq_softmax"),
        Fault::GqaKvHead if m.n_kv_heads == 1 => {
            Expect::NoEffect("one KV head: every query head maps to it whatever the mapping")
        }
        Fault::GqaKvHead => at(0, "blk.0.kq"),
        Fault::Q8BlockScale => Expect::NeedsIsolate {
            op: m.first_q8_matmul.clone(),
        },
    }
}

/// Faults that live between ops (in the graph's plumbing rather than in a kernel), planted by
/// a wrapper around any backend: the same bug classes can be run against every backend,
/// including ones this crate knows nothing about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpFault {
    /// The row selection before the LM head ignores its offsets: every selected row is row 0
    /// (a view whose offset was dropped).
    SelectRowsOffset,
    /// The residual add returns only the branch, dropping the residual stream.
    ResidualDropped,
}

impl OpFault {
    pub const ALL: [OpFault; 2] = [OpFault::SelectRowsOffset, OpFault::ResidualDropped];

    pub fn name(self) -> &'static str {
        match self {
            OpFault::SelectRowsOffset => "select-rows-offset",
            OpFault::ResidualDropped => "residual-dropped",
        }
    }

    /// Where a whole-run diff must localise it (step, tap).
    pub fn expected(self) -> (usize, &'static str) {
        match self {
            OpFault::SelectRowsOffset => (0, "result_norm"),
            OpFault::ResidualDropped => (0, "blk.0.ffn_inp"),
        }
    }
}

/// Any backend with an [`OpFault`] planted between its ops; every op is the inner backend's.
pub struct BetweenOps<B> {
    pub inner: B,
    pub fault: Option<OpFault>,
    label: String,
}

impl<B: Backend> BetweenOps<B> {
    pub fn new(inner: B) -> BetweenOps<B> {
        let label = inner.name().to_string();
        BetweenOps {
            inner,
            fault: None,
            label,
        }
    }

    pub fn set_fault(&mut self, fault: Option<OpFault>) {
        self.fault = fault;
        self.label = match fault {
            Some(f) => format!("{}[{}]", self.inner.name(), f.name()),
            None => self.inner.name().to_string(),
        };
    }
}

impl<B: Backend> Backend for BetweenOps<B> {
    type Tensor = B::Tensor;
    type Weight = B::Weight;
    type KvCache = B::KvCache;

    fn name(&self) -> &str {
        &self.label
    }
    fn hidden_taps(&self) -> &'static [&'static str] {
        self.inner.hidden_taps()
    }
    fn load_weight(&self, w: WeightView<'_>) -> Result<B::Weight, BackendError> {
        self.inner.load_weight(w)
    }
    fn alloc_kv(&self, layout: KvLayout) -> Result<B::KvCache, BackendError> {
        self.inner.alloc_kv(layout)
    }
    fn to_host(&self, t: &B::Tensor) -> HostTensor {
        self.inner.to_host(t)
    }
    fn embed(&self, table: &B::Weight, ids: &[u32]) -> Result<B::Tensor, BackendError> {
        self.inner.embed(table, ids)
    }
    fn matmul(&self, x: &B::Tensor, w: &B::Weight) -> B::Tensor {
        self.inner.matmul(x, w)
    }
    fn add_bias(&self, x: &B::Tensor, bias: &B::Weight) -> B::Tensor {
        self.inner.add_bias(x, bias)
    }
    fn rms_norm(&self, x: &B::Tensor, weight: &B::Weight, eps: f32) -> B::Tensor {
        self.inner.rms_norm(x, weight, eps)
    }
    fn add(&self, a: &B::Tensor, b: &B::Tensor) -> B::Tensor {
        if self.fault == Some(OpFault::ResidualDropped) {
            // `a + b` became `0 * a + b`: the residual stream is lost.
            return self.inner.add(&self.inner.scale(a, 0.0), b);
        }
        self.inner.add(a, b)
    }
    fn scale(&self, x: &B::Tensor, s: f32) -> B::Tensor {
        self.inner.scale(x, s)
    }
    fn act_mul(&self, gate: &B::Tensor, up: &B::Tensor, act: Activation) -> B::Tensor {
        self.inner.act_mul(gate, up, act)
    }
    fn gate_up_act(
        &self,
        x: &B::Tensor,
        gate: &B::Weight,
        up: &B::Weight,
        act: Activation,
    ) -> (B::Tensor, B::Tensor, B::Tensor) {
        self.inner.gate_up_act(x, gate, up, act)
    }
    fn rope(&self, x: &B::Tensor, positions: &[u32], p: RopeParams) -> B::Tensor {
        self.inner.rope(x, positions, p)
    }
    fn select_rows(&self, x: &B::Tensor, rows: &[usize]) -> B::Tensor {
        if self.fault == Some(OpFault::SelectRowsOffset) {
            return self.inner.select_rows(x, &vec![0; rows.len()]);
        }
        self.inner.select_rows(x, rows)
    }
    fn kv_store(
        &self,
        cache: &mut B::KvCache,
        layer: usize,
        k: &B::Tensor,
        v: &B::Tensor,
        batch: &Batch,
    ) -> Result<(), BackendError> {
        self.inner.kv_store(cache, layer, k, v, batch)
    }
    fn attention(
        &self,
        cache: &B::KvCache,
        layer: usize,
        q: &B::Tensor,
        batch: &Batch,
        p: AttentionParams,
        taps: &mut Taps<'_>,
    ) -> Result<B::Tensor, BackendError> {
        self.inner.attention(cache, layer, q, batch, p, taps)
    }
}
