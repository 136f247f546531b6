//! Blocks to f32, bit-identical to ggml's `to_float` (the generic C in ggml-quants.c).
//!
//! Bit-identity depends on doing the same f32 operations in the same order as ggml: integer
//! quants are converted to f32 and multiplied (never fused into an FMA), sub-block scales are
//! formed as `d * sc` before multiplying the quant, and `- m` / `+ m` are separate roundings.
//! Rust never contracts `a * b + c`, so writing the expressions as ggml does is enough.
//!
//! Each kernel walks whole blocks as fixed-size arrays so that the compiler sees constant trip
//! counts, drops bounds checks and vectorizes the inner loops. The K-quant kernels work in two
//! passes: bit-unpacking into a byte array (16 lanes per SSE2 operation), then int-to-float and
//! scaling (4 lanes); fused into one loop everything would run 4 lanes wide.

use crate::blocks::{self, fp16_to_f32, le_f16, le_u16, KVALUES_IQ4NL, QK32, QK_K};
use crate::error::{check_lengths, expected_bytes};
use crate::{GgmlType, QuantError};
use half::{f16, slice::HalfFloatSliceExt};

/// Dequantizes `dst.len()` values of type `ty` from `src`, which must hold exactly
/// `dst.len() / ty.block_size()` blocks.
pub fn dequantize_row(ty: GgmlType, src: &[u8], dst: &mut [f32]) -> Result<(), QuantError> {
    let kernel = kernel(ty)?;
    check_lengths(ty, dst.len(), src.len())?;
    kernel(src, dst);
    Ok(())
}

/// Dequantizes `n_elements` values of type `ty` from `src` into a new vector.
pub fn dequantize(ty: GgmlType, src: &[u8], n_elements: usize) -> Result<Vec<f32>, QuantError> {
    let kernel = kernel(ty)?;
    check_lengths(ty, n_elements, src.len())?;
    let mut out = vec![0.0f32; n_elements];
    kernel(src, &mut out);
    Ok(out)
}

/// As [`dequantize_row`], split over `n_threads` scoped threads at block boundaries. Results are
/// identical to the single-threaded call (every block is decoded independently).
pub fn dequantize_row_parallel(
    ty: GgmlType,
    src: &[u8],
    dst: &mut [f32],
    n_threads: usize,
) -> Result<(), QuantError> {
    let kernel = kernel(ty)?;
    check_lengths(ty, dst.len(), src.len())?;
    let n_blocks = dst.len() / ty.block_size();
    let n_threads = n_threads.clamp(1, n_blocks.max(1));
    if n_threads == 1 {
        kernel(src, dst);
        return Ok(());
    }
    let blocks_per_thread = n_blocks.div_ceil(n_threads);
    let src_chunk = blocks_per_thread * ty.type_size();
    let dst_chunk = blocks_per_thread * ty.block_size();
    std::thread::scope(|s| {
        for (src, dst) in src.chunks(src_chunk).zip(dst.chunks_mut(dst_chunk)) {
            s.spawn(move || kernel(src, dst));
        }
    });
    Ok(())
}

/// Bytes that `n_elements` values of `ty` occupy (an error if they are not whole blocks).
pub fn quantized_size(ty: GgmlType, n_elements: usize) -> Result<usize, QuantError> {
    expected_bytes(ty, n_elements)
}

type Kernel = fn(&[u8], &mut [f32]);

fn kernel(ty: GgmlType) -> Result<Kernel, QuantError> {
    use GgmlType::*;
    Ok(match ty {
        F32 => f32_row,
        F16 => f16_row,
        Bf16 => bf16_row,
        Q4_0 => q4_0,
        Q4_1 => q4_1,
        Q5_0 => q5_0,
        Q5_1 => q5_1,
        Q8_0 => q8_0,
        Q2K => q2_k,
        Q3K => q3_k,
        Q4K => q4_k,
        Q5K => q5_k,
        Q6K => q6_k,
        Q8K => q8_k,
        Iq4Nl => iq4_nl,
        Iq4Xs => iq4_xs,
        _ => {
            return Err(QuantError::Unsupported {
                ty,
                op: "dequantization",
            })
        }
    })
}

