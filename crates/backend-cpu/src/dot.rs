//! The matmul micro-kernels: decoded weight rows (see `decode`) against Q8 activation rows,
//! and f32 rows against f32 rows.
//!
//! Every output element is computed by the same sequence of operations whatever the tile
//! shape, the number of activation rows or the thread that runs it: eight f32 lane
//! accumulators, one fused multiply-add per 32 values per lane (`acc += f32(isum) * (sc * d)`,
//! with `isum` the exact integer dot of 4 values), then a fixed reduction tree, plus (family U)
//! the offset term `sum(mn * s16)` accumulated the same way.
//!
//! Types whose scale is constant over each 32 values use the *pair scheme* instead when a row
//! is whole pairs of blocks (`decode::pair_scheme`; the choice depends only on the type and the
//! row length): per 64 values (blocks A and B), lane `j < 4` sums the 8 products of A's values
//! `4j..4j+4` and `16+4j..16+4j+4`, lane `4 + j` the same for B, and gets one multiply-add
//! with its block's `sc * d`; the offset term is four lanes, lane `i` summing `mn * s16` of the
//! `i`-th 16 values of every pair in order, reduced as `(m0 + m2) + (m1 + m3)` and added to the
//! main sum. Half the conversions and multiply-adds of the plain scheme, and
//! the two 16-byte halves of a 4- or 5-bit block unpack straight into that order. The integer
//! sums are exact, so only the float steps define the result. The portable build performs the
//! identical IEEE operations one lane at a time (`mul_add` is a fused multiply-add), so the
//! two builds agree bit for bit; a test checks it.

use crate::decode::{Decoded, Family};
use crate::Isa;

/// Where a task writes its results: `out[c * m + j]`. Tasks write disjoint columns.
#[derive(Clone, Copy)]
pub struct Out {
    pub ptr: *mut f32,
    pub m: usize,
    pub len: usize,
}

// SAFETY: `Out` is a plain pointer into a buffer that outlives every task using it; tasks write
// disjoint elements (distinct weight rows), so sharing it between threads is sound.
unsafe impl Send for Out {}
// SAFETY: as above.
unsafe impl Sync for Out {}

impl Out {
    #[inline(always)]
    pub fn put(&self, c: usize, j: usize, v: f32) {
        let i = c * self.m + j;
        assert!(i < self.len, "matmul output index out of range");
        // SAFETY: `i` is in bounds (checked above) and no other task writes column `j`.
        unsafe { *self.ptr.add(i) = v };
    }

    /// Elements `j0..j0 + len` of row `c`, for the task that owns them.
    ///
    /// SAFETY (caller): no other live reference covers these elements (tasks own disjoint
    /// columns, and the caller holds no other slice of them).
    #[inline(always)]
    pub unsafe fn segment<'a>(self, c: usize, j0: usize, len: usize) -> &'a mut [f32] {
        let i = c * self.m + j0;
        assert!(
            j0 + len <= self.m && i + len <= self.len,
            "matmul output segment out of range"
        );
        std::slice::from_raw_parts_mut(self.ptr.add(i), len)
    }
}

/// Activation rows quantized to Q8 (see `act`).
pub struct QAct<'a> {
    pub qs: &'a [i8],
    pub d: &'a [f32],
    pub s16: &'a [f32],
    /// The pair layout (see `act`), present when the AVX2 pair kernels may run.
    pub xp: &'a [i8],
    pub d8: &'a [f32],
    pub n: usize,
}

impl QAct<'_> {
    fn has_pairs(&self, k: usize) -> bool {
        self.xp.len() >= self.n * k && self.d8.len() >= self.n * k / 8
    }
}

/// `out[c, j0 + r] = dot(weight row r, activation row c)` for the `rows` decoded rows in
/// `dec` and every activation row. `pair`: the weight's scheme (`decode::pair_scheme`), which
/// `dec` was decoded for.
#[allow(clippy::too_many_arguments)]
pub fn q8_chunk(
    isa: Isa,
    fam: Family,
    pair: bool,
    k: usize,
    dec: &Decoded,
    rows: usize,
    a: &QAct<'_>,
    out: Out,
    j0: usize,
) {
    assert!(dec.qs.len() >= rows * k && dec.sc8.len() >= rows * k / 4);
    assert!(a.qs.len() >= a.n * k && a.d.len() >= a.n * k / 32);
    let p16 = crate::act::pad16(k);
    assert!(dec.mn.len() >= rows * p16 && a.s16.len() >= a.n * p16);
    assert!(
        !pair || k.is_multiple_of(64),
        "pair scheme needs whole pairs"
    );
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `Isa::Avx2` is only chosen when the CPU has AVX2, FMA and F16C; buffer lengths
        // were checked above (and the pair layout's just below).
        Isa::Avx2 => unsafe {
            if pair {
                assert!(
                    a.has_pairs(k),
                    "pair kernel without the pair activation layout"
                );
            }
            match (fam == Family::S, pair) {
                (false, false) => avx2::q8_chunk::<false, false>(k, dec, rows, a, out, j0),
                (true, false) => avx2::q8_chunk::<true, false>(k, dec, rows, a, out, j0),
                (false, true) => avx2::q8_chunk::<false, true>(k, dec, rows, a, out, j0),
                (true, true) => avx2::q8_chunk::<true, true>(k, dec, rows, a, out, j0),
            }
        },
        _ => portable::q8_chunk(fam, pair, k, dec, rows, a, out, j0),
    }
}

