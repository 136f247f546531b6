//! Blocked attention: one task takes a few query rows of one sequence and the query heads that
//! share one KV head, so each cached K and V row is loaded (and converted from f16) once for all
//! of them. A query reads only the keys it can see: positions up to its own, cut to the sliding
//! window; scores are kept for those keys only.
//!
//! Per query the arithmetic is fixed: eight-lane fused dot products with the fixed reduction,
//! `exp(s - max)`, a sequential sum, and fused `acc += e * v` over keys in ascending order,
//! then `acc * (1 / sum)`. So the blocking, the task split and the thread count never change a
//! bit.
//!
//! Taps come out of this kernel, never from a second attention path: when an observer wants
//! `kq`/`kq_softmax`, a block also stores the scores it computed (scaled, masked) and its
//! softmax weights (its numerators times the `1 / sum` it applies to the output) into
//! [`ScoreTaps`]: the same instructions plus stores (test `debug_mode_is_bitwise_normal`).
//! `k_read`/`v_read` come from [`read_kv_rows`], which reads each cache row through the very
//! address arithmetic and conversion ([`load_row`]) the kernel's loads use.

use lockstep_graph::{AttentionParams, BatchSeq};

use crate::dot::{hsum_lanes, Out};
use crate::vmath;
use crate::{CpuKvCache, Isa, KvStore, Planted};

/// Per-thread buffers.
#[derive(Default)]
pub struct AttnScratch {
    k: Vec<f32>,
    v: Vec<f32>,
    scores: Vec<f32>,
    acc: Vec<f32>,
    /// A chunk of K or V rows converted to f32 (tiled kernel).
    rows: Vec<f32>,
}

/// The work of one task.
pub struct Block<'a> {
    pub seq: &'a BatchSeq,
    /// Rows `i0..i1` of the sequence's new tokens.
    pub i0: usize,
    pub i1: usize,
    /// Query heads `h0..h1`, all of KV head `kh`.
    pub h0: usize,
    pub h1: usize,
    pub kh: usize,
    /// Debug mode: where to store the scores and softmax weights this block computes.
    pub taps: Option<ScoreTaps>,
    /// The seeded fault, in builds with `faults` (a zero-sized nothing otherwise).
    pub fault: Planted,
}

/// The sequence's `kq` and `kq_softmax` taps, `[n_rows * n_heads, n_kv]` (row `i * n_heads +
/// h`), prefilled with `-inf` and `0`; each block writes its own queries' visible spans. The
/// blocks of one call own disjoint (row, head) pairs, so their writes never overlap (what
/// `Out`'s sharing between threads relies on).
#[derive(Clone, Copy)]
pub struct ScoreTaps {
    pub kq: Out,
    pub probs: Out,
    pub n_heads: usize,
}

/// The cache offset the kernel reads `slot` of `layer` from (the tap path uses the same).
#[inline(always)]
pub fn read_offset(cache: &CpuKvCache, layer: usize, slot: u32, fault: Planted) -> usize {
    let layer = if planted!(fault, KvWrongLayer) && layer % 2 == 1 {
        layer - 1
    } else {
        layer
    };
    cache.offset(layer, slot)
}

