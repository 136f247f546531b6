//! The draw from a whole logits row, defined so a GPU can make it bitwise.
//!
//! Temperature sampling without top-k or top-p (the OpenAI API's default) draws from every
//! token of the row. Copying a 49152- or 262144-entry row to the host each step, and taking an
//! `exp` of every entry there, costs more than the GPU's whole decode step, so a backend may
//! draw where it computed the row. For its token to be *exactly* the host's, every value on
//! the way is defined by operations that IEEE 754 rounds the same everywhere:
//!
//! - [`det_exp`]: an `exp` of plain f64 multiplies, adds and subtracts (no fused multiply-add,
//!   which Rust never forms; the kernels spell each one with `__dmul_rn`/`__dadd_rn`), not the
//!   platform's libm or CUDA's `exp`, which may differ in the last bit;
//! - the weights `det_exp((logit - max) / temperature)` (f32 widened exactly to f64), 0 for a
//!   token that min-p drops (`logit < max + ln(min_p)`, the sampler's test);
//! - their sums in a fixed tree: every 32 consecutive values (zero-padded) add in a butterfly
//!   (`a[i] + a[i ^ o]` for o = 16, 8, 4, 2, 1: a warp's `__shfl_xor_sync`), level after level
//!   until one value is left, the total;
//! - the walk: `target = u * total`, then from the top level down the 32 children of the
//!   chosen node in order, `cum + child`, the first whose running sum exceeds the target.
//!   Should rounding leave the target beyond a node's last child, the last token with a
//!   positive weight is the draw.
//!
//! The token follows the softmax of `logits / temperature` over the kept tokens, as a walk in
//! id order would; only the order of the additions is fixed differently.

/// Values a node of the sum tree adds (a warp).
pub const DRAW_FANOUT: usize = 32;

/// The parameters of one row's draw.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RowDraw {
    /// The sampler's temperature (> 0).
    pub temperature: f32,
    /// `ln(min_p)`, `-inf` when min-p is off: tokens below `max + ln_min_p` weigh 0.
    pub ln_min_p: f64,
    /// The uniform value in `[0, 1)` the sampler's RNG gave for this step (values outside
    /// `[0, 1]` are taken as the nearest end).
    pub u: f64,
}

/// `exp(x)`'s bit patterns in this crate and in the CUDA kernels (`kernels.cu`'s `det_exp`
/// uses the same constants: a test there compares them).
pub mod det_exp_consts {
    /// 1 / ln 2.
    pub const LOG2E: u64 = 0x3FF7_1547_652B_82FE;
    /// ln 2 split in two: the high part has trailing zero bits, so `k * LN2_HI` is exact for
    /// every |k| < 2^11.
    pub const LN2_HI: u64 = 0x3FE6_2E42_FEE0_0000;
    /// ln 2 - LN2_HI.
    pub const LN2_LO: u64 = 0x3DEA_39EF_3579_3C76;
    /// Below this the weight is defined as 0 (it would be under 1e-304).
    pub const MIN_X: u64 = 0xC085_E000_0000_0000; // -700.0
}

/// 1/n! for n = 13 down to 2, as bit patterns (the Taylor polynomial of `exp` on
/// `[-ln2/2, ln2/2]`; the 14th term is under 1e-17 there).
pub const DET_EXP_COEFFS: [u64; 12] = [
    0x3DE6_1246_13A8_6D09, // 1/13!
    0x3E21_EED8_EFF8_D898, // 1/12!
    0x3E5A_E645_67F5_44E4, // 1/11!
    0x3E92_7E4F_B778_9F5C, // 1/10!
    0x3EC7_1DE3_A556_C734, // 1/9!
    0x3EFA_01A0_1A01_A01A, // 1/8!
    0x3F2A_01A0_1A01_A01A, // 1/7!
    0x3F56_C16C_16C1_6C17, // 1/6!
    0x3F81_1111_1111_1111, // 1/5!
    0x3FA5_5555_5555_5555, // 1/4!
    0x3FC5_5555_5555_5555, // 1/3!
    0x3FE0_0000_0000_0000, // 1/2!
];

