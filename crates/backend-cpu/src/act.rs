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
}

/// Number of 16-value groups of a row of `k`, rounded up to a multiple of 8 (whole vectors).
pub fn pad16(k: usize) -> usize {
    (k / 16).div_ceil(8) * 8
}

impl Q8Act {
    /// `par` runs a list of independent jobs (possibly in parallel); rows never interact, so
    /// the result does not depend on how they are spread.
    pub fn quantize(
        isa: Isa,
        x: &[f32],
        rows: usize,
        k: usize,
        par: impl FnOnce(&mut [RowJob<'_>]),
    ) -> Q8Act {
        debug_assert_eq!(k % 32, 0);
        debug_assert_eq!(x.len(), rows * k);
        let p16 = pad16(k);
        let mut a = Q8Act {
            qs: vec![0; rows * k],
            d: vec![0.0; rows * k / 32],
            s16: vec![0.0; rows * p16],
        };
        const ROWS: usize = 16;
        let mut jobs: Vec<RowJob<'_>> = x
            .chunks(ROWS * k)
            .zip(a.qs.chunks_mut(ROWS * k))
            .zip(a.d.chunks_mut(ROWS * k / 32))
            .zip(a.s16.chunks_mut(ROWS * p16))
            .map(|(((x, qs), d), s16)| RowJob {
                isa,
                k,
                x,
                qs,
                d,
                s16,
            })
            .collect();
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
}

impl RowJob<'_> {
    pub fn run(&mut self) {
        let (k, p16) = (self.k, pad16(self.k));
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
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn quantize_row_avx2(x: &[f32], q: &mut [i8], d: &mut [f32], s: &mut [f32]) {
    quantize_row(x, q, d, s)
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