/// Activation rows up to which matmuls unpack weights in registers instead of decoding rows.
pub const FUSED_MAX_ROWS: usize = 8;

/// The small-batch path: `out[c, j0 + r]` for the `rows` weight rows in `src` (type `ty`,
/// unpacked block by block in registers) against every activation row. Returns false (doing
/// nothing) when this build has no unpacker for `ty` or the batch is too large. Bitwise equal to
/// decoding the rows and running `q8_chunk`.
#[allow(clippy::too_many_arguments)]
pub fn fused_chunk(
    isa: Isa,
    ty: lockstep_quant::GgmlType,
    fam: Family,
    pair: bool,
    k: usize,
    src: &[u8],
    rows: usize,
    a: &QAct<'_>,
    out: Out,
    j0: usize,
    mnbuf: &mut Vec<f32>,
) -> bool {
    if a.n == 0 || a.n > FUSED_MAX_ROWS {
        return false;
    }
    let p16 = crate::act::pad16(k);
    assert!(a.qs.len() >= a.n * k && a.d.len() >= a.n * k / 32 && a.s16.len() >= a.n * p16);
    assert!(src.len() >= rows * (k / ty.block_size() * ty.type_size()));
    match isa {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 if pair => {
            if !a.has_pairs(k) {
                return false;
            }
            crate::unpack::with_pair_unpacker!(ty, T => {
                // SAFETY: `Isa::Avx2` implies AVX2, FMA and F16C; lengths checked above.
                unsafe {
                    if fam == Family::U {
                        avx2::fused_pair::<T, false>(k, src, rows, a, out, j0)
                    } else {
                        avx2::fused_pair::<T, true>(k, src, rows, a, out, j0)
                    }
                }
                true
            }, _ => false)
        }
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => crate::unpack::with_unpacker!(ty, T => {
            // SAFETY: `Isa::Avx2` implies AVX2, FMA and F16C; lengths checked above.
            unsafe {
                if fam == Family::U {
                    avx2::fused::<T, false>(k, src, rows, a, out, j0, mnbuf)
                } else {
                    avx2::fused::<T, true>(k, src, rows, a, out, j0, mnbuf)
                }
            }
            true
        }, _ => false),
        _ => {
            let _ = (ty, fam, pair, src, rows, out, j0, mnbuf);
            false
        }
    }
}

/// `out[c, j0 + r] = dot(w row r, x row c)` for f32 rows.
pub fn f32_chunk(
    isa: Isa,
    k: usize,
    w: &[f32],
    rows: usize,
    x: &[f32],
    n: usize,
    out: Out,
    j0: usize,
) {
    assert!(w.len() >= rows * k && x.len() >= n * k);
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `Isa::Avx2` is only chosen when the CPU has AVX2 and FMA; lengths checked above.
        Isa::Avx2 => unsafe { avx2::f32_chunk(k, w, rows, x, n, out, j0) },
        _ => portable::f32_chunk(k, w, rows, x, n, out, j0),
    }
}

/// The fixed reduction of eight lanes: ((a0+a4)+(a2+a6)) + ((a1+a5)+(a3+a7)).
#[inline(always)]
pub fn hsum_lanes(a: &[f32; 8]) -> f32 {
    let s = [a[0] + a[4], a[1] + a[5], a[2] + a[6], a[3] + a[7]];
    (s[0] + s[2]) + (s[1] + s[3])
}

pub mod portable {
    use super::*;

    #[inline(always)]
    fn q8_one(
        fam: Family,
        k: usize,
        wq: &[u8],
        wsc: &[f32],
        wmn: &[f32],
        xq: &[i8],
        xd: &[f32],
        xs: &[f32],
    ) -> f32 {
        let mut acc = [0f32; 8];
        for b in 0..k / 32 {
            let scale_x = xd[b];
            for (l, a) in acc.iter_mut().enumerate() {
                let mut s = 0i32;
                for e in 0..4 {
                    let i = 32 * b + 4 * l + e;
                    let w = match fam {
                        Family::U => i32::from(wq[i]),
                        Family::S => i32::from(wq[i] as i8),
                    };
                    s += w * i32::from(xq[i]);
                }
                *a = (s as f32).mul_add(wsc[8 * b + l] * scale_x, *a);
            }
        }
        let main = hsum_lanes(&acc);
        if fam == Family::U {
            main + mn_dot(wmn, xs)
        } else {
            main
        }
    }

