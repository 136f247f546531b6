//! Weight blocks to the one layout the int8 kernels read, a few rows at a time, into scratch
//! that stays in cache while it is used against every activation row.
//!
//! Every quantized type is written as `w = sc * u + mn`, per 16 values:
//! - family U (`u` unsigned, at most 63): Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K.
//!   Signed types become unsigned with an offset folded into `mn` (Q4_0: `u = q`, `mn = -8 d`).
//! - family S (`u` a signed byte, no `mn`): Q8_0, IQ4_NL, IQ4_XS.
//!
//! `sc` and `mn` are products of an f16 and a small integer, so they are exact in f32 and the
//! layout represents the weights exactly (a test rebuilds ggml's dequantization bit for bit).
//! `sc` is stored expanded to 8 floats per 32 values (lanes 0-3 cover values 0-15, lanes 4-7
//! values 16-31: the lanes of a `vpmaddwd` result), `mn` as one float per 16 values, zero-padded
//! to `pad16(k)` per row.

use lockstep_quant::blocks::{self, fp16_to_f32, KVALUES_IQ4NL};
use lockstep_quant::GgmlType;

use crate::act::pad16;
use crate::Isa;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Family {
    /// Unsigned quants with a per-16 offset `mn`.
    U,
    /// Signed quants, no offset.
    S,
}

pub fn family(ty: GgmlType) -> Option<Family> {
    use GgmlType::*;
    match ty {
        Q4_0 | Q4_1 | Q5_0 | Q5_1 | Q2K | Q3K | Q4K | Q5K | Q6K => Some(Family::U),
        Q8_0 | Iq4Nl | Iq4Xs => Some(Family::S),
        _ => None,
    }
}

/// Whether matmuls against `ty` with rows of `k` values use the pair scheme (see `dot`): the
/// types whose scale is constant over each 32 values, when a row is whole pairs of blocks.
/// The choice depends on nothing else (not the kernel build, not the batch), so every path
/// computes the same sums.
pub fn pair_scheme(ty: GgmlType, k: usize) -> bool {
    use GgmlType::*;
    k.is_multiple_of(64) && matches!(ty, Q4_0 | Q4_1 | Q5_0 | Q5_1 | Iq4Nl)
}

/// Where one row's decoded data lives inside the scratch buffers.
pub struct Decoded {
    pub qs: Vec<u8>,
    pub sc8: Vec<f32>,
    pub mn: Vec<f32>,
}

impl Decoded {
    pub fn new() -> Decoded {
        Decoded {
            qs: Vec::new(),
            sc8: Vec::new(),
            mn: Vec::new(),
        }
    }

    pub fn reserve(&mut self, rows: usize, k: usize) {
        let need_q = rows * k;
        if self.qs.len() < need_q {
            self.qs.resize(need_q, 0);
        }
        let need_s = rows * k / 4;
        if self.sc8.len() < need_s {
            self.sc8.resize(need_s, 0.0);
        }
        let need_m = rows * pad16(k);
        if self.mn.len() < need_m {
            // Padding entries stay zero forever: decoders never write past k / 16.
            self.mn.resize(need_m, 0.0);
        }
    }
}

