//! The arithmetic of ggml's CPU backend (llama.cpp on the CPU), as the isolated pass needs it:
//! the activation formats its matmuls consume, and the per-op bounds that differ from
//! lockstep's own `quant8` ones. Facts from ggml-cpu's sources (the llama.cpp that
//! llama-cpp-python 0.3.36 vendors, x86 AVX2 paths); the derivations are in
//! `docs/verification.md` ("Per-op bounds", ggml-cpu).
//!
//! - A matmul converts its activations to the weight type's `vec_dot_type` first: Q8_0 for
//!   Q4_0/Q5_0/Q8_0/IQ4_NL (and the other 32-blocks ggml pairs with it), Q8_1 for Q4_1/Q5_1,
//!   Q8_K (blocks of 256) for the K-quants and the IQ types, f16 for F16 weights, bf16 for
//!   BF16, none for F32. The repacked kernels (Q4_0 8x8, Q4_K 8x8, ...) quantize to the same
//!   values.
//! - Q8_0 / Q8_1 (32 values): `amax = max|x|`, `d = amax / 127` (f32), `id = 127 / amax`,
//!   `q = round_half_even(x * id)`; the block stores `d` as **f16**, so the values consumed
//!   are `q * f16(d)`. Q8_1 also stores `s = f16(d * sum q)` (f32 `d`), which the Q4_1/Q5_1
//!   dot multiplies by the weight block's min: `d_w d_x sum(q_w q_x) + m_w s`.
//! - Q8_K (256 values): `iscale = 127 / amax` (sign aside, which cancels), `d = 1 / iscale`
//!   (f32), `q = round_half_even(x * iscale)`: values `q * d`.

use lockstep_gguf::GgufFile;
use lockstep_graph::HostTensor;
use lockstep_quant::{bf16_to_f32, f32_to_bf16, f32_to_fp16, fp16_to_f32, GgmlType};

/// f32 unit roundoff.
const U: f64 = 1.0 / 16_777_216.0;
/// f16: relative rounding error of a normal value, and half the spacing of subnormals.
pub const U_F16: f64 = 1.0 / 2048.0;
pub const F16_HALF_SUBNORMAL: f64 = 1.0 / 33_554_432.0;

/// What ggml-cpu converts a matmul's activations to before its dot products.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VecDot {
    F32,
    F16,
    Bf16,
    /// 32 values, f16 scale.
    Q8_0,
    /// 32 values, f16 scale and f16 `d * sum(q)`.
    Q8_1,
    /// 256 values, f32 scale.
    Q8K,
}

impl VecDot {
    /// ggml-cpu's `type_traits_cpu[ty].vec_dot_type`.
    pub fn of(ty: GgmlType) -> VecDot {
        match ty {
            GgmlType::F32 => VecDot::F32,
            GgmlType::F16 => VecDot::F16,
            GgmlType::Bf16 => VecDot::Bf16,
            GgmlType::Q4_1 | GgmlType::Q5_1 => VecDot::Q8_1,
            GgmlType::Q4_0 | GgmlType::Q5_0 | GgmlType::Q8_0 | GgmlType::Iq4Nl => VecDot::Q8_0,
            _ => VecDot::Q8K,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            VecDot::F32 => "f32",
            VecDot::F16 => "f16",
            VecDot::Bf16 => "bf16",
            VecDot::Q8_0 => "Q8_0",
            VecDot::Q8_1 => "Q8_1",
            VecDot::Q8K => "Q8_K",
        }
    }
}

/// The activations a ggml-cpu matmul consumes, as values, and for Q8_1 the per-block
/// difference `s - f16(d) * sum(q)` between the stored block sum and the sum of the values
/// (`[rows, cols / 32]`), which the Q4_1/Q5_1 dot picks up times the weight block's min.
pub struct Consumed {
    pub x: HostTensor,
    pub q8_1_delta: Option<Vec<f64>>,
    /// Values whose scaled form `x * id` lies within [`TIE_BAND`] of a rounding boundary
    /// (`k + 1/2`): (row, column, quantum). Another ggml build that forms `id` as `1 / d`
    /// (ARM's NEON path) rather than `127 / amax`, or rounds ties away from zero (the
    /// reference C path), may round these the other way, moving the value by one quantum.
    pub ambiguous: Vec<Ambiguous>,
}

