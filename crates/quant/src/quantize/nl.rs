//! IQ4_NL and IQ4_XS: 4-bit indices into the non-linear `KVALUES_IQ4NL` grid, as ggml's
//! `quantize_iq4_nl` / `quantize_iq4_xs` without an importance matrix (weights x², 7 extra
//! scale tries on each side of the max-based scale).

use super::search::{best_index_int8, nearest_int, GROUP_MAX_EPS};
use super::{blocks_mut, put_f16, put_u16};
use crate::blocks::{self, KVALUES_IQ4NL, QK32, QK_K};

const NTRY: i32 = 7;

/// Best scale for one 32-value sub-block (ggml's inner loop of `quantize_row_iq4_nl_impl`), or
/// `None` for an all-zero one. Writes the levels of the first, max-based scale into `levels`;
/// callers requantize against the scale they store.
fn search_block(xb: &[f32], levels: &mut [u8; QK32]) -> Option<f32> {
    let vals = &KVALUES_IQ4NL;
    let mut amax = 0.0f32;
    let mut max = 0.0f32;
    for &v in xb {
        if v.abs() > amax {
            amax = v.abs();
            max = v;
        }
    }
    if amax < GROUP_MAX_EPS {
        return None;
    }
    let mut d = -max / vals[0] as f32;
    let mut id = 1.0 / d;
    let mut sumqx = 0.0f32;
    let mut sumq2 = 0.0f32;
    for (l_out, &v) in levels.iter_mut().zip(xb) {
        let l = best_index_int8(vals, id * v);
        *l_out = l as u8;
        let q = vals[l] as f32;
        let w = v * v;
        sumqx += w * q * v;
        sumq2 += w * q * q;
    }
    d = if sumq2 > 0.0 { sumqx / sumq2 } else { 0.0 };
    let mut best = d * sumqx;
    for itry in -NTRY..=NTRY {
        id = (itry + vals[0] as i32) as f32 / max;
        sumqx = 0.0;
        sumq2 = 0.0;
        for &v in xb {
            let q = vals[best_index_int8(vals, id * v)] as f32;
            let w = v * v;
            sumqx += w * q * v;
            sumq2 += w * q * q;
        }
        if sumq2 > 0.0 && sumqx * sumqx > best * sumq2 {
            d = sumqx / sumq2;
            best = d * sumqx;
        }
    }
    Some(d)
}

#[inline(always)]
fn pack_nibbles(levels: &[u8], qs: &mut [u8]) {
    for (i, q) in qs.chunks_exact_mut(16).enumerate() {
        let l = &levels[32 * i..32 * i + 32];
        for (j, o) in q.iter_mut().enumerate() {
            *o = l[j] | (l[j + 16] << 4);
        }
    }
}

pub(super) fn iq4_nl(src: &[f32], dst: &mut [u8]) {
    use blocks::iq4_nl::*;
    for (x, y) in blocks_mut::<QK32, SIZE>(src, dst) {
        let mut levels = [0u8; QK32];
        let scale = search_block(x, &mut levels).unwrap_or(0.0);
        put_f16(y, D, scale);
        // One sub-block per block: requantize against the unrounded scale, as ggml does.
        let id = if scale != 0.0 { 1.0 / scale } else { 0.0 };
        for (l, &v) in levels.iter_mut().zip(x) {
            *l = best_index_int8(&KVALUES_IQ4NL, id * v) as u8;
        }
        pack_nibbles(&levels, &mut y[QS..QS + 16]);
    }
}

pub(super) fn iq4_xs(src: &[f32], dst: &mut [u8]) {
    use blocks::iq4_xs::*;
    for (x, y) in blocks_mut::<QK_K, SIZE>(src, dst) {
        let mut levels = [0u8; QK_K];
        let mut scales = [0.0f32; 8];
        let mut max_scale = 0.0f32;
        let mut amax_scale = 0.0f32;
        for (ib, s) in scales.iter_mut().enumerate() {
            let mut sub = [0u8; QK32];
            if let Some(d) = search_block(&x[32 * ib..32 * ib + 32], &mut sub) {
                *s = d;
                if d.abs() > amax_scale {
                    amax_scale = d.abs();
                    max_scale = d;
                }
            }
        }

        // 6-bit signed sub-block scales against one f16 scale. The levels are chosen with the
        // unrounded super-block scale `d`, exactly as ggml does.
        let d = -max_scale / 32.0;
        put_f16(y, D, d);
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        let mut scales_h = 0u16;
        let mut scales_l = [0u8; 4];
        for (ib, &s) in scales.iter().enumerate() {
            let l = nearest_int(id * s).clamp(-32, 31);
            let dl = d * l as f32;
            let idl = if dl != 0.0 { 1.0 / dl } else { 0.0 };
            for i in 32 * ib..32 * ib + 32 {
                levels[i] = best_index_int8(&KVALUES_IQ4NL, idl * x[i]) as u8;
            }
            let l = (l + 32) as u8;
            scales_l[ib / 2] |= (l & 0xF) << (4 * (ib % 2));
            scales_h |= ((l >> 4) as u16) << (2 * ib);
        }
        put_u16(y, SCALES_H, scales_h);
        y[SCALES_L..SCALES_L + 4].copy_from_slice(&scales_l);
        pack_nibbles(&levels, &mut y[QS..QS + 128]);
    }
}
