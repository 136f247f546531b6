//! AVX2 unpacking of weight blocks straight into registers, for the hot types (Q4_0, Q4_1,
//! Q5_0, Q5_1, Q8_0, IQ4_NL, Q4_K, Q6_K).
//!
//! Each unpacker yields, per 32 values, the same bytes `u` and scale vector `sc` that
//! `decode::decode_row` writes (and the same `mn`), so the fused small-batch kernel and the
//! decoded-rows kernel compute bitwise the same results. `decode` uses these unpackers too for
//! these types, and its test checks them against ggml's dequantization.

#![cfg(target_arch = "x86_64")]

use std::arch::x86_64::*;

use lockstep_quant::blocks::KVALUES_IQ4NL;

/// Unpacked vectors of one block (up to 8 x 32 values).
pub struct Unpacked {
    pub u: [__m256i; 8],
    pub sc: [__m256; 8],
    /// Offsets per 16 values (family U only).
    pub mn: [f32; 16],
}

/// One weight type's unpacker.
pub trait Unpack {
    /// Values and bytes per block.
    const BS: usize;
    const TS: usize;
    /// Unpacks the block at `src`; returns the number of 32-value vectors (`BS / 32`).
    ///
    /// SAFETY (caller): AVX2, FMA and F16C present; `src` valid for `TS` bytes.
    unsafe fn unpack(src: *const u8, o: &mut Unpacked) -> usize;
}

/// Runs `$body` with `$t` bound to the unpacker type of `$ty` (types without one run `$none`).
macro_rules! with_unpacker {
    ($ty:expr, $t:ident => $body:expr, _ => $none:expr) => {{
        use lockstep_quant::GgmlType as G;
        use $crate::unpack as u;
        match $ty {
            G::Q4_0 => {
                type $t = u::Q4_0T;
                $body
            }
            G::Q4_1 => {
                type $t = u::Q4_1T;
                $body
            }
            G::Q5_0 => {
                type $t = u::Q5_0T;
                $body
            }
            G::Q5_1 => {
                type $t = u::Q5_1T;
                $body
            }
            G::Q8_0 => {
                type $t = u::Q8_0T;
                $body
            }
            G::Iq4Nl => {
                type $t = u::Iq4NlT;
                $body
            }
            G::Q4K => {
                type $t = u::Q4KT;
                $body
            }
            G::Q6K => {
                type $t = u::Q6KT;
                $body
            }
            _ => $none,
        }
    }};
}
pub(crate) use with_unpacker;

macro_rules! unpacker {
    ($name:ident, $f:ident, $bs:expr, $ts:expr) => {
        pub struct $name;
        impl Unpack for $name {
            const BS: usize = $bs;
            const TS: usize = $ts;
            #[inline(always)]
            unsafe fn unpack(src: *const u8, o: &mut Unpacked) -> usize {
                $f(src, o)
            }
        }
    };
}

unpacker!(Q4_0T, q4_0, 32, 18);
unpacker!(Q4_1T, q4_1, 32, 20);
unpacker!(Q5_0T, q5_0, 32, 22);
unpacker!(Q5_1T, q5_1, 32, 24);
unpacker!(Q8_0T, q8_0, 32, 34);
unpacker!(Iq4NlT, iq4_nl, 32, 18);
unpacker!(Q4KT, q4_k, 256, 144);
unpacker!(Q6KT, q6_k, 256, 210);

#[inline(always)]
unsafe fn f16(src: *const u8) -> f32 {
    let h = u16::from_le_bytes([*src, *src.add(1)]);
    _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(i32::from(h))))
}

/// Low nibbles of 16 bytes as values 0-15, high nibbles as values 16-31.
#[inline(always)]
unsafe fn nibbles16(src: *const u8) -> __m256i {
    let q = _mm_loadu_si128(src as *const __m128i);
    let m = _mm_set1_epi8(0x0F);
    let lo = _mm_and_si128(q, m);
    let hi = _mm_and_si128(_mm_srli_epi16::<4>(q), m);
    _mm256_set_m128i(hi, lo)
}

