//! A fault-injectable backend: the reference backend's ops (most delegated to
//! [`RefBackend`], KV cache and attention copied), with seeded bugs taken from real
//! post-mortems. With no fault set it is bitwise identical to the reference; with one set,
//! `lockstep diff` must name the tap where the fault first shows.
//!
//! This crate is for tests and for `lockstep` built with `--features faults`; release builds
//! of the CLI do not depend on it. The reference backend itself never contains a fault.

use std::sync::Arc;

use lockstep_backend_ref::{dot, RefBackend, RefWeight};
use lockstep_graph::{
    Activation, AttentionParams, Backend, BackendError, Batch, HostTensor, KvLayout, RopeParams,
    Taps, WeightView,
};
use lockstep_quant::{f32_to_fp16, fp16_to_f32, GgmlType};

/// The seeded bugs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// 1. The prefill attends over its own fresh K/V but never writes them to the cache;
    ///    decode then reads never-written blocks.
    PrefillNoKvWrite,
    /// 2. Odd layers read the previous layer's KV blocks (a shared-KV slot bug).
    KvWrongLayer,
    /// 3. The attention output projection gets its weight with the dimensions swapped
    ///    (`mul_mat(wo, x)` vs `mul_mat(x, wo)`: the weight read transposed).
    AttnOutSwapped,
    /// 4. K/V stored as f16 but read back as f32 bits.
    KvF16AsF32,
    /// 5. The embedding lookup returns zeros for ids in the upper half of the vocabulary
    ///    (the second shard of a split table never loaded).
    EmbedZeros,
    /// 6. A Q8_0 dot product uses the neighbouring block's scale.
    Q8WrongScale,
    /// 7. A per-head view's offset is ignored: every head reads head 0's slice of Q.
    HeadOffset,
    /// 8. An explicit (all-true) mask takes a different accumulation path (f32, reversed)
    ///    from "no mask", and drifts.
    MaskDrift,
    /// 9. The LM head is skipped: the normed hidden state is returned as logits (zero-padded).
    LmHeadSkipped,
    /// 10. The softmax scale is applied twice (flat attention).
    SoftmaxScale,
    /// 11. RoPE uses position + 1 in the single-token (decode) kernel only.
    RopeDecodeOffByOne,
    /// 12. Layer 1's FFN down projection returns zeros (a weight never uploaded): a dead layer.
    FfnDownZero,
    /// 13. The embedding gather uses a zero row stride: every row is the first token's
    ///     embedding (hidden states identical across positions).
    EmbedBroadcast,
    /// 14. The causal mask is off by one (`j < pos`): a query cannot see its own key, the
    ///     first row sees nothing, and a naive softmax turns that into NaN.
    CausalOffByOne,
    /// 15. The final norm's weight was never uploaded (zeros): all logits 0, flat.
    OutputNormZero,
}

impl Fault {
    pub const ALL: [Fault; 15] = [
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
        }
    }

    pub fn parse(s: &str) -> Option<Fault> {
        Fault::ALL.into_iter().find(|f| f.name() == s)
    }

    pub fn names() -> Vec<&'static str> {
        Fault::ALL.iter().map(|f| f.name()).collect()
    }
}

/// A weight: the reference's f32 copy, its name (faults pick their victims by name), and
/// for Q8_0 tensors the raw blocks (fault 6 re-reads them).
#[derive(Clone, Debug)]
pub struct FaultyWeight {
    pub name: String,
    pub ty: GgmlType,
    pub w: RefWeight,
    raw_q8: Option<Arc<Vec<u8>>>,
}

/// The paged cache: f32 rows like the reference, plus the f16 store of fault 4 and the
/// prefill staging area of fault 1 (both allocated only when those faults run).
pub struct FaultyKvCache {
    layout: KvLayout,
    k: Vec<f32>,
    v: Vec<f32>,
    k16: Vec<u16>,
    v16: Vec<u16>,
    /// Per layer: (slots, K rows, V rows) of the last prefill that skipped the cache.
    staged: Vec<Option<(Vec<u32>, HostTensor, HostTensor)>>,
}