/// Runs `block` on each `B`-byte block of `src` and its `N` outputs. Lengths were checked by the
/// caller; the conversions to arrays cannot fail on `chunks_exact` pieces, and `filter_map`
/// keeps this free of panicking paths anyway.
///
/// The block functions are `#[inline(never)]` on purpose: once their short inner loops are
/// fully unrolled, LLVM would otherwise vectorize this loop *across* blocks, gathering bytes
/// from 4 blocks at a time, which runs 2-3x slower than vectorizing within a block.
#[inline(always)]
fn each_block<const B: usize, const N: usize>(
    src: &[u8],
    dst: &mut [f32],
    block: fn(&[u8; B], &mut [f32; N]),
) {
    let pairs = src
        .chunks_exact(B)
        .zip(dst.chunks_exact_mut(N))
        .filter_map(|(s, d)| Some((s.try_into().ok()?, d.try_into().ok()?)));
    for (b, y) in pairs {
        block(b, y);
    }
}

/// `KVALUES_IQ4NL` as f32 (ggml converts the i8 level to float before multiplying: exact).
const KV_F32: [f32; 16] = {
    let mut t = [0.0f32; 16];
    let mut i = 0;
    while i < 16 {
        t[i] = KVALUES_IQ4NL[i] as f32;
        i += 1;
    }
    t
};

fn f32_row(src: &[u8], dst: &mut [f32]) {
    for (y, b) in dst.iter_mut().zip(src.chunks_exact(4)) {
        *y = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    }
}

/// F16 in runs of 64, through `half`'s slice conversion (F16C instructions where the CPU has
/// them, detected at run time). Every f16 converts to f32 exactly, and the unit test
/// `f16_rows_convert_every_bit_pattern_like_ggml` checks all 65536 patterns (NaNs included)
/// against ggml's scalar conversion.
fn f16_row(src: &[u8], dst: &mut [f32]) {
    each_block(src, dst, f16_run::<128, 64>);
    let done = (src.len() / 128 * 64).min(dst.len());
    let (src, dst) = (&src[2 * done..], &mut dst[done..]);
    for (y, b) in dst.iter_mut().zip(src.chunks_exact(2)) {
        *y = fp16_to_f32(u16::from_le_bytes([b[0], b[1]]));
    }
}

#[inline(never)]
fn f16_run<const B: usize, const N: usize>(b: &[u8; B], y: &mut [f32; N]) {
    let mut h = [f16::ZERO; N];
    for (h, b) in h.iter_mut().zip(b.chunks_exact(2)) {
        *h = f16::from_bits(u16::from_le_bytes([b[0], b[1]]));
    }
    h.convert_to_f32_slice(y);
}

fn bf16_row(src: &[u8], dst: &mut [f32]) {
    for (y, b) in dst.iter_mut().zip(src.chunks_exact(2)) {
        *y = blocks::bf16_to_f32(u16::from_le_bytes([b[0], b[1]]));
    }
}

fn q4_0(src: &[u8], dst: &mut [f32]) {
    each_block(src, dst, q4_0_block);
}

#[inline(never)]
fn q4_0_block(b: &[u8; blocks::q4_0::SIZE], y: &mut [f32; QK32]) {
    use blocks::q4_0::*;
    let d = le_f16(b, D);
    let qs = &b[QS..QS + 16];
    let (lo, hi) = y.split_at_mut(16);
    for j in 0..16 {
        lo[j] = ((qs[j] & 0xF) as i32 - 8) as f32 * d;
        hi[j] = ((qs[j] >> 4) as i32 - 8) as f32 * d;
    }
}

fn q4_1(src: &[u8], dst: &mut [f32]) {
    each_block(src, dst, q4_1_block);
}

#[inline(never)]
fn q4_1_block(b: &[u8; blocks::q4_1::SIZE], y: &mut [f32; QK32]) {
    use blocks::q4_1::*;
    let d = le_f16(b, D);
    let m = le_f16(b, M);
    let qs = &b[QS..QS + 16];
    let (lo, hi) = y.split_at_mut(16);
    for j in 0..16 {
        lo[j] = (qs[j] & 0xF) as f32 * d + m;
        hi[j] = (qs[j] >> 4) as f32 * d + m;
    }
}

