//! Q4_0, Q4_1, Q5_0, Q5_1 and Q8_0: one f16 scale (and min) per 32 values, as ggml's
//! `quantize_row_q*_ref`.
//!
//! ggml converts `x * id + 8.5` to `int8_t` by truncation; Rust's `as i8` truncates too and only
//! differs (saturating) outside the range these formulas can reach for finite input.

use super::{blocks_mut, put_f16};
use crate::blocks::{self, QK32};

/// The value of largest magnitude (first one on ties), ggml's `max` with `fabsf`.
#[inline(always)]
fn signed_absmax(x: &[f32; QK32]) -> f32 {
    let mut amax = 0.0f32;
    let mut max = 0.0f32;
    for &v in x {
        if amax < v.abs() {
            amax = v.abs();
            max = v;
        }
    }
    max
}

#[inline(always)]
fn min_max(x: &[f32; QK32]) -> (f32, f32) {
    let mut min = f32::MAX;
    let mut max = -f32::MAX;
    for &v in x {
        if v < min {
            min = v;
        }
        if v > max {
            max = v;
        }
    }
    (min, max)
}

#[inline(always)]
fn inverse(d: f32) -> f32 {
    if d != 0.0 {
        1.0 / d
    } else {
        0.0
    }
}

pub(super) fn q4_0(src: &[f32], dst: &mut [u8]) {
    use blocks::q4_0::*;
    for (x, y) in blocks_mut::<QK32, SIZE>(src, dst) {
        let d = signed_absmax(x) / -8.0;
        let id = inverse(d);
        put_f16(y, D, d);
        for j in 0..16 {
            let x0 = x[j] * id;
            let x1 = x[j + 16] * id;
            let q0 = ((x0 + 8.5) as i8).min(15) as u8;
            let q1 = ((x1 + 8.5) as i8).min(15) as u8;
            y[QS + j] = q0 | (q1 << 4);
        }
    }
}

pub(super) fn q4_1(src: &[f32], dst: &mut [u8]) {
    use blocks::q4_1::*;
    for (x, y) in blocks_mut::<QK32, SIZE>(src, dst) {
        let (min, max) = min_max(x);
        let d = (max - min) / 15.0;
        let id = inverse(d);
        put_f16(y, D, d);
        put_f16(y, M, min);
        for j in 0..16 {
            let x0 = (x[j] - min) * id;
            let x1 = (x[j + 16] - min) * id;
            let q0 = ((x0 + 0.5) as i8).min(15) as u8;
            let q1 = ((x1 + 0.5) as i8).min(15) as u8;
            y[QS + j] = q0 | (q1 << 4);
        }
    }
}

pub(super) fn q5_0(src: &[f32], dst: &mut [u8]) {
    use blocks::q5_0::*;
    for (x, y) in blocks_mut::<QK32, SIZE>(src, dst) {
        let d = signed_absmax(x) / -16.0;
        let id = inverse(d);
        put_f16(y, D, d);
        let mut qh = 0u32;
        for j in 0..16 {
            let x0 = x[j] * id;
            let x1 = x[j + 16] * id;
            let q0 = ((x0 + 16.5) as i8).min(31) as u8;
            let q1 = ((x1 + 16.5) as i8).min(31) as u8;
            y[QS + j] = (q0 & 0xF) | ((q1 & 0xF) << 4);
            qh |= (((q0 & 0x10) >> 4) as u32) << j;
            qh |= (((q1 & 0x10) >> 4) as u32) << (j + 16);
        }
        y[QH..QH + 4].copy_from_slice(&qh.to_le_bytes());
    }
}

pub(super) fn q5_1(src: &[f32], dst: &mut [u8]) {
    use blocks::q5_1::*;
    for (x, y) in blocks_mut::<QK32, SIZE>(src, dst) {
        let (min, max) = min_max(x);
        let d = (max - min) / 31.0;
        let id = inverse(d);
        put_f16(y, D, d);
        put_f16(y, M, min);
        let mut qh = 0u32;
        for j in 0..16 {
            let x0 = (x[j] - min) * id;
            let x1 = (x[j + 16] - min) * id;
            // ggml clamps nothing here: (max - min) / 31 keeps these within 0..=31.
            let q0 = (x0 + 0.5) as u8;
            let q1 = (x1 + 0.5) as u8;
            y[QS + j] = (q0 & 0xF) | ((q1 & 0xF) << 4);
            qh |= (((q0 & 0x10) >> 4) as u32) << j;
            qh |= (((q1 & 0x10) >> 4) as u32) << (j + 16);
        }
        y[QH..QH + 4].copy_from_slice(&qh.to_le_bytes());
    }
}

pub(super) fn q8_0(src: &[f32], dst: &mut [u8]) {
    use blocks::q8_0::*;
    for (x, y) in blocks_mut::<QK32, SIZE>(src, dst) {
        let mut amax = 0.0f32;
        for &v in x {
            // ggml's MAX(amax, fabsf(v)): keeps amax unless v is strictly larger.
            let a = v.abs();
            amax = if amax > a { amax } else { a };
        }
        let d = amax / 127.0;
        let id = inverse(d);
        put_f16(y, D, d);
        for j in 0..QK32 {
            // roundf: half away from zero, as f32::round.
            y[QS + j] = (x[j] * id).round() as i8 as u8;
        }
    }
}