/// 0x10 in every byte whose bit is set in `qh` (bit j -> byte j).
#[inline(always)]
unsafe fn high_bits(qh: u32) -> __m256i {
    let shuf = _mm256_set_epi64x(
        0x0303_0303_0303_0303,
        0x0202_0202_0202_0202,
        0x0101_0101_0101_0101,
        0,
    );
    let bytes = _mm256_shuffle_epi8(_mm256_set1_epi32(qh as i32), shuf);
    let bit_mask = _mm256_set1_epi64x(0x7fbf_dfef_f7fb_fdfe);
    let set = _mm256_cmpeq_epi8(_mm256_or_si256(bytes, bit_mask), _mm256_set1_epi64x(-1));
    _mm256_and_si256(set, _mm256_set1_epi8(0x10))
}

#[inline(always)]
unsafe fn q4_0(src: *const u8, o: &mut Unpacked) -> usize {
    let d = f16(src);
    o.u[0] = nibbles16(src.add(2));
    o.sc[0] = _mm256_set1_ps(d);
    o.mn[0] = -8.0 * d;
    o.mn[1] = -8.0 * d;
    1
}

#[inline(always)]
unsafe fn q4_1(src: *const u8, o: &mut Unpacked) -> usize {
    // d and m are adjacent halves: one conversion for both.
    let dm = _mm_cvtph_ps(_mm_cvtsi32_si128(i32::from_le_bytes([
        *src,
        *src.add(1),
        *src.add(2),
        *src.add(3),
    ])));
    let m = _mm_cvtss_f32(_mm_movehdup_ps(dm));
    o.u[0] = nibbles16(src.add(4));
    o.sc[0] = _mm256_broadcastss_ps(dm);
    o.mn[0] = m;
    o.mn[1] = m;
    1
}

#[inline(always)]
unsafe fn q5_0(src: *const u8, o: &mut Unpacked) -> usize {
    let d = f16(src);
    let qh = u32::from_le_bytes([*src.add(2), *src.add(3), *src.add(4), *src.add(5)]);
    o.u[0] = _mm256_or_si256(nibbles16(src.add(6)), high_bits(qh));
    o.sc[0] = _mm256_set1_ps(d);
    o.mn[0] = -16.0 * d;
    o.mn[1] = -16.0 * d;
    1
}

#[inline(always)]
unsafe fn q5_1(src: *const u8, o: &mut Unpacked) -> usize {
    let m = f16(src.add(2));
    let qh = u32::from_le_bytes([*src.add(4), *src.add(5), *src.add(6), *src.add(7)]);
    o.u[0] = _mm256_or_si256(nibbles16(src.add(8)), high_bits(qh));
    o.sc[0] = _mm256_set1_ps(f16(src));
    o.mn[0] = m;
    o.mn[1] = m;
    1
}

#[inline(always)]
unsafe fn q8_0(src: *const u8, o: &mut Unpacked) -> usize {
    o.u[0] = _mm256_loadu_si256(src.add(2) as *const __m256i);
    o.sc[0] = _mm256_set1_ps(f16(src));
    1
}

#[inline(always)]
unsafe fn iq4_nl(src: *const u8, o: &mut Unpacked) -> usize {
    let table =
        _mm256_broadcastsi128_si256(_mm_loadu_si128(KVALUES_IQ4NL.as_ptr() as *const __m128i));
    o.u[0] = _mm256_shuffle_epi8(table, nibbles16(src.add(2)));
    o.sc[0] = _mm256_set1_ps(f16(src));
    1
}

/// The eight 6-bit scales and eight 6-bit mins of a Q4_K/Q5_K block, as bytes `[sc0..sc7]`
/// and `[m0..m7]`: the packing of `get_scale_min_k4`, undone four at a time with word
/// operations (bytes 0-3 hold the low six bits of scales 0-3, bytes 4-7 those of mins 0-3, the
/// top two bits of each making up the high bits of scales/mins 4-7, whose low nibbles are
/// bytes 8-11).
#[inline(always)]
unsafe fn k4_scales_mins(p: *const u8) -> (u64, u64) {
    let w0 = u32::from_le_bytes([*p, *p.add(1), *p.add(2), *p.add(3)]);
    let w1 = u32::from_le_bytes([*p.add(4), *p.add(5), *p.add(6), *p.add(7)]);
    let w2 = u32::from_le_bytes([*p.add(8), *p.add(9), *p.add(10), *p.add(11)]);
    let sc_lo = w0 & 0x3f3f_3f3f;
    let mn_lo = w1 & 0x3f3f_3f3f;
    let sc_hi = (w2 & 0x0f0f_0f0f) | (((w0 >> 6) & 0x0303_0303) << 4);
    let mn_hi = ((w2 >> 4) & 0x0f0f_0f0f) | (((w1 >> 6) & 0x0303_0303) << 4);
    (
        u64::from(sc_lo) | (u64::from(sc_hi) << 32),
        u64::from(mn_lo) | (u64::from(mn_hi) << 32),
    )
}