/// The fifth bits (as 0 or 16) of elements `j` and `j + 16` of a Q5 block. Written as mask
/// tests on bytes rather than `qh >> j` because SSE2 has no per-lane shifts.
#[inline(always)]
fn q5_high_bits(qh: &[u8; 4], j: usize) -> (u8, u8) {
    let bit = 1u8 << (j % 8);
    let h0 = if qh[j / 8] & bit != 0 { 16 } else { 0 };
    let h1 = if qh[2 + j / 8] & bit != 0 { 16 } else { 0 };
    (h0, h1)
}

fn q5_0(src: &[u8], dst: &mut [f32]) {
    each_block(src, dst, q5_0_block);
}

#[inline(never)]
fn q5_0_block(b: &[u8; blocks::q5_0::SIZE], y: &mut [f32; QK32]) {
    use blocks::q5_0::*;
    let d = le_f16(b, D);
    let qh = [b[QH], b[QH + 1], b[QH + 2], b[QH + 3]];
    let qs = &b[QS..QS + 16];
    let (lo, hi) = y.split_at_mut(16);
    for j in 0..16 {
        let (h0, h1) = q5_high_bits(&qh, j);
        lo[j] = (((qs[j] & 0xF) | h0) as i32 - 16) as f32 * d;
        hi[j] = (((qs[j] >> 4) | h1) as i32 - 16) as f32 * d;
    }
}

fn q5_1(src: &[u8], dst: &mut [f32]) {
    each_block(src, dst, q5_1_block);
}

#[inline(never)]
fn q5_1_block(b: &[u8; blocks::q5_1::SIZE], y: &mut [f32; QK32]) {
    use blocks::q5_1::*;
    let d = le_f16(b, D);
    let m = le_f16(b, M);
    let qh = [b[QH], b[QH + 1], b[QH + 2], b[QH + 3]];
    let qs = &b[QS..QS + 16];
    let (lo, hi) = y.split_at_mut(16);
    for j in 0..16 {
        let (h0, h1) = q5_high_bits(&qh, j);
        lo[j] = ((qs[j] & 0xF) | h0) as f32 * d + m;
        hi[j] = ((qs[j] >> 4) | h1) as f32 * d + m;
    }
}

fn q8_0(src: &[u8], dst: &mut [f32]) {
    each_block(src, dst, q8_0_block);
}

#[inline(never)]
fn q8_0_block(b: &[u8; blocks::q8_0::SIZE], y: &mut [f32; QK32]) {
    use blocks::q8_0::*;
    let d = le_f16(b, D);
    let qs = &b[QS..QS + 32];
    for j in 0..32 {
        y[j] = qs[j] as i8 as f32 * d;
    }
}

fn q2_k(src: &[u8], dst: &mut [f32]) {
    each_block(src, dst, q2_k_block);
}

#[inline(never)]
fn q2_k_block(b: &[u8; blocks::q2_k::SIZE], y: &mut [f32; QK_K]) {
    use blocks::q2_k::*;
    let d = le_f16(b, D);
    let min = le_f16(b, DMIN);
    // Value 128*n + 32*j + l is bits 2*j of quant byte 32*n + l.
    let mut q = [0i8; QK_K];
    for (n, qn) in q.chunks_exact_mut(128).enumerate() {
        let qs = &b[QS + 32 * n..QS + 32 * n + 32];
        for (j, qj) in qn.chunks_exact_mut(32).enumerate() {
            for (o, &byte) in qj.iter_mut().zip(qs) {
                *o = ((byte >> (2 * j)) & 3) as i8;
            }
        }
    }
    // Pairs of 16-value groups per step: with 16-long inner loops LLVM would fully unroll them
    // and then vectorize across groups with byte gathers.
    let scales = &b[SCALES..SCALES + 16];
    for ((out, q), sc) in y
        .chunks_exact_mut(32)
        .zip(q.chunks_exact(32))
        .zip(scales.chunks_exact(2))
    {
        let (dl0, ml0) = (d * (sc[0] & 0xF) as f32, min * (sc[0] >> 4) as f32);
        let (dl1, ml1) = (d * (sc[1] & 0xF) as f32, min * (sc[1] >> 4) as f32);
        for (l, (o, &q)) in out.iter_mut().zip(q).enumerate() {
            let (dl, ml) = if l < 16 { (dl0, ml0) } else { (dl1, ml1) };
            *o = dl * q as f32 - ml;
        }
    }
}