    /// The pair scheme on the natural layout (`dot` module docs).
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    fn q8_one_pair(
        fam: Family,
        k: usize,
        wq: &[u8],
        wsc: &[f32],
        wmn: &[f32],
        xq: &[i8],
        xd: &[f32],
        xs: &[f32],
    ) -> f32 {
        let mut acc = [0f32; 8];
        for p in 0..k / 64 {
            for (l, a) in acc.iter_mut().enumerate() {
                let (blk, j) = (2 * p + l / 4, l % 4);
                let mut s = 0i32;
                for half in 0..2 {
                    for e in 0..4 {
                        let i = 32 * blk + 16 * half + 4 * j + e;
                        let w = match fam {
                            Family::U => i32::from(wq[i]),
                            Family::S => i32::from(wq[i] as i8),
                        };
                        s += w * i32::from(xq[i]);
                    }
                }
                *a = (s as f32).mul_add(wsc[8 * blk] * xd[blk], *a);
            }
        }
        let main = hsum_lanes(&acc);
        if fam == Family::U {
            main + mn_dot_pairs(k / 64, wmn, xs)
        } else {
            main
        }
    }

    /// The pair scheme's offset term over `np` pairs.
    #[inline(always)]
    pub fn mn_dot_pairs(np: usize, wmn: &[f32], xs: &[f32]) -> f32 {
        let mut m = [0f32; 4];
        for p in 0..np {
            for (i, m) in m.iter_mut().enumerate() {
                *m = wmn[4 * p + i].mul_add(xs[4 * p + i], *m);
            }
        }
        (m[0] + m[2]) + (m[1] + m[3])
    }

    #[inline(always)]
    pub fn mn_dot(wmn: &[f32], xs: &[f32]) -> f32 {
        let mut acc = [0f32; 8];
        for (w, x) in wmn.chunks_exact(8).zip(xs.chunks_exact(8)) {
            for l in 0..8 {
                acc[l] = w[l].mul_add(x[l], acc[l]);
            }
        }
        hsum_lanes(&acc)
    }

    #[allow(clippy::too_many_arguments)]
    pub fn q8_chunk(
        fam: Family,
        pair: bool,
        k: usize,
        dec: &Decoded,
        rows: usize,
        a: &QAct<'_>,
        out: Out,
        j0: usize,
    ) {
        let p16 = crate::act::pad16(k);
        let one = if pair { q8_one_pair } else { q8_one };
        for c in 0..a.n {
            for r in 0..rows {
                let v = one(
                    fam,
                    k,
                    &dec.qs[r * k..(r + 1) * k],
                    &dec.sc8[r * k / 4..(r + 1) * k / 4],
                    &dec.mn[r * p16..(r + 1) * p16],
                    &a.qs[c * k..(c + 1) * k],
                    &a.d[c * k / 32..(c + 1) * k / 32],
                    &a.s16[c * p16..(c + 1) * p16],
                );
                out.put(c, j0 + r, v);
            }
        }
    }

    #[inline(always)]
    pub fn f32_dot(w: &[f32], x: &[f32]) -> f32 {
        let k8 = w.len() / 8 * 8;
        let mut acc = [0f32; 8];
        for (wc, xc) in w[..k8].chunks_exact(8).zip(x[..k8].chunks_exact(8)) {
            for l in 0..8 {
                acc[l] = wc[l].mul_add(xc[l], acc[l]);
            }
        }
        let mut tail = 0f32;
        for i in k8..w.len() {
            tail = w[i].mul_add(x[i], tail);
        }
        hsum_lanes(&acc) + tail
    }