/// Eight unsigned bytes times `d`, as f32 (`d * b as f32`, exactly the scalar products).
#[inline(always)]
unsafe fn scaled_u8x8(bytes: u64, d: f32) -> __m256 {
    let v = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128(bytes as i64));
    _mm256_mul_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(v))
}

/// `v[i]` in every lane.
#[inline(always)]
unsafe fn lane(v: __m256, i: i32) -> __m256 {
    _mm256_permutevar8x32_ps(v, _mm256_set1_epi32(i))
}

/// Lanes 0-3 `v[i]`, lanes 4-7 `v[i + 1]`.
#[inline(always)]
unsafe fn lane_pair(v: __m256, i: i32) -> __m256 {
    _mm256_permutevar8x32_ps(v, _mm256_setr_epi32(i, i, i, i, i + 1, i + 1, i + 1, i + 1))
}

/// Each of `v`'s eight values twice, in order, into `dst[0..16]`.
#[inline(always)]
unsafe fn store_twice(v: __m256, dst: *mut f32) {
    let lo = _mm256_permutevar8x32_ps(v, _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3));
    let hi = _mm256_permutevar8x32_ps(v, _mm256_setr_epi32(4, 4, 5, 5, 6, 6, 7, 7));
    _mm256_storeu_ps(dst, lo);
    _mm256_storeu_ps(dst.add(8), hi);
}

#[inline(always)]
unsafe fn q4_k(src: *const u8, o: &mut Unpacked) -> usize {
    use lockstep_quant::blocks::q4_k::*;
    let d = f16(src.add(D));
    let dmin = f16(src.add(DMIN));
    let m4 = _mm256_set1_epi8(0x0F);
    for j in 0..4 {
        let q = _mm256_loadu_si256(src.add(QS + 32 * j) as *const __m256i);
        o.u[2 * j] = _mm256_and_si256(q, m4);
        o.u[2 * j + 1] = _mm256_and_si256(_mm256_srli_epi16::<4>(q), m4);
    }
    let (sc, mn) = k4_scales_mins(src.add(SCALES));
    let scv = scaled_u8x8(sc, d);
    // -(dmin * m): a sign flip is exact, so this equals the scalar negation.
    let mnv = _mm256_xor_ps(scaled_u8x8(mn, dmin), _mm256_set1_ps(-0.0));
    for is in 0..8 {
        o.sc[is] = lane(scv, is as i32);
    }
    store_twice(mnv, o.mn.as_mut_ptr());
    8
}

