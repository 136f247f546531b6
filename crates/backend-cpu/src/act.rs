//! Activation quantization: every row of `x` to 8-bit blocks of 32 with an f32 scale (ggml's
//! Q8_0 with the scale kept in f32), plus the scaled sum of each 16 quants (what ggml's Q8_1
//! and Q8_K keep as `s` / `bsums`) for weights with offsets or mins.
//!
//! One format for every weight type: finer than ggml's Q8_K (one scale per 256) for the
//! K-quants, so at least as accurate as ggml everywhere. Written as plain fixed-size loops that
//! the compiler vectorizes; every step is exactly rounded IEEE arithmetic, so the AVX2 build
//! and the portable build give the same bits.

use crate::Isa;

/// `rows` activation rows of `k` values (k a multiple of 32), quantized.
pub struct Q8Act {
    pub qs: Vec<i8>,
    /// One scale per 32 values.
    pub d: Vec<f32>,
    /// `d * sum(q)` per 16 values, zero-padded to `pad16(k)` per row.
    pub s16: Vec<f32>,
    /// The pair layout the AVX2 pair kernels read (empty unless asked for): per 64 values,
    /// blocks A and B as `A[0..16] B[0..16] A[16..32] B[16..32]`, and per pair the scales
    /// `[dA x4, dB x4]` (see `dot`).
    pub xp: Vec<i8>,
    pub d8: Vec<f32>,
}

/// The pair layout of one row: `xp`, `d8` from the natural `q`, `d` (k a multiple of 64).
#[inline(always)]
fn pair_layout(q: &[i8], d: &[f32], xp: &mut [i8], d8: &mut [f32]) {
    for (((q, d), xp), d8) in q
        .chunks_exact(64)
        .zip(d.chunks_exact(2))
        .zip(xp.chunks_exact_mut(64))
        .zip(d8.chunks_exact_mut(8))
    {
        xp[..16].copy_from_slice(&q[..16]);
        xp[16..32].copy_from_slice(&q[32..48]);
        xp[32..48].copy_from_slice(&q[16..32]);
        xp[48..].copy_from_slice(&q[48..]);
        d8[..4].fill(d[0]);
        d8[4..].fill(d[1]);
    }
}

/// Number of 16-value groups of a row of `k`, rounded up to a multiple of 8 (whole vectors).
pub fn pad16(k: usize) -> usize {
    (k / 16).div_ceil(8) * 8
}

/// Activation rows quantized per job.
const ROWS: usize = 16;

impl Q8Act {
    /// The kernels' view of the first `n` rows.
    pub fn view(&self, n: usize) -> crate::dot::QAct<'_> {
        crate::dot::QAct {
            qs: &self.qs,
            d: &self.d,
            s16: &self.s16,
            xp: &self.xp,
            d8: &self.d8,
            n,
        }
    }

    /// `par` runs a list of independent jobs (possibly in parallel); rows never interact, so
    /// the result does not depend on how they are spread. `pairs` asks for the pair layout too
    /// (k must then be a multiple of 64).
    pub fn quantize(
        isa: Isa,
        x: &[f32],
        rows: usize,
        k: usize,
        pairs: bool,
        par: impl FnOnce(&mut [RowJob<'_>]),
    ) -> Q8Act {
        debug_assert_eq!(k % 32, 0);
        debug_assert_eq!(x.len(), rows * k);
        assert!(
            !pairs || k.is_multiple_of(64),
            "pair layout needs rows of whole pairs"
        );
        let p16 = pad16(k);
        let pk = if pairs { k } else { 0 };
        let mut a = Q8Act {
            qs: vec![0; rows * k],
            d: vec![0.0; rows * k / 32],
            s16: vec![0.0; rows * p16],
            xp: vec![0; rows * pk],
            d8: vec![0.0; rows * pk / 8],
        };
        let mut jobs = Vec::with_capacity(rows.div_ceil(ROWS));
        let (mut qs, mut d, mut s16) = (&mut a.qs[..], &mut a.d[..], &mut a.s16[..]);
        let (mut xp, mut d8) = (&mut a.xp[..], &mut a.d8[..]);
        for x in x.chunks(ROWS * k) {
            let r = x.len() / k;
            let (q0, q1) = std::mem::take(&mut qs).split_at_mut(r * k);
            let (d0, d1) = std::mem::take(&mut d).split_at_mut(r * k / 32);
            let (s0, s1) = std::mem::take(&mut s16).split_at_mut(r * p16);
            let (x0, x1) = std::mem::take(&mut xp).split_at_mut(r * pk);
            let (e0, e1) = std::mem::take(&mut d8).split_at_mut(r * pk / 8);
            (qs, d, s16, xp, d8) = (q1, d1, s1, x1, e1);
            jobs.push(RowJob {
                isa,
                k,
                x,
                qs: q0,
                d: d0,
                s16: s0,
                xp: x0,
                d8: e0,
            });
        }
        par(&mut jobs);
        drop(jobs);
        a
    }
}

/// A block of rows to quantize.
pub struct RowJob<'a> {
    isa: Isa,
    k: usize,
    x: &'a [f32],
    qs: &'a mut [i8],
    d: &'a mut [f32],
    s16: &'a mut [f32],
    xp: &'a mut [i8],
    d8: &'a mut [f32],
}

