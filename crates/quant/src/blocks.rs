//! Block layouts of ggml's quantized types, as byte offsets, plus the scalar conversions
//! (f16, bf16) that every block format is built on.
//!
//! Blocks are read straight out of little-endian byte buffers (a GGUF mmap is not aligned for
//! `#[repr(C)]` structs with `u16` fields), so each layout is described by the offsets of its
//! fields. Each `mod` below mirrors one `block_*` struct of ggml-common.h; the `SIZE` of every
//! one equals `GgmlType::type_size`.

use half::{bf16, f16};

/// Elements per block of the "legacy" formats (Q4_0 … Q8_0, IQ4_NL).
pub const QK32: usize = 32;
/// Elements per super-block of the K-quants and IQ4_XS.
pub const QK_K: usize = 256;

/// The 16 signed levels of IQ4_NL / IQ4_XS (`kvalues_iq4nl`): a non-uniform grid that follows
/// the distribution of trained weights more closely than 16 evenly spaced levels.
pub const KVALUES_IQ4NL: [i8; 16] = [
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
];

/// `block_q4_0`: `d: f16`, then 16 bytes of nibbles. Element `j < 16` is the low nibble of
/// byte `j`, element `j + 16` its high nibble; value = (q - 8) * d.
pub mod q4_0 {
    pub const D: usize = 0;
    pub const QS: usize = 2;
    pub const SIZE: usize = 18;
}

/// `block_q4_1`: `d: f16`, `m: f16`, 16 bytes of nibbles; value = q * d + m.
pub mod q4_1 {
    pub const D: usize = 0;
    pub const M: usize = 2;
    pub const QS: usize = 4;
    pub const SIZE: usize = 20;
}

/// `block_q5_0`: `d: f16`, `qh: u32` (bit j = 5th bit of element j), 16 bytes of nibbles;
/// value = (q - 16) * d.
pub mod q5_0 {
    pub const D: usize = 0;
    pub const QH: usize = 2;
    pub const QS: usize = 6;
    pub const SIZE: usize = 22;
}

/// `block_q5_1`: `d: f16`, `m: f16`, `qh: u32`, 16 bytes of nibbles; value = q * d + m.
pub mod q5_1 {
    pub const D: usize = 0;
    pub const M: usize = 2;
    pub const QH: usize = 4;
    pub const QS: usize = 8;
    pub const SIZE: usize = 24;
}

/// `block_q8_0`: `d: f16`, 32 × i8; value = q * d.
pub mod q8_0 {
    pub const D: usize = 0;
    pub const QS: usize = 2;
    pub const SIZE: usize = 34;
}

/// `block_q2_K`: 16 bytes of (scale | min << 4), 64 bytes of 2-bit quants, `d: f16`,
/// `dmin: f16`.
pub mod q2_k {
    pub const SCALES: usize = 0;
    pub const QS: usize = 16;
    pub const D: usize = 80;
    pub const DMIN: usize = 82;
    pub const SIZE: usize = 84;
}

/// `block_q3_K`: 32 bytes of high bits, 64 bytes of low 2 bits, 12 bytes of 6-bit scales,
/// `d: f16`.
pub mod q3_k {
    pub const HMASK: usize = 0;
    pub const QS: usize = 32;
    pub const SCALES: usize = 96;
    pub const D: usize = 108;
    pub const SIZE: usize = 110;
}

/// `block_q4_K`: `d: f16`, `dmin: f16`, 12 bytes of 6-bit scales and mins, 128 bytes of
/// nibbles.
pub mod q4_k {
    pub const D: usize = 0;
    pub const DMIN: usize = 2;
    pub const SCALES: usize = 4;
    pub const QS: usize = 16;
    pub const SIZE: usize = 144;
}

/// `block_q5_K`: as Q4_K plus 32 bytes of 5th bits before the nibbles.
pub mod q5_k {
    pub const D: usize = 0;
    pub const DMIN: usize = 2;
    pub const SCALES: usize = 4;
    pub const QH: usize = 16;
    pub const QS: usize = 48;
    pub const SIZE: usize = 176;
}

/// `block_q6_K`: 128 bytes of low nibbles, 64 bytes of high 2 bits, 16 × i8 scales, `d: f16`.
pub mod q6_k {
    pub const QL: usize = 0;
    pub const QH: usize = 128;
    pub const SCALES: usize = 192;
    pub const D: usize = 208;
    pub const SIZE: usize = 210;
}

/// `block_q8_K`: `d: f32`, 256 × i8, 16 × i16 sums of each group of 16 quants.
pub mod q8_k {
    pub const D: usize = 0;
    pub const QS: usize = 4;
    pub const BSUMS: usize = 260;
    pub const SIZE: usize = 292;
}