/// One activation value that another correct build may quantize one step the other way.
#[derive(Clone, Copy, Debug)]
pub struct Ambiguous {
    pub row: usize,
    pub col: usize,
    /// The block's quantum (`f16(d)` or `d`).
    pub quantum: f32,
    /// Q8_1: one f16 ulp of the block's stored sum `s` (`2^-10 |s|`), by which `s` may then
    /// round differently on top of the quantum; 0 otherwise.
    pub s_ulp: f64,
}

/// Whether a ggml CPU build with these features (llama.cpp's system info, `AVX = 1 | AVX2 =
/// 1 | ...`) quantizes Q8_0 / Q8_1 activations with the x86 AVX code this module emulates
/// exactly (`id = 127 / amax`, `_mm256_round_ps` to nearest even); Q8_K is the reference C
/// code on x86, emulated exactly too. Values on a rounding boundary then need no bound.
pub fn x86_avx_quantizer(features: &str) -> bool {
    features
        .split(['|', ':'])
        .map(str::trim)
        .any(|f| f == "AVX = 1" || f == "AVX2 = 1")
}

/// Relative distance to a rounding boundary within which two correct implementations of the
/// 8-bit quantization may disagree: `id` off by up to 3u between `127 / amax` and `1 / d`
/// (two roundings against one), the product rounded (u) in each; 8u for margin.
pub const TIE_BAND: f64 = 8.0 / 16_777_216.0;

fn near_boundary(t: f32) -> bool {
    let t = f64::from(t);
    let frac = t - t.floor();
    (frac - 0.5).abs() <= TIE_BAND * t.abs()
}

/// Converts `x` (`[rows, k]`) as ggml-cpu does for a weight whose `vec_dot_type` is `vd`.
pub fn consume(x: &HostTensor, vd: VecDot) -> Consumed {
    let k = x.cols().max(1);
    let mut delta = Vec::new();
    let mut ambiguous = Vec::new();
    let data: Vec<f32> = match vd {
        VecDot::F32 => x.data.clone(),
        VecDot::F16 => x
            .data
            .iter()
            .map(|&v| fp16_to_f32(f32_to_fp16(v)))
            .collect(),
        VecDot::Bf16 => x
            .data
            .iter()
            .map(|&v| bf16_to_f32(f32_to_bf16(v)))
            .collect(),
        VecDot::Q8_0 | VecDot::Q8_1 => {
            let mut out = Vec::with_capacity(x.data.len());
            for (r, row) in x.data.chunks(k).enumerate() {
                for (b, blk) in row.chunks(32).enumerate() {
                    let amax = blk.iter().fold(0f32, |m, v| m.max(v.abs()));
                    let d = amax / 127.0;
                    let id = if amax != 0.0 { 127.0 / amax } else { 0.0 };
                    let d16 = fp16_to_f32(f32_to_fp16(d));
                    let mut sum_q = 0i32;
                    let first_amb = ambiguous.len();
                    for (i, &v) in blk.iter().enumerate() {
                        if near_boundary(v * id) {
                            ambiguous.push(Ambiguous {
                                row: r,
                                col: b * 32 + i,
                                quantum: d16,
                                s_ulp: 0.0,
                            });
                        }
                        let q = (v * id).round_ties_even().clamp(-128.0, 127.0);
                        let q = if q.is_nan() { 0.0 } else { q };
                        sum_q += q as i32;
                        out.push(q * d16);
                    }
                    if vd == VecDot::Q8_1 {
                        let s = fp16_to_f32(f32_to_fp16(d * sum_q as f32));
                        delta.push(f64::from(s) - f64::from(d16) * f64::from(sum_q));
                        let s_ulp = f64::from(s.abs()).max(f64::from(d16)) / 1024.0;
                        for a in &mut ambiguous[first_amb..] {
                            a.s_ulp = s_ulp;
                        }
                    }
                }
            }
            out
        }
        VecDot::Q8K => {
            let mut out = Vec::with_capacity(x.data.len());
            for (r, row) in x.data.chunks(k).enumerate() {
                for (b, blk) in row.chunks(256).enumerate() {
                    let amax = blk.iter().fold(0f32, |m, v| m.max(v.abs()));
                    if amax == 0.0 {
                        out.extend(std::iter::repeat_n(0.0, blk.len()));
                        continue;
                    }
                    let iscale = 127.0 / amax;
                    let d = 1.0 / iscale;
                    for (i, &v) in blk.iter().enumerate() {
                        if near_boundary(v * iscale) {
                            ambiguous.push(Ambiguous {
                                row: r,
                                col: b * 256 + i,
                                quantum: d,
                                s_ulp: 0.0,
                            });
                        }
                    }
                    out.extend(blk.iter().map(|&v| {
                        let q = (v * iscale).round_ties_even().clamp(-127.0, 127.0);
                        if q.is_nan() {
                            0.0
                        } else {
                            q * d
                        }
                    }));
                }
            }
            out
        }
    };
    Consumed {
        x: HostTensor::new(x.shape.clone(), data),
        q8_1_delta: (vd == VecDot::Q8_1).then_some(delta),
        ambiguous,
    }
}

