//! The backend interface: the ops a model graph may use.

use lockstep_quant::GgmlType;

use crate::{Batch, HostTensor, LogitsOut, StepOut, Taps};

#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    #[error("tensor `{name}`: {why}")]
    Weight { name: String, why: String },
    #[error("token id {id} at batch row {row} is outside the vocabulary (size {vocab})")]
    TokenOutOfRange { id: u32, row: usize, vocab: usize },
    #[error("KV cache: {0}")]
    Kv(String),
    #[error("{backend} backend: {why}")]
    Unavailable { backend: String, why: String },
    #[error("{0}")]
    Other(String),
}

/// A weight as stored in the model file: the backend decides how to hold it (dequantized to
/// f32, kept quantized, uploaded to a device).
#[derive(Clone, Copy, Debug)]
pub struct WeightView<'a> {
    pub name: &'a str,
    pub ty: GgmlType,
    /// ggml order: `dims[0]` is the row length.
    pub dims: &'a [u64],
    pub data: &'a [u8],
}

/// Shape of the paged KV cache the engine asks a backend to allocate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KvLayout {
    pub n_layers: usize,
    pub n_blocks: usize,
    pub block_size: usize,
    /// Width of one cached K (and V) row: n_kv_heads * head_dim.
    pub kv_dim: usize,
}

