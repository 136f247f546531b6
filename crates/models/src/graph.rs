//! The forward pass. One function for every supported architecture: read it top to bottom
//! like llama2.c's `forward`, with a tap after every op.

use lockstep_graph::{
    AttentionParams, Backend, Batch, LogitsOut, NormThen, QkvIn, RopeParams, StepKey, StepOut, Taps,
};

use crate::config::ModelConfig;
use crate::weights::Model;
use crate::ModelError;

/// Runs `batch` through the model, writing each new token's K/V to the cache, and returns the
/// logits of `batch.output_rows` as `out` asks: the rows `[output_rows.len(), n_vocab]` on the
/// host, or each row reduced where it was computed to its `k` largest logits
/// ([`LogitsSummary`](lockstep_graph::LogitsSummary)).
///
/// Without a tap observer the backend may replay a recording of an earlier step of the same
/// shape instead of running the ops one by one ([`Backend::replay_step`], CUDA graphs); with
/// one, every op runs eagerly so each tap is copied from the kernel that made it.
pub fn forward<B: Backend>(
    b: &B,
    model: &Model<B>,
    cache: &mut B::KvCache,
    batch: &Batch,
    taps: &mut Taps<'_>,
    out: LogitsOut<'_>,
) -> Result<StepOut, ModelError> {
    if taps.active() {
        let logits = forward_ops(b, model, cache, batch, taps)?;
        // The logits tensor itself, copied only when the observer wants it.
        taps.emit("result_output", || b.to_host(&logits));
        // An eager step still ends through `end_step`, so a backend's end-of-step checks
        // (cuda: the f16 GEMM's range flag) hold for tapped runs too.
        let Some(r) = b.end_step(logits, out)? else {
            unreachable!("a step that was never begun ran eagerly and has its logits")
        };
        return Ok(r);
    }
    let key = StepKey {
        model: model as *const Model<B> as usize,
        n_tokens: batch.n_tokens(),
        n_outputs: batch.output_rows.len(),
    };
    if let Some(r) = b.replay_step(key, cache, batch, out)? {
        return Ok(r);
    }
    b.begin_step(key, cache, batch)?;
    match forward_ops(b, model, cache, batch, taps) {
        Ok(logits) => match b.end_step(logits, out)? {
            Some(r) => Ok(r),
            None => {
                let logits = forward_ops(b, model, cache, batch, taps)?;
                Ok(b.logits_out(&logits, out)?)
            }
        },
        Err(e) => {
            b.abandon_step();
            Err(e)
        }
    }
}

