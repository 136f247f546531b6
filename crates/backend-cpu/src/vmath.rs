//! Vector math shared by the ops: exp, the gated activations, and f16 conversion of cache
//! rows. Each function has an AVX2 build and a portable build that
//! perform the same IEEE operations in the same order, so results agree bit for bit.

use lockstep_graph::Activation;

use crate::Isa;

const EXP_LO: f32 = -87.336_55;
const EXP_HI: f32 = 88.722_83;
const LOG2E: f32 = std::f32::consts::LOG2_E;
const LN2_HI: f32 = 0.693_359_4;
const LN2_LO: f32 = -2.121_944_4e-4;
const P: [f32; 6] = [
    1.987_569_1e-4,
    1.398_199_9e-3,
    8.333_452e-3,
    4.166_579_6e-2,
    0.166_666_65,
    0.5,
];
/// 2 * sqrt(2 / pi): GELU-tanh as x * sigmoid(2 * sqrt(2/pi) * (x + 0.044715 x^3)).
const GELU_2C: f32 = 1.595_769_2;

/// e^x, accurate to about 1 ulp (Cody-Waite reduction and the cephes polynomial); 0 below
/// -87.34 (and for -inf), +inf above 88.72.
#[inline(always)]
pub fn exp(x: f32) -> f32 {
    if x < EXP_LO {
        return 0.0;
    }
    let x = x.min(EXP_HI);
    let n = (x * LOG2E).round_ties_even();
    let r = (-n).mul_add(LN2_HI, x);
    let r = (-n).mul_add(LN2_LO, r);
    let mut p = P[0];
    for c in &P[1..] {
        p = p.mul_add(r, *c);
    }
    let z = r * r;
    let y = p.mul_add(z, r) + 1.0;
    let pow = f32::from_bits((((n as i32) + 127) as u32) << 23);
    y * pow
}

#[inline(always)]
fn act_one(g: f32, u: f32, act: Activation) -> f32 {
    let z = match act {
        Activation::Silu => g,
        Activation::GeluTanh => {
            let t = g * g;
            let t = t * g;
            let t = 0.044715 * t;
            let t = g + t;
            GELU_2C * t
        }
    };
    let e = exp(-z);
    g / (1.0 + e) * u
}

/// `out[i] = act(gate[i]) * up[i]`.
pub fn act_mul(isa: Isa, gate: &[f32], up: &[f32], out: &mut [f32], act: Activation) {
    let n = gate.len().min(up.len()).min(out.len());
    let mut done = 0;
    #[cfg(target_arch = "x86_64")]
    if isa == Isa::Avx2 {
        // SAFETY: `Isa::Avx2` implies AVX2 and FMA; lengths are `n`.
        done = unsafe { avx2::act_mul(&gate[..n], &up[..n], &mut out[..n], act) };
    }
    let _ = isa;
    for i in done..n {
        out[i] = act_one(gate[i], up[i], act);
    }
}

/// f32 to f16 bits, round to nearest even (F16C where available; the same bits for every
/// non-NaN value).
pub fn to_f16_row(isa: Isa, src: &[f32], dst: &mut [u16]) {
    let mut done = 0;
    #[cfg(target_arch = "x86_64")]
    if isa == Isa::Avx2 {
        // SAFETY: `Isa::Avx2` implies F16C.
        done = unsafe { avx2::to_f16_row(src, dst) };
    }
    let _ = isa;
    for (h, &x) in dst[done..].iter_mut().zip(&src[done..]) {
        *h = lockstep_quant::f32_to_fp16(x);
    }
}