/// `exp(x)` for `x <= 0`, from IEEE-rounded f64 operations alone (see the module docs); 0
/// below -700 (and for -inf). Relative error under 1e-15 against the true value.
pub fn det_exp(x: f64) -> f64 {
    use det_exp_consts::*;
    let x = if x > 0.0 { 0.0 } else { x };
    if x.is_nan() || x < f64::from_bits(MIN_X) {
        return 0.0;
    }
    // x = k ln2 + r, |r| <= ln2 / 2 (to rounding).
    let k = (x * f64::from_bits(LOG2E) + 0.5).floor();
    let r = (x - k * f64::from_bits(LN2_HI)) - k * f64::from_bits(LN2_LO);
    let mut p = f64::from_bits(DET_EXP_COEFFS[0]);
    for &c in &DET_EXP_COEFFS[1..] {
        p = p * r + f64::from_bits(c);
    }
    p = p * r + 1.0;
    p = p * r + 1.0;
    // 2^k, k in [-1010, 0]: a normal number, built from its exponent bits.
    let scale = f64::from_bits(((k as i64 + 1023) as u64) << 52);
    p * scale
}

/// Whether a draw of this row is defined: every logit finite and the row not empty.
fn finite_max(row: &[f32]) -> Option<f32> {
    let mut max = f32::NEG_INFINITY;
    for &v in row {
        if !v.is_finite() {
            return None;
        }
        max = max.max(v);
    }
    (!row.is_empty()).then_some(max)
}

/// The weight of `logit` in a draw of a row whose largest logit is `max`.
pub fn draw_weight(logit: f32, max: f32, d: &RowDraw) -> f64 {
    let (l, m) = (f64::from(logit), f64::from(max));
    if l < m + d.ln_min_p {
        return 0.0;
    }
    det_exp((l - m) / f64::from(d.temperature))
}

/// The butterfly sum of up to 32 values (missing ones are 0).
pub fn butterfly_sum(vals: &[f64]) -> f64 {
    let mut a = [0.0f64; DRAW_FANOUT];
    for (s, &v) in a.iter_mut().zip(vals) {
        *s = v;
    }
    let mut o = DRAW_FANOUT / 2;
    while o > 0 {
        let b = a;
        for (i, s) in a.iter_mut().enumerate() {
            *s = b[i] + b[i ^ o];
        }
        o /= 2;
    }
    a[0]
}

/// The sum tree over `weights`: levels[0] the weights, each next level the butterfly sums of
/// 32 of the one below, the last a single value (the total).
fn sum_levels(weights: Vec<f64>) -> Vec<Vec<f64>> {
    let mut levels = vec![weights];
    while let Some(below) = levels.last().filter(|l| l.len() > 1) {
        let up: Vec<f64> = below.chunks(DRAW_FANOUT).map(butterfly_sum).collect();
        levels.push(up);
    }
    levels
}

/// The sum of `weights` in the draw's tree (0 for none): the last of `sum_levels`, without
/// keeping the levels below.
pub fn tree_sum(weights: &[f64]) -> f64 {
    if let [w] = weights {
        return *w;
    }
    let mut level: Vec<f64> = weights.chunks(DRAW_FANOUT).map(butterfly_sum).collect();
    while level.len() > 1 {
        level = level.chunks(DRAW_FANOUT).map(butterfly_sum).collect();
    }
    level.first().copied().unwrap_or(0.0)
}

/// The softmax weight at temperature 1 of `logit` in a row whose largest logit is `max`, as
/// top-p weighs it: `det_exp(logit - max)`.
pub fn unit_weight(logit: f32, max: f32) -> f64 {
    det_exp(f64::from(logit) - f64::from(max))
}

/// The total weight of `row` at temperature 1 ([`unit_weight`] summed in the draw's tree):
/// what top-p without top-k measures its nucleus against. `None` for an empty row or one
/// with a non-finite logit.
pub fn row_total(row: &[f32]) -> Option<f64> {
    let max = finite_max(row)?;
    let w: Vec<f64> = row.iter().map(|&l| unit_weight(l, max)).collect();
    Some(tree_sum(&w))
}