impl FaultyKvCache {
    fn row_offset(&self, layer: usize, slot: u32) -> Result<usize, BackendError> {
        let l = &self.layout;
        if layer >= l.n_layers || slot as usize >= l.n_slots() {
            return Err(BackendError::Kv(format!(
                "layer {layer} slot {slot} outside the cache ({} layers x {} slots)",
                l.n_layers,
                l.n_slots()
            )));
        }
        Ok((layer * l.n_slots() + slot as usize) * l.kv_dim)
    }
}

#[derive(Default)]
pub struct FaultyBackend {
    inner: RefBackend,
    fault: Option<Fault>,
    name: String,
}

impl FaultyBackend {
    pub fn new(fault: Option<Fault>) -> FaultyBackend {
        let mut b = FaultyBackend {
            inner: RefBackend::new(),
            fault: None,
            name: String::new(),
        };
        b.set_fault(fault);
        b
    }

    /// Changes the planted fault (takes effect from the next op).
    pub fn set_fault(&mut self, fault: Option<Fault>) {
        self.fault = fault;
        self.name = match fault {
            Some(f) => format!("faulty[{}]", f.name()),
            None => "faulty".to_string(),
        };
    }

    pub fn fault(&self) -> Option<Fault> {
        self.fault
    }

    fn is(&self, f: Fault) -> bool {
        self.fault == Some(f)
    }
}

fn is_head(name: &str) -> bool {
    name == "output.weight" || name == "token_embd.weight"
}

/// Q8_0 dequantization with block `b` scaled by block `b + 1`'s scale (wrapping within the
/// row): the bug of fault 6.
fn q8_wrong_scale(raw: &[u8], rows: usize, cols: usize) -> Vec<f32> {
    let nb = cols / 32;
    let mut out = vec![0f32; rows * cols];
    for r in 0..rows {
        for b in 0..nb {
            let other = if nb > 1 { (b + 1) % nb } else { b };
            let blk = |i: usize| &raw[(r * nb + i) * 34..(r * nb + i + 1) * 34];
            let d = fp16_to_f32(u16::from_le_bytes([blk(other)[0], blk(other)[1]]));
            let q = &blk(b)[2..34];
            for (i, &qi) in q.iter().enumerate() {
                out[r * cols + b * 32 + i] = d * f32::from(qi as i8);
            }
        }
    }
    out
}

impl Backend for FaultyBackend {
    type Tensor = HostTensor;
    type Weight = FaultyWeight;
    type KvCache = FaultyKvCache;

    fn name(&self) -> &str {
        &self.name
    }

    fn load_weight(&self, w: WeightView<'_>) -> Result<FaultyWeight, BackendError> {
        let raw_q8 = (w.ty == GgmlType::Q8_0).then(|| Arc::new(w.data.to_vec()));
        Ok(FaultyWeight {
            name: w.name.to_string(),
            ty: w.ty,
            w: self.inner.load_weight(w)?,
            raw_q8,
        })
    }

    fn alloc_kv(&self, layout: KvLayout) -> Result<FaultyKvCache, BackendError> {
        let n = layout
            .n_layers
            .checked_mul(layout.n_slots())
            .and_then(|n| n.checked_mul(layout.kv_dim))
            .ok_or_else(|| BackendError::Kv(format!("layout {layout:?} overflows")))?;
        Ok(FaultyKvCache {
            layout,
            k: vec![0.0; n],
            v: vec![0.0; n],
            k16: Vec::new(),
            v16: Vec::new(),
            staged: (0..layout.n_layers).map(|_| None).collect(),
        })
    }

    fn to_host(&self, t: &HostTensor) -> HostTensor {
        t.clone()
    }

    fn embed(&self, table: &FaultyWeight, ids: &[u32]) -> Result<HostTensor, BackendError> {
        if self.is(Fault::EmbedBroadcast) && !ids.is_empty() {
            // Bounds are still checked for every id; only the gather is wrong.
            self.inner.embed(&table.w, ids)?;
            return self.inner.embed(&table.w, &vec![ids[0]; ids.len()]);
        }
        let mut out = self.inner.embed(&table.w, ids)?;
        if self.is(Fault::EmbedZeros) {
            let c = out.cols();
            let half = table.w.rows / 2;
            for (r, &id) in ids.iter().enumerate() {
                if id as usize >= half {
                    out.data[r * c..(r + 1) * c].fill(0.0);
                }
            }
        }
        Ok(out)
    }