/// The NMSE the [`Consumed::ambiguous`] values may add to `y = x W^T` (`col_sq` the weight's
/// column sums of squares; `min_sq`, for Q4_1 / Q5_1, the sums over output rows of the
/// squared block mins, per block): a value moved by one quantum `q_i` moves every output `j`
/// by `q_i w_ji`, and for Q8_1 the block's stored sum `s` may round differently by one f16
/// ulp, moving output `j` by `m_jb ulp(s)` more; `(a + b)^2 <= 2a^2 + 2b^2`, and with `m_r`
/// such values in row `r` Cauchy-Schwarz bounds that row's squared output error by `m_r`
/// times the sum of theirs.
pub fn ambiguity_bound(
    amb: &[Ambiguous],
    col_sq: &[f64],
    min_sq: Option<&[f64]>,
    y_energy: f64,
) -> f64 {
    if amb.is_empty() || y_energy == 0.0 {
        return 0.0;
    }
    let mut by_row: std::collections::BTreeMap<usize, (f64, f64)> = Default::default();
    for a in amb {
        let q = f64::from(a.quantum);
        let c = col_sq.get(a.col).copied().unwrap_or(0.0);
        let m = min_sq
            .and_then(|m| m.get(a.col / 32))
            .copied()
            .unwrap_or(0.0);
        let e = by_row.entry(a.row).or_insert((0.0, 0.0));
        e.0 += 1.0;
        e.1 += 2.0 * q * q * c + 2.0 * a.s_ulp * a.s_ulp * m;
    }
    by_row.values().map(|(m, s)| m * s).sum::<f64>() / y_energy
}

/// Per block column `b`, the sum over a weight's rows of its squared block mins
/// (`mins` as [`block_mins`] gives them, `n_out` rows).
pub fn min_squares(mins: &[f32], n_out: usize) -> Vec<f64> {
    let nb = mins.len() / n_out.max(1);
    let mut out = vec![0f64; nb];
    for row in mins.chunks_exact(nb.max(1)) {
        for (o, &m) in out.iter_mut().zip(row) {
            *o += f64::from(m) * f64::from(m);
        }
    }
    out
}

/// The f16 block mins (`m`) of a Q4_1 / Q5_1 weight, `[rows, cols / 32]`, read from the file;
/// `None` for other types or a tensor whose bytes do not match its shape.
pub fn block_mins(file: &GgufFile, name: &str) -> Option<Vec<f32>> {
    let t = file.header().tensor(name)?;
    let bytes_per_block = match t.ty {
        GgmlType::Q4_1 => 20,
        GgmlType::Q5_1 => 24,
        _ => return None,
    };
    let data = file.tensor_data(t);
    if !data.len().is_multiple_of(bytes_per_block) {
        return None;
    }
    Some(
        data.chunks_exact(bytes_per_block)
            .map(|b| fp16_to_f32(u16::from_le_bytes([b[2], b[3]])))
            .collect(),
    )
}

/// Adds the Q8_1 block-sum term to `y = x W^T` (`[rows, n_out]`): output `j` of row `r`
/// gains `sum_b m[j, b] * delta[r, b]`, the weight block's min times the difference between
/// the stored `s` and the sum of the consumed values.
pub fn add_q8_1_term(y: &mut HostTensor, mins: &[f32], delta: &[f64]) {
    let n_out = y.cols().max(1);
    let rows = y.rows();
    if rows == 0 || !mins.len().is_multiple_of(n_out) || !delta.len().is_multiple_of(rows) {
        return;
    }
    let nb = mins.len() / n_out;
    if delta.len() / rows != nb {
        return;
    }
    for (r, yrow) in y.data.chunks_mut(n_out).enumerate() {
        let dr = &delta[r * nb..(r + 1) * nb];
        for (j, yv) in yrow.iter_mut().enumerate() {
            let mr = &mins[j * nb..(j + 1) * nb];
            let c: f64 = mr.iter().zip(dr).map(|(&m, &d)| f64::from(m) * d).sum();
            *yv = (f64::from(*yv) + c) as f32;
        }
    }
}