impl RowJob<'_> {
    pub fn run(&mut self) {
        let (k, p16) = (self.k, pad16(self.k));
        let pairs = !self.xp.is_empty();
        for r in 0..self.x.len() / k {
            let xr = &self.x[r * k..(r + 1) * k];
            let q = &mut self.qs[r * k..(r + 1) * k];
            let d = &mut self.d[r * k / 32..(r + 1) * k / 32];
            let s = &mut self.s16[r * p16..r * p16 + k / 16];
            match self.isa {
                #[cfg(target_arch = "x86_64")]
                // SAFETY: `Isa::Avx2` is only chosen when the CPU has AVX2, FMA and F16C.
                Isa::Avx2 => unsafe { quantize_row_avx2(xr, q, d, s) },
                _ => quantize_row(xr, q, d, s),
            }
            if pairs {
                pair_layout(
                    q,
                    d,
                    &mut self.xp[r * k..(r + 1) * k],
                    &mut self.d8[r * k / 8..(r + 1) * k / 8],
                );
            }
        }
    }
}

/// `quantize_row` with explicit AVX2 (the compiler vectorized the portable loops across blocks
/// with strided gathers and byte-wise stores): the same IEEE operations per value, so the same
/// bits. NaN and infinite products are mapped as the portable `as i32` cast and clamp map them
/// (NaN to 0, the infinities to -127/127) before the conversion.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn quantize_row_avx2(x: &[f32], q: &mut [i8], d: &mut [f32], s: &mut [f32]) {
    use std::arch::x86_64::*;
    let nb = x.len() / 32;
    assert!(q.len() >= nb * 32 && d.len() >= nb && s.len() >= 2 * nb);
    let abs_mask = _mm256_set1_epi32(0x7fff_ffff);
    let (lo, hi) = (_mm256_set1_ps(-127.0), _mm256_set1_ps(127.0));
    let hsum = |v: __m256i| -> i32 {
        let t = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256::<1>(v));
        let t = _mm_add_epi32(t, _mm_shuffle_epi32::<0b01_00_11_10>(t));
        let t = _mm_add_epi32(t, _mm_shuffle_epi32::<0b10_11_00_01>(t));
        _mm_cvtsi128_si32(t)
    };
    for b in 0..nb {
        let xp = x.as_ptr().add(32 * b);
        let v: [__m256; 4] = std::array::from_fn(|i| _mm256_loadu_ps(xp.add(8 * i)));
        // |x| as bits, integer max (sign bit cleared, so signed max orders them as unsigned).
        let a: [__m256i; 4] =
            std::array::from_fn(|i| _mm256_and_si256(_mm256_castps_si256(v[i]), abs_mask));
        let m = _mm256_max_epi32(_mm256_max_epi32(a[0], a[1]), _mm256_max_epi32(a[2], a[3]));
        let m = _mm_max_epi32(_mm256_castsi256_si128(m), _mm256_extracti128_si256::<1>(m));
        let m = _mm_max_epi32(m, _mm_shuffle_epi32::<0b01_00_11_10>(m));
        let m = _mm_max_epi32(m, _mm_shuffle_epi32::<0b10_11_00_01>(m));
        let amax = f32::from_bits(_mm_cvtsi128_si32(m) as u32);
        let dd = amax / 127.0;
        let id = if dd != 0.0 { 1.0 / dd } else { 0.0 };
        let idv = _mm256_set1_ps(id);
        let c: [__m256i; 4] = std::array::from_fn(|i| {
            let r = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
                _mm256_mul_ps(v[i], idv),
            );
            let r = _mm256_and_ps(r, _mm256_cmp_ps::<_CMP_ORD_Q>(r, r));
            _mm256_cvtps_epi32(_mm256_min_ps(_mm256_max_ps(r, lo), hi))
        });
        let p = _mm256_packs_epi16(
            _mm256_packs_epi32(c[0], c[1]),
            _mm256_packs_epi32(c[2], c[3]),
        );
        let p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        _mm256_storeu_si256(q.as_mut_ptr().add(32 * b) as *mut __m256i, p);
        let s0 = hsum(_mm256_add_epi32(c[0], c[1]));
        let s1 = hsum(_mm256_add_epi32(c[2], c[3]));
        d[b] = dd;
        s[2 * b] = dd * s0 as f32;
        s[2 * b + 1] = dd * s1 as f32;
    }
}