#[inline(always)]
unsafe fn q6_k(src: *const u8, o: &mut Unpacked) -> usize {
    use lockstep_quant::blocks::q6_k::*;
    let d = f16(src.add(D));
    let m4 = _mm256_set1_epi8(0x0F);
    let m3 = _mm256_set1_epi8(0x03);
    for n in 0..2 {
        let ql0 = _mm256_loadu_si256(src.add(QL + 64 * n) as *const __m256i);
        let ql1 = _mm256_loadu_si256(src.add(QL + 64 * n + 32) as *const __m256i);
        let qh = _mm256_loadu_si256(src.add(QH + 32 * n) as *const __m256i);
        let h0 = _mm256_slli_epi16::<4>(_mm256_and_si256(qh, m3));
        let h1 = _mm256_slli_epi16::<4>(_mm256_and_si256(_mm256_srli_epi16::<2>(qh), m3));
        let h2 = _mm256_slli_epi16::<4>(_mm256_and_si256(_mm256_srli_epi16::<4>(qh), m3));
        let h3 = _mm256_slli_epi16::<4>(_mm256_and_si256(_mm256_srli_epi16::<6>(qh), m3));
        o.u[4 * n] = _mm256_or_si256(_mm256_and_si256(ql0, m4), h0);
        o.u[4 * n + 1] = _mm256_or_si256(_mm256_and_si256(ql1, m4), h1);
        o.u[4 * n + 2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16::<4>(ql0), m4), h2);
        o.u[4 * n + 3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16::<4>(ql1), m4), h3);
    }
    // d * (scale as i8) as f32 for the 16 scales, and mn = -32 * that: the scalar products.
    let sv = _mm_loadu_si128(src.add(SCALES) as *const __m128i);
    let dv = _mm256_set1_ps(d);
    let dl0 = _mm256_mul_ps(dv, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(sv)));
    let dl1 = _mm256_mul_ps(
        dv,
        _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128::<8>(sv))),
    );
    let m32 = _mm256_set1_ps(-32.0);
    _mm256_storeu_ps(o.mn.as_mut_ptr(), _mm256_mul_ps(m32, dl0));
    _mm256_storeu_ps(o.mn.as_mut_ptr().add(8), _mm256_mul_ps(m32, dl1));
    for i in 0..4 {
        o.sc[i] = lane_pair(dl0, 2 * i as i32);
        o.sc[4 + i] = lane_pair(dl1, 2 * i as i32);
    }
    8
}

/// Unpacked pairs of 32-value blocks, in the pair order the pair kernels read (`dot` module
/// docs): for blocks A and B, `v[p][0]` holds A's values 0-15 then B's values 0-15 and
/// `v[p][1]` A's values 16-31 then B's values 16-31; `sc[p]` is A's scale in lanes 0-3 and B's
/// in lanes 4-7; `mn` is one offset per 16 values in natural order.
pub struct Pairs {
    pub v: [[__m256i; 2]; 4],
    pub sc: [__m256; 4],
    pub mn: [f32; 16],
}

impl Pairs {
    pub fn new() -> Pairs {
        // SAFETY: zeroed vectors are plain data; no CPU feature is needed to create them.
        unsafe {
            Pairs {
                v: [[_mm256_setzero_si256(); 2]; 4],
                sc: [_mm256_setzero_ps(); 4],
                mn: [0.0; 16],
            }
        }
    }
}

/// One weight type's pair unpacker: `BS` values (`BS / 64` pairs) from `TS` bytes, which are
/// two ggml blocks for the 32-value types and one for the 256-value ones.
pub trait PairUnpack {
    const BS: usize;
    const TS: usize;
    /// SAFETY (caller): AVX2, FMA and F16C present; `src` valid for `TS` bytes.
    unsafe fn unpack(src: *const u8, o: &mut Pairs);
}

/// Runs `$body` with `$t` bound to the pair unpacker of `$ty` (types without one run `$none`).
macro_rules! with_pair_unpacker {
    ($ty:expr, $t:ident => $body:expr, _ => $none:expr) => {{
        use lockstep_quant::GgmlType as G;
        use $crate::unpack as u;
        match $ty {
            G::Q4_0 => {
                type $t = u::P4_0;
                $body
            }
            G::Q4_1 => {
                type $t = u::P4_1;
                $body
            }
            G::Q5_0 => {
                type $t = u::P5_0;
                $body
            }
            G::Q5_1 => {
                type $t = u::P5_1;
                $body
            }
            G::Q8_0 => {
                type $t = u::P8_0;
                $body
            }
            G::Iq4Nl => {
                type $t = u::PIq4Nl;
                $body
            }
            G::Q4K => {
                type $t = u::P4K;
                $body
            }
            _ => $none,
        }
    }};
}
pub(crate) use with_pair_unpacker;

macro_rules! pair_unpacker {
    ($name:ident, $f:ident, $bs:expr, $ts:expr) => {
        pub struct $name;
        impl PairUnpack for $name {
            const BS: usize = $bs;
            const TS: usize = $ts;
            #[inline(always)]
            unsafe fn unpack(src: *const u8, o: &mut Pairs) {
                $f(src, o)
            }
        }
    };
}

