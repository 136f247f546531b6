//! Error metrics between two tensors, and between two logit rows.

use serde::Serialize;

/// How far `b` is from `a` (the reference side).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Metrics {
    /// sum((a-b)^2) / sum(a^2); 0 when both are zero, +inf when only `a` is.
    pub nmse: f64,
    pub max_abs: f64,
    /// cos(a, b); 1 when both are zero.
    pub cosine: f64,
    /// Elements compared.
    pub n: usize,
    /// Elements that are bitwise different (NaN-aware: equal NaN bits count as equal).
    pub n_diff: usize,
}

impl Metrics {
    /// A shape mismatch or a missing value: infinitely wrong.
    pub fn broken(n: usize) -> Metrics {
        Metrics {
            nmse: f64::INFINITY,
            max_abs: f64::INFINITY,
            cosine: 0.0,
            n,
            n_diff: n,
        }
    }

    pub fn bitwise_equal(&self) -> bool {
        self.n_diff == 0
    }
}

/// Compares `b` against `a`. Elements where both are the same infinity (masked scores are
/// `-inf`) agree exactly and are left out of the sums; a NaN or an infinity on one side only
/// makes the whole comparison infinitely wrong.
pub fn compare(a: &[f32], b: &[f32]) -> Metrics {
    if a.len() != b.len() {
        return Metrics::broken(a.len().max(b.len()));
    }
    let mut num = 0f64;
    let mut den = 0f64;
    let mut bb = 0f64;
    let mut ab = 0f64;
    let mut max_abs = 0f64;
    let mut n_diff = 0usize;
    let mut broken = false;
    for (&x, &y) in a.iter().zip(b) {
        if x.to_bits() == y.to_bits() {
            if x.is_finite() {
                let xf = f64::from(x);
                den += xf * xf;
                bb += xf * xf;
                ab += xf * xf;
            }
            continue;
        }
        n_diff += 1;
        if !x.is_finite() || !y.is_finite() {
            broken = true;
            continue;
        }
        let (xf, yf) = (f64::from(x), f64::from(y));
        let d = xf - yf;
        num += d * d;
        den += xf * xf;
        bb += yf * yf;
        ab += xf * yf;
        max_abs = max_abs.max(d.abs());
    }
    if broken {
        return Metrics {
            n_diff,
            ..Metrics::broken(a.len())
        };
    }
    let nmse = if num == 0.0 {
        0.0
    } else if den == 0.0 {
        f64::INFINITY
    } else {
        num / den
    };
    let cosine = if den == 0.0 && bb == 0.0 {
        1.0
    } else if den == 0.0 || bb == 0.0 {
        0.0
    } else {
        ab / (den.sqrt() * bb.sqrt())
    };
    Metrics {
        nmse,
        max_abs,
        cosine,
        n: a.len(),
        n_diff,
    }
}

/// log-softmax of a logit row in f64. Non-finite logits give `None`.
pub fn log_softmax(x: &[f32]) -> Option<Vec<f64>> {
    if x.iter().any(|v| !v.is_finite()) || x.is_empty() {
        return None;
    }
    let max = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let lse = x
        .iter()
        .map(|&v| (f64::from(v) - f64::from(max)).exp())
        .sum::<f64>()
        .ln()
        + f64::from(max);
    Some(x.iter().map(|&v| f64::from(v) - lse).collect())
}

/// KL(P_a || P_b) in nats of the softmax distributions of two logit rows; +inf when either
/// row is not finite.
pub fn kl_divergence(a: &[f32], b: &[f32]) -> f64 {
    if a.len() != b.len() {
        return f64::INFINITY;
    }
    match (log_softmax(a), log_softmax(b)) {
        (Some(la), Some(lb)) => la
            .iter()
            .zip(&lb)
            .map(|(&pa, &pb)| pa.exp() * (pa - pb))
            .sum::<f64>()
            .max(0.0),
        _ => f64::INFINITY,
    }
}

/// Index of the largest finite value (lowest index on ties); 0 for a row with none.
pub fn argmax(x: &[f32]) -> u32 {
    let mut best = 0usize;
    let mut bv = f32::NEG_INFINITY;
    for (i, &v) in x.iter().enumerate() {
        if v > bv {
            bv = v;
            best = i;
        }
    }
    best as u32
}

/// Shannon entropy (nats) of the softmax of a logit row; `None` when not finite.
pub fn entropy(x: &[f32]) -> Option<f64> {
    let l = log_softmax(x)?;
    Some(-l.iter().map(|&lp| lp.exp() * lp).sum::<f64>())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn basics() {
        let a = [1.0, 2.0, f32::NEG_INFINITY];
        let m = compare(&a, &a);
        assert_eq!(m.nmse, 0.0);
        assert!(m.bitwise_equal());
        let b = [1.0, 2.5, f32::NEG_INFINITY];
        let m = compare(&a, &b);
        assert!((m.nmse - 0.25 / 5.0).abs() < 1e-12);
        assert_eq!(m.max_abs, 0.5);
        let c = [1.0, 2.0, 0.0];
        assert!(compare(&a, &c).nmse.is_infinite());
        assert!(compare(&[0.0], &[1.0]).nmse.is_infinite());
        assert!(kl_divergence(&[1.0, 2.0], &[1.0, 2.0]).abs() < 1e-15);
        assert!(kl_divergence(&[1.0, 2.0], &[2.0, 1.0]) > 0.1);
        assert_eq!(argmax(&[0.0, 3.0, 3.0]), 1);
    }
}