    fn matmul(&self, x: &HostTensor, w: &FaultyWeight) -> HostTensor {
        if self.is(Fault::LmHeadSkipped) && is_head(&w.name) {
            let (n, d) = (x.rows(), x.cols());
            let v = w.w.rows;
            let mut out = vec![0f32; n * v];
            for i in 0..n {
                let k = d.min(v);
                out[i * v..i * v + k].copy_from_slice(&x.row(i)[..k]);
            }
            return HostTensor::matrix(n, v, out);
        }
        if self.is(Fault::AttnOutSwapped) && w.name.ends_with(".attn_output.weight") {
            // The same buffer read as [in, out]: W'[j][c] = data[c * m + j].
            let (m, k) = (w.w.rows, w.w.cols);
            let mut t = vec![0f32; m * k];
            for j in 0..m {
                for c in 0..k {
                    t[j * k + c] = w.w.data[c * m + j];
                }
            }
            let wt = RefWeight {
                rows: m,
                cols: k,
                data: Arc::new(t),
            };
            return self.inner.matmul(x, &wt);
        }
        if self.is(Fault::Q8WrongScale) {
            if let Some(raw) = &w.raw_q8 {
                let wrong = RefWeight {
                    rows: w.w.rows,
                    cols: w.w.cols,
                    data: Arc::new(q8_wrong_scale(raw, w.w.rows, w.w.cols)),
                };
                return self.inner.matmul(x, &wrong);
            }
        }
        if self.is(Fault::FfnDownZero) && w.name == "blk.1.ffn_down.weight" {
            return HostTensor::matrix(x.rows(), w.w.rows, vec![0.0; x.rows() * w.w.rows]);
        }
        self.inner.matmul(x, &w.w)
    }

    fn add_bias(&self, x: &HostTensor, bias: &FaultyWeight) -> HostTensor {
        self.inner.add_bias(x, &bias.w)
    }

    fn rms_norm(&self, x: &HostTensor, weight: &FaultyWeight, eps: f32) -> HostTensor {
        if self.is(Fault::OutputNormZero) && weight.name == "output_norm.weight" {
            return HostTensor::new(x.shape.clone(), vec![0.0; x.data.len()]);
        }
        self.inner.rms_norm(x, &weight.w, eps)
    }

    fn add(&self, a: &HostTensor, b: &HostTensor) -> HostTensor {
        self.inner.add(a, b)
    }

    fn scale(&self, x: &HostTensor, s: f32) -> HostTensor {
        self.inner.scale(x, s)
    }

    fn act_mul(&self, gate: &HostTensor, up: &HostTensor, act: Activation) -> HostTensor {
        self.inner.act_mul(gate, up, act)
    }

    fn rope(&self, x: &HostTensor, positions: &[u32], p: RopeParams) -> HostTensor {
        if self.is(Fault::RopeDecodeOffByOne) && positions.len() == 1 && positions[0] > 0 {
            return self.inner.rope(x, &[positions[0] + 1], p);
        }
        self.inner.rope(x, positions, p)
    }

    fn select_rows(&self, x: &HostTensor, rows: &[usize]) -> HostTensor {
        self.inner.select_rows(x, rows)
    }

