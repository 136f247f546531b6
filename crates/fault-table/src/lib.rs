//! The fault table: where `lockstep diff --a ref --b cpu --inject FAULT` must localise each
//! fault planted in the cpu backend's own kernels (`lockstep_backend_cpu::Fault`, feature
//! `faults`). The tests in `tests/` hold the backend to it on both real models; the table in
//! `docs/verification.md` is this one.

pub use lockstep_backend_cpu::Fault;

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