#[inline(always)]
fn quantize_row(x: &[f32], q: &mut [i8], d: &mut [f32], s: &mut [f32]) {
    for (((xb, qb), db), sb) in x
        .chunks_exact(32)
        .zip(q.chunks_exact_mut(32))
        .zip(d.iter_mut())
        .zip(s.chunks_exact_mut(2))
    {
        quantize_block(xb, qb, db, sb);
    }
}

#[inline(always)]
fn quantize_block(x: &[f32], q: &mut [i8], d: &mut f32, s: &mut [f32]) {
    let (Ok(x), Ok(q)): (Result<&[f32; 32], _>, Result<&mut [i8; 32], _>) =
        (x.try_into(), q.try_into())
    else {
        return;
    };
    // |x| as bits: non-negative floats order like their bit patterns (integer max vectorizes).
    let mut amax = 0u32;
    for v in x {
        amax = amax.max(v.to_bits() & 0x7fff_ffff);
    }
    let amax = f32::from_bits(amax);
    let dd = amax / 127.0;
    let id = if dd != 0.0 { 1.0 / dd } else { 0.0 };
    let mut qi = [0i32; 32];
    for (o, v) in qi.iter_mut().zip(x) {
        *o = (v * id).round_ties_even() as i32;
    }
    for (o, v) in q.iter_mut().zip(&qi) {
        *o = (*v).clamp(-127, 127) as i8;
    }
    let s0: i32 = q[..16].iter().map(|&v| i32::from(v)).sum();
    let s1: i32 = q[16..].iter().map(|&v| i32::from(v)).sum();
    *d = dd;
    s[0] = dd * s0 as f32;
    s[1] = dd * s1 as f32;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The AVX2 quantizer gives the portable one's bits, on ordinary rows and on rows with the
    /// values that take special paths: zeros, denormals (whose scale overflows), infinities, NaN.
    #[test]
    fn avx2_quantizer_is_bitwise_the_portable_one() {
        if !Isa::available().contains(&Isa::Avx2) {
            eprintln!("no AVX2 on this CPU: only the portable quantizer exists here");
            return;
        }
        let k = 256;
        let mut rows: Vec<Vec<f32>> = (0..6)
            .map(|r| {
                (0..k)
                    .map(|i| {
                        let t = ((i * 7919 + r * 104_729) % 10_007) as f32 / 10_007.0 - 0.5;
                        t * 10f32.powi(r as i32 - 2)
                    })
                    .collect()
            })
            .collect();
        let mut special = vec![0f32; k];
        special[32..64].fill(1e-41); // a block of denormals: 1 / (amax / 127) overflows
        special[40] = -3e-42;
        special[64] = f32::INFINITY;
        special[70] = -2.5;
        special[100] = f32::NAN;
        special[130] = f32::NEG_INFINITY;
        special[160..192]
            .iter_mut()
            .enumerate()
            .for_each(|(i, v)| *v = (i as f32 - 16.0) * 0.5);
        rows.push(special);
        for x in rows {
            let run = |isa: Isa| {
                let a = Q8Act::quantize(isa, &x, 1, k, true, |jobs| {
                    jobs.iter_mut().for_each(|j| j.run())
                });
                let f = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                (a.qs, f(&a.d), f(&a.s16), a.xp, f(&a.d8))
            };
            assert!(run(Isa::Avx2) == run(Isa::Portable));
        }
    }
}