fn q3_k(src: &[u8], dst: &mut [f32]) {
    each_block(src, dst, q3_k_block);
}

#[inline(never)]
fn q3_k_block(b: &[u8; blocks::q3_k::SIZE], y: &mut [f32; QK_K]) {
    use blocks::q3_k::*;
    let d_all = le_f16(b, D);
    let mut packed = [0u8; 12];
    packed.copy_from_slice(&b[SCALES..SCALES + 12]);
    let scales = blocks::q3_k_scales(&packed);
    // As Q2_K, value 128*n + 32*j + l has its low bits at 2*j of quant byte 32*n + l; its third
    // bit is bit 4*n + j of hmask byte l, and a clear bit means "minus 4".
    let hm = &b[HMASK..HMASK + 32];
    let mut q = [0i8; QK_K];
    for (n, qn) in q.chunks_exact_mut(128).enumerate() {
        let qs = &b[QS + 32 * n..QS + 32 * n + 32];
        for (j, qj) in qn.chunks_exact_mut(32).enumerate() {
            let m = 1u8 << (4 * n + j);
            for ((o, &byte), &h) in qj.iter_mut().zip(qs).zip(hm) {
                let low = ((byte >> (2 * j)) & 3) as i8;
                *o = low - if h & m != 0 { 0 } else { 4 };
            }
        }
    }
    for ((out, q), &sc) in y.chunks_exact_mut(16).zip(q.chunks_exact(16)).zip(&scales) {
        let dl = d_all * sc as f32;
        for (o, &q) in out.iter_mut().zip(q) {
            *o = dl * q as f32;
        }
    }
}

fn q4_k(src: &[u8], dst: &mut [f32]) {
    each_block(src, dst, q4_k_block);
}

#[inline(never)]
fn q4_k_block(b: &[u8; blocks::q4_k::SIZE], y: &mut [f32; QK_K]) {
    use blocks::q4_k::*;
    let d = le_f16(b, D);
    let min = le_f16(b, DMIN);
    let mut sm = [0u8; 12];
    sm.copy_from_slice(&b[SCALES..SCALES + 12]);
    for j in 0..4 {
        let q = &b[QS + 32 * j..QS + 32 * j + 32];
        let (sc, m) = blocks::get_scale_min_k4(2 * j, &sm);
        let (d1, m1) = (d * sc as f32, min * m as f32);
        let (sc, m) = blocks::get_scale_min_k4(2 * j + 1, &sm);
        let (d2, m2) = (d * sc as f32, min * m as f32);
        let out = &mut y[64 * j..64 * j + 64];
        let (lo, hi) = out.split_at_mut(32);
        for l in 0..32 {
            lo[l] = d1 * (q[l] & 0xF) as f32 - m1;
            hi[l] = d2 * (q[l] >> 4) as f32 - m2;
        }
    }
}

fn q5_k(src: &[u8], dst: &mut [f32]) {
    each_block(src, dst, q5_k_block);
}

#[inline(never)]
fn q5_k_block(b: &[u8; blocks::q5_k::SIZE], y: &mut [f32; QK_K]) {
    use blocks::q5_k::*;
    let d = le_f16(b, D);
    let min = le_f16(b, DMIN);
    let mut sm = [0u8; 12];
    sm.copy_from_slice(&b[SCALES..SCALES + 12]);
    // Values 64*j + l and 64*j + 32 + l are the low and high nibbles of quant byte 32*j + l,
    // with fifth bits 2*j and 2*j + 1 of qh byte l.
    let qh = &b[QH..QH + 32];
    let mut q = [0u8; QK_K];
    for (j, qj) in q.chunks_exact_mut(64).enumerate() {
        let ql = &b[QS + 32 * j..QS + 32 * j + 32];
        let (u1, u2) = (1u8 << (2 * j), 2u8 << (2 * j));
        let (lo, hi) = qj.split_at_mut(32);
        for l in 0..32 {
            lo[l] = (ql[l] & 0xF) + if qh[l] & u1 != 0 { 16 } else { 0 };
            hi[l] = (ql[l] >> 4) + if qh[l] & u2 != 0 { 16 } else { 0 };
        }
    }
    for (is, (out, q)) in y.chunks_exact_mut(32).zip(q.chunks_exact(32)).enumerate() {
        let (sc, m) = blocks::get_scale_min_k4(is, &sm);
        let (dl, ml) = (d * sc as f32, min * m as f32);
        for (o, &q) in out.iter_mut().zip(q) {
            *o = dl * q as f32 - ml;
        }
    }
}

