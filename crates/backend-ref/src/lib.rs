//! The reference CPU backend: the definition of truth that every fast path is judged against.
//!
//! Weights are dequantized to f32 once. Every op is a plain loop with a fixed summation order
//! (reductions that are cheap to widen run in f64), so a row's result never depends on which
//! other rows share its batch or on the thread count: prefill, decode and batching agree
//! bitwise here, and any disagreement elsewhere is the other backend's.

use std::sync::Arc;

use lockstep_graph::{
    Activation, AttentionParams, Backend, BackendError, Batch, HostTensor, KvLayout, RopeParams,
    RopeStyle, Taps, WeightView,
};
use rayon::prelude::*;

/// A weight as `[rows, cols]` f32, row-major (a vector is one row).
#[derive(Clone, Debug)]
pub struct RefWeight {
    pub rows: usize,
    pub cols: usize,
    pub data: Arc<Vec<f32>>,
}

/// The paged cache: for each layer, `n_slots` rows of K and of V, f32.
pub struct RefKvCache {
    layout: KvLayout,
    k: Vec<f32>,
    v: Vec<f32>,
}

impl RefKvCache {
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
pub struct RefBackend {}

impl RefBackend {
    pub fn new() -> RefBackend {
        RefBackend {}
    }
}

mod kernel;

pub use kernel::dot;

fn matrix(t: &HostTensor) -> (usize, usize) {
    (t.rows(), t.cols())
}

impl Backend for RefBackend {
    type Tensor = HostTensor;
    type Weight = RefWeight;
    type KvCache = RefKvCache;

    fn name(&self) -> &str {
        "ref"
    }

    fn load_weight(&self, w: WeightView<'_>) -> Result<RefWeight, BackendError> {
        let n: u64 = w.dims.iter().product();
        let cols = w.dims.first().copied().unwrap_or(1) as usize;
        let rows = (n as usize).checked_div(cols).unwrap_or(0);
        let data = lockstep_quant::dequantize(w.ty, w.data, n as usize).map_err(|e| {
            BackendError::Weight {
                name: w.name.to_string(),
                why: e.to_string(),
            }
        })?;
        Ok(RefWeight {
            rows,
            cols,
            data: Arc::new(data),
        })
    }

    fn alloc_kv(&self, layout: KvLayout) -> Result<RefKvCache, BackendError> {
        let n = layout
            .n_layers
            .checked_mul(layout.n_slots())
            .and_then(|n| n.checked_mul(layout.kv_dim))
            .ok_or_else(|| BackendError::Kv(format!("layout {layout:?} overflows")))?;
        Ok(RefKvCache {
            layout,
            k: vec![0.0; n],
            v: vec![0.0; n],
        })
    }

    fn to_host(&self, t: &HostTensor) -> HostTensor {
        t.clone()
    }

    fn embed(&self, table: &RefWeight, ids: &[u32]) -> Result<HostTensor, BackendError> {
        let mut out = Vec::with_capacity(ids.len() * table.cols);
        for (row, &id) in ids.iter().enumerate() {
            let i = id as usize;
            if i >= table.rows {
                return Err(BackendError::TokenOutOfRange {
                    id,
                    row,
                    vocab: table.rows,
                });
            }
            out.extend_from_slice(&table.data[i * table.cols..(i + 1) * table.cols]);
        }
        Ok(HostTensor::matrix(ids.len(), table.cols, out))
    }

    fn matmul(&self, x: &HostTensor, w: &RefWeight) -> HostTensor {
        let (n, k) = matrix(x);
        assert_eq!(
            k, w.cols,
            "matmul: x has {k} columns, weight rows have {}",
            w.cols
        );
        let m = w.rows;
        // Work is split over output columns; each output element is computed in exactly the
        // order of `dot`, so neither the split nor the tiling changes a bit of the result.
        let mut out_t = vec![0f32; m * n];
        out_t
            .par_chunks_mut(kernel::W_CHUNK * n)
            .enumerate()
            .for_each(|(ci, block)| {
                let j0 = ci * kernel::W_CHUNK;
                let rows = block.len() / n.max(1);
                kernel::matmul_block(&x.data, n, k, &w.data[j0 * k..(j0 + rows) * k], block);
            });
        let mut out = vec![0f32; n * m];
        for j in 0..m {
            for i in 0..n {
                out[i * m + j] = out_t[j * n + i];
            }
        }
        HostTensor::matrix(n, m, out)
    }