/// The ops of one step, leaving the logits on the backend.
fn forward_ops<B: Backend>(
    b: &B,
    model: &Model<B>,
    cache: &mut B::KvCache,
    batch: &Batch,
    taps: &mut Taps<'_>,
) -> Result<B::Tensor, ModelError> {
    let cfg: &ModelConfig = &model.config;
    let positions = &batch.positions;

    let embd = b.embed(&model.token_embd, &batch.tokens)?;
    taps.emit("inp_embd", || b.to_host(&embd));

    // Each layer's attention norm is made by the op that ends the layer before it (the
    // residual add, the norm and the q/k/v projections of the next layer in one op, which a
    // backend may fuse); the first one here, with the embedding's scale and layer 0's q/k/v
    // (one op too).
    let mut next_norm = None;
    // The next layer's q, k and v when the op that made its norm also projected it.
    let mut next_qkv = None;
    let mut x = match model.layers.first() {
        Some(w) => {
            let r = b.scale_norm_then(
                &embd,
                cfg.embd_scale,
                &w.attn_norm,
                cfg.rms_eps,
                NormThen::Qkv {
                    wq: &w.wq,
                    wk: &w.wk,
                    wv: &w.wv,
                },
            );
            next_norm = Some(r.normed);
            next_qkv = Some(r.outs);
            r.scaled.unwrap_or(embd)
        }
        None => match cfg.embd_scale {
            Some(s) => b.scale(&embd, s),
            None => embd,
        },
    };
    if cfg.embd_scale.is_some() {
        taps.emit("inp_scaled", || b.to_host(&x));
    }
    let mut out_norm = None;
    // Every row goes to the head, in order (decode): the output norm joins the last add.
    let all_rows = batch.output_rows.iter().copied().eq(0..batch.n_tokens());
    for (il, w) in model.layers.iter().enumerate() {
        let local = cfg.is_local_layer(il);

        // Attention.
        let Some(h) = next_norm.take() else {
            unreachable!("made before the loop and at the end of every layer but the last")
        };
        taps.emit_layer(il, "attn_norm", || b.to_host(&h));
        let (mut q, mut k, mut v) = match next_qkv.take() {
            Some(qkv) => qkv,
            None => b.matmul_qkv(&h, &w.wq, &w.wk, &w.wv),
        };
        if let Some(bq) = &w.bq {
            q = b.add_bias(&q, bq);
        }
        if let Some(bk) = &w.bk {
            k = b.add_bias(&k, bk);
        }
        if let Some(bv) = &w.bv {
            v = b.add_bias(&v, bv);
        }
        taps.emit_layer(il, "q", || b.to_host(&q));
        taps.emit_layer(il, "k", || b.to_host(&k));
        taps.emit_layer(il, "v", || b.to_host(&v));
        let rope = RopeParams {
            style: cfg.rope_style,
            head_dim: cfg.head_dim,
            n_rot: cfg.n_rot,
            base: if local {
                cfg.rope_base_local
            } else {
                cfg.rope_base
            },
        };
        // Per-head norms, rotation and the K/V store: one op a backend may fuse.
        let qkv = QkvIn {
            q: &q,
            k: &k,
            v: &v,
            q_norm: w.q_norm.as_ref(),
            k_norm: w.k_norm.as_ref(),
            eps: cfg.rms_eps,
        };
        let attn = AttentionParams {
            n_heads: cfg.n_heads,
            n_kv_heads: cfg.n_kv_heads,
            head_dim: cfg.head_dim,
            scale: cfg.attn_scale,
            window: if local { cfg.sliding_window } else { None },
        };
        // Then attention over the cache: with the rotation, one op a backend may fuse (it
        // emits q_norm, k_norm, q_rope, k_rope and attention's own taps).
        let kqv = b.rope_store_attention(cache, il, qkv, positions, rope, batch, attn, taps)?;
        taps.emit_layer(il, "kqv", || b.to_host(&kqv));
        let attn_out = b.matmul(&kqv, &w.wo);
        taps.emit_layer(il, "attn_out", || b.to_host(&attn_out));
        // The optional post norm, the residual add, the feed-forward norm, and gate, up and
        // the activation on it: one op.
        let r = b.residual_norm_then(
            &x,
            &attn_out,
            w.post_attn_norm.as_ref(),
            &w.ffn_norm,
            cfg.rms_eps,
            NormThen::GateUp {
                gate: &w.ffn_gate,
                up: &w.ffn_up,
                act: cfg.activation,
            },
        );
        if let Some(p) = &r.post {
            taps.emit_layer(il, "attn_post_norm", || b.to_host(p));
        }
        let ffn_inp = r.sum;
        taps.emit_layer(il, "ffn_inp", || b.to_host(&ffn_inp));

        // Feed-forward.
        let h = r.normed;
        taps.emit_layer(il, "ffn_norm", || b.to_host(&h));
        let (gate, up, act) = r.outs;
        taps.emit_layer(il, "ffn_gate", || b.to_host(&gate));
        taps.emit_layer(il, "ffn_up", || b.to_host(&up));
        taps.emit_layer(il, "ffn_act", || b.to_host(&act));
        let ffn_out = b.matmul(&act, &w.ffn_down);
        taps.emit_layer(il, "ffn_out", || b.to_host(&ffn_out));
        // The optional post norm, the residual add, and the norm that follows: the next
        // layer's attention norm (with that layer's q/k/v projections, one op), or after the
        // last layer the output norm when every row goes to the head (decode), so the head's
        // input needs no row selection.
        if let Some(n) = model.layers.get(il + 1) {
            let r = b.residual_norm_then(
                &ffn_inp,
                &ffn_out,
                w.post_ffn_norm.as_ref(),
                &n.attn_norm,
                cfg.rms_eps,
                NormThen::Qkv {
                    wq: &n.wq,
                    wk: &n.wk,
                    wv: &n.wv,
                },
            );
            if let Some(p) = &r.post {
                taps.emit_layer(il, "ffn_post_norm", || b.to_host(p));
            }
            x = r.sum;
            taps.emit_layer(il, "l_out", || b.to_host(&x));
            next_norm = Some(r.normed);
            next_qkv = Some(r.outs);
            continue;
        }
        let r = b.residual_norm(
            &ffn_inp,
            &ffn_out,
            w.post_ffn_norm.as_ref(),
            all_rows.then_some(&model.output_norm),
            cfg.rms_eps,
        );
        if let Some(p) = &r.post {
            taps.emit_layer(il, "ffn_post_norm", || b.to_host(p));
        }
        x = r.sum;
        taps.emit_layer(il, "l_out", || b.to_host(&x));
        out_norm = r.normed;
    }

    // Only the rows whose logits are wanted go through the head: for a long prompt that is
    // one row instead of hundreds of vocabulary-wide products.
    let h = match out_norm {
        Some(h) => h,
        None => {
            let x = b.select_rows(&x, &batch.output_rows);
            b.rms_norm(&x, &model.output_norm, cfg.rms_eps)
        }
    };
    taps.emit("result_norm", || b.to_host(&h));
    let head = model.output.as_ref().unwrap_or(&model.token_embd);
    Ok(b.matmul(&h, head))
}