    pub fn f32_chunk(k: usize, w: &[f32], rows: usize, x: &[f32], n: usize, out: Out, j0: usize) {
        for c in 0..n {
            for r in 0..rows {
                out.put(
                    c,
                    j0 + r,
                    f32_dot(&w[r * k..(r + 1) * k], &x[c * k..(c + 1) * k]),
                );
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
pub mod avx2 {
    use super::*;
    use std::arch::x86_64::*;

    /// Runs `$body` with the constant `$c` equal to the number of activation rows `$n` (1-8;
    /// the small-batch kernels are instantiated per count so their accumulators are registers).
    macro_rules! with_columns {
        ($n:expr, $c:ident => $body:expr) => {
            match $n {
                1 => {
                    const $c: usize = 1;
                    $body
                }
                2 => {
                    const $c: usize = 2;
                    $body
                }
                3 => {
                    const $c: usize = 3;
                    $body
                }
                4 => {
                    const $c: usize = 4;
                    $body
                }
                5 => {
                    const $c: usize = 5;
                    $body
                }
                6 => {
                    const $c: usize = 6;
                    $body
                }
                7 => {
                    const $c: usize = 7;
                    $body
                }
                _ => {
                    const $c: usize = 8;
                    $body
                }
            }
        };
    }

    const TILE_R: usize = 4;
    const TILE_C: usize = 2;

    #[inline(always)]
    pub unsafe fn hsum(v: __m256) -> f32 {
        let lo = _mm256_castps256_ps128(v);
        let hi = _mm256_extractf128_ps::<1>(v);
        let s = _mm_add_ps(lo, hi); // [a0+a4, a1+a5, a2+a6, a3+a7]
        let h = _mm_movehl_ps(s, s); // [s2, s3, s2, s3]
        let t = _mm_add_ps(s, h); // [s0+s2, s1+s3, ..]
        let u = _mm_shuffle_ps::<1>(t, t); // t1
        _mm_cvtss_f32(_mm_add_ss(t, u))
    }

    /// One R x C tile of Q8 dot products over the whole row (`nb` blocks of 32): weight rows
    /// `wq + r * k` (scales `wsc + r * k / 4`), activation rows `xq + c * k` (scales
    /// `xd + c * k / 32`).
    ///
    /// SAFETY (caller): AVX2+FMA present; every row valid for `nb` blocks.
    #[inline(always)]
    unsafe fn tile<const R: usize, const C: usize, const S: bool>(
        nb: usize,
        k: usize,
        wq: *const u8,
        wsc: *const f32,
        xq: *const i8,
        xd: *const f32,
    ) -> [[__m256; C]; R] {
        let ones = _mm256_set1_epi16(1);
        let mut acc = [[_mm256_setzero_ps(); C]; R];
        let (kq, ks, kd) = (k, k / 4, k / 32);
        for b in 0..nb {
            for (r, acc) in acc.iter_mut().enumerate() {
                let w = _mm256_loadu_si256(wq.add(r * kq + 32 * b) as *const __m256i);
                let sc = _mm256_loadu_ps(wsc.add(r * ks + 8 * b));
                let wa = if S { _mm256_sign_epi8(w, w) } else { w };
                for (c, acc) in acc.iter_mut().enumerate() {
                    let x = _mm256_loadu_si256(xq.add(c * kq + 32 * b) as *const __m256i);
                    let xs = if S { _mm256_sign_epi8(x, w) } else { x };
                    let p = _mm256_maddubs_epi16(wa, xs);
                    let f = _mm256_cvtepi32_ps(_mm256_madd_epi16(p, ones));
                    let dx = _mm256_set1_ps(*xd.add(c * kd + b));
                    *acc = _mm256_fmadd_ps(f, _mm256_mul_ps(sc, dx), *acc);
                }
            }
        }
        acc
    }

    /// The exact integer sums of one pair's lanes: `w`, `x` the pair's two vectors each.
    #[inline(always)]
    unsafe fn pair_isum<const S: bool>(
        w: [__m256i; 2],
        wa: [__m256i; 2],
        x: [__m256i; 2],
    ) -> __m256i {
        let ones = _mm256_set1_epi16(1);
        if S {
            let p0 = _mm256_maddubs_epi16(wa[0], _mm256_sign_epi8(x[0], w[0]));
            let p1 = _mm256_maddubs_epi16(wa[1], _mm256_sign_epi8(x[1], w[1]));
            _mm256_add_epi32(_mm256_madd_epi16(p0, ones), _mm256_madd_epi16(p1, ones))
        } else {
            // Unsigned weights are at most 63 and |x| at most 127: each 16-bit pair sum is at
            // most 16002, so adding two cannot overflow and the sum stays exact.
            let p = _mm256_add_epi16(
                _mm256_maddubs_epi16(w[0], x[0]),
                _mm256_maddubs_epi16(w[1], x[1]),
            );
            _mm256_madd_epi16(p, ones)
        }
    }

    /// The pair scheme's R x C tile over `np` pairs: decoded pair-layout weight rows `wq + r * k`
    /// (scale vectors `wsc + r * k / 4`), pair-layout activation rows `xq + c * k` (scale
    /// vectors `xd8 + c * k / 8`).
    ///
    /// SAFETY (caller): AVX2+FMA present; every row valid for `np` pairs.
    #[inline(always)]
    unsafe fn tile_pair<const R: usize, const C: usize, const S: bool>(
        np: usize,
        k: usize,
        wq: *const u8,
        wsc: *const f32,
        xq: *const i8,
        xd8: *const f32,
    ) -> [[__m256; C]; R] {
        let mut acc = [[_mm256_setzero_ps(); C]; R];
        let (ks, k8) = (k / 4, k / 8);
        for p in 0..np {
            for (r, acc) in acc.iter_mut().enumerate() {
                let wp = wq.add(r * k + 64 * p);
                let w = [
                    _mm256_loadu_si256(wp as *const __m256i),
                    _mm256_loadu_si256(wp.add(32) as *const __m256i),
                ];
                let wa = if S {
                    [_mm256_sign_epi8(w[0], w[0]), _mm256_sign_epi8(w[1], w[1])]
                } else {
                    w
                };
                let sc = _mm256_loadu_ps(wsc.add(r * ks + 8 * p));
                for (c, acc) in acc.iter_mut().enumerate() {
                    let xp = xq.add(c * k + 64 * p);
                    let x = [
                        _mm256_loadu_si256(xp as *const __m256i),
                        _mm256_loadu_si256(xp.add(32) as *const __m256i),
                    ];
                    let f = _mm256_cvtepi32_ps(pair_isum::<S>(w, wa, x));
                    let dx = _mm256_loadu_ps(xd8.add(c * k8 + 8 * p));
                    *acc = _mm256_fmadd_ps(f, _mm256_mul_ps(sc, dx), *acc);
                }
            }
        }
        acc
    }

    /// The pair scheme's offset lanes reduced: `(m0 + m2) + (m1 + m3)`.
    #[inline(always)]
    unsafe fn hsum4(m: __m128) -> f32 {
        let h = _mm_movehl_ps(m, m); // [m2, m3, ..]
        let t = _mm_add_ps(m, h); // [m0+m2, m1+m3, ..]
        _mm_cvtss_f32(_mm_add_ss(t, _mm_movehdup_ps(t)))
    }

    /// The pair scheme's offset term over `np` pairs.
    #[inline(always)]
    unsafe fn mn_dot_pairs(np: usize, w: *const f32, x: *const f32) -> f32 {
        let mut m = _mm_setzero_ps();
        for p in 0..np {
            m = _mm_fmadd_ps(_mm_loadu_ps(w.add(4 * p)), _mm_loadu_ps(x.add(4 * p)), m);
        }
        hsum4(m)
    }

    /// `sum(mn * s16)` over `n8` vectors, reduced like the main accumulator.
    #[inline(always)]
    unsafe fn mn_dot(n8: usize, w: *const f32, x: *const f32) -> f32 {
        let mut acc = _mm256_setzero_ps();
        for i in 0..n8 {
            acc = _mm256_fmadd_ps(
                _mm256_loadu_ps(w.add(8 * i)),
                _mm256_loadu_ps(x.add(8 * i)),
                acc,
            );
        }
        hsum(acc)
    }

    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    unsafe fn q8_tile<const R: usize, const C: usize, const S: bool, const P: bool>(
        k: usize,
        dec: &Decoded,
        r0: usize,
        a: &QAct<'_>,
        c0: usize,
        out: Out,
        j0: usize,
    ) {
        let p16 = crate::act::pad16(k);
        let acc = if P {
            tile_pair::<R, C, S>(
                k / 64,
                k,
                dec.qs.as_ptr().add(r0 * k),
                dec.sc8.as_ptr().add(r0 * k / 4),
                a.xp.as_ptr().add(c0 * k),
                a.d8.as_ptr().add(c0 * k / 8),
            )
        } else {
            tile::<R, C, S>(
                k / 32,
                k,
                dec.qs.as_ptr().add(r0 * k),
                dec.sc8.as_ptr().add(r0 * k / 4),
                a.qs.as_ptr().add(c0 * k),
                a.d.as_ptr().add(c0 * k / 32),
            )
        };
        for r in 0..R {
            for c in 0..C {
                let mut v = hsum(acc[r][c]);
                if !S {
                    let (w, x) = (
                        dec.mn.as_ptr().add((r0 + r) * p16),
                        a.s16.as_ptr().add((c0 + c) * p16),
                    );
                    v += if P {
                        mn_dot_pairs(k / 64, w, x)
                    } else {
                        mn_dot(p16 / 8, w, x)
                    };
                }
                out.put(c0 + c, j0 + r0 + r, v);
            }
        }
    }

    /// How far ahead of the row being read the kernels prefetch weight bytes. The hardware
    /// prefetcher alone left a streaming GEMV (the 178 MB LM head of gemma3) at ~70% of the
    /// machine's read bandwidth; prefetching ~2 KB ahead brings it to ~85% (BENCHMARKS.md).
    const PF_BYTES: usize = 2048;

    /// Prefetches every cache line of a `ts`-byte block (one prefetch per block left most lines
    /// of the 144- and 210-byte K-quant blocks to the hardware prefetcher, whose misses showed
    /// up as stalls on the weight loads). `ts` is a constant, so the loop unrolls.
    #[inline(always)]
    unsafe fn prefetch_block(p: *const u8, ts: usize) {
        let mut o = 0;
        while o < ts {
            _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(o) as *const i8);
            o += 64;
        }
    }

    /// SAFETY (caller): AVX2, FMA and F16C present; lengths checked by `super::fused_chunk`.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn fused<T: crate::unpack::Unpack, const S: bool>(
        k: usize,
        src: &[u8],
        rows: usize,
        a: &QAct<'_>,
        out: Out,
        j0: usize,
        mnbuf: &mut Vec<f32>,
    ) {
        // The kernels prefetch PF_BYTES ahead of what they read; start the first stretch now.
        prefetch_block(src.as_ptr(), PF_BYTES.min(src.len()));
        with_columns!(a.n, C => fused_c::<T, C, S>(k, src, rows, a, out, j0, mnbuf))
    }

    #[inline(always)]
    unsafe fn fused_c<T: crate::unpack::Unpack, const C: usize, const S: bool>(
        k: usize,
        src: &[u8],
        rows: usize,
        a: &QAct<'_>,
        out: Out,
        j0: usize,
        mnbuf: &mut Vec<f32>,
    ) {
        if S || T::BS == 256 {
            // Offsets (if any) come a whole vector of 8 at a time: accumulate them in the loop
            // (the same sequence as `mn_dot`) and take two rows at a time.
            // Two rows at a time only pays for the long blocks: on streaming Q8_0 rows (the
            // LM head) it cost a third of the speed.
            let rb = k / T::BS * T::TS;
            let mut r = 0;
            while T::BS == 256 && r + 2 <= rows {
                fused_rows::<T, 2, C, S>(k, src.as_ptr().add(r * rb), a, out, j0 + r);
                r += 2;
            }
            while r < rows {
                fused_rows::<T, 1, C, S>(k, src.as_ptr().add(r * rb), a, out, j0 + r);
                r += 1;
            }
            return;
        }
        let p16 = crate::act::pad16(k);
        let nb = k / T::BS;
        let nv = T::BS / 32;
        let rb = nb * T::TS;
        mnbuf.clear();
        mnbuf.resize(p16, 0.0);
        let ones = _mm256_set1_epi16(1);
        let mut o = crate::unpack::Unpacked {
            u: [_mm256_setzero_si256(); 8],
            sc: [_mm256_setzero_ps(); 8],
            mn: [0.0; 16],
        };
        for r in 0..rows {
            let row = src.as_ptr().add(r * rb);
            let mut acc = [_mm256_setzero_ps(); C];
            for b in 0..nb {
                prefetch_block(row.wrapping_add(PF_BYTES + b * T::TS), T::TS);
                T::unpack(row.add(b * T::TS), &mut o);
                if !S {
                    std::ptr::copy_nonoverlapping(
                        o.mn.as_ptr(),
                        mnbuf.as_mut_ptr().add(b * (T::BS / 16)),
                        T::BS / 16,
                    );
                }
                for i in 0..nv {
                    let blk = b * nv + i;
                    let w = o.u[i];
                    let wa = if S { _mm256_sign_epi8(w, w) } else { w };
                    for (c, acc) in acc.iter_mut().enumerate() {
                        let x = _mm256_loadu_si256(
                            a.qs.as_ptr().add(c * k + 32 * blk) as *const __m256i
                        );
                        let xs = if S { _mm256_sign_epi8(x, w) } else { x };
                        let p = _mm256_maddubs_epi16(wa, xs);
                        let f = _mm256_cvtepi32_ps(_mm256_madd_epi16(p, ones));
                        let dx = _mm256_set1_ps(*a.d.as_ptr().add(c * k / 32 + blk));
                        *acc = _mm256_fmadd_ps(f, _mm256_mul_ps(o.sc[i], dx), *acc);
                    }
                }
            }
            for (c, acc) in acc.iter().enumerate() {
                let mut v = hsum(*acc);
                if !S {
                    v += mn_dot(p16 / 8, mnbuf.as_ptr(), a.s16.as_ptr().add(c * p16));
                }
                out.put(c, j0 + r, v);
            }
        }
    }

    /// Weight rows `j..j + R` (blocks at `src`) against every activation row, for signed types
    /// and 256-value blocks (whose 16 offsets are two of `mn_dot`'s vectors).
    #[inline(always)]
    unsafe fn fused_rows<
        T: crate::unpack::Unpack,
        const R: usize,
        const C: usize,
        const S: bool,
    >(
        k: usize,
        src: *const u8,
        a: &QAct<'_>,
        out: Out,
        j: usize,
    ) {
        let p16 = crate::act::pad16(k);
        let nb = k / T::BS;
        let nv = T::BS / 32;
        let rb = nb * T::TS;
        let ones = _mm256_set1_epi16(1);
        let mut o: [crate::unpack::Unpacked; R] =
            std::array::from_fn(|_| crate::unpack::Unpacked {
                u: [_mm256_setzero_si256(); 8],
                sc: [_mm256_setzero_ps(); 8],
                mn: [0.0; 16],
            });
        let mut acc = [[_mm256_setzero_ps(); C]; R];
        let mut accm = [[_mm256_setzero_ps(); C]; R];
        for b in 0..nb {
            for (r, o) in o.iter_mut().enumerate() {
                let blk = src.add(r * rb + b * T::TS);
                prefetch_block(blk.wrapping_add(PF_BYTES), T::TS);
                T::unpack(blk, o);
            }
            for i in 0..nv {
                let blk = b * nv + i;
                for c in 0..C {
                    let x =
                        _mm256_loadu_si256(a.qs.as_ptr().add(c * k + 32 * blk) as *const __m256i);
                    let dx = _mm256_set1_ps(*a.d.as_ptr().add(c * k / 32 + blk));
                    for r in 0..R {
                        let w = o[r].u[i];
                        let wa = if S { _mm256_sign_epi8(w, w) } else { w };
                        let xs = if S { _mm256_sign_epi8(x, w) } else { x };
                        let p = _mm256_maddubs_epi16(wa, xs);
                        let f = _mm256_cvtepi32_ps(_mm256_madd_epi16(p, ones));
                        acc[r][c] = _mm256_fmadd_ps(f, _mm256_mul_ps(o[r].sc[i], dx), acc[r][c]);
                    }
                }
            }
            if !S {
                for c in 0..C {
                    let xs = a.s16.as_ptr().add(c * p16 + 16 * b);
                    let (x0, x1) = (_mm256_loadu_ps(xs), _mm256_loadu_ps(xs.add(8)));
                    for r in 0..R {
                        let m = o[r].mn.as_ptr();
                        accm[r][c] = _mm256_fmadd_ps(_mm256_loadu_ps(m), x0, accm[r][c]);
                        accm[r][c] = _mm256_fmadd_ps(_mm256_loadu_ps(m.add(8)), x1, accm[r][c]);
                    }
                }
            }
        }
        for r in 0..R {
            for c in 0..C {
                let mut v = hsum(acc[r][c]);
                if !S {
                    v += hsum(accm[r][c]);
                }
                out.put(c, j + r, v);
            }
        }
    }

    /// The pair scheme's small-batch kernel: like `fused`, unpacking two blocks at a time.
    ///
    /// SAFETY (caller): AVX2, FMA and F16C present; lengths checked by `super::fused_chunk`,
    /// including the pair layout of `a`.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn fused_pair<T: crate::unpack::PairUnpack, const S: bool>(
        k: usize,
        src: &[u8],
        rows: usize,
        a: &QAct<'_>,
        out: Out,
        j0: usize,
    ) {
        prefetch_block(src.as_ptr(), PF_BYTES.min(src.len()));
        with_columns!(a.n, C => fused_pair_c::<T, C, S>(k, src, rows, a, out, j0))
    }

    #[inline(always)]
    unsafe fn fused_pair_c<T: crate::unpack::PairUnpack, const C: usize, const S: bool>(
        k: usize,
        src: &[u8],
        rows: usize,
        a: &QAct<'_>,
        out: Out,
        j0: usize,
    ) {
        let rb = k / T::BS * T::TS;
        let mut r = 0;
        // Two rows at a time: independent accumulator chains, and each activation vector
        // loaded once for both.
        while r + 2 <= rows {
            fused_pair_rows::<T, 2, C, S>(k, src.as_ptr().add(r * rb), a, out, j0 + r);
            r += 2;
        }
        if r < rows {
            fused_pair_rows::<T, 1, C, S>(k, src.as_ptr().add(r * rb), a, out, j0 + r);
        }
    }

    /// Weight rows `j..j + R` (their blocks at `src`) against every activation row.
    #[inline(always)]
    unsafe fn fused_pair_rows<
        T: crate::unpack::PairUnpack,
        const R: usize,
        const C: usize,
        const S: bool,
    >(
        k: usize,
        src: *const u8,
        a: &QAct<'_>,
        out: Out,
        j: usize,
    ) {
        let p16 = crate::act::pad16(k);
        let nb = k / T::BS;
        let np = T::BS / 64;
        let rb = nb * T::TS;
        let mut o: [crate::unpack::Pairs; R] = std::array::from_fn(|_| crate::unpack::Pairs::new());
        let mut acc = [[_mm256_setzero_ps(); C]; R];
        let mut accm = [[_mm_setzero_ps(); C]; R];
        for b in 0..nb {
            for (r, o) in o.iter_mut().enumerate() {
                let blk = src.add(r * rb + b * T::TS);
                prefetch_block(blk.wrapping_add(PF_BYTES), T::TS);
                T::unpack(blk, o);
            }
            for i in 0..np {
                let p = b * np + i;
                for c in 0..C {
                    let xp = a.xp.as_ptr().add(c * k + 64 * p);
                    let x = [
                        _mm256_loadu_si256(xp as *const __m256i),
                        _mm256_loadu_si256(xp.add(32) as *const __m256i),
                    ];
                    let dx = _mm256_loadu_ps(a.d8.as_ptr().add(c * k / 8 + 8 * p));
                    let xs = if S {
                        _mm_setzero_ps()
                    } else {
                        _mm_loadu_ps(a.s16.as_ptr().add(c * p16 + 4 * p))
                    };
                    for r in 0..R {
                        let w = o[r].v[i];
                        let wa = if S {
                            [_mm256_sign_epi8(w[0], w[0]), _mm256_sign_epi8(w[1], w[1])]
                        } else {
                            w
                        };
                        let f = _mm256_cvtepi32_ps(pair_isum::<S>(w, wa, x));
                        acc[r][c] = _mm256_fmadd_ps(f, _mm256_mul_ps(o[r].sc[i], dx), acc[r][c]);
                        if !S {
                            let mn = _mm_loadu_ps(o[r].mn.as_ptr().add(4 * i));
                            accm[r][c] = _mm_fmadd_ps(mn, xs, accm[r][c]);
                        }
                    }
                }
            }
        }
        for r in 0..R {
            for c in 0..C {
                let mut v = hsum(acc[r][c]);
                if !S {
                    v += hsum4(accm[r][c]);
                }
                out.put(c, j + r, v);
            }
        }
    }

    /// SAFETY (caller): AVX2+FMA present; buffer lengths checked by `super::q8_chunk`.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn q8_chunk<const S: bool, const P: bool>(
        k: usize,
        dec: &Decoded,
        rows: usize,
        a: &QAct<'_>,
        out: Out,
        j0: usize,
    ) {
        const R: usize = TILE_R;
        const C: usize = TILE_C;
        let mut c0 = 0;
        while c0 < a.n {
            let cc = (a.n - c0).min(C);
            let mut r0 = 0;
            while r0 < rows {
                let rr = (rows - r0).min(R);
                if rr == R && cc == C {
                    q8_tile::<R, C, S, P>(k, dec, r0, a, c0, out, j0);
                } else if rr == R {
                    for c in c0..c0 + cc {
                        q8_tile::<R, 1, S, P>(k, dec, r0, a, c, out, j0);
                    }
                } else {
                    for r in r0..r0 + rr {
                        for c in c0..c0 + cc {
                            q8_tile::<1, 1, S, P>(k, dec, r, a, c, out, j0);
                        }
                    }
                }
                r0 += rr;
            }
            c0 += cc;
        }
    }