/// RoPE per element: ggml builds each position's angles as a running f32 product
/// `theta_{i+1} = theta_i * s` from `theta_0 = p`, with `s = powf(base, -2 / n_rot)` (one
/// rounding, at most `2u` relative from powf), so pair `i`'s angle is off by at most
/// `3 i u theta_i` (i multiplications, each `u`, and `i` factors of `s`'s `2u`). A rotation
/// by an angle off by `dt` moves the pair by `dt` of its norm; cos/sin to f32, the products
/// and the sum add `8u` as in the `quant8` bound. Returns the per-element relative bound for
/// `[rows, heads * head_dim]`.
pub fn rope_eps(
    positions: &[u32],
    cols: usize,
    head_dim: usize,
    n_rot: usize,
    base: f32,
    neox: bool,
) -> Vec<f64> {
    let half = (n_rot / 2).max(1);
    let mut eps = Vec::with_capacity(positions.len() * cols);
    for &p in positions {
        for c in 0..cols {
            let d = c % head_dim.max(1);
            if d >= n_rot {
                eps.push(0.0);
                continue;
            }
            let i = if neox { d % half } else { d / 2 };
            let theta = f64::from(p) * f64::from(base).powf(-2.0 * i as f64 / n_rot as f64);
            eps.push(3.0 * i as f64 * U * theta + 8.0 * U);
        }
    }
    eps
}

/// GELU-tanh of ggml-cpu (`GGML_GELU_FP16`): for `-10 < g < 10` the gate is rounded to f16
/// and looked up in a table of `f16(gelu_f32(.))`; `g <= -10` gives 0, `g >= 10` gives `g`;
/// then times `up` in f32. Per element the absolute error is at most
/// `|up| (|gelu'(g)| h(g) + max(2^-11 |gelu(g)|, 2^-25) + 8u|g|) + u|y|`: `h` the f16
/// rounding of the gate (2^-11 relative, 2^-25 below the normal range), the table entry's own
/// f16 rounding, the f32 evaluation of `0.5 g (1 + tanh(z))` (its cancellation for negative
/// g is absolute, ~u|g|), the product. Returns the squared absolute bounds summed.
pub fn gelu_table_err2(gate: &[f32], up: &[f32], y: &[f32]) -> f64 {
    const C: f64 = 0.797_884_560_802_865_4; // sqrt(2 / pi)
    let mut num = 0f64;
    for ((&g, &u), &yv) in gate.iter().zip(up).zip(y) {
        let (g, u, yv) = (f64::from(g), f64::from(u).abs(), f64::from(yv).abs());
        let e = if g <= -10.0 {
            // ggml gives 0; the true value is below 1e-22 of |g|.
            let z = C * (g + 0.044715 * g * g * g);
            (0.5 * g * (1.0 + z.tanh())).abs() * u + 8.0 * U * g.abs() * u
        } else if g >= 10.0 {
            U * yv + 8.0 * U * g.abs() * u
        } else {
            let z = C * (g + 0.044715 * g * g * g);
            let t = z.tanh();
            let gelu = 0.5 * g * (1.0 + t);
            let dgelu =
                0.5 * (1.0 + t) + 0.5 * g * (1.0 - t * t) * C * (1.0 + 3.0 * 0.044715 * g * g);
            let h = (U_F16 * g.abs()).max(F16_HALF_SUBNORMAL);
            let table = (U_F16 * (gelu.abs() + dgelu.abs() * h)).max(F16_HALF_SUBNORMAL);
            u * (dgelu.abs() * h + table + 8.0 * U * g.abs()) + U * yv
        };
        num += e * e;
    }
    num
}