/// `block_iq4_nl`: `d: f16`, 16 bytes of nibbles indexing `KVALUES_IQ4NL`.
pub mod iq4_nl {
    pub const D: usize = 0;
    pub const QS: usize = 2;
    pub const SIZE: usize = 18;
}

/// `block_iq4_xs`: `d: f16`, `scales_h: u16` (2 high bits per sub-block), 4 bytes of low
/// nibbles of the 6-bit sub-block scales, 128 bytes of nibbles indexing `KVALUES_IQ4NL`.
pub mod iq4_xs {
    pub const D: usize = 0;
    pub const SCALES_H: usize = 2;
    pub const SCALES_L: usize = 4;
    pub const QS: usize = 8;
    pub const SIZE: usize = 136;
}

/// f16 bits to f32, exactly as ggml's `ggml_compute_fp16_to_fp32` (the one its to_float
/// functions use), NaN payloads included. Branch-free integer work so per-block scale decoding
/// stays cheap without depending on F16C being detected.
#[inline(always)]
pub fn fp16_to_f32(h: u16) -> f32 {
    let w = (h as u32) << 16;
    let sign = w & 0x8000_0000;
    let two_w = w.wrapping_add(w);
    // Re-bias the exponent (15 -> 127 would be +112; ggml adds 224 and scales by 2^-112 so that
    // Inf/NaN land on exponent 255).
    let normalized = f32::from_bits((two_w >> 4) + (0xE0 << 23)) * f32::from_bits(0x0780_0000);
    // Subnormal halves: place the mantissa under a 0.5 exponent and subtract 0.5.
    let denormalized = f32::from_bits((two_w >> 17) | (126 << 23)) - 0.5;
    let bits = if two_w < (1 << 27) {
        denormalized.to_bits()
    } else {
        normalized.to_bits()
    };
    f32::from_bits(sign | bits)
}

/// f32 to f16 bits, round to nearest even (ggml's `GGML_FP32_TO_FP16`, and IEEE).
#[inline]
pub fn f32_to_fp16(x: f32) -> u16 {
    f16::from_f32(x).to_bits()
}

/// bf16 bits to f32 (a shift; exact).
#[inline(always)]
pub fn bf16_to_f32(h: u16) -> f32 {
    f32::from_bits((h as u32) << 16)
}

/// f32 to bf16 bits, round to nearest even, NaN made quiet (ggml's `GGML_FP32_TO_BF16`).
#[inline]
pub fn f32_to_bf16(x: f32) -> u16 {
    bf16::from_f32(x).to_bits()
}

/// The little-endian u16 at `b[at..at + 2]`.
#[inline(always)]
pub(crate) fn le_u16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

/// The little-endian f16 at `b[at..at + 2]`, as f32.
#[inline(always)]
pub(crate) fn le_f16(b: &[u8], at: usize) -> f32 {
    fp16_to_f32(le_u16(b, at))
}

/// ggml's `get_scale_min_k4`: the 6-bit scale and min of sub-block `j` (0..8) from the 12
/// packed bytes of a Q4_K / Q5_K block.
#[inline(always)]
pub fn get_scale_min_k4(j: usize, q: &[u8; 12]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    }
}

/// The 16 signed 6-bit scales of a Q3_K block, unpacked from its 12 bytes, with the +32 bias
/// already removed.
#[inline(always)]
pub fn q3_k_scales(s: &[u8; 12]) -> [i8; 16] {
    let mut out = [0i8; 16];
    for (j, o) in out.iter_mut().enumerate() {
        let low = if j < 8 { s[j] & 0xF } else { s[j - 8] >> 4 };
        let high = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
        *o = ((low | (high << 4)) as i8).wrapping_sub(32);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::GgmlType;

    #[test]
    fn layouts_match_type_sizes() {
        use GgmlType::*;
        for (ty, size) in [
            (Q4_0, q4_0::SIZE),
            (Q4_1, q4_1::SIZE),
            (Q5_0, q5_0::SIZE),
            (Q5_1, q5_1::SIZE),
            (Q8_0, q8_0::SIZE),
            (Q2K, q2_k::SIZE),
            (Q3K, q3_k::SIZE),
            (Q4K, q4_k::SIZE),
            (Q5K, q5_k::SIZE),
            (Q6K, q6_k::SIZE),
            (Q8K, q8_k::SIZE),
            (Iq4Nl, iq4_nl::SIZE),
            (Iq4Xs, iq4_xs::SIZE),
        ] {
            assert_eq!(ty.type_size(), size, "{ty}");
        }
    }

    #[test]
    fn fp16_to_f32_matches_half_for_every_value() {
        for h in 0..=u16::MAX {
            let ours = fp16_to_f32(h);
            let theirs = f16::from_bits(h).to_f32();
            if theirs.is_nan() {
                assert!(ours.is_nan(), "{h:#06x}");
            } else {
                assert_eq!(ours.to_bits(), theirs.to_bits(), "{h:#06x}");
            }
        }
    }
}