impl KvLayout {
    pub fn n_slots(&self) -> usize {
        self.n_blocks * self.block_size
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RopeStyle {
    /// llama.cpp `LLAMA_ROPE_TYPE_NORM`: rotate adjacent pairs (x[2i], x[2i+1]).
    Norm,
    /// llama.cpp `LLAMA_ROPE_TYPE_NEOX`: rotate halves (x[i], x[i + n_rot/2]).
    Neox,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RopeParams {
    pub style: RopeStyle,
    pub head_dim: usize,
    /// Dimensions rotated per head (the rest pass through).
    pub n_rot: usize,
    pub base: f32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Activation {
    Silu,
    /// GELU, tanh approximation (Gemma).
    GeluTanh,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AttentionParams {
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    /// Multiplies q.k before the mask and softmax.
    pub scale: f32,
    /// A query at position p sees keys in (p - window, p]; `None` = plain causal.
    pub window: Option<u32>,
}

/// What fixes the shape of a forward step for [`Backend::replay_step`]: a recorded step is
/// replayed only for the same model and cache and the same numbers of rows and outputs (every
/// kernel's launch geometry follows from these; everything else is data the step re-stages).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct StepKey {
    /// Identity of the model's weights (their address while loaded).
    pub model: usize,
    pub n_tokens: usize,
    pub n_outputs: usize,
}

/// The inputs of [`Backend::rope_store`]: the projections and the optional per-head norms.
pub struct QkvIn<'a, B: Backend + ?Sized> {
    pub q: &'a B::Tensor,
    pub k: &'a B::Tensor,
    pub v: &'a B::Tensor,
    pub q_norm: Option<&'a B::Weight>,
    pub k_norm: Option<&'a B::Weight>,
    pub eps: f32,
}

/// The outputs of [`Backend::residual_norm`]: the post-normed block output (when there was a
/// post norm), the new residual stream, and its norm (when asked for).
pub struct Residual<T> {
    pub post: Option<T>,
    pub sum: T,
    pub normed: Option<T>,
}

/// The outputs of [`Backend::rope_store`]: the normed q and k (when there were norms) and the
/// rotated q and k (what attention and the cache consumed).
pub struct QkRoped<T> {
    pub q_norm: Option<T>,
    pub k_norm: Option<T>,
    pub q: T,
    pub k: T,
}

/// Ops a backend provides. Activations are 2-D `[rows, cols]` (one row per batch token).
///
/// Every op is deterministic: the same inputs give bitwise the same outputs regardless of how
/// many other rows share the batch (the reference backend guarantees this; others state where
/// they do not).
pub trait Backend {
    type Tensor;
    type Weight;
    type KvCache;

    fn name(&self) -> &str;

    /// Per-layer taps (suffixes such as `kq`, `kq_softmax`) this backend never emits because
    /// its kernels never hold those values (a fused attention that keeps no score matrix).
    /// `diff` localizes with the taps both sides have and names these as not exposed, instead
    /// of treating them as missing. Every tap a backend does emit is copied from the very
    /// buffer the next op consumed, never recomputed by another code path (`docs/taps.md`).
    fn hidden_taps(&self) -> &'static [&'static str] {
        &[]
    }

    /// Out-of-bounds writes detected since the last call, for backends that can guard the
    /// memory they own (the cpu backend's `with_output_guards`); `check --ops` fails a case
    /// that leaves any. Empty for backends that cannot tell.
    fn guard_violations(&self) -> Vec<String> {
        Vec::new()
    }

    /// Step graphs: a backend that can record a whole forward step and replay it later (CUDA
    /// graphs) does so through these three hooks; the model graph calls them around every
    /// forward that has no tap observer, so taps always come from eagerly run kernels.
    ///
    /// `replay_step` runs a step recorded earlier under `key` on this batch's inputs (token
    /// ids, positions, slots, attention tables, all re-derived from `batch` and checked as the
    /// ops check them) and returns its logits as `out` asks, or `None` when there is no such
    /// recording.
    fn replay_step(
        &self,
        key: StepKey,
        cache: &mut Self::KvCache,
        batch: &Batch,
        out: LogitsOut<'_>,
    ) -> Result<Option<StepOut>, BackendError> {
        let _ = (key, cache, batch, out);
        Ok(None)
    }

    /// Called before the ops of a step that `replay_step` did not run.
    fn begin_step(
        &self,
        key: StepKey,
        cache: &Self::KvCache,
        batch: &Batch,
    ) -> Result<(), BackendError> {
        let _ = (key, cache, batch);
        Ok(())
    }

    /// Ends the step begun by `begin_step` with its logits tensor: the logits as `out` asks
    /// ([`Backend::logits_out`]), or `None` when the ops were only recorded and not run (a
    /// capture the backend dropped), in which case the caller runs them again, eagerly. A
    /// tapped step, never begun, ends here too and must get `Some`.
    fn end_step(
        &self,
        logits: Self::Tensor,
        out: LogitsOut<'_>,
    ) -> Result<Option<StepOut>, BackendError> {
        self.logits_out(&logits, out).map(Some)
    }

    /// The logits rows of `logits` as `out` asks: copied to the host, or reduced to
    /// summaries ([`StepOut::from_host`], whose `LogitsSummary::of_row` is the definition to
    /// match). The default reduces on the host; a backend whose logits live elsewhere reduces
    /// them there.
    fn logits_out(
        &self,
        logits: &Self::Tensor,
        out: LogitsOut<'_>,
    ) -> Result<StepOut, BackendError> {
        Ok(StepOut::from_host(self.to_host(logits), out))
    }

    /// Ends a step begun by `begin_step` whose forward failed part way.
    fn abandon_step(&self) {}

    fn load_weight(&self, w: WeightView<'_>) -> Result<Self::Weight, BackendError>;
    fn alloc_kv(&self, layout: KvLayout) -> Result<Self::KvCache, BackendError>;

    fn to_host(&self, t: &Self::Tensor) -> HostTensor;

    /// Rows `ids` of an embedding table `[vocab, dim]`.
    fn embed(&self, table: &Self::Weight, ids: &[u32]) -> Result<Self::Tensor, BackendError>;
    /// `x W^T` for `W` of shape `[out, in]` (GGUF dims `[in, out]`).
    fn matmul(&self, x: &Self::Tensor, w: &Self::Weight) -> Self::Tensor;
    /// Adds a bias vector to every row.
    fn add_bias(&self, x: &Self::Tensor, bias: &Self::Weight) -> Self::Tensor;
    /// RMS-normalises every contiguous group of `weight`'s length (a row, or one head) and
    /// multiplies by `weight`.
    fn rms_norm(&self, x: &Self::Tensor, weight: &Self::Weight, eps: f32) -> Self::Tensor;
    fn add(&self, a: &Self::Tensor, b: &Self::Tensor) -> Self::Tensor;
    fn scale(&self, x: &Self::Tensor, s: f32) -> Self::Tensor;
    /// `act(gate) * up`, element-wise.
    fn act_mul(&self, gate: &Self::Tensor, up: &Self::Tensor, act: Activation) -> Self::Tensor;
    /// The gated feed-forward input in one op: `gate = x Wg^T`, `up = x Wu^T` and
    /// `act(gate) * up`, returned in that order (the products for taps). A backend may fuse
    /// them (one pass over both weights, the activation applied while the products are in
    /// cache); its results must be bitwise those of the three separate ops, which is what this
    /// default does.
    fn gate_up_act(
        &self,
        x: &Self::Tensor,
        gate: &Self::Weight,
        up: &Self::Weight,
        act: Activation,
    ) -> (Self::Tensor, Self::Tensor, Self::Tensor) {
        let g = self.matmul(x, gate);
        let u = self.matmul(x, up);
        let a = self.act_mul(&g, &u, act);
        (g, u, a)
    }
    /// The q, k and v projections of one input in one op (a backend may run them in one
    /// launch); each product bitwise what `matmul` gives, which is what this default does.
    fn matmul_qkv(
        &self,
        x: &Self::Tensor,
        wq: &Self::Weight,
        wk: &Self::Weight,
        wv: &Self::Weight,
    ) -> (Self::Tensor, Self::Tensor, Self::Tensor) {
        (self.matmul(x, wq), self.matmul(x, wk), self.matmul(x, wv))
    }
    /// The end of a block in one op: the block's output `b`, post-normed when `post` is given
    /// (Gemma), added to the residual stream `a`, and the sum normed by `next` when given (the
    /// next block's input norm, or the output norm). Each output bitwise what `rms_norm` and
    /// `add` give, which is what this default does.
    fn residual_norm(
        &self,
        a: &Self::Tensor,
        b: &Self::Tensor,
        post: Option<&Self::Weight>,
        next: Option<&Self::Weight>,
        eps: f32,
    ) -> Residual<Self::Tensor> {
        residual_norm_unfused(self, a, b, post, next, eps)
    }
    /// `residual_norm` with a `next` norm, and the op that consumes the normed sum (`then`: the
    /// next layer's q/k/v projections, or the block's gate/up/activation), in one op. A backend
    /// may run both in one launch (each block of a decode mat-vec norms the row itself and
    /// quantizes it in shared memory, one block writing what it consumed); every output must
    /// be bitwise what the two ops give, which is what this default does.
    fn residual_norm_then(
        &self,
        a: &Self::Tensor,
        b: &Self::Tensor,
        post: Option<&Self::Weight>,
        next: &Self::Weight,
        eps: f32,
        then: NormThen<'_, Self::Weight>,
    ) -> ResidualThen<Self::Tensor> {
        residual_norm_then_unfused(self, a, b, post, next, eps, then)
    }
    /// The first layer's input in one op: `scale` (when given: Gemma's embedding scale) on the
    /// embedding `x`, the scaled row's norm by `norm`, and the op that consumes the norm
    /// (`then`: layer 0's q/k/v projections). Every later layer's norm comes from the op that
    /// ends the layer before it ([`Backend::residual_norm_then`]); this is the same fusion for
    /// layer 0, whose input is no residual sum. Each output must be bitwise what the separate
    /// ops give, which is what this default does.
    fn scale_norm_then(
        &self,
        x: &Self::Tensor,
        scale: Option<f32>,
        norm: &Self::Weight,
        eps: f32,
        then: NormThen<'_, Self::Weight>,
    ) -> ScaleNormThen<Self::Tensor> {
        scale_norm_then_unfused(self, x, scale, norm, eps, then)
    }
    /// Everything between the q/k/v projections and attention, in one op: the optional
    /// per-head norms of q and k, their rotary embedding, and the store of the rotated k and of
    /// v into the cache (`kv_store`). Each output, and what reaches the cache, bitwise what the
    /// separate ops give (this default); a fused backend writes every intermediate it returns
    /// from the registers the next stage consumed.
    fn rope_store(
        &self,
        cache: &mut Self::KvCache,
        layer: usize,
        qkv: QkvIn<'_, Self>,
        positions: &[u32],
        p: RopeParams,
        batch: &Batch,
    ) -> Result<QkRoped<Self::Tensor>, BackendError> {
        rope_store_unfused(self, cache, layer, qkv, positions, p, batch)
    }
    /// `rope_store`, then `attention` on the rotated q: a decode step's whole path from the
    /// q/k/v projections to the attention output, in one op. Emits what the two ops and the
    /// graph between them do, in that order: `q_norm` / `k_norm` (when there are norms),
    /// `q_rope`, `k_rope`, then attention's taps. A backend may run both in one launch (each
    /// attention block rotating its own heads and the step's key); every output, and what
    /// reaches the cache, must be bitwise what the two ops give, which is what this default
    /// does.
    #[allow(clippy::too_many_arguments)]
    fn rope_store_attention(
        &self,
        cache: &mut Self::KvCache,
        layer: usize,
        qkv: QkvIn<'_, Self>,
        positions: &[u32],
        rope: RopeParams,
        batch: &Batch,
        attn: AttentionParams,
        taps: &mut Taps<'_>,
    ) -> Result<Self::Tensor, BackendError> {
        rope_store_attention_unfused(self, cache, layer, qkv, positions, rope, batch, attn, taps)
    }
    /// Rotary embedding of every head of every row, row `i` at `positions[i]`.
    fn rope(&self, x: &Self::Tensor, positions: &[u32], p: RopeParams) -> Self::Tensor;
    /// The rows `rows` of `x`, in that order.
    fn select_rows(&self, x: &Self::Tensor, rows: &[usize]) -> Self::Tensor;

    /// Writes row `i` of `k`/`v` to cache slot `batch.slots[i]` of `layer`.
    fn kv_store(
        &self,
        cache: &mut Self::KvCache,
        layer: usize,
        k: &Self::Tensor,
        v: &Self::Tensor,
        batch: &Batch,
    ) -> Result<(), BackendError>;

    /// Masked multi-head attention of `q` (`[rows, n_heads * head_dim]`) over each
    /// sequence's cached keys and values; returns `[rows, n_heads * head_dim]`.
    ///
    /// Emits `blk.{layer}.k_read`, `v_read`, `kq` (scaled, masked scores, -inf where masked)
    /// and `kq_softmax` when an observer wants them; layouts are in `docs/taps.md`.
    fn attention(
        &self,
        cache: &Self::KvCache,
        layer: usize,
        q: &Self::Tensor,
        batch: &Batch,
        p: AttentionParams,
        taps: &mut Taps<'_>,
    ) -> Result<Self::Tensor, BackendError>;
}

/// [`Backend::residual_norm`] as the separate ops (its default; also what a fusing backend
/// runs for shapes its kernel does not take).
pub fn residual_norm_unfused<B: Backend + ?Sized>(
    b: &B,
    a: &B::Tensor,
    x: &B::Tensor,
    post: Option<&B::Weight>,
    next: Option<&B::Weight>,
    eps: f32,
) -> Residual<B::Tensor> {
    let post = post.map(|w| b.rms_norm(x, w, eps));
    let sum = b.add(a, post.as_ref().unwrap_or(x));
    let normed = next.map(|w| b.rms_norm(&sum, w, eps));
    Residual { post, sum, normed }
}

/// The op that consumes the norm of [`Backend::residual_norm_then`] or
/// [`Backend::scale_norm_then`].
#[derive(Clone, Copy)]
pub enum NormThen<'a, W> {
    /// `matmul_qkv(normed, wq, wk, wv)`.
    Qkv { wq: &'a W, wk: &'a W, wv: &'a W },
    /// `gate_up_act(normed, gate, up, act)`.
    GateUp {
        gate: &'a W,
        up: &'a W,
        act: Activation,
    },
}

/// The outputs of [`Backend::residual_norm_then`]: `residual_norm`'s (the post-normed block
/// output when there was a post norm, the new residual stream, its norm) and the consumer's
/// three (q, k, v or gate, up, activation).
pub struct ResidualThen<T> {
    pub post: Option<T>,
    pub sum: T,
    pub normed: T,
    pub outs: (T, T, T),
}

/// The outputs of [`Backend::scale_norm_then`]: the scaled row (when there was a scale), its
/// norm, and the consumer's three.
pub struct ScaleNormThen<T> {
    pub scaled: Option<T>,
    pub normed: T,
    pub outs: (T, T, T),
}

/// [`Backend::scale_norm_then`] as the separate ops (its default; also what a fusing backend
/// runs for shapes its kernel does not take).
pub fn scale_norm_then_unfused<B: Backend + ?Sized>(
    b: &B,
    x: &B::Tensor,
    scale: Option<f32>,
    norm: &B::Weight,
    eps: f32,
    then: NormThen<'_, B::Weight>,
) -> ScaleNormThen<B::Tensor> {
    let scaled = scale.map(|s| b.scale(x, s));
    let normed = b.rms_norm(scaled.as_ref().unwrap_or(x), norm, eps);
    let outs = norm_consumer(b, &normed, then);
    ScaleNormThen {
        scaled,
        normed,
        outs,
    }
}

/// The op a norm feeds ([`NormThen`]), run on its own.
fn norm_consumer<B: Backend + ?Sized>(
    b: &B,
    normed: &B::Tensor,
    then: NormThen<'_, B::Weight>,
) -> (B::Tensor, B::Tensor, B::Tensor) {
    match then {
        NormThen::Qkv { wq, wk, wv } => b.matmul_qkv(normed, wq, wk, wv),
        NormThen::GateUp { gate, up, act } => b.gate_up_act(normed, gate, up, act),
    }
}

/// [`Backend::residual_norm_then`] as the two ops (its default; also what a fusing backend
/// runs for shapes its kernel does not take).
pub fn residual_norm_then_unfused<B: Backend + ?Sized>(
    b: &B,
    a: &B::Tensor,
    x: &B::Tensor,
    post: Option<&B::Weight>,
    next: &B::Weight,
    eps: f32,
    then: NormThen<'_, B::Weight>,
) -> ResidualThen<B::Tensor> {
    let Residual { post, sum, normed } = b.residual_norm(a, x, post, Some(next), eps);
    // `residual_norm` norms the sum whenever it is given a norm; its default, and every
    // backend's override, keep to that, but a missing output is not worth a panic here.
    let normed = normed.unwrap_or_else(|| b.rms_norm(&sum, next, eps));
    let outs = norm_consumer(b, &normed, then);
    ResidualThen {
        post,
        sum,
        normed,
        outs,
    }
}

/// [`Backend::rope_store_attention`] as the two ops (its default; also what a fusing backend
/// runs where its kernel does not), with the taps between them.
#[allow(clippy::too_many_arguments)]
pub fn rope_store_attention_unfused<B: Backend + ?Sized>(
    b: &B,
    cache: &mut B::KvCache,
    layer: usize,
    qkv: QkvIn<'_, B>,
    positions: &[u32],
    rope: RopeParams,
    batch: &Batch,
    attn: AttentionParams,
    taps: &mut Taps<'_>,
) -> Result<B::Tensor, BackendError> {
    let roped = b.rope_store(cache, layer, qkv, positions, rope, batch)?;
    emit_roped(b, layer, &roped, taps);
    b.attention(cache, layer, &roped.q, batch, attn, taps)
}

/// The taps of [`Backend::rope_store`]'s outputs, in the graph's order.
pub fn emit_roped<B: Backend + ?Sized>(
    b: &B,
    layer: usize,
    roped: &QkRoped<B::Tensor>,
    taps: &mut Taps<'_>,
) {
    if let Some(qn) = &roped.q_norm {
        taps.emit_layer(layer, "q_norm", || b.to_host(qn));
    }
    if let Some(kn) = &roped.k_norm {
        taps.emit_layer(layer, "k_norm", || b.to_host(kn));
    }
    taps.emit_layer(layer, "q_rope", || b.to_host(&roped.q));
    taps.emit_layer(layer, "k_rope", || b.to_host(&roped.k));
}

/// [`Backend::rope_store`] as the separate ops (its default; also what a fusing backend runs
/// for shapes its kernel does not take).
pub fn rope_store_unfused<B: Backend + ?Sized>(
    b: &B,
    cache: &mut B::KvCache,
    layer: usize,
    qkv: QkvIn<'_, B>,
    positions: &[u32],
    p: RopeParams,
    batch: &Batch,
) -> Result<QkRoped<B::Tensor>, BackendError> {
    let QkvIn {
        q,
        k,
        v,
        q_norm,
        k_norm,
        eps,
    } = qkv;
    let q_normed = q_norm.map(|w| b.rms_norm(q, w, eps));
    let k_normed = k_norm.map(|w| b.rms_norm(k, w, eps));
    let q_rope = b.rope(q_normed.as_ref().unwrap_or(q), positions, p);
    let k_rope = b.rope(k_normed.as_ref().unwrap_or(k), positions, p);
    b.kv_store(cache, layer, &k_rope, v, batch)?;
    Ok(QkRoped {
        q_norm: q_normed,
        k_norm: k_normed,
        q: q_rope,
        k: k_rope,
    })
}