/// The nucleus of top-p within `top`, a row's largest logits in the sampler's order
/// (descending, ties by the lower id): the length of the shortest prefix whose weights,
/// added in order from 0, reach `p * total` (`total`: [`row_total`]); `None` when `top`
/// ends first.
pub fn nucleus_len(top: &[(u32, f32)], total: f64, p: f32) -> Option<usize> {
    let max = top.first()?.1;
    let target = f64::from(p) * total;
    let mut cum = 0.0f64;
    for (i, &(_, l)) in top.iter().enumerate() {
        cum += unit_weight(l, max);
        if cum >= target {
            return Some(i + 1);
        }
    }
    None
}

/// The token drawn from `row` as the module docs define it; `None` for an empty row or one
/// with a non-finite logit (the sampler reports those as errors).
pub fn draw_row(row: &[f32], d: &RowDraw) -> Option<u32> {
    let max = finite_max(row)?;
    let levels = sum_levels(row.iter().map(|&l| draw_weight(l, max, d)).collect());
    let total = levels.last()?.first().copied()?;
    // A uniform outside [0, 1] (never the sampler's) is taken as the nearest end.
    let target = d.u.clamp(0.0, 1.0) * total;
    let last_positive = || {
        let w = levels.first()?;
        w.iter().rposition(|&v| v > 0.0).map(|i| i as u32)
    };
    // Walk down: at each level, the children of the chosen node in order.
    let mut node = 0usize;
    let mut cum = 0.0f64;
    for level in levels.iter().rev().skip(1) {
        let first = node * DRAW_FANOUT;
        let children = level.get(first..level.len().min(first + DRAW_FANOUT))?;
        let mut found = None;
        for (j, &c) in children.iter().enumerate() {
            let next = cum + c;
            if target < next {
                found = Some(first + j);
                break;
            }
            cum = next;
        }
        match found {
            Some(n) => node = n,
            None => return last_positive(),
        }
    }
    Some(node as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn draw(temperature: f32, u: f64) -> RowDraw {
        RowDraw {
            temperature,
            ln_min_p: f64::NEG_INFINITY,
            u,
        }
    }

    #[test]
    fn det_exp_is_exp_to_a_few_ulps() {
        let mut worst = 0.0f64;
        let mut x = 0.0f64;
        while x > -700.0 {
            let (got, want) = (det_exp(x), x.exp());
            worst = worst.max(((got - want) / want).abs());
            x -= 0.013_7;
        }
        assert!(worst < 1e-15, "worst relative error {worst:e}");
        assert_eq!(det_exp(0.0), 1.0);
        assert_eq!(det_exp(-701.0), 0.0);
        assert_eq!(det_exp(f64::NEG_INFINITY), 0.0);
        // Positive arguments are clamped: a weight is at most 1.
        assert_eq!(det_exp(3.0), 1.0);
    }

    #[test]
    fn coefficients_are_the_inverse_factorials() {
        let mut f = 1.0f64;
        let mut want = Vec::new();
        for n in 2..=13u32 {
            f *= f64::from(n);
            want.push(1.0 / f);
        }
        want.reverse();
        for (bits, w) in DET_EXP_COEFFS.iter().zip(want) {
            let c = f64::from_bits(*bits);
            assert!(((c - w) / w).abs() < 1e-16, "{c:e} against {w:e}");
        }
        assert!((f64::from_bits(det_exp_consts::LOG2E) - std::f64::consts::LOG2_E).abs() < 1e-16);
        let ln2 = f64::from_bits(det_exp_consts::LN2_HI) + f64::from_bits(det_exp_consts::LN2_LO);
        assert_eq!(ln2, std::f64::consts::LN_2);
        // The high part leaves 11 bits for k.
        assert_eq!(det_exp_consts::LN2_HI & 0x7FF, 0);
    }

    #[test]
    fn butterfly_is_a_sum() {
        let v: Vec<f64> = (0..32).map(f64::from).collect();
        assert_eq!(butterfly_sum(&v), 496.0);
        assert_eq!(butterfly_sum(&[1.5, 2.5]), 4.0);
        assert_eq!(butterfly_sum(&[]), 0.0);
    }

    #[test]
    fn the_walk_follows_the_cumulative_weights() {
        // Weights 1, e^-1, e^-2 (temperature 1): boundaries at 1/Z and (1 + e^-1)/Z.
        let row = [3.0f32, 2.0, 1.0];
        let z = 1.0 + (-1.0f64).exp() + (-2.0f64).exp();
        let b1 = 1.0 / z;
        let b2 = (1.0 + (-1.0f64).exp()) / z;
        assert_eq!(draw_row(&row, &draw(1.0, 0.0)), Some(0));
        assert_eq!(draw_row(&row, &draw(1.0, b1 - 1e-9)), Some(0));
        assert_eq!(draw_row(&row, &draw(1.0, b1 + 1e-9)), Some(1));
        assert_eq!(draw_row(&row, &draw(1.0, b2 + 1e-9)), Some(2));
        assert_eq!(draw_row(&row, &draw(1.0, 0.999_999)), Some(2));
        // A low temperature leaves the largest logit almost all the mass.
        assert_eq!(draw_row(&row, &draw(0.01, 0.999_999)), Some(0));
    }

    #[test]
    fn every_token_of_a_long_row_is_reached_in_id_order() {
        // 3000 equal logits (three levels): u = (i + 0.5) / n draws token i.
        let n = 3000;
        let row = vec![0.25f32; n];
        for i in [0, 1, 31, 32, 1023, 1024, 1500, 2999] {
            let u = (i as f64 + 0.5) / n as f64;
            assert_eq!(draw_row(&row, &draw(0.7, u)), Some(i as u32), "u = {u}");
        }
    }

    #[test]
    fn min_p_zeroes_the_dropped_tokens() {
        // Logits 0 and -10: with min_p 0.01 (ln = -4.6) only token 0 stays.
        let row = [-10.0f32, 0.0, -10.0];
        let d = RowDraw {
            temperature: 1.0,
            ln_min_p: 0.01f64.ln(),
            u: 0.999_999_9,
        };
        assert_eq!(draw_row(&row, &d), Some(1));
        assert_eq!(draw_row(&row, &RowDraw { u: 0.0, ..d }), Some(1));
    }

    #[test]
    fn totals_and_nuclei() {
        let row = [3.0f32, 2.0, 1.0, 2.0];
        let e = |x: f64| x.exp();
        let total = row_total(&row).expect("finite");
        assert!((total - (1.0 + 2.0 * e(-1.0) + e(-2.0))).abs() < 1e-15);
        // A draw at temperature 1 without min-p sums the same tree.
        let levels = sum_levels(
            row.iter()
                .map(|&l| draw_weight(l, 3.0, &draw(1.0, 0.0)))
                .collect(),
        );
        assert_eq!(levels.last().map(|l| l[0]), Some(total));
        let top = [(0u32, 3.0f32), (1, 2.0), (3, 2.0), (2, 1.0)];
        // 1 / total = 0.48: p = 0.4 keeps one token, 0.6 two, 0.9 three.
        assert_eq!(nucleus_len(&top, total, 0.4), Some(1));
        assert_eq!(nucleus_len(&top, total, 0.6), Some(2));
        assert_eq!(nucleus_len(&top, total, 0.9), Some(3));
        assert_eq!(nucleus_len(&top[..2], total, 0.9), None);
        assert_eq!(nucleus_len(&[], total, 0.5), None);
        assert_eq!(tree_sum(&[]), 0.0);
        assert_eq!(row_total(&[1.0, f32::NAN]), None);
    }

    #[test]
    fn undefined_rows_have_no_draw() {
        assert_eq!(draw_row(&[], &draw(1.0, 0.5)), None);
        assert_eq!(draw_row(&[0.0, f32::NAN], &draw(1.0, 0.5)), None);
        assert_eq!(draw_row(&[f32::INFINITY], &draw(1.0, 0.5)), None);
    }
}
