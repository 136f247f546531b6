//! K-quants (256-value super-blocks with quantized sub-block scales), as ggml's
//! `quantize_row_q{2,3,4,5,6}_K_ref`, and the Q8_K activation format.
//!
//! Each quantizer first searches per-sub-block scales in f32, then quantizes those scales
//! against one f16 super-block scale, and finally requantizes the values against the scales as
//! they will be decoded, so the stored levels fit the rounded scales.

use super::search::{
    make_q3_quants_rmse, make_qkx2_quants, make_qx_quants_rmse1, nearest_int, Qkx2, GROUP_MAX_EPS,
};
use super::{blocks_mut, put_f16};
use crate::blocks::{self, get_scale_min_k4, le_f16, QK_K};

/// Packs 256 2-bit levels as Q2_K/Q3_K store them: byte `l` of each 32-byte group holds
/// elements `l`, `l+32`, `l+64`, `l+96` of its 128-value half, lowest bits first.
#[inline(always)]
fn pack_2bit(levels: &[u8; QK_K], qs: &mut [u8]) {
    for (half, out) in qs.chunks_exact_mut(32).take(2).enumerate() {
        let l = &levels[128 * half..128 * half + 128];
        for (i, o) in out.iter_mut().enumerate() {
            *o = l[i] | (l[i + 32] << 2) | (l[i + 64] << 4) | (l[i + 96] << 6);
        }
    }
}

pub(super) fn q2_k(src: &[f32], dst: &mut [u8]) {
    use blocks::q2_k::*;
    const Q4SCALE: f32 = 15.0;
    let params = Qkx2 {
        nmax: 3,
        rmin: -0.5,
        rdelta: 0.1,
        nstep: 15,
        use_mad: true,
    };
    for (x, y) in blocks_mut::<QK_K, SIZE>(src, dst) {
        let mut levels = [0u8; QK_K];
        let mut aux = [0u8; 16];
        let mut weights = [0.0f32; 16];
        let mut scales = [0.0f32; 16];
        let mut mins = [0.0f32; 16];
        let mut max_scale = 0.0f32;
        let mut max_min = 0.0f32;
        for j in 0..16 {
            let xs = &x[16 * j..16 * j + 16];
            for (w, v) in weights.iter_mut().zip(xs) {
                *w = v.abs();
            }
            let (scale, min) = make_qkx2_quants(
                &params,
                xs,
                &weights,
                &mut levels[16 * j..16 * j + 16],
                &mut aux,
            );
            scales[j] = scale;
            mins[j] = min;
            if scale > max_scale {
                max_scale = scale;
            }
            if min > max_min {
                max_min = min;
            }
        }

        let sc = &mut y[SCALES..SCALES + 16];
        if max_scale > 0.0 {
            let iscale = Q4SCALE / max_scale;
            for (s, &v) in sc.iter_mut().zip(&scales) {
                *s = nearest_int(iscale * v) as u8;
            }
            put_f16(y, D, max_scale / Q4SCALE);
        } else {
            sc.fill(0);
            put_f16(y, D, 0.0);
        }
        let sc = &mut y[SCALES..SCALES + 16];
        if max_min > 0.0 {
            let iscale = Q4SCALE / max_min;
            for (s, &v) in sc.iter_mut().zip(&mins) {
                *s |= (nearest_int(iscale * v) << 4) as u8;
            }
            put_f16(y, DMIN, max_min / Q4SCALE);
        } else {
            put_f16(y, DMIN, 0.0);
        }

        let (d_all, dmin_all) = (le_f16(y, D), le_f16(y, DMIN));
        for j in 0..16 {
            let s = y[SCALES + j];
            let d = d_all * (s & 0xF) as f32;
            if d == 0.0 {
                continue;
            }
            let dm = dmin_all * (s >> 4) as f32;
            for i in 16 * j..16 * j + 16 {
                levels[i] = nearest_int((x[i] + dm) / d).clamp(0, 3) as u8;
            }
        }
        pack_2bit(&levels, &mut y[QS..QS + 64]);
    }
}