pair_unpacker!(P4_0, p4_0, 64, 36);
pair_unpacker!(P4_1, p4_1, 64, 40);
pair_unpacker!(P5_0, p5_0, 64, 44);
pair_unpacker!(P5_1, p5_1, 64, 48);
pair_unpacker!(P8_0, p8_0, 64, 68);
pair_unpacker!(PIq4Nl, p_iq4_nl, 64, 36);
pair_unpacker!(P4K, p4_k, 256, 144);

/// 16 bytes at `a` in the low half, 16 bytes at `b` in the high half.
#[inline(always)]
unsafe fn load_pair(a: *const u8, b: *const u8) -> __m256i {
    _mm256_loadu2_m128i(b as *const __m128i, a as *const __m128i)
}

/// The nibbles of A's 16 bytes and B's 16 bytes: low nibbles (values 0-15 of each block) in
/// `[0]`, high nibbles (values 16-31) in `[1]`.
#[inline(always)]
unsafe fn nibble_pair(a: *const u8, b: *const u8) -> [__m256i; 2] {
    let q = load_pair(a, b);
    let m = _mm256_set1_epi8(0x0F);
    [
        _mm256_and_si256(q, m),
        _mm256_and_si256(_mm256_srli_epi16::<4>(q), m),
    ]
}

/// Two f16 values (at `a` and `b`) as f32: `[fa, fb, 0, 0]`.
#[inline(always)]
unsafe fn f16_two(a: *const u8, b: *const u8) -> __m128 {
    let ha = i32::from(u16::from_le_bytes([*a, *a.add(1)]));
    let hb = i32::from(u16::from_le_bytes([*b, *b.add(1)]));
    _mm_cvtph_ps(_mm_cvtsi32_si128(ha | (hb << 16)))
}

/// `[x0 x4, x1 x4]` from `x = [x0, x1, ..]`.
#[inline(always)]
unsafe fn spread_two(x: __m128) -> __m256 {
    _mm256_permutevar8x32_ps(
        _mm256_castps128_ps256(x),
        _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1),
    )
}

/// `[x0, x0, x1, x1]` into `dst[0..4]` (offsets per 16 values of A then B).
#[inline(always)]
unsafe fn store_two_twice(x: __m128, dst: *mut f32) {
    _mm_storeu_ps(dst, _mm_unpacklo_ps(x, x));
}

/// 0x10 in the bytes of the pair's vectors whose fifth bit is set: `qa`, `qb` are A's and B's
/// 32 high bits (bit j for value j).
#[inline(always)]
unsafe fn high_bits_pair(qa: u32, qb: u32) -> [__m256i; 2] {
    let w = _mm256_set1_epi64x((u64::from(qa) | (u64::from(qb) << 32)) as i64);
    // Lane 0 takes A's bytes (0, 1: values 0-15; 2, 3: values 16-31), lane 1 B's (4, 5; 6, 7).
    let s0 = _mm256_setr_epi64x(
        0,
        0x0101_0101_0101_0101,
        0x0404_0404_0404_0404,
        0x0505_0505_0505_0505,
    );
    let s1 = _mm256_setr_epi64x(
        0x0202_0202_0202_0202,
        0x0303_0303_0303_0303,
        0x0606_0606_0606_0606,
        0x0707_0707_0707_0707,
    );
    let bit_mask = _mm256_set1_epi64x(0x7fbf_dfef_f7fb_fdfe);
    let ones = _mm256_set1_epi64x(-1);
    let sixteen = _mm256_set1_epi8(0x10);
    let h = |s: __m256i| {
        let bytes = _mm256_shuffle_epi8(w, s);
        _mm256_and_si256(
            _mm256_cmpeq_epi8(_mm256_or_si256(bytes, bit_mask), ones),
            sixteen,
        )
    };
    [h(s0), h(s1)]
}

#[inline(always)]
unsafe fn u32_at(p: *const u8) -> u32 {
    u32::from_le_bytes([*p, *p.add(1), *p.add(2), *p.add(3)])
}

#[inline(always)]
unsafe fn p4_0(src: *const u8, o: &mut Pairs) {
    let b = src.add(18);
    let d = f16_two(src, b);
    o.v[0] = nibble_pair(src.add(2), b.add(2));
    o.sc[0] = spread_two(d);
    store_two_twice(_mm_mul_ps(d, _mm_set1_ps(-8.0)), o.mn.as_mut_ptr());
}