    #[inline(always)]
    unsafe fn f32_tile<const R: usize, const C: usize>(
        k: usize,
        w: *const f32,
        x: *const f32,
        out: Out,
        r0: usize,
        c0: usize,
        j0: usize,
    ) {
        let k8 = k / 8 * 8;
        let mut acc = [[_mm256_setzero_ps(); C]; R];
        let mut i = 0;
        while i < k8 {
            let xv: [__m256; C] = std::array::from_fn(|c| _mm256_loadu_ps(x.add((c0 + c) * k + i)));
            for r in 0..R {
                let wv = _mm256_loadu_ps(w.add((r0 + r) * k + i));
                for c in 0..C {
                    acc[r][c] = _mm256_fmadd_ps(wv, xv[c], acc[r][c]);
                }
            }
            i += 8;
        }
        for r in 0..R {
            for c in 0..C {
                let mut tail = 0f32;
                for i in k8..k {
                    tail = (*w.add((r0 + r) * k + i)).mul_add(*x.add((c0 + c) * k + i), tail);
                }
                out.put(c0 + c, j0 + r0 + r, hsum(acc[r][c]) + tail);
            }
        }
    }

    /// SAFETY (caller): AVX2+FMA present; `w` holds `rows * k`, `x` holds `n * k` values.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn f32_chunk(
        k: usize,
        w: &[f32],
        rows: usize,
        x: &[f32],
        n: usize,
        out: Out,
        j0: usize,
    ) {
        let (w, x) = (w.as_ptr(), x.as_ptr());
        let mut c0 = 0;
        while c0 < n {
            let cc = (n - c0).min(2);
            let mut r0 = 0;
            while r0 < rows {
                let rr = (rows - r0).min(4);
                match (rr, cc) {
                    (4, 2) => f32_tile::<4, 2>(k, w, x, out, r0, c0, j0),
                    (4, 1) => f32_tile::<4, 1>(k, w, x, out, r0, c0, j0),
                    (_, 2) => {
                        for r in r0..r0 + rr {
                            f32_tile::<1, 2>(k, w, x, out, r, c0, j0)
                        }
                    }
                    _ => {
                        for r in r0..r0 + rr {
                            f32_tile::<1, 1>(k, w, x, out, r, c0, j0)
                        }
                    }
                }
                r0 += rr;
            }
            c0 += cc;
        }
    }
}