fn q6_k(src: &[u8], dst: &mut [f32]) {
    each_block(src, dst, q6_k_block);
}

#[inline(never)]
fn q6_k_block(b: &[u8; blocks::q6_k::SIZE], y: &mut [f32; QK_K]) {
    use blocks::q6_k::*;
    let d = le_f16(b, D);
    // In each half n, value 128*n + 32*k + l takes the low (k = 0, 1) or high (k = 2, 3) nibble
    // of ql byte 64*n + 32*(k % 2) + l and bits 2*k of qh byte 32*n + l.
    let mut q = [0i8; QK_K];
    for (n, qn) in q.chunks_exact_mut(128).enumerate() {
        let ql = &b[QL + 64 * n..QL + 64 * n + 64];
        let qh = &b[QH + 32 * n..QH + 32 * n + 32];
        let (q01, q23) = qn.split_at_mut(64);
        let (q0, q1) = q01.split_at_mut(32);
        let (q2, q3) = q23.split_at_mut(32);
        for l in 0..32 {
            let h = qh[l];
            q0[l] = ((ql[l] & 0xF) | ((h & 3) << 4)) as i8 - 32;
            q1[l] = ((ql[l + 32] & 0xF) | (((h >> 2) & 3) << 4)) as i8 - 32;
            q2[l] = ((ql[l] >> 4) | (((h >> 4) & 3) << 4)) as i8 - 32;
            q3[l] = ((ql[l + 32] >> 4) | (((h >> 6) & 3) << 4)) as i8 - 32;
        }
    }
    let sc = &b[SCALES..SCALES + 16];
    for ((out, q), &s) in y.chunks_exact_mut(16).zip(q.chunks_exact(16)).zip(sc) {
        // ggml evaluates `d * sc * q` left to right: the scale product rounds first.
        let dl = d * s as i8 as f32;
        for (o, &q) in out.iter_mut().zip(q) {
            *o = dl * q as f32;
        }
    }
}

fn q8_k(src: &[u8], dst: &mut [f32]) {
    each_block(src, dst, q8_k_block);
}

#[inline(never)]
fn q8_k_block(b: &[u8; blocks::q8_k::SIZE], y: &mut [f32; QK_K]) {
    use blocks::q8_k::*;
    let d = f32::from_le_bytes([b[D], b[D + 1], b[D + 2], b[D + 3]]);
    let qs = &b[QS..QS + QK_K];
    for j in 0..QK_K {
        y[j] = d * qs[j] as i8 as f32;
    }
}

fn iq4_nl(src: &[u8], dst: &mut [f32]) {
    each_block(src, dst, iq4_nl_block);
}

#[inline(never)]
fn iq4_nl_block(b: &[u8; blocks::iq4_nl::SIZE], y: &mut [f32; QK32]) {
    use blocks::iq4_nl::*;
    let d = le_f16(b, D);
    let qs = &b[QS..QS + 16];
    let (lo, hi) = y.split_at_mut(16);
    for j in 0..16 {
        lo[j] = d * KV_F32[(qs[j] & 0xF) as usize];
        hi[j] = d * KV_F32[(qs[j] >> 4) as usize];
    }
}

fn iq4_xs(src: &[u8], dst: &mut [f32]) {
    each_block(src, dst, iq4_xs_block);
}