    fn add_bias(&self, x: &HostTensor, bias: &RefWeight) -> HostTensor {
        let (_, c) = matrix(x);
        assert_eq!(c, bias.data.len(), "bias length");
        let mut out = x.clone();
        for row in out.data.chunks_mut(c) {
            for (o, b) in row.iter_mut().zip(bias.data.iter()) {
                *o += b;
            }
        }
        out
    }

    fn rms_norm(&self, x: &HostTensor, weight: &RefWeight, eps: f32) -> HostTensor {
        let g = weight.data.len();
        assert!(
            g > 0 && x.cols().is_multiple_of(g),
            "rms_norm group {g} vs {} columns",
            x.cols()
        );
        let mut out = x.clone();
        for grp in out.data.chunks_mut(g) {
            let ss: f64 = grp.iter().map(|&v| f64::from(v) * f64::from(v)).sum();
            let scale = 1.0 / (ss / g as f64 + f64::from(eps)).sqrt();
            for (o, w) in grp.iter_mut().zip(weight.data.iter()) {
                *o = (f64::from(*o) * scale) as f32 * w;
            }
        }
        out
    }

    fn add(&self, a: &HostTensor, b: &HostTensor) -> HostTensor {
        assert_eq!(a.shape, b.shape, "add: shapes differ");
        let data = a.data.iter().zip(&b.data).map(|(x, y)| x + y).collect();
        HostTensor::new(a.shape.clone(), data)
    }

    fn scale(&self, x: &HostTensor, s: f32) -> HostTensor {
        HostTensor::new(x.shape.clone(), x.data.iter().map(|v| v * s).collect())
    }

    fn act_mul(&self, gate: &HostTensor, up: &HostTensor, act: Activation) -> HostTensor {
        assert_eq!(gate.shape, up.shape, "act_mul: shapes differ");
        let f = |g: f32| -> f64 {
            let g = f64::from(g);
            match act {
                Activation::Silu => g / (1.0 + (-g).exp()),
                Activation::GeluTanh => {
                    let c = (2.0 / std::f64::consts::PI).sqrt();
                    0.5 * g * (1.0 + (c * (g + 0.044715 * g * g * g)).tanh())
                }
            }
        };
        let data = gate
            .data
            .iter()
            .zip(&up.data)
            .map(|(&g, &u)| (f(g) * f64::from(u)) as f32)
            .collect();
        HostTensor::new(gate.shape.clone(), data)
    }

    fn rope(&self, x: &HostTensor, positions: &[u32], p: RopeParams) -> HostTensor {
        let (rows, cols) = matrix(x);
        assert_eq!(rows, positions.len(), "rope: one position per row");
        assert!(cols % p.head_dim == 0, "rope: columns are whole heads");
        let half = p.n_rot / 2;
        // theta_i = pos * base^(-2i / n_rot), computed exactly in f64 per element rather than by
        // ggml's running product; the difference is far below the fixtures' tolerances.
        let inv: Vec<f64> = (0..half)
            .map(|i| f64::from(p.base).powf(-2.0 * i as f64 / p.n_rot as f64))
            .collect();
        let mut out = x.clone();
        for (r, row) in out.data.chunks_mut(cols).enumerate() {
            let pos = f64::from(positions[r]);
            for head in row.chunks_mut(p.head_dim) {
                for (i, &f) in inv.iter().enumerate() {
                    let (s, c) = (pos * f).sin_cos();
                    let (a, b) = match p.style {
                        RopeStyle::Norm => (2 * i, 2 * i + 1),
                        RopeStyle::Neox => (i, i + half),
                    };
                    let (x0, x1) = (f64::from(head[a]), f64::from(head[b]));
                    head[a] = (x0 * c - x1 * s) as f32;
                    head[b] = (x0 * s + x1 * c) as f32;
                }
            }
        }
        out
    }