/// `s[j] = exp(s[j] - max)`.
pub fn exp_shifted(isa: Isa, s: &mut [f32], max: f32) {
    let mut done = 0;
    #[cfg(target_arch = "x86_64")]
    if isa == Isa::Avx2 {
        // SAFETY: `Isa::Avx2` implies AVX2 and FMA.
        done = unsafe { avx2::exp_shifted(s, max) };
    }
    let _ = isa;
    for v in &mut s[done..] {
        *v = exp(*v - max);
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::*;
    use std::arch::x86_64::*;

    #[inline(always)]
    unsafe fn exp8(x: __m256) -> __m256 {
        let zero_mask = _mm256_cmp_ps::<_CMP_LT_OQ>(x, _mm256_set1_ps(EXP_LO));
        let x = _mm256_min_ps(x, _mm256_set1_ps(EXP_HI));
        let n = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
            _mm256_mul_ps(x, _mm256_set1_ps(LOG2E)),
        );
        let nn = _mm256_xor_ps(n, _mm256_set1_ps(-0.0));
        let r = _mm256_fmadd_ps(nn, _mm256_set1_ps(LN2_HI), x);
        let r = _mm256_fmadd_ps(nn, _mm256_set1_ps(LN2_LO), r);
        let mut p = _mm256_set1_ps(P[0]);
        for c in &P[1..] {
            p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(*c));
        }
        let z = _mm256_mul_ps(r, r);
        let y = _mm256_add_ps(_mm256_fmadd_ps(p, z, r), _mm256_set1_ps(1.0));
        let e = _mm256_slli_epi32::<23>(_mm256_add_epi32(
            _mm256_cvtps_epi32(n),
            _mm256_set1_epi32(127),
        ));
        let v = _mm256_mul_ps(y, _mm256_castsi256_ps(e));
        _mm256_andnot_ps(zero_mask, v)
    }

    /// Returns how many elements it did (whole vectors).
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn act_mul(gate: &[f32], up: &[f32], out: &mut [f32], act: Activation) -> usize {
        let n8 = gate.len().min(up.len()).min(out.len()) / 8 * 8;
        let one = _mm256_set1_ps(1.0);
        let mut i = 0;
        while i < n8 {
            let g = _mm256_loadu_ps(gate.as_ptr().add(i));
            let u = _mm256_loadu_ps(up.as_ptr().add(i));
            let z = match act {
                Activation::Silu => g,
                Activation::GeluTanh => {
                    let t = _mm256_mul_ps(g, g);
                    let t = _mm256_mul_ps(t, g);
                    let t = _mm256_mul_ps(_mm256_set1_ps(0.044715), t);
                    let t = _mm256_add_ps(g, t);
                    _mm256_mul_ps(_mm256_set1_ps(GELU_2C), t)
                }
            };
            let e = exp8(_mm256_xor_ps(z, _mm256_set1_ps(-0.0)));
            let y = _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(one, e)), u);
            _mm256_storeu_ps(out.as_mut_ptr().add(i), y);
            i += 8;
        }
        n8
    }

    #[target_feature(enable = "avx2,f16c")]
    pub unsafe fn to_f16_row(src: &[f32], dst: &mut [u16]) -> usize {
        let n8 = src.len().min(dst.len()) / 8 * 8;
        let mut i = 0;
        while i < n8 {
            let h = _mm256_cvtps_ph::<{ _MM_FROUND_TO_NEAREST_INT }>(_mm256_loadu_ps(
                src.as_ptr().add(i),
            ));
            _mm_storeu_si128(dst.as_mut_ptr().add(i) as *mut __m128i, h);
            i += 8;
        }
        n8
    }

    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn exp_shifted(s: &mut [f32], max: f32) -> usize {
        let n8 = s.len() / 8 * 8;
        let m = _mm256_set1_ps(max);
        let mut i = 0;
        while i < n8 {
            let p = s.as_mut_ptr().add(i);
            _mm256_storeu_ps(p, exp8(_mm256_sub_ps(_mm256_loadu_ps(p), m)));
            i += 8;
        }
        n8
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exp_is_accurate_and_builds_agree() {
        let xs: Vec<f32> = (0..20001).map(|i| (i as f32 - 10000.0) * 0.0095).collect();
        let mut worst = 0f64;
        for &x in &xs {
            let y = exp(x);
            if x > -87.0 && x < 88.0 {
                let t = (x as f64).exp();
                worst = worst.max(((y as f64 - t) / t).abs());
            }
        }
        assert!(worst < 5e-7, "relative error {worst}");
        assert_eq!(exp(f32::NEG_INFINITY), 0.0);
        for isa in Isa::available() {
            let mut v = xs.clone();
            exp_shifted(isa, &mut v, 0.0);
            let mut h = vec![0u16; xs.len()];
            to_f16_row(isa, &xs, &mut h);
            for (&hb, &x) in h.iter().zip(&xs) {
                assert_eq!(hb, lockstep_quant::f32_to_fp16(x), "{isa:?} f16({x})");
            }
            for (a, &x) in v.iter().zip(&xs) {
                assert_eq!(a.to_bits(), exp(x).to_bits(), "{isa:?} exp({x})");
            }
            let g: Vec<f32> = xs.iter().map(|x| x * 0.01).collect();
            let u: Vec<f32> = xs.iter().map(|x| 1.0 - x * 0.001).collect();
            for act in [Activation::Silu, Activation::GeluTanh] {
                let mut o = vec![0f32; g.len()];
                act_mul(isa, &g, &u, &mut o, act);
                for i in 0..g.len() {
                    assert_eq!(o[i].to_bits(), act_one(g[i], u[i], act).to_bits());
                }
            }
        }
    }
}