/// The `k_read`/`v_read` taps: every row of `slots` (`kv_dim` wide), read and converted by
/// the kernel's own [`load_row`] at the kernel's own [`read_offset`].
pub fn read_kv_rows(
    isa: Isa,
    cache: &CpuKvCache,
    layer: usize,
    slots: &[u32],
    fault: Planted,
    k_out: &mut Vec<f32>,
    v_out: &mut Vec<f32>,
) {
    let d = cache.layout.kv_dim;
    for (store, out) in [(&cache.k, k_out), (&cache.v, v_out)] {
        let start = out.len();
        out.resize(start + slots.len() * d, 0.0);
        for (&slot, dst) in slots.iter().zip(out[start..].chunks_exact_mut(d.max(1))) {
            let o = read_offset(cache, layer, slot, fault);
            match isa {
                #[cfg(target_arch = "x86_64")]
                // SAFETY: `Isa::Avx2` implies AVX2, FMA and F16C.
                Isa::Avx2 => unsafe { load_row_avx2(store, o, dst, fault) },
                _ => load_row::<false>(store, o, dst, fault),
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn load_row_avx2(store: &KvStore, o: usize, dst: &mut [f32], fault: Planted) {
    load_row::<true>(store, o, dst, fault)
}

/// Computes the block's outputs into `out` (`[rows of the batch, n_heads * head_dim]`).
#[allow(clippy::too_many_arguments)]
pub fn attend_block(
    isa: Isa,
    cache: &CpuKvCache,
    layer: usize,
    q: &[f32],
    q_dim: usize,
    p: &AttentionParams,
    b: &Block<'_>,
    s: &mut AttnScratch,
    out: Out,
) {
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `Isa::Avx2` implies AVX2, FMA and F16C.
        Isa::Avx2 => unsafe { tiled::attend_block(cache, layer, q, q_dim, p, b, s, out) },
        _ => attend_block_generic::<false>(cache, layer, q, q_dim, p, b, s, out),
    }
}

/// The visible key range `lo..hi` of the query at position `pos`.
#[inline(always)]
pub fn key_range(pos: u32, n_kv: usize, window: Option<u32>, fault: Planted) -> (usize, usize) {
    let end = if planted!(fault, CausalOffByOne) {
        pos as usize
    } else {
        pos as usize + 1
    };
    let hi = end.min(n_kv);
    let lo = match window {
        Some(w) => (pos as usize + 1).saturating_sub(w as usize).min(hi),
        None => 0,
    };
    (lo, hi)
}

/// Reads one cache row (or the part of it at `o`) as f32: what every kernel load and the
/// `k_read`/`v_read` taps go through.
#[inline(always)]
fn load_row<const AVX: bool>(store: &KvStore, o: usize, dst: &mut [f32], fault: Planted) {
    match store {
        KvStore::F16(v) if planted!(fault, KvF16AsF32) => {
            // The reader assumes an f32 cache: value `e` is the bits of halves 2(o+e), +1.
            let at = |i: usize| u32::from(v[i % v.len().max(1)]);
            for (e, d) in dst.iter_mut().enumerate() {
                let i = 2 * (o + e);
                *d = f32::from_bits(at(i) | (at(i + 1) << 16));
            }
        }
        KvStore::F16(v) => {
            let src = &v[o..o + dst.len()];
            #[cfg(target_arch = "x86_64")]
            if AVX {
                // SAFETY: only instantiated inside `attend_block_avx2` (AVX2 + F16C); lengths equal.
                unsafe { f16_to_f32_avx(src, dst) };
                return;
            }
            for (d, &h) in dst.iter_mut().zip(src) {
                *d = lockstep_quant::fp16_to_f32(h);
            }
        }
        KvStore::F32(v) => dst.copy_from_slice(&v[o..o + dst.len()]),
    }
}

#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn f16_to_f32_avx(src: &[u16], dst: &mut [f32]) {
    use std::arch::x86_64::*;
    let n8 = dst.len().min(src.len()) / 8 * 8;
    let mut i = 0;
    while i < n8 {
        let h = _mm_loadu_si128(src.as_ptr().add(i) as *const __m128i);
        _mm256_storeu_ps(dst.as_mut_ptr().add(i), _mm256_cvtph_ps(h));
        i += 8;
    }
    for j in n8..dst.len().min(src.len()) {
        dst[j] = lockstep_quant::fp16_to_f32(src[j]);
    }
}

/// Eight-lane fused dot product with the fixed reduction (`hd` a multiple of 8).
#[inline(always)]
fn dot<const AVX: bool>(a: &[f32], b: &[f32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if AVX {
        use std::arch::x86_64::*;
        // SAFETY: only instantiated inside `attend_block_avx2` (AVX2 + FMA); reads stay within
        // the shorter slice.
        unsafe {
            let n8 = a.len().min(b.len()) / 8 * 8;
            let mut acc = _mm256_setzero_ps();
            let mut i = 0;
            while i < n8 {
                acc = _mm256_fmadd_ps(
                    _mm256_loadu_ps(a.as_ptr().add(i)),
                    _mm256_loadu_ps(b.as_ptr().add(i)),
                    acc,
                );
                i += 8;
            }
            return crate::dot::avx2::hsum(acc);
        }
    }
    let mut acc = [0f32; 8];
    for (x, y) in a.chunks_exact(8).zip(b.chunks_exact(8)) {
        for l in 0..8 {
            acc[l] = x[l].mul_add(y[l], acc[l]);
        }
    }
    hsum_lanes(&acc)
}

/// Four dot products against one `b`, each bitwise equal to `dot(a_i, b)` (independent
/// accumulators, interleaved for throughput).
#[inline(always)]
fn dot4<const AVX: bool>(a: [&[f32]; 4], b: &[f32]) -> [f32; 4] {
    #[cfg(target_arch = "x86_64")]
    if AVX {
        use std::arch::x86_64::*;
        // SAFETY: only instantiated inside `attend_block_avx2` (AVX2 + FMA); reads stay within
        // the shortest slice.
        unsafe {
            let n = a.iter().map(|x| x.len()).min().unwrap_or(0).min(b.len());
            let n8 = n / 8 * 8;
            let mut acc = [_mm256_setzero_ps(); 4];
            let mut i = 0;
            while i < n8 {
                let bv = _mm256_loadu_ps(b.as_ptr().add(i));
                for q in 0..4 {
                    acc[q] = _mm256_fmadd_ps(_mm256_loadu_ps(a[q].as_ptr().add(i)), bv, acc[q]);
                }
                i += 8;
            }
            return [
                crate::dot::avx2::hsum(acc[0]),
                crate::dot::avx2::hsum(acc[1]),
                crate::dot::avx2::hsum(acc[2]),
                crate::dot::avx2::hsum(acc[3]),
            ];
        }
    }
    [
        dot::<AVX>(a[0], b),
        dot::<AVX>(a[1], b),
        dot::<AVX>(a[2], b),
        dot::<AVX>(a[3], b),
    ]
}

/// `acc[i] = e * v[i] + acc[i]`, fused.
#[inline(always)]
fn axpy<const AVX: bool>(e: f32, v: &[f32], acc: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if AVX {
        use std::arch::x86_64::*;
        // SAFETY: only instantiated inside `attend_block_avx2` (AVX2 + FMA); bounds as above.
        unsafe {
            let n8 = acc.len().min(v.len()) / 8 * 8;
            let ev = _mm256_set1_ps(e);
            let mut i = 0;
            while i < n8 {
                let p = acc.as_mut_ptr().add(i);
                _mm256_storeu_ps(
                    p,
                    _mm256_fmadd_ps(ev, _mm256_loadu_ps(v.as_ptr().add(i)), _mm256_loadu_ps(p)),
                );
                i += 8;
            }
            return;
        }
    }
    for (a, &x) in acc.iter_mut().zip(v) {
        *a = e.mul_add(x, *a);
    }
}

/// A block's queries, numbered `qi` = (row `i0 + qi / nh`, head `h0 + qi % nh`), with the key
/// range `ranges[qi]` each may see and the union `lo..hi` of those ranges.
struct Queries {
    nh: usize,
    nq: usize,
    ranges: Vec<(usize, usize)>,
    lo: usize,
    hi: usize,
}

impl Queries {
    fn new(b: &Block<'_>, p: &AttentionParams) -> Queries {
        let seq = b.seq;
        let n_kv = seq.kv_slots.len();
        let nh = b.h1 - b.h0;
        let ranges: Vec<(usize, usize)> = (b.i0..b.i1)
            .flat_map(|i| {
                let r = key_range(seq.first_pos + i as u32, n_kv, p.window, b.fault);
                std::iter::repeat_n(r, nh)
            })
            .collect();
        let lo = ranges.iter().map(|r| r.0).min().unwrap_or(0);
        let hi = ranges.iter().map(|r| r.1).max().unwrap_or(0);
        Queries {
            nh,
            nq: ranges.len(),
            ranges,
            lo,
            hi,
        }
    }

    fn span(&self) -> usize {
        self.hi.saturating_sub(self.lo)
    }

    /// Whether query `qi` may attend to key `j` (its range, then the explicit mask).
    #[inline(always)]
    fn visible(&self, b: &Block<'_>, qi: usize, j: usize) -> bool {
        let (a, z) = self.ranges[qi];
        if j < a || j >= z {
            return false;
        }
        match &b.seq.mask {
            Some(m) => m[(b.i0 + qi / self.nh) * b.seq.kv_slots.len() + j],
            None => true,
        }
    }

    /// Batch row and head of query `qi`.
    #[inline(always)]
    fn row_head(&self, b: &Block<'_>, qi: usize) -> (usize, usize) {
        (b.seq.first_row + b.i0 + qi / self.nh, b.h0 + qi % self.nh)
    }

    /// Query `qi`'s vector.
    fn q<'q>(&self, b: &Block<'_>, q: &'q [f32], q_dim: usize, hd: usize, qi: usize) -> &'q [f32] {
        let (row, h) = self.row_head(b, qi);
        let h = if planted!(b.fault, HeadOffset) { 0 } else { h };
        &q[row * q_dim + h * hd..row * q_dim + (h + 1) * hd]
    }

    /// Softmax numerators in place over each query's own range of `scores` (`[nq, span]`,
    /// -inf where masked), with `exp(s - max)` and a sequential sum; every weight a query must
    /// not use ends as 0, so "skip when e == 0" is the whole rule afterwards. Returns the sums
    /// and whether each query saw any key.
    fn softmax(&self, isa: Isa, b: &Block<'_>, scores: &mut [f32]) -> (Vec<f32>, Vec<bool>) {
        let flat = planted!(b.fault, SoftmaxFlat);
        let reversed_sum = planted!(b.fault, MaskDrift) && b.seq.mask.is_some();
        let span = self.span();
        let mut sums = vec![0f32; self.nq];
        let mut any = vec![false; self.nq];
        for qi in 0..self.nq {
            let (a, z) = self.ranges[qi];
            let row = &mut scores[qi * span..(qi + 1) * span];
            if a < z {
                let sc = &mut row[a - self.lo..z - self.lo];
                let max = sc.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                if max != f32::NEG_INFINITY {
                    any[qi] = true;
                    if flat {
                        sc.iter_mut().for_each(|s| *s = max + (*s - max) * 0.25);
                    }
                    vmath::exp_shifted(isa, sc, max);
                    let mut sum = 0f32;
                    if reversed_sum {
                        sc.iter().rev().for_each(|&e| sum += e);
                    } else {
                        for &e in sc.iter() {
                            sum += e;
                        }
                    }
                    sums[qi] = sum;
                }
            }
            for (j, e) in row.iter_mut().enumerate() {
                if !any[qi] || self.lo + j < a || self.lo + j >= z {
                    *e = 0.0;
                }
            }
        }
        (sums, any)
    }

    /// `out[row, head] = acc / sum` (0 for a query that saw no key).
    fn write_out(
        &self,
        b: &Block<'_>,
        hd: usize,
        acc: &[f32],
        sums: &[f32],
        any: &[bool],
        out: Out,
    ) {
        // A naive kernel divides by the zero sum of a query that saw no key (NaN).
        let naive = planted!(b.fault, CausalOffByOne);
        for qi in 0..self.nq {
            let (row, h) = self.row_head(b, qi);
            let inv = 1.0 / sums[qi];
            for d in 0..hd {
                let val = if any[qi] || naive {
                    acc[qi * hd + d] * inv
                } else {
                    0.0
                };
                out.put(row, h * hd + d, val);
            }
        }
    }

    /// Debug mode, after the scores: the block's scaled, masked scores (`-inf` where a query
    /// may not look) into the `kq` tap.
    fn store_scores(&self, b: &Block<'_>, scores: &[f32]) {
        let Some(t) = &b.taps else { return };
        let span = self.span();
        for qi in 0..self.nq {
            let r = (b.i0 + qi / self.nh) * t.n_heads + b.h0 + qi % self.nh;
            for (j, &v) in scores[qi * span..(qi + 1) * span].iter().enumerate() {
                t.kq.put(r, self.lo + j, v);
            }
        }
    }

    /// Debug mode, after the softmax: each weight the kernel uses, `e * (1 / sum)` with the
    /// very numerator `e` it accumulates and the `1 / sum` it applies to the output.
    fn store_probs(&self, b: &Block<'_>, scores: &[f32], sums: &[f32], any: &[bool]) {
        let Some(t) = &b.taps else { return };
        let span = self.span();
        let naive = planted!(b.fault, CausalOffByOne);
        for qi in 0..self.nq {
            let r = (b.i0 + qi / self.nh) * t.n_heads + b.h0 + qi % self.nh;
            let inv = 1.0 / sums[qi];
            for (j, &e) in scores[qi * span..(qi + 1) * span].iter().enumerate() {
                let w = if any[qi] || naive { e * inv } else { 0.0 };
                t.probs.put(r, self.lo + j, w);
            }
        }
    }
}

#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn attend_block_generic<const AVX: bool>(
    cache: &CpuKvCache,
    layer: usize,
    q: &[f32],
    q_dim: usize,
    p: &AttentionParams,
    b: &Block<'_>,
    s: &mut AttnScratch,
    out: Out,
) {
    let isa = if AVX { Isa::Avx2 } else { Isa::Portable };
    let hd = p.head_dim;
    let seq = b.seq;
    let qs = Queries::new(b, p);
    let (nq, lo, hi, span) = (qs.nq, qs.lo, qs.hi, qs.span());
    let AttnScratch {
        k, v, scores, acc, ..
    } = s;
    k.resize(hd, 0.0);
    v.resize(hd, 0.0);
    scores.clear();
    scores.resize(nq * span, f32::NEG_INFINITY);
    acc.clear();
    acc.resize(nq * hd, 0.0);
    let qrows: Vec<&[f32]> = (0..nq).map(|qi| qs.q(b, q, q_dim, hd, qi)).collect();
    let scale = if planted!(b.fault, SoftmaxScale) {
        p.scale * p.scale
    } else {
        p.scale
    };
    // Scores.
    let mut vis = Vec::with_capacity(nq);
    for j in lo..hi {
        let o = read_offset(cache, layer, seq.kv_slots[j], b.fault) + b.kh * hd;
        load_row::<AVX>(&cache.k, o, k, b.fault);
        vis.clear();
        vis.extend((0..nq).filter(|&qi| qs.visible(b, qi, j)));
        let mut g = vis.chunks_exact(4);
        for c in &mut g {
            let d = dot4::<AVX>([qrows[c[0]], qrows[c[1]], qrows[c[2]], qrows[c[3]]], k);
            for (&qi, dv) in c.iter().zip(d) {
                scores[qi * span + (j - lo)] = dv * scale;
            }
        }
        for &qi in g.remainder() {
            scores[qi * span + (j - lo)] = dot::<AVX>(qrows[qi], k) * scale;
        }
    }
    qs.store_scores(b, scores);
    let (sums, any) = qs.softmax(isa, b, scores);
    qs.store_probs(b, scores, &sums, &any);
    // Weighted values, keys in ascending order.
    for j in lo..hi {
        if (0..nq).all(|qi| scores[qi * span + (j - lo)] == 0.0) {
            continue;
        }
        let o = read_offset(cache, layer, seq.kv_slots[j], b.fault) + b.kh * hd;
        load_row::<AVX>(&cache.v, o, v, b.fault);
        for qi in 0..nq {
            let e = scores[qi * span + (j - lo)];
            if e != 0.0 {
                axpy::<AVX>(e, v, &mut acc[qi * hd..(qi + 1) * hd]);
            }
        }
    }
    qs.write_out(b, hd, acc, &sums, &any, out);
}

/// The AVX2 kernel: the same arithmetic as `attend_block_generic` per output element, register
/// tiled. Scores are computed four queries by two keys at a time (one 8-lane fused accumulator
/// per pair over the head dimension, then the same fixed reduction and scale); weighted values
/// four queries by sixteen dimensions at a time, keys in ascending order, each fused
/// `acc += e * v` skipped exactly when `e == 0` as the generic loop skips it. Keys are taken in
/// chunks converted from f16 once, so no more than a chunk of K or V is ever materialized.
#[cfg(target_arch = "x86_64")]
mod tiled {
    use super::*;
    use std::arch::x86_64::*;

    /// Keys per converted chunk.
    const KC: usize = 128;

    #[target_feature(enable = "avx2,fma,f16c")]
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn attend_block(
        cache: &CpuKvCache,
        layer: usize,
        q: &[f32],
        q_dim: usize,
        p: &AttentionParams,
        b: &Block<'_>,
        s: &mut AttnScratch,
        out: Out,
    ) {
        let hd = p.head_dim;
        if !hd.is_multiple_of(16) {
            return attend_block_generic::<true>(cache, layer, q, q_dim, p, b, s, out);
        }
        let seq = b.seq;
        let qs = Queries::new(b, p);
        let (nq, lo, hi, span) = (qs.nq, qs.lo, qs.hi, qs.span());
        let AttnScratch {
            scores, acc, rows, ..
        } = s;
        scores.clear();
        scores.resize(nq * span, f32::NEG_INFINITY);
        acc.clear();
        acc.resize(nq * hd, 0.0);
        rows.resize(KC * hd, 0.0);
        let qrow = |qi: usize| -> *const f32 { qs.q(b, q, q_dim, hd, qi).as_ptr() };
        let scale = if planted!(b.fault, SoftmaxScale) {
            p.scale * p.scale
        } else {
            p.scale
        };
        let load_chunk = |store: &KvStore, j0: usize, j1: usize, rows: &mut [f32]| {
            for j in j0..j1 {
                let o = read_offset(cache, layer, seq.kv_slots[j], b.fault) + b.kh * hd;
                let dst = &mut rows[(j - j0) * hd..(j - j0 + 1) * hd];
                load_row::<true>(store, o, dst, b.fault);
            }
        };

        // Scores, chunk by chunk of keys.
        for j0 in (lo..hi).step_by(KC) {
            let j1 = (j0 + KC).min(hi);
            load_chunk(&cache.k, j0, j1, rows);
            let kp = rows.as_ptr();
            let mut q0 = 0;
            while q0 < nq {
                let qn = (nq - q0).min(4);
                let qp: [*const f32; 4] = std::array::from_fn(|i| qrow(q0 + i.min(qn - 1)));
                let mut j = j0;
                while j < j1 {
                    let jn = (j1 - j).min(2);
                    let k0 = kp.add((j - j0) * hd);
                    let k1 = kp.add((j + jn - 1 - j0) * hd);
                    let mut a = [[_mm256_setzero_ps(); 2]; 4];
                    let mut d = 0;
                    while d < hd {
                        let kv0 = _mm256_loadu_ps(k0.add(d));
                        let kv1 = _mm256_loadu_ps(k1.add(d));
                        for i in 0..4 {
                            let qv = _mm256_loadu_ps(qp[i].add(d));
                            a[i][0] = _mm256_fmadd_ps(qv, kv0, a[i][0]);
                            a[i][1] = _mm256_fmadd_ps(qv, kv1, a[i][1]);
                        }
                        d += 8;
                    }
                    for i in 0..qn {
                        for t in 0..jn {
                            if qs.visible(b, q0 + i, j + t) {
                                scores[(q0 + i) * span + (j + t - lo)] =
                                    crate::dot::avx2::hsum(a[i][t]) * scale;
                            }
                        }
                    }
                    j += jn;
                }
                q0 += qn;
            }
        }

        qs.store_scores(b, scores);
        let (sums, any) = qs.softmax(Isa::Avx2, b, scores);
        qs.store_probs(b, scores, &sums, &any);

        // Weighted values.
        for j0 in (lo..hi).step_by(KC) {
            let j1 = (j0 + KC).min(hi);
            if !(0..nq).any(|qi| {
                scores[qi * span + (j0 - lo)..qi * span + (j1 - lo)]
                    .iter()
                    .any(|&e| e != 0.0)
            }) {
                continue;
            }
            load_chunk(&cache.v, j0, j1, rows);
            let vp = rows.as_ptr();
            let mut q0 = 0;
            while q0 < nq {
                let qn = (nq - q0).min(4);
                let ep: [*const f32; 4] = std::array::from_fn(|i| {
                    scores.as_ptr().add((q0 + i.min(qn - 1)) * span + (j0 - lo))
                });
                let ap: [*mut f32; 4] =
                    std::array::from_fn(|i| acc.as_mut_ptr().add((q0 + i.min(qn - 1)) * hd));
                let mut d = 0;
                while d < hd {
                    let mut a: [[__m256; 2]; 4] = std::array::from_fn(|i| {
                        [
                            _mm256_loadu_ps(ap[i].add(d)),
                            _mm256_loadu_ps(ap[i].add(d + 8)),
                        ]
                    });
                    for j in 0..j1 - j0 {
                        let v0 = _mm256_loadu_ps(vp.add(j * hd + d));
                        let v1 = _mm256_loadu_ps(vp.add(j * hd + d + 8));
                        let e: [f32; 4] = std::array::from_fn(|i| *ep[i].add(j));
                        if qn == 4 && e.iter().all(|&x| x != 0.0) {
                            for i in 0..4 {
                                let ev = _mm256_set1_ps(e[i]);
                                a[i][0] = _mm256_fmadd_ps(ev, v0, a[i][0]);
                                a[i][1] = _mm256_fmadd_ps(ev, v1, a[i][1]);
                            }
                        } else {
                            for i in 0..qn {
                                if e[i] != 0.0 {
                                    let ev = _mm256_set1_ps(e[i]);
                                    a[i][0] = _mm256_fmadd_ps(ev, v0, a[i][0]);
                                    a[i][1] = _mm256_fmadd_ps(ev, v1, a[i][1]);
                                }
                            }
                        }
                    }
                    for i in 0..qn {
                        _mm256_storeu_ps(ap[i].add(d), a[i][0]);
                        _mm256_storeu_ps(ap[i].add(d + 8), a[i][1]);
                    }
                    d += 16;
                }
                q0 += qn;
            }
        }
        qs.write_out(b, hd, acc, &sums, &any, out);
    }
}
