//! Seeded faults planted in this backend's own kernels (feature `faults`, for tests of
//! `lockstep diff`; builds without the feature contain none of this code).
//!
//! Each fault is a bug class from a real post-mortem, placed where such a bug lives: inside
//! the fused attention kernel, the cache write or read, the quantized matmul's decoded scales,
//! the embedding gather, RoPE, or the weight upload. With no fault selected every kernel runs
//! its normal instructions. The reference backend never contains a fault.

/// The seeded bugs, selected at run time with [`crate::CpuBackend::set_fault`]
/// (`lockstep diff --inject NAME`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Fault {
    /// The prefill's K/V rows reach its own attention but never persist in the cache: the
    /// next step's cache write reuses the staging rows, so decode reads zeros.
    PrefillNoKvWrite,
    /// Odd layers read the previous layer's KV rows (a shared-KV slot bug in the cache read).
    KvWrongLayer,
    /// The attention output weight is uploaded with its dimensions swapped (read transposed).
    AttnOutSwapped,
    /// The f16 cache is read back as f32 bits (the reader assumes an f32 cache).
    KvF16AsF32,
    /// The embedding gather returns zeros for ids in the upper half of the vocabulary.
    EmbedZeros,
    /// The Q8_0 matmul kernel uses the next block's scale (decoded scale vector shifted).
    Q8WrongScale,
    /// The fused attention kernel ignores the per-head offset of Q: every head reads head 0.
    HeadOffset,
    /// The fused attention kernel, given an explicit mask, sums the softmax denominator in
    /// reverse key order: a drift of a few ulps that an all-true mask must not cause.
    MaskDrift,
    /// The LM head is skipped: the normed hidden state is returned as logits (zero-padded).
    LmHeadSkipped,
    /// The fused attention kernel applies the softmax scale twice (flat attention).
    SoftmaxScale,
    /// RoPE uses position + 1 when it rotates a single row (decode).
    RopeDecodeOffByOne,
    /// Layer 1's FFN down weight is never uploaded (zeros): a dead layer.
    FfnDownZero,
    /// The embedding gather uses a zero row stride: every row is the first token's.
    EmbedBroadcast,
    /// The fused attention kernel's causal range stops one key short (`j < pos`); a query
    /// that sees nothing divides by a zero sum (NaN), as a naive kernel does.
    CausalOffByOne,
    /// The final norm's weight is never uploaded (zeros): all logits 0.
    OutputNormZero,
    /// The fused attention kernel's softmax takes `exp((s - max) / 4)`: flattened weights
    /// from correct scores.
    SoftmaxFlat,
    /// The fused attention kernel maps query-head group `g` to KV head `g * group % n_kv`
    /// instead of `g`: wrong keys and values for grouped queries (no effect with one KV head).
    GqaKvHead,
    /// The Q8_0 matmul kernel's even blocks carry a 6% larger scale: a small systematic
    /// error a whole-model diff against f32 math cannot see through the 8-bit noise.
    Q8BlockScale,
}

impl Fault {
    pub const ALL: [Fault; 18] = [
        Fault::PrefillNoKvWrite,
        Fault::KvWrongLayer,
        Fault::AttnOutSwapped,
        Fault::KvF16AsF32,
        Fault::EmbedZeros,
        Fault::Q8WrongScale,
        Fault::HeadOffset,
        Fault::MaskDrift,
        Fault::LmHeadSkipped,
        Fault::SoftmaxScale,
        Fault::RopeDecodeOffByOne,
        Fault::FfnDownZero,
        Fault::EmbedBroadcast,
        Fault::CausalOffByOne,
        Fault::OutputNormZero,
        Fault::SoftmaxFlat,
        Fault::GqaKvHead,
        Fault::Q8BlockScale,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Fault::PrefillNoKvWrite => "prefill-no-kv-write",
            Fault::KvWrongLayer => "kv-wrong-layer",
            Fault::AttnOutSwapped => "attn-out-swapped",
            Fault::KvF16AsF32 => "kv-f16-as-f32",
            Fault::EmbedZeros => "embd-zeros",
            Fault::Q8WrongScale => "q8-wrong-scale",
            Fault::HeadOffset => "head-offset",
            Fault::MaskDrift => "mask-drift",
            Fault::LmHeadSkipped => "lm-head-skipped",
            Fault::SoftmaxScale => "softmax-scale",
            Fault::RopeDecodeOffByOne => "rope-decode-off-by-one",
            Fault::FfnDownZero => "ffn-down-zero",
            Fault::EmbedBroadcast => "embd-broadcast",
            Fault::CausalOffByOne => "causal-off-by-one",
            Fault::OutputNormZero => "output-norm-zero",
            Fault::SoftmaxFlat => "softmax-flat",
            Fault::GqaKvHead => "gqa-kv-head",
            Fault::Q8BlockScale => "q8-block-scale",
        }
    }

    pub fn parse(s: &str) -> Option<Fault> {
        Fault::ALL.into_iter().find(|f| f.name() == s)
    }

    pub fn names() -> Vec<&'static str> {
        Fault::ALL.iter().map(|f| f.name()).collect()
    }
}

/// What a weight is, for the faults that pick their victim by name (recorded at load, in
/// builds with faults only).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum WeightRole {
    #[default]
    Other,
    /// `output.weight`, or `token_embd.weight` (a tied head).
    Head,
    /// `blk.N.attn_output.weight`.
    AttnOutput,
    /// `blk.1.ffn_down.weight`.
    FfnDownLayer1,
    /// `output_norm.weight`.
    OutputNorm,
}

impl WeightRole {
    pub fn of(name: &str) -> WeightRole {
        match name {
            "output.weight" | "token_embd.weight" => WeightRole::Head,
            "blk.1.ffn_down.weight" => WeightRole::FfnDownLayer1,
            "output_norm.weight" => WeightRole::OutputNorm,
            n if n.ends_with(".attn_output.weight") => WeightRole::AttnOutput,
            _ => WeightRole::Other,
        }
    }
}