pub(super) fn q3_k(src: &[f32], dst: &mut [u8]) {
    use blocks::q3_k::*;
    for (x, y) in blocks_mut::<QK_K, SIZE>(src, dst) {
        let mut levels = [0i8; QK_K];
        let mut scales = [0.0f32; 16];
        let mut max_scale = 0.0f32;
        let mut amax = 0.0f32;
        for j in 0..16 {
            scales[j] =
                make_q3_quants_rmse(4, &x[16 * j..16 * j + 16], &mut levels[16 * j..16 * j + 16]);
            let scale = scales[j].abs();
            if scale > amax {
                amax = scale;
                max_scale = scales[j];
            }
        }

        let mut packed = [0u8; 12];
        if max_scale != 0.0 {
            let iscale = -32.0 / max_scale;
            for (j, &s) in scales.iter().enumerate() {
                // ggml stores nearest_int's result in an int8_t before clamping.
                let l = ((nearest_int(iscale * s) as i8).clamp(-32, 31) + 32) as u8;
                if j < 8 {
                    packed[j] = l & 0xF;
                } else {
                    packed[j - 8] |= (l & 0xF) << 4;
                }
                packed[j % 4 + 8] |= (l >> 4) << (2 * (j / 4));
            }
            put_f16(y, D, 1.0 / iscale);
        } else {
            put_f16(y, D, 0.0);
        }
        y[SCALES..SCALES + 12].copy_from_slice(&packed);

        let d_all = le_f16(y, D);
        for (j, &sc) in blocks::q3_k_scales(&packed).iter().enumerate() {
            let d = d_all * sc as f32;
            if d == 0.0 {
                continue;
            }
            for i in 16 * j..16 * j + 16 {
                levels[i] = (nearest_int(x[i] / d).clamp(-4, 3) + 4) as i8;
            }
        }

        // The third bit of element j goes to bit j / 32 of hmask byte j % 32.
        let mut low = [0u8; QK_K];
        let hmask = &mut y[HMASK..HMASK + 32];
        hmask.fill(0);
        for (j, (&l, lo)) in levels.iter().zip(low.iter_mut()).enumerate() {
            let mut l = l as u8;
            if l > 3 {
                hmask[j % 32] |= 1 << (j / 32);
                l -= 4;
            }
            *lo = l;
        }
        pack_2bit(&low, &mut y[QS..QS + 64]);
    }
}

/// Stores the 8 six-bit scales and mins of a Q4_K/Q5_K block in ggml's 12-byte layout (the
/// inverse of `get_scale_min_k4`).
#[inline(always)]
fn pack_scales_mins_k4(ls: &[u8; 8], lm: &[u8; 8], out: &mut [u8]) {
    for j in 0..8 {
        if j < 4 {
            out[j] = ls[j];
            out[j + 4] = lm[j];
        } else {
            out[j + 4] = (ls[j] & 0xF) | ((lm[j] & 0xF) << 4);
            out[j - 4] |= (ls[j] >> 4) << 6;
            out[j] |= (lm[j] >> 4) << 6;
        }
    }
}

/// The shared body of Q4_K and Q5_K: levels 0..=nmax per 32 values, 6-bit scales and mins.
/// Returns the final levels; the caller packs them.
fn q45_k_levels(
    x: &[f32; QK_K],
    y: &mut [u8],
    params: &Qkx2,
    d_at: usize,
    dmin_at: usize,
    scales_at: usize,
) -> [u8; QK_K] {
    let mut levels = [0u8; QK_K];
    let mut aux = [0u8; 32];
    let mut weights = [0.0f32; 32];
    let mut scales = [0.0f32; 8];
    let mut mins = [0.0f32; 8];
    let mut max_scale = 0.0f32;
    let mut max_min = 0.0f32;
    for j in 0..8 {
        let xs = &x[32 * j..32 * j + 32];
        let mut sum_x2 = 0.0f32;
        for &v in xs {
            sum_x2 += v * v;
        }
        let av_x = (sum_x2 / 32.0).sqrt();
        for (w, v) in weights.iter_mut().zip(xs) {
            *w = av_x + v.abs();
        }
        let (scale, min) = make_qkx2_quants(
            params,
            xs,
            &weights,
            &mut levels[32 * j..32 * j + 32],
            &mut aux,
        );
        scales[j] = scale;
        mins[j] = min;
        if scale > max_scale {
            max_scale = scale;
        }
        if min > max_min {
            max_min = min;
        }
    }

    let inv_scale = if max_scale > 0.0 {
        63.0 / max_scale
    } else {
        0.0
    };
    let inv_min = if max_min > 0.0 { 63.0 / max_min } else { 0.0 };
    let mut ls = [0u8; 8];
    let mut lm = [0u8; 8];
    for j in 0..8 {
        // ggml narrows to uint8_t first, then clamps.
        ls[j] = (nearest_int(inv_scale * scales[j]) as u8).min(63);
        lm[j] = (nearest_int(inv_min * mins[j]) as u8).min(63);
    }
    let mut packed = [0u8; 12];
    pack_scales_mins_k4(&ls, &lm, &mut packed);
    y[scales_at..scales_at + 12].copy_from_slice(&packed);
    put_f16(y, d_at, max_scale / 63.0);
    put_f16(y, dmin_at, max_min / 63.0);

    let (d_all, dmin_all) = (le_f16(y, d_at), le_f16(y, dmin_at));
    for j in 0..8 {
        let (sc, m) = get_scale_min_k4(j, &packed);
        let d = d_all * sc as f32;
        if d == 0.0 {
            continue;
        }
        let dm = dmin_all * m as f32;
        for i in 32 * j..32 * j + 32 {
            levels[i] = nearest_int((x[i] + dm) / d).clamp(0, params.nmax) as u8;
        }
    }
    levels
}