/// The weighted sum `o = sum_j p_j v_j` with the probabilities converted to f16 (KQ·V is an
/// f16 matmul: the softmax output is its f32 operand, converted to the F16 weight's
/// `vec_dot_type`). Each `p_j` moves by at most `c_j = min(p_j, max(2^-11 p_j, 2^-25))`
/// (f16 rounding: relative for normal values, half a subnormal step below); these roundings
/// are independent, so the sum moves by at most `lambda sqrt(sum_j (c_j v_jd)^2)` except with
/// probability ~`2 exp(-lambda^2/2)` (as for the matmuls). Returns that per-output term,
/// `lambda` included, for one output element given its `(p_j, v_jd)` pairs.
pub fn p_f16_term(lambda: f64, pv: impl Iterator<Item = (f32, f32)>) -> f64 {
    let mut s = 0f64;
    for (p, v) in pv {
        let p = f64::from(p);
        if p == 0.0 {
            continue;
        }
        let c = p.min((U_F16 * p).max(F16_HALF_SUBNORMAL)) * f64::from(v);
        s += c * c;
    }
    lambda * s.sqrt()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn q8_0_values_use_the_f16_scale() {
        // amax 1.0: d = 1/127 (f32), stored as f16; q = round(x * 127).
        let x = HostTensor::matrix(1, 32, (0..32).map(|i| i as f32 / 31.0).collect());
        let c = consume(&x, VecDot::Q8_0);
        let d16 = fp16_to_f32(f32_to_fp16(1.0 / 127.0));
        assert_eq!(c.x.data[31], 127.0 * d16);
        assert_ne!(d16, 1.0 / 127.0, "the f16 scale differs from the f32 one");
        // 5/31 * 127 = 20.48 -> 20
        assert_eq!(c.x.data[5], 20.0 * d16);
        assert!(c.q8_1_delta.is_none());
    }

    #[test]
    fn q8_1_delta_is_the_stored_sum_minus_the_values_sum() {
        let x = HostTensor::matrix(1, 32, (0..32).map(|i| (i as f32 - 10.0) / 7.0).collect());
        let c = consume(&x, VecDot::Q8_1);
        let delta = c.q8_1_delta.expect("Q8_1 keeps deltas");
        assert_eq!(delta.len(), 1);
        let amax = 21.0f32 / 7.0;
        let d = amax / 127.0;
        let d16 = fp16_to_f32(f32_to_fp16(d));
        let sum_q: f64 = c.x.data.iter().map(|&v| f64::from(v / d16).round()).sum();
        let s = fp16_to_f32(f32_to_fp16(d * sum_q as f32));
        assert_eq!(delta[0], f64::from(s) - f64::from(d16) * sum_q);
        assert!(delta[0] != 0.0);
    }

    #[test]
    fn q8_k_blocks_are_256_with_an_f32_scale() {
        let x = HostTensor::matrix(
            1,
            512,
            (0..512).map(|i| ((i * 37) % 101) as f32 - 50.0).collect(),
        );
        let c = consume(&x, VecDot::Q8K);
        let d = 1.0 / (127.0f32 / 50.0);
        assert_eq!(
            c.x.data[0],
            (-50.0f32 * (127.0 / 50.0)).round_ties_even() * d
        );
        for (a, b) in x.data.iter().zip(&c.x.data) {
            assert!((a - b).abs() <= d * 0.5 + 1e-6, "{a} {b}");
        }
    }

    #[test]
    fn values_on_a_rounding_boundary_are_ambiguous() {
        // amax 127: id = 1, so 2.5 sits exactly on a tie and 2.4 far from one.
        let mut v = vec![0.0f32; 32];
        v[0] = 127.0;
        v[1] = 2.5;
        v[2] = 2.4;
        let c = consume(&HostTensor::matrix(1, 32, v), VecDot::Q8_1);
        let cols: Vec<usize> = c.ambiguous.iter().map(|a| a.col).collect();
        assert_eq!(cols, [1]);
        assert_eq!(c.x.data[1], 2.0 * c.ambiguous[0].quantum, "half to even");
        assert!(c.ambiguous[0].s_ulp > 0.0);
        // One such value in a row: the bound is 2 q^2 c_i (+ the s term) over sum y^2.
        let col_sq = vec![1.0; 32];
        let b = ambiguity_bound(&c.ambiguous, &col_sq, None, 1.0);
        let q = f64::from(c.ambiguous[0].quantum);
        assert_eq!(b, 2.0 * q * q);
    }

    #[test]
    fn avx_builds_are_recognised_from_the_system_info() {
        assert!(x86_avx_quantizer(
            "CPU : SSE3 = 1 | SSSE3 = 1 | AVX = 1 | AVX2 = 1 | F16C = 1 | FMA = 1 | REPACK = 1 |"
        ));
        assert!(!x86_avx_quantizer(
            "CPU : NEON = 1 | ARM_FMA = 1 | FP16_VA = 1 | REPACK = 1 |"
        ));
        assert!(!x86_avx_quantizer("CPU : SSE3 = 1 | AVX = 0 | AVX2 = 0 |"));
        assert!(!x86_avx_quantizer(""));
    }

    #[test]
    fn rope_eps_grows_with_position_and_pair() {
        let e = rope_eps(&[0, 100], 8, 8, 8, 10000.0, false);
        assert_eq!(e[0], 8.0 * U);
        assert!(e[8 + 2] > e[2], "{} {}", e[8 + 2], e[2]);
        assert_eq!(e[8], 8.0 * U, "pair 0 has no running product");
    }
}