#[inline(always)]
unsafe fn p4_1(src: *const u8, o: &mut Pairs) {
    let b = src.add(20);
    // [dA, mA, dB, mB] in one conversion.
    let dm = _mm_cvtph_ps(_mm_set_epi32(0, 0, u32_at(b) as i32, u32_at(src) as i32));
    o.v[0] = nibble_pair(src.add(4), b.add(4));
    o.sc[0] = _mm256_permutevar8x32_ps(
        _mm256_castps128_ps256(dm),
        _mm256_setr_epi32(0, 0, 0, 0, 2, 2, 2, 2),
    );
    _mm_storeu_ps(o.mn.as_mut_ptr(), _mm_permute_ps::<0b11_11_01_01>(dm));
}

#[inline(always)]
unsafe fn p5_0(src: *const u8, o: &mut Pairs) {
    let b = src.add(22);
    let d = f16_two(src, b);
    let [lo, hi] = nibble_pair(src.add(6), b.add(6));
    let [h0, h1] = high_bits_pair(u32_at(src.add(2)), u32_at(b.add(2)));
    o.v[0] = [_mm256_or_si256(lo, h0), _mm256_or_si256(hi, h1)];
    o.sc[0] = spread_two(d);
    store_two_twice(_mm_mul_ps(d, _mm_set1_ps(-16.0)), o.mn.as_mut_ptr());
}

#[inline(always)]
unsafe fn p5_1(src: *const u8, o: &mut Pairs) {
    let b = src.add(24);
    let d = f16_two(src, b);
    let m = f16_two(src.add(2), b.add(2));
    let [lo, hi] = nibble_pair(src.add(8), b.add(8));
    let [h0, h1] = high_bits_pair(u32_at(src.add(4)), u32_at(b.add(4)));
    o.v[0] = [_mm256_or_si256(lo, h0), _mm256_or_si256(hi, h1)];
    o.sc[0] = spread_two(d);
    store_two_twice(m, o.mn.as_mut_ptr());
}

#[inline(always)]
unsafe fn p8_0(src: *const u8, o: &mut Pairs) {
    let b = src.add(34);
    o.v[0] = [
        load_pair(src.add(2), b.add(2)),
        load_pair(src.add(18), b.add(18)),
    ];
    o.sc[0] = spread_two(f16_two(src, b));
}

#[inline(always)]
unsafe fn p_iq4_nl(src: *const u8, o: &mut Pairs) {
    let b = src.add(18);
    let table =
        _mm256_broadcastsi128_si256(_mm_loadu_si128(KVALUES_IQ4NL.as_ptr() as *const __m128i));
    let [lo, hi] = nibble_pair(src.add(2), b.add(2));
    o.v[0] = [
        _mm256_shuffle_epi8(table, lo),
        _mm256_shuffle_epi8(table, hi),
    ];
    o.sc[0] = spread_two(f16_two(src, b));
}

#[inline(always)]
unsafe fn p4_k(src: *const u8, o: &mut Pairs) {
    use lockstep_quant::blocks::q4_k::*;
    let d = f16(src.add(D));
    let dmin = f16(src.add(DMIN));
    let m4 = _mm256_set1_epi8(0x0F);
    let (sc, mn) = k4_scales_mins(src.add(SCALES));
    let scv = scaled_u8x8(sc, d);
    let mnv = _mm256_xor_ps(scaled_u8x8(mn, dmin), _mm256_set1_ps(-0.0));
    for j in 0..4 {
        // Sub-blocks 2j (low nibbles) and 2j + 1 (high nibbles) share these 32 bytes.
        let q = _mm256_loadu_si256(src.add(QS + 32 * j) as *const __m256i);
        let a = _mm256_and_si256(q, m4);
        let b = _mm256_and_si256(_mm256_srli_epi16::<4>(q), m4);
        o.v[j] = [
            _mm256_permute2x128_si256::<0x20>(a, b),
            _mm256_permute2x128_si256::<0x31>(a, b),
        ];
        o.sc[j] = lane_pair(scv, 2 * j as i32);
    }
    store_twice(mnv, o.mn.as_mut_ptr());
}