pub(super) fn q4_k(src: &[f32], dst: &mut [u8]) {
    use blocks::q4_k::*;
    let params = Qkx2 {
        nmax: 15,
        rmin: -1.0,
        rdelta: 0.1,
        nstep: 20,
        use_mad: false,
    };
    for (x, y) in blocks_mut::<QK_K, SIZE>(src, dst) {
        let levels = q45_k_levels(x, y, &params, D, DMIN, SCALES);
        for (c, q) in y[QS..QS + 128].chunks_exact_mut(32).enumerate() {
            let l = &levels[64 * c..64 * c + 64];
            for (i, o) in q.iter_mut().enumerate() {
                *o = l[i] | (l[i + 32] << 4);
            }
        }
    }
}

pub(super) fn q5_k(src: &[f32], dst: &mut [u8]) {
    use blocks::q5_k::*;
    let params = Qkx2 {
        nmax: 31,
        rmin: -0.5,
        rdelta: 0.1,
        nstep: 15,
        use_mad: false,
    };
    for (x, y) in blocks_mut::<QK_K, SIZE>(src, dst) {
        let levels = q45_k_levels(x, y, &params, D, DMIN, SCALES);
        let mut qh = [0u8; 32];
        for (c, ql) in y[QS..QS + 128].chunks_exact_mut(32).enumerate() {
            let (m1, m2) = (1u8 << (2 * c), 2u8 << (2 * c));
            let l = &levels[64 * c..64 * c + 64];
            for (i, o) in ql.iter_mut().enumerate() {
                let mut l1 = l[i];
                if l1 > 15 {
                    l1 -= 16;
                    qh[i] |= m1;
                }
                let mut l2 = l[i + 32];
                if l2 > 15 {
                    l2 -= 16;
                    qh[i] |= m2;
                }
                *o = l1 | (l2 << 4);
            }
        }
        y[QH..QH + 32].copy_from_slice(&qh);
    }
}

pub(super) fn q6_k(src: &[f32], dst: &mut [u8]) {
    use blocks::q6_k::*;
    for (x, y) in blocks_mut::<QK_K, SIZE>(src, dst) {
        let mut levels = [0i8; QK_K];
        let mut scales = [0.0f32; 16];
        let mut max_scale = 0.0f32;
        let mut max_abs_scale = 0.0f32;
        for ib in 0..16 {
            let scale = make_qx_quants_rmse1(
                32,
                &x[16 * ib..16 * ib + 16],
                &mut levels[16 * ib..16 * ib + 16],
            );
            scales[ib] = scale;
            if scale.abs() > max_abs_scale {
                max_abs_scale = scale.abs();
                max_scale = scale;
            }
        }

        if max_abs_scale < GROUP_MAX_EPS {
            y.fill(0);
            continue;
        }

        let iscale = -128.0 / max_scale;
        put_f16(y, D, 1.0 / iscale);
        for (ib, &s) in scales.iter().enumerate() {
            y[SCALES + ib] = nearest_int(iscale * s).min(127) as i8 as u8;
        }

        let d_all = le_f16(y, D);
        for j in 0..16 {
            let d = d_all * y[SCALES + j] as i8 as f32;
            if d == 0.0 {
                continue;
            }
            for i in 16 * j..16 * j + 16 {
                levels[i] = (nearest_int(x[i] / d).clamp(-32, 31) + 32) as i8;
            }
        }

        for half in 0..2 {
            let l = &levels[128 * half..128 * half + 128];
            for i in 0..32 {
                let (q1, q2, q3, q4) = (
                    l[i] as u8,
                    l[i + 32] as u8,
                    l[i + 64] as u8,
                    l[i + 96] as u8,
                );
                y[QL + 64 * half + i] = (q1 & 0xF) | ((q3 & 0xF) << 4);
                y[QL + 64 * half + i + 32] = (q2 & 0xF) | ((q4 & 0xF) << 4);
                y[QH + 32 * half + i] =
                    (q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) | ((q4 >> 4) << 6);
            }
        }
    }
}

pub(super) fn q8_k(src: &[f32], dst: &mut [u8]) {
    use blocks::q8_k::*;
    for (x, y) in blocks_mut::<QK_K, SIZE>(src, dst) {
        let mut max = 0.0f32;
        let mut amax = 0.0f32;
        for &v in x {
            if v.abs() > amax {
                amax = v.abs();
                max = v;
            }
        }
        if amax == 0.0 {
            y.fill(0);
            continue;
        }
        // -127 rather than -128 keeps every quant within ±127 (ggml: "for IQ2_XXS").
        let iscale = -127.0 / max;
        let mut qs = [0i8; QK_K];
        for (q, &v) in qs.iter_mut().zip(x) {
            *q = nearest_int(iscale * v).min(127) as i8;
        }
        for (q, o) in qs.iter().zip(&mut y[QS..QS + QK_K]) {
            *o = *q as u8;
        }
        for (j, group) in qs.chunks_exact(16).enumerate() {
            let sum: i32 = group.iter().map(|&q| q as i32).sum();
            y[BSUMS + 2 * j..BSUMS + 2 * j + 2].copy_from_slice(&(sum as i16).to_le_bytes());
        }
        y[D..D + 4].copy_from_slice(&(1.0 / iscale).to_le_bytes());
    }
}