#[inline(never)]
fn iq4_xs_block(b: &[u8; blocks::iq4_xs::SIZE], y: &mut [f32; QK_K]) {
    use blocks::iq4_xs::*;
    let d = le_f16(b, D);
    let scales_h = le_u16(b, SCALES_H);
    let scales_l = &b[SCALES_L..SCALES_L + 4];
    for ib in 0..8 {
        let ls = ((scales_l[ib / 2] >> (4 * (ib % 2))) & 0xF) as i32
            | ((((scales_h >> (2 * ib)) & 3) as i32) << 4);
        let dl = d * (ls - 32) as f32;
        let qs = &b[QS + 16 * ib..QS + 16 * ib + 16];
        let out = &mut y[32 * ib..32 * ib + 32];
        let (lo, hi) = out.split_at_mut(16);
        for j in 0..16 {
            lo[j] = dl * KV_F32[(qs[j] & 0xF) as usize];
            hi[j] = dl * KV_F32[(qs[j] >> 4) as usize];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_unsupported_types() {
        let mut out = [0.0f32; 256];
        let err = dequantize_row(GgmlType::Iq2Xxs, &[0u8; 66], &mut out).unwrap_err();
        assert!(matches!(err, QuantError::Unsupported { .. }));
        assert!(err.to_string().contains("IQ2_XXS"), "{err}");
        assert!(dequantize(GgmlType::Q8_1, &[0u8; 36], 32).is_err());
    }

    #[test]
    fn rejects_partial_blocks_and_wrong_byte_counts() {
        let mut out = [0.0f32; 33];
        let err = dequantize_row(GgmlType::Q4_0, &[0u8; 18], &mut out).unwrap_err();
        assert!(matches!(err, QuantError::PartialBlock { .. }), "{err}");
        assert!(err.to_string().contains("Q4_0") && err.to_string().contains("33"));

        let mut out = [0.0f32; 64];
        let err = dequantize_row(GgmlType::Q4_0, &[0u8; 35], &mut out).unwrap_err();
        let msg = err.to_string();
        assert!(matches!(
            err,
            QuantError::ByteLength {
                expected: 36,
                actual: 35,
                ..
            }
        ));
        assert!(
            msg.contains("Q4_0") && msg.contains("36") && msg.contains("35"),
            "{msg}"
        );

        assert!(dequantize(GgmlType::Q6K, &[0u8; 210], 255).is_err());
        assert!(dequantize(GgmlType::Q6K, &[0u8; 211], 256).is_err());
        assert!(dequantize(GgmlType::F32, &[0u8; 7], 2).is_err());
        assert!(dequantize(GgmlType::Q4K, &[], 0).unwrap().is_empty());
    }

    #[test]
    fn f16_rows_convert_every_bit_pattern_like_ggml() {
        // 65536 values take the 64-wide path; the extra 37 take the scalar tail.
        let mut bits: Vec<u16> = (0..=u16::MAX).collect();
        bits.extend(0xFBF0..0xFC15);
        let src: Vec<u8> = bits.iter().flat_map(|h| h.to_le_bytes()).collect();
        let out = dequantize(GgmlType::F16, &src, bits.len()).unwrap();
        for (&h, y) in bits.iter().zip(&out) {
            assert_eq!(y.to_bits(), fp16_to_f32(h).to_bits(), "{h:#06x}");
        }
    }

    #[test]
    fn arbitrary_bytes_decode_without_panicking() {
        let bytes: Vec<u8> = (0..4 * 292u32)
            .map(|i| i.wrapping_mul(0x9E37_79B9).rotate_left(11) as u8)
            .collect();
        for &ty in crate::ALL_TYPES.iter().filter(|t| t.is_supported()) {
            let n_blocks = bytes.len() / ty.type_size();
            let n = n_blocks * ty.block_size();
            let src = &bytes[..n_blocks * ty.type_size()];
            let out = dequantize(ty, src, n).unwrap();
            assert_eq!(out.len(), n, "{ty}");
        }
    }

    #[test]
    fn parallel_matches_serial() {
        // Arbitrary bytes are valid Q4_K blocks (any f16 scale, any nibbles).
        let n_blocks = 37;
        let src: Vec<u8> = (0..n_blocks * 144)
            .map(|i| (i as u32).wrapping_mul(2654435761).rotate_left(7) as u8)
            .collect();
        let serial = dequantize(GgmlType::Q4K, &src, n_blocks * 256).unwrap();
        for threads in [1, 2, 3, 8, 100] {
            let mut par = vec![0.0f32; n_blocks * 256];
            dequantize_row_parallel(GgmlType::Q4K, &src, &mut par, threads).unwrap();
            let a: Vec<u32> = serial.iter().map(|v| v.to_bits()).collect();
            let b: Vec<u32> = par.iter().map(|v| v.to_bits()).collect();
            assert_eq!(a, b, "{threads} threads");
        }
    }
}