    fn kv_store(
        &self,
        cache: &mut FaultyKvCache,
        layer: usize,
        k: &HostTensor,
        v: &HostTensor,
        batch: &Batch,
    ) -> Result<(), BackendError> {
        let d = cache.layout.kv_dim;
        if k.cols() != d || v.cols() != d || k.rows() != batch.slots.len() {
            return Err(BackendError::Kv(format!(
                "kv_store: K {:?} / V {:?} for {} slots of width {d}",
                k.shape,
                v.shape,
                batch.slots.len()
            )));
        }
        if layer < cache.staged.len() {
            cache.staged[layer] = None;
        }
        let prefill = batch.n_tokens() > 1 && batch.seqs.iter().all(|s| s.first_pos == 0);
        if self.is(Fault::PrefillNoKvWrite) && prefill {
            // The prefill path attends over the fresh rows and "forgets" the cache write.
            if layer < cache.staged.len() {
                cache.staged[layer] = Some((batch.slots.clone(), k.clone(), v.clone()));
            }
            return Ok(());
        }
        if self.is(Fault::KvF16AsF32) {
            if cache.k16.is_empty() {
                cache.k16 = vec![0; cache.k.len() * 2];
                cache.v16 = vec![0; cache.v.len() * 2];
            }
            for (i, &slot) in batch.slots.iter().enumerate() {
                let o = cache.row_offset(layer, slot)?;
                // Rows sized for f32 (2 u16 per value), written with f16 values.
                for (j, (&kv, &vv)) in k.row(i).iter().zip(v.row(i)).enumerate() {
                    cache.k16[2 * o + j] = f32_to_fp16(kv);
                    cache.v16[2 * o + j] = f32_to_fp16(vv);
                }
            }
            return Ok(());
        }
        for (i, &slot) in batch.slots.iter().enumerate() {
            let o = cache.row_offset(layer, slot)?;
            cache.k[o..o + d].copy_from_slice(k.row(i));
            cache.v[o..o + d].copy_from_slice(v.row(i));
        }
        Ok(())
    }