    fn select_rows(&self, x: &HostTensor, rows: &[usize]) -> HostTensor {
        let c = x.cols();
        let mut data = Vec::with_capacity(rows.len() * c);
        for &r in rows {
            data.extend_from_slice(x.row(r));
        }
        HostTensor::matrix(rows.len(), c, data)
    }

    fn kv_store(
        &self,
        cache: &mut RefKvCache,
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
        for (i, &slot) in batch.slots.iter().enumerate() {
            let o = cache.row_offset(layer, slot)?;
            cache.k[o..o + d].copy_from_slice(k.row(i));
            cache.v[o..o + d].copy_from_slice(v.row(i));
        }
        Ok(())
    }

    fn attention(
        &self,
        cache: &RefKvCache,
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
        let keep_scores = taps.wants_layer(layer, "kq") || taps.wants_layer(layer, "kq_softmax");
        let mut out = vec![0f32; q.rows() * q_dim];
        let mut k_read = Vec::new();
        let mut v_read = Vec::new();
        let mut kq_all = Vec::new();
        let mut sm_all = Vec::new();

        for seq in &batch.seqs {
            let n_kv = seq.kv_slots.len();
            // Gather this sequence's keys and values: exactly what the cache holds.
            let mut keys = Vec::with_capacity(n_kv * kv_dim);
            let mut vals = Vec::with_capacity(n_kv * kv_dim);
            for &slot in &seq.kv_slots {
                let o = cache.row_offset(layer, slot)?;
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
            let rows = seq.first_row..seq.first_row + seq.n_rows;
            let out_rows = &mut out[rows.start * q_dim..rows.end * q_dim];
            let per_row: Vec<(Vec<f32>, Vec<f32>)> = out_rows
                .par_chunks_mut(q_dim)
                .enumerate()
                .map(|(i, o)| {
                    let pos = seq.first_pos + i as u32;
                    let qrow = q.row(rows.start + i);
                    let mut scores_keep = Vec::new();
                    let mut probs_keep = Vec::new();
                    for h in 0..p.n_heads {
                        let kh = h / group;
                        let qh = &qrow[h * hd..(h + 1) * hd];
                        let visible = |j: usize| -> bool {
                            let j32 = j as u32;
                            j32 <= pos
                                && p.window.is_none_or(|w| pos - j32 < w)
                                && seq.mask.as_ref().is_none_or(|m| m[i * n_kv + j])
                        };
                        let scores: Vec<f32> = (0..n_kv)
                            .map(|j| {
                                if visible(j) {
                                    dot(qh, &keys[j * kv_dim + kh * hd..j * kv_dim + (kh + 1) * hd])
                                        * p.scale
                                } else {
                                    f32::NEG_INFINITY
                                }
                            })
                            .collect();
                        let max = scores.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                        let exps: Vec<f64> = scores
                            .iter()
                            .map(|&s| {
                                if s == f32::NEG_INFINITY {
                                    0.0
                                } else {
                                    (f64::from(s) - f64::from(max)).exp()
                                }
                            })
                            .collect();
                        let sum: f64 = exps.iter().sum();
                        let mut acc = vec![0f64; hd];
                        for (j, &e) in exps.iter().enumerate() {
                            if e == 0.0 {
                                continue;
                            }
                            let pj = e / sum;
                            let vr = &vals[j * kv_dim + kh * hd..j * kv_dim + (kh + 1) * hd];
                            for (a, &vv) in acc.iter_mut().zip(vr) {
                                *a += pj * f64::from(vv);
                            }
                        }
                        for (d, a) in o[h * hd..(h + 1) * hd].iter_mut().zip(&acc) {
                            *d = *a as f32;
                        }
                        if keep_scores {
                            scores_keep.extend_from_slice(&scores);
                            // A query that sees no key uses no weight (its output is 0);
                            // its tap says so instead of 0/0.
                            probs_keep.extend(exps.iter().map(|&e| {
                                if sum > 0.0 {
                                    (e / sum) as f32
                                } else {
                                    0.0
                                }
                            }));
                        }
                    }
                    (scores_keep, probs_keep)
                })
                .collect();
            if keep_scores {
                for (s, pr) in per_row {
                    kq_all.extend(s);
                    sm_all.extend(pr);
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