/// Decodes `rows` consecutive rows of `k` values of type `ty` from `src` into `out` (which
/// must have been `reserve`d for them).
///
/// Under the pair scheme the AVX2 build writes the pair layout: per 64 values the bytes of
/// `Pairs::v` (A's values 0-15, B's 0-15, A's 16-31, B's 16-31) and, at `sc8[8 p..]` of the
/// row, the scale vector `[scA x4, scB x4]`. The portable build keeps the natural layout.
pub fn decode_rows(isa: Isa, ty: GgmlType, src: &[u8], rows: usize, k: usize, out: &mut Decoded) {
    let rb = k / ty.block_size() * ty.type_size();
    let p16 = pad16(k);
    #[cfg(target_arch = "x86_64")]
    if isa == Isa::Avx2 && pair_scheme(ty, k) {
        for r in 0..rows {
            let s = &src[r * rb..(r + 1) * rb];
            let q = &mut out.qs[r * k..(r + 1) * k];
            let sc = &mut out.sc8[r * k / 4..(r + 1) * k / 4];
            let mn = &mut out.mn[r * p16..r * p16 + k / 16];
            crate::unpack::with_pair_unpacker!(ty, T =>
            // SAFETY: `Isa::Avx2` is only chosen when the CPU has AVX2, FMA and F16C;
            // the row holds whole blocks (checked at load).
            unsafe { decode_row_pairs::<T>(s, q, sc, mn) },
            _ => {
                // SAFETY: as above.
                unsafe { decode_row_avx2(ty, s, q, sc, mn) };
                to_pair_layout(q, sc);
            })
        }
        return;
    }
    for r in 0..rows {
        let s = &src[r * rb..(r + 1) * rb];
        let q = &mut out.qs[r * k..(r + 1) * k];
        let sc = &mut out.sc8[r * k / 4..(r + 1) * k / 4];
        let mn = &mut out.mn[r * p16..r * p16 + k / 16];
        match isa {
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => {
                crate::unpack::with_unpacker!(ty, T =>
                    // SAFETY: `Isa::Avx2` is only chosen when the CPU has AVX2, FMA and F16C;
                    // the row holds whole blocks (checked at load).
                    unsafe { decode_row_unpack::<T>(s, q, sc, mn) },
                    // SAFETY: as above.
                    _ => unsafe { decode_row_avx2(ty, s, q, sc, mn) })
            }
            _ => decode_row(ty, s, q, sc, mn),
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn decode_row_avx2(ty: GgmlType, s: &[u8], q: &mut [u8], sc: &mut [f32], mn: &mut [f32]) {
    decode_row(ty, s, q, sc, mn)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn decode_row_unpack<T: crate::unpack::Unpack>(
    s: &[u8],
    q: &mut [u8],
    sc: &mut [f32],
    mn: &mut [f32],
) {
    use std::arch::x86_64::*;
    let (bs, ts) = (T::BS, T::TS);
    let nb = q.len() / bs;
    assert!(s.len() >= nb * ts && sc.len() >= q.len() / 4 && mn.len() >= q.len() / 16);
    let mut o = crate::unpack::Unpacked {
        u: [_mm256_setzero_si256(); 8],
        sc: [_mm256_setzero_ps(); 8],
        mn: [0.0; 16],
    };
    for b in 0..nb {
        let nv = T::unpack(s.as_ptr().add(b * ts), &mut o);
        for i in 0..nv {
            let e = b * bs + 32 * i;
            _mm256_storeu_si256(q.as_mut_ptr().add(e) as *mut __m256i, o.u[i]);
            _mm256_storeu_ps(sc.as_mut_ptr().add(e / 4), o.sc[i]);
        }
        mn[b * bs / 16..(b + 1) * bs / 16].copy_from_slice(&o.mn[..bs / 16]);
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn decode_row_pairs<T: crate::unpack::PairUnpack>(
    s: &[u8],
    q: &mut [u8],
    sc: &mut [f32],
    mn: &mut [f32],
) {
    use std::arch::x86_64::*;
    let (bs, ts) = (T::BS, T::TS);
    let nb = q.len() / bs;
    assert!(s.len() >= nb * ts && sc.len() >= q.len() / 8 && mn.len() >= q.len() / 16);
    let mut o = crate::unpack::Pairs::new();
    for b in 0..nb {
        T::unpack(s.as_ptr().add(b * ts), &mut o);
        for i in 0..bs / 64 {
            let e = b * bs + 64 * i;
            _mm256_storeu_si256(q.as_mut_ptr().add(e) as *mut __m256i, o.v[i][0]);
            _mm256_storeu_si256(q.as_mut_ptr().add(e + 32) as *mut __m256i, o.v[i][1]);
            _mm256_storeu_ps(sc.as_mut_ptr().add(e / 8), o.sc[i]);
        }
        mn[b * bs / 16..(b + 1) * bs / 16].copy_from_slice(&o.mn[..bs / 16]);
    }
}

/// Rewrites a naturally decoded row (`q`, `sc` as `decode_row` writes them) into the pair
/// layout, in place: pair `p` reads `sc[16 p..]` before writing `sc[8 p..8 p + 8]`, and later
/// pairs read only beyond what earlier ones wrote.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
fn to_pair_layout(q: &mut [u8], sc: &mut [f32]) {
    for (p, qp) in q.chunks_exact_mut(64).enumerate() {
        let mut t = [0u8; 64];
        t.copy_from_slice(qp);
        qp[16..32].copy_from_slice(&t[32..48]);
        qp[32..48].copy_from_slice(&t[16..32]);
        let (a, b) = (sc[16 * p], sc[16 * p + 8]);
        sc[8 * p..8 * p + 4].fill(a);
        sc[8 * p + 4..8 * p + 8].fill(b);
    }
}

/// Splits a row into its blocks and the matching pieces of the outputs, and runs `f` on each.
#[inline(always)]
fn each<const B: usize, const N: usize, const S: usize, const M: usize>(
    src: &[u8],
    q: &mut [u8],
    sc: &mut [f32],
    mn: &mut [f32],
    f: impl Fn(&[u8; B], &mut [u8; N], &mut [f32; S], &mut [f32; M]),
) {
    for (((b, q), s), m) in src
        .chunks_exact(B)
        .zip(q.chunks_exact_mut(N))
        .zip(sc.chunks_exact_mut(S))
        .zip(mn.chunks_exact_mut(M))
    {
        if let (Ok(b), Ok(q), Ok(s), Ok(m)) =
            (b.try_into(), q.try_into(), s.try_into(), m.try_into())
        {
            f(b, q, s, m);
        }
    }
}

#[inline(always)]
fn f16_at(b: &[u8], at: usize) -> f32 {
    fp16_to_f32(u16::from_le_bytes([b[at], b[at + 1]]))
}

#[inline(always)]
fn fill8(s: &mut [f32], a: f32, b: f32) {
    s[..4].fill(a);
    s[4..8].fill(b);
}

#[inline(always)]
fn nibbles(qs: &[u8], q: &mut [u8; 32]) {
    for j in 0..16 {
        q[j] = qs[j] & 0xF;
        q[j + 16] = qs[j] >> 4;
    }
}

#[inline(always)]
fn high5(q: &mut [u8; 32], qh: u32) {
    for (j, v) in q.iter_mut().enumerate() {
        *v |= (((qh >> j) & 1) << 4) as u8;
    }
}

#[inline(always)]
fn decode_row(ty: GgmlType, s: &[u8], q: &mut [u8], sc: &mut [f32], mn: &mut [f32]) {
    use GgmlType::*;
    match ty {
        Q4_0 => each(
            s,
            q,
            sc,
            mn,
            |b: &[u8; 18], q: &mut [u8; 32], s: &mut [f32; 8], m: &mut [f32; 2]| {
                let d = f16_at(b, 0);
                nibbles(&b[2..18], q);
                s.fill(d);
                m.fill(-8.0 * d);
            },
        ),
        Q4_1 => each(
            s,
            q,
            sc,
            mn,
            |b: &[u8; 20], q: &mut [u8; 32], s: &mut [f32; 8], m: &mut [f32; 2]| {
                nibbles(&b[4..20], q);
                s.fill(f16_at(b, 0));
                m.fill(f16_at(b, 2));
            },
        ),
        Q5_0 => each(
            s,
            q,
            sc,
            mn,
            |b: &[u8; 22], q: &mut [u8; 32], s: &mut [f32; 8], m: &mut [f32; 2]| {
                let d = f16_at(b, 0);
                nibbles(&b[6..22], q);
                high5(q, u32::from_le_bytes([b[2], b[3], b[4], b[5]]));
                s.fill(d);
                m.fill(-16.0 * d);
            },
        ),
        Q5_1 => each(
            s,
            q,
            sc,
            mn,
            |b: &[u8; 24], q: &mut [u8; 32], s: &mut [f32; 8], m: &mut [f32; 2]| {
                nibbles(&b[8..24], q);
                high5(q, u32::from_le_bytes([b[4], b[5], b[6], b[7]]));
                s.fill(f16_at(b, 0));
                m.fill(f16_at(b, 2));
            },
        ),
        Q8_0 => each(
            s,
            q,
            sc,
            mn,
            |b: &[u8; 34], q: &mut [u8; 32], s: &mut [f32; 8], _m: &mut [f32; 2]| {
                q.copy_from_slice(&b[2..34]);
                s.fill(f16_at(b, 0));
            },
        ),
        Iq4Nl => each(
            s,
            q,
            sc,
            mn,
            |b: &[u8; 18], q: &mut [u8; 32], s: &mut [f32; 8], _m: &mut [f32; 2]| {
                for j in 0..16 {
                    q[j] = KVALUES_IQ4NL[(b[2 + j] & 0xF) as usize] as u8;
                    q[j + 16] = KVALUES_IQ4NL[(b[2 + j] >> 4) as usize] as u8;
                }
                s.fill(f16_at(b, 0));
            },
        ),
        Q2K => each(
            s,
            q,
            sc,
            mn,
            |b: &[u8; 84], q: &mut [u8; 256], s: &mut [f32; 64], m: &mut [f32; 16]| {
                use blocks::q2_k::*;
                let d = f16_at(b, D);
                let dmin = f16_at(b, DMIN);
                for n in 0..2 {
                    let qs = &b[QS + 32 * n..QS + 32 * n + 32];
                    for j in 0..4 {
                        let o = &mut q[128 * n + 32 * j..128 * n + 32 * j + 32];
                        for l in 0..32 {
                            o[l] = (qs[l] >> (2 * j)) & 3;
                        }
                    }
                }
                for g in 0..16 {
                    let v = b[SCALES + g];
                    m[g] = -(dmin * (v >> 4) as f32);
                }
                for blk in 0..8 {
                    let (a, c) = (b[SCALES + 2 * blk], b[SCALES + 2 * blk + 1]);
                    fill8(
                        &mut s[8 * blk..8 * blk + 8],
                        d * (a & 0xF) as f32,
                        d * (c & 0xF) as f32,
                    );
                }
            },
        ),
        Q3K => each(
            s,
            q,
            sc,
            mn,
            |b: &[u8; 110], q: &mut [u8; 256], s: &mut [f32; 64], m: &mut [f32; 16]| {
                use blocks::q3_k::*;
                let d = f16_at(b, D);
                let mut packed = [0u8; 12];
                packed.copy_from_slice(&b[SCALES..SCALES + 12]);
                let scales = blocks::q3_k_scales(&packed);
                let hm = &b[HMASK..HMASK + 32];
                for n in 0..2 {
                    let qs = &b[QS + 32 * n..QS + 32 * n + 32];
                    for j in 0..4 {
                        let bit = 4 * n + j;
                        let o = &mut q[128 * n + 32 * j..128 * n + 32 * j + 32];
                        for l in 0..32 {
                            o[l] = ((qs[l] >> (2 * j)) & 3) | (((hm[l] >> bit) & 1) << 2);
                        }
                    }
                }
                let mut dl = [0f32; 16];
                for g in 0..16 {
                    dl[g] = d * scales[g] as f32;
                    m[g] = -4.0 * dl[g];
                }
                for blk in 0..8 {
                    fill8(&mut s[8 * blk..8 * blk + 8], dl[2 * blk], dl[2 * blk + 1]);
                }
            },
        ),
        Q4K => each(
            s,
            q,
            sc,
            mn,
            |b: &[u8; 144], q: &mut [u8; 256], s: &mut [f32; 64], m: &mut [f32; 16]| {
                use blocks::q4_k::*;
                let d = f16_at(b, D);
                let dmin = f16_at(b, DMIN);
                let mut sm = [0u8; 12];
                sm.copy_from_slice(&b[SCALES..SCALES + 12]);
                for j in 0..4 {
                    let qs = &b[QS + 32 * j..QS + 32 * j + 32];
                    let o = &mut q[64 * j..64 * j + 64];
                    for l in 0..32 {
                        o[l] = qs[l] & 0xF;
                        o[l + 32] = qs[l] >> 4;
                    }
                }
                for is in 0..8 {
                    let (scv, mv) = blocks::get_scale_min_k4(is, &sm);
                    let dl = d * scv as f32;
                    s[8 * is..8 * is + 8].fill(dl);
                    let ml = -(dmin * mv as f32);
                    m[2 * is] = ml;
                    m[2 * is + 1] = ml;
                }
            },
        ),
        Q5K => each(
            s,
            q,
            sc,
            mn,
            |b: &[u8; 176], q: &mut [u8; 256], s: &mut [f32; 64], m: &mut [f32; 16]| {
                use blocks::q5_k::*;
                let d = f16_at(b, D);
                let dmin = f16_at(b, DMIN);
                let mut sm = [0u8; 12];
                sm.copy_from_slice(&b[SCALES..SCALES + 12]);
                let qh = &b[QH..QH + 32];
                for j in 0..4 {
                    let ql = &b[QS + 32 * j..QS + 32 * j + 32];
                    let o = &mut q[64 * j..64 * j + 64];
                    for l in 0..32 {
                        o[l] = (ql[l] & 0xF) | (((qh[l] >> (2 * j)) & 1) << 4);
                        o[l + 32] = (ql[l] >> 4) | (((qh[l] >> (2 * j + 1)) & 1) << 4);
                    }
                }
                for is in 0..8 {
                    let (scv, mv) = blocks::get_scale_min_k4(is, &sm);
                    s[8 * is..8 * is + 8].fill(d * scv as f32);
                    let ml = -(dmin * mv as f32);
                    m[2 * is] = ml;
                    m[2 * is + 1] = ml;
                }
            },
        ),
        Q6K => each(
            s,
            q,
            sc,
            mn,
            |b: &[u8; 210], q: &mut [u8; 256], s: &mut [f32; 64], m: &mut [f32; 16]| {
                use blocks::q6_k::*;
                let d = f16_at(b, D);
                for n in 0..2 {
                    let ql = &b[QL + 64 * n..QL + 64 * n + 64];
                    let qh = &b[QH + 32 * n..QH + 32 * n + 32];
                    let o = &mut q[128 * n..128 * n + 128];
                    for l in 0..32 {
                        let h = qh[l];
                        o[l] = (ql[l] & 0xF) | ((h & 3) << 4);
                        o[l + 32] = (ql[l + 32] & 0xF) | (((h >> 2) & 3) << 4);
                        o[l + 64] = (ql[l] >> 4) | (((h >> 4) & 3) << 4);
                        o[l + 96] = (ql[l + 32] >> 4) | (((h >> 6) & 3) << 4);
                    }
                }
                let mut dl = [0f32; 16];
                for g in 0..16 {
                    dl[g] = d * b[SCALES + g] as i8 as f32;
                    m[g] = -32.0 * dl[g];
                }
                for blk in 0..8 {
                    fill8(&mut s[8 * blk..8 * blk + 8], dl[2 * blk], dl[2 * blk + 1]);
                }
            },
        ),
        Iq4Xs => each(
            s,
            q,
            sc,
            mn,
            |b: &[u8; 136], q: &mut [u8; 256], s: &mut [f32; 64], _m: &mut [f32; 16]| {
                use blocks::iq4_xs::*;
                let d = f16_at(b, D);
                let scales_h = u16::from_le_bytes([b[SCALES_H], b[SCALES_H + 1]]);
                for ib in 0..8 {
                    let ls = ((b[SCALES_L + ib / 2] >> (4 * (ib % 2))) & 0xF) as i32
                        | ((((scales_h >> (2 * ib)) & 3) as i32) << 4);
                    s[8 * ib..8 * ib + 8].fill(d * (ls - 32) as f32);
                    let qs = &b[QS + 16 * ib..QS + 16 * ib + 16];
                    let o = &mut q[32 * ib..32 * ib + 32];
                    for j in 0..16 {
                        o[j] = KVALUES_IQ4NL[(qs[j] & 0xF) as usize] as u8;
                        o[j + 16] = KVALUES_IQ4NL[(qs[j] >> 4) as usize] as u8;
                    }
                }
            },
        ),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The decoded layout rebuilds ggml's dequantization exactly, for every type and both
    /// builds.
    #[test]
    fn decoded_layout_rebuilds_ggml_dequantization() {
        let types = [
            GgmlType::Q4_0,
            GgmlType::Q4_1,
            GgmlType::Q5_0,
            GgmlType::Q5_1,
            GgmlType::Q8_0,
            GgmlType::Q2K,
            GgmlType::Q3K,
            GgmlType::Q4K,
            GgmlType::Q5K,
            GgmlType::Q6K,
            GgmlType::Iq4Nl,
            GgmlType::Iq4Xs,
        ];
        // 512: whole pairs (the pair layout for its types); 288: an odd number of blocks.
        for (k, ty) in types.iter().map(|&t| (512, t)).chain(
            types
                .iter()
                .filter(|t| t.block_size() == 32)
                .map(|&t| (288, t)),
        ) {
            let rows = 3;
            let x: Vec<f32> = (0..rows * k)
                .map(|i| ((i * 7919 % 1013) as f32 - 506.0) * 0.01 * (1.0 + (i / k) as f32))
                .collect();
            let src = lockstep_quant::quantize(ty, &x, x.len()).expect("quantize");
            let want = lockstep_quant::dequantize(ty, &src, x.len()).expect("dequantize");
            for isa in Isa::available() {
                let mut d = Decoded::new();
                d.reserve(rows, k);
                decode_rows(isa, ty, &src, rows, k, &mut d);
                let p16 = pad16(k);
                let pairs = isa == Isa::Avx2 && pair_scheme(ty, k);
                for r in 0..rows {
                    for i in 0..k {
                        let (blk, t) = (i / 32, i % 32);
                        let (sc, u) = if pairs {
                            // Pair layout: pair p = blk / 2 holds A (even) and B (odd) blocks.
                            let (p, ab) = (blk / 2, blk % 2);
                            (
                                d.sc8[r * k / 4 + 8 * p + 4 * ab],
                                d.qs[r * k + 64 * p + 32 * (t / 16) + 16 * ab + t % 16],
                            )
                        } else {
                            (d.sc8[r * k / 4 + blk * 8 + t / 16 * 4], d.qs[r * k + i])
                        };
                        let got = match family(ty) {
                            Some(Family::U) => (u as f32 * sc + d.mn[r * p16 + i / 16]).to_bits(),
                            _ => ((u as i8) as f32 * sc).to_bits(),
                        };
                        let w = want[r * k + i];
                        let g = f32::from_bits(got);
                        assert!(
                            (g - w).abs() <= 1e-6 * w.abs(),
                            "{ty} {isa:?} row {r} elem {i}: {} vs {w}",
                            g
                        );
                    }
                }
            }
        }
    }
}