    fn attention(
        &self,
        cache: &FaultyKvCache,
        layer: usize,
        q: &HostTensor,
        batch: &Batch,
        p: AttentionParams,
        taps: &mut Taps<'_>,
    ) -> Result<HostTensor, BackendError> {
        let hd = p.head_dim;
        let q_dim = p.n_heads * hd;
        let kv_dim = p.n_kv_heads * hd;
        let group = p.n_heads / p.n_kv_heads;
        if q.cols() != q_dim || kv_dim != cache.layout.kv_dim {
            return Err(BackendError::Kv(format!(
                "attention: q has {} columns for {} heads of {hd}; cache rows are {} wide",
                q.cols(),
                p.n_heads,
                cache.layout.kv_dim
            )));
        }
        let read_layer = if self.is(Fault::KvWrongLayer) && layer % 2 == 1 {
            layer - 1
        } else {
            layer
        };
        let scale = if self.is(Fault::SoftmaxScale) {
            p.scale * p.scale
        } else {
            p.scale
        };
        let keep_scores = taps.wants_layer(layer, "kq") || taps.wants_layer(layer, "kq_softmax");
        let mut out = vec![0f32; q.rows() * q_dim];
        let mut k_read = Vec::new();
        let mut v_read = Vec::new();
        let mut kq_all = Vec::new();
        let mut sm_all = Vec::new();

        for seq in &batch.seqs {
            let n_kv = seq.kv_slots.len();
            let mut keys = Vec::with_capacity(n_kv * kv_dim);
            let mut vals = Vec::with_capacity(n_kv * kv_dim);
            for &slot in &seq.kv_slots {
                let staged =
                    cache
                        .staged
                        .get(layer)
                        .and_then(|s| s.as_ref())
                        .and_then(|(slots, k, v)| {
                            slots
                                .iter()
                                .position(|&s| s == slot)
                                .map(|i| (k.row(i), v.row(i)))
                        });
                if let Some((kr, vr)) = staged {
                    keys.extend_from_slice(kr);
                    vals.extend_from_slice(vr);
                    continue;
                }
                let o = cache.row_offset(read_layer, slot)?;
                if self.is(Fault::KvF16AsF32) && !cache.k16.is_empty() {
                    let bits = |buf: &[u16], e: usize| {
                        f32::from_bits(
                            u32::from(buf[2 * o + 2 * e])
                                | (u32::from(buf[2 * o + 2 * e + 1]) << 16),
                        )
                    };
                    keys.extend((0..kv_dim).map(|e| bits(&cache.k16, e)));
                    vals.extend((0..kv_dim).map(|e| bits(&cache.v16, e)));
                    continue;
                }
                keys.extend_from_slice(&cache.k[o..o + kv_dim]);
                vals.extend_from_slice(&cache.v[o..o + kv_dim]);
            }
            if let Some(m) = &seq.mask {
                if m.len() != seq.n_rows * n_kv {
                    return Err(BackendError::Kv(format!(
                        "mask has {} entries, expected {} x {n_kv}",
                        m.len(),
                        seq.n_rows
                    )));
                }
            }
            let drift = self.is(Fault::MaskDrift) && seq.mask.is_some();
            let off_by_one = self.is(Fault::CausalOffByOne);
            let head_offset = self.is(Fault::HeadOffset);
            let rows = seq.first_row..seq.first_row + seq.n_rows;
            for i in 0..seq.n_rows {
                let o = &mut out[(rows.start + i) * q_dim..(rows.start + i + 1) * q_dim];
                let pos = seq.first_pos + i as u32;
                let qrow = q.row(rows.start + i);
                for h in 0..p.n_heads {
                    let kh = h / group;
                    let qh = if head_offset {
                        &qrow[..hd]
                    } else {
                        &qrow[h * hd..(h + 1) * hd]
                    };
                    let visible = |j: usize| -> bool {
                        let j32 = j as u32;
                        (if off_by_one { j32 < pos } else { j32 <= pos })
                            && p.window.is_none_or(|w| pos - j32 < w)
                            && seq.mask.as_ref().is_none_or(|m| m[i * n_kv + j])
                    };
                    let scores: Vec<f32> = (0..n_kv)
                        .map(|j| {
                            if visible(j) {
                                dot(qh, &keys[j * kv_dim + kh * hd..j * kv_dim + (kh + 1) * hd])
                                    * scale
                            } else {
                                f32::NEG_INFINITY
                            }
                        })
                        .collect();
                    let max = scores.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                    let exps: Vec<f64> = scores
                        .iter()
                        .map(|&s| {
                            if off_by_one {
                                // The naive kernel: exp(s - max) with no empty-row guard.
                                (f64::from(s) - f64::from(max)).exp()
                            } else if s == f32::NEG_INFINITY {
                                0.0
                            } else {
                                (f64::from(s) - f64::from(max)).exp()
                            }
                        })
                        .collect();
                    let sum: f64 = exps.iter().sum();
                    let dst = &mut o[h * hd..(h + 1) * hd];
                    if drift {
                        // The "masked" kernel: f32 accumulation, keys in reverse order.
                        let mut acc = vec![0f32; hd];
                        for (j, &e) in exps.iter().enumerate().rev() {
                            if e == 0.0 {
                                continue;
                            }
                            let pj = (e / sum) as f32;
                            let vr = &vals[j * kv_dim + kh * hd..j * kv_dim + (kh + 1) * hd];
                            for (a, &vv) in acc.iter_mut().zip(vr) {
                                *a += pj * vv;
                            }
                        }
                        dst.copy_from_slice(&acc);
                    } else {
                        let mut acc = vec![0f64; hd];
                        for (j, &e) in exps.iter().enumerate() {
                            if e == 0.0 && !off_by_one {
                                continue;
                            }
                            let pj = e / sum;
                            let vr = &vals[j * kv_dim + kh * hd..j * kv_dim + (kh + 1) * hd];
                            for (a, &vv) in acc.iter_mut().zip(vr) {
                                *a += pj * f64::from(vv);
                            }
                        }
                        for (d, a) in dst.iter_mut().zip(&acc) {
                            *d = *a as f32;
                        }
                    }
                    if keep_scores {
                        kq_all.extend_from_slice(&scores);
                        sm_all.extend(exps.iter().map(|&e| (e / sum) as f32));
                    }
                }
            }
            if taps.active() {
                k_read.extend_from_slice(&keys);
                v_read.extend_from_slice(&vals);
            }
        }
        if taps.active() {
            let n = k_read.len() / kv_dim.max(1);
            taps.emit_layer(layer, "k_read", || HostTensor::matrix(n, kv_dim, k_read));
            taps.emit_layer(layer, "v_read", || HostTensor::matrix(n, kv_dim, v_read));
            let (a, b) = (kq_all.len(), sm_all.len());
            taps.emit_layer(layer, "kq", || HostTensor::new(vec![a], kq_all));
            taps.emit_layer(layer, "kq_softmax", || HostTensor::new(vec![b], sm_all));
        }
        Ok(HostTensor::matrix(q.rows(), q_dim, out))
    }
}
