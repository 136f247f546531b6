//! The scale searches of ggml's reference quantizers (ggml-quants.c), kept operation for
//! operation so that our blocks come out identical to `ggml_quantize_chunk`'s. Every f32
//! expression is written in ggml's evaluation order, with ggml's int-to-float promotions.

/// Groups whose largest magnitude is below this are stored as zeros (ggml's GROUP_MAX_EPS).
pub(crate) const GROUP_MAX_EPS: f32 = 1e-15;

/// ggml's `nearest_int`: round half to even via the 1.5 * 2^23 magic constant. Exact for
/// |x| <= 2^22, the range the callers guarantee; for anything else (NaN, huge values) it
/// returns some integer instead of panicking, as ggml does.
#[inline(always)]
pub(crate) fn nearest_int(x: f32) -> i32 {
    let v = x + 12_582_912.0;
    (v.to_bits() & 0x007F_FFFF) as i32 - 0x0040_0000
}

/// ggml's `best_index_int8`: index of the level of `val` (sorted) closest to `x`, ties going
/// to the upper one.
#[inline]
pub(crate) fn best_index_int8(val: &[i8; 16], x: f32) -> usize {
    if x <= val[0] as f32 {
        return 0;
    }
    if x >= val[15] as f32 {
        return 15;
    }
    let (mut ml, mut mu) = (0usize, 15usize);
    while mu - ml > 1 {
        let mav = (ml + mu) / 2;
        if x < val[mav] as f32 {
            mu = mav;
        } else {
            ml = mav;
        }
    }
    if x - (val[mu - 1] as f32) < (val[mu] as f32) - x {
        mu - 1
    } else {
        mu
    }
}

/// ggml's `make_qx_quants` for `rmse_type == 1` without importance weights (the only form the
/// reference quantizers use): symmetric levels -nmax..nmax-1 weighted by x², trying 18 scales
/// around the max-abs one. Writes `l + nmax` into `levels` and returns the scale.
pub(crate) fn make_qx_quants_rmse1(nmax: i32, x: &[f32], levels: &mut [i8]) -> f32 {
    let n = x.len().min(levels.len());
    let (x, levels) = (&x[..n], &mut levels[..n]);
    let mut max = 0.0f32;
    let mut amax = 0.0f32;
    for &v in x {
        let ax = v.abs();
        if ax > amax {
            amax = ax;
            max = v;
        }
    }
    if amax < GROUP_MAX_EPS {
        levels.fill(0);
        return 0.0;
    }
    let nmaxf = nmax as f32;
    let mut iscale = -nmaxf / max;
    let mut sumlx = 0.0f32;
    let mut suml2 = 0.0f32;
    for (l_out, &v) in levels.iter_mut().zip(x) {
        let l = nearest_int(iscale * v).clamp(-nmax, nmax - 1);
        *l_out = (l + nmax) as i8;
        let w = v * v;
        let lf = l as f32;
        sumlx += w * v * lf;
        suml2 += w * lf * lf;
    }
    let mut scale = if suml2 != 0.0 { sumlx / suml2 } else { 0.0 };
    let mut best = scale * sumlx;
    for is in -9..=9 {
        if is == 0 {
            continue;
        }
        iscale = -(nmaxf + 0.1 * is as f32) / max;
        sumlx = 0.0;
        suml2 = 0.0;
        for &v in x {
            let l = nearest_int(iscale * v).clamp(-nmax, nmax - 1);
            let w = v * v;
            let lf = l as f32;
            sumlx += w * v * lf;
            suml2 += w * lf * lf;
        }
        if suml2 > 0.0 && sumlx * sumlx > best * suml2 {
            for (l_out, &v) in levels.iter_mut().zip(x) {
                let l = nearest_int(iscale * v).clamp(-nmax, nmax - 1);
                *l_out = (l + nmax) as i8;
            }
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    scale
}

/// ggml's `make_q3_quants` with `do_rmse`: symmetric levels, then up to five passes of
/// coordinate descent on each level under x² weights. Writes `l + nmax` and returns the scale.
pub(crate) fn make_q3_quants_rmse(nmax: i32, x: &[f32], levels: &mut [i8]) -> f32 {
    let n = x.len().min(levels.len());
    let (x, levels) = (&x[..n], &mut levels[..n]);
    let mut max = 0.0f32;
    let mut amax = 0.0f32;
    for &v in x {
        let ax = v.abs();
        if ax > amax {
            amax = ax;
            max = v;
        }
    }
    if amax < GROUP_MAX_EPS {
        levels.fill(0);
        return 0.0;
    }
    let iscale = -(nmax as f32) / max;
    let mut sumlx = 0.0f32;
    let mut suml2 = 0.0f32;
    for (l_out, &v) in levels.iter_mut().zip(x) {
        let l = nearest_int(iscale * v).clamp(-nmax, nmax - 1);
        *l_out = l as i8;
        let w = v * v;
        let lf = l as f32;
        sumlx += w * v * lf;
        suml2 += w * lf * lf;
    }
    for _ in 0..5 {
        let mut n_changed = 0;
        for (l_cur, &v) in levels.iter_mut().zip(x) {
            let w = v * v;
            let cur = *l_cur as f32;
            let mut slx = sumlx - w * v * cur;
            if slx > 0.0 {
                let mut sl2 = suml2 - w * cur * cur;
                let new_l = nearest_int(v * sl2 / slx).clamp(-nmax, nmax - 1);
                if new_l != *l_cur as i32 {
                    let nl = new_l as f32;
                    slx += w * v * nl;
                    sl2 += w * nl * nl;
                    if sl2 > 0.0 && slx * slx * suml2 > sumlx * sumlx * sl2 {
                        *l_cur = new_l as i8;
                        sumlx = slx;
                        suml2 = sl2;
                        n_changed += 1;
                    }
                }
            }
        }
        if n_changed == 0 {
            break;
        }
    }
    for l in levels.iter_mut() {
        *l += nmax as i8;
    }
    if suml2 > 0.0 {
        sumlx / suml2
    } else {
        0.0
    }
}

/// Parameters of ggml's `make_qkx2_quants` grid search over scales.
pub(crate) struct Qkx2 {
    pub nmax: i32,
    pub rmin: f32,
    pub rdelta: f32,
    pub nstep: i32,
    pub use_mad: bool,
}

/// ggml's `make_qkx2_quants`: asymmetric levels 0..=nmax with a (non-positive) min, chosen by
/// weighted least squares over `nstep + 1` candidate scales. Writes the levels, returns
/// `(scale, -min)`.
pub(crate) fn make_qkx2_quants(
    p: &Qkx2,
    x: &[f32],
    weights: &[f32],
    levels: &mut [u8],
    aux: &mut [u8],
) -> (f32, f32) {
    let n = x.len().min(weights.len()).min(levels.len()).min(aux.len());
    if n == 0 {
        return (0.0, 0.0);
    }
    let (x, weights, levels, aux) = (&x[..n], &weights[..n], &mut levels[..n], &mut aux[..n]);
    let nmax = p.nmax;
    let mut min = x[0];
    let mut max = x[0];
    let mut sum_w = weights[0];
    let mut sum_x = sum_w * x[0];
    for (&v, &w) in x.iter().zip(weights).skip(1) {
        if v < min {
            min = v;
        }
        if v > max {
            max = v;
        }
        sum_w += w;
        sum_x += w * v;
    }
    if min > 0.0 {
        min = 0.0;
    }
    if max == min {
        levels.fill(0);
        return (0.0, -min);
    }
    let mut iscale = nmax as f32 / (max - min);
    let mut scale = 1.0 / iscale;
    let mut best_error = 0.0f32;
    for ((l_out, &v), &w) in levels.iter_mut().zip(x).zip(weights) {
        let l = nearest_int(iscale * (v - min)).clamp(0, nmax);
        *l_out = l as u8;
        let diff = scale * l as f32 + min - v;
        let diff = if p.use_mad { diff.abs() } else { diff * diff };
        best_error += w * diff;
    }
    if p.nstep < 1 {
        return (scale, -min);
    }
    for is in 0..=p.nstep {
        iscale = (p.rmin + p.rdelta * is as f32 + nmax as f32) / (max - min);
        let mut sum_l = 0.0f32;
        let mut sum_l2 = 0.0f32;
        let mut sum_xl = 0.0f32;
        for ((a, &v), &w) in aux.iter_mut().zip(x).zip(weights) {
            let l = nearest_int(iscale * (v - min)).clamp(0, nmax);
            *a = l as u8;
            let lf = l as f32;
            sum_l += w * lf;
            sum_l2 += w * lf * lf;
            sum_xl += w * lf * v;
        }
        let det = sum_w * sum_l2 - sum_l * sum_l;
        if det > 0.0 {
            let mut this_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
            let mut this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
            if this_min > 0.0 {
                this_min = 0.0;
                this_scale = sum_xl / sum_l2;
            }
            let mut cur_error = 0.0f32;
            for ((&a, &v), &w) in aux.iter().zip(x).zip(weights) {
                let diff = this_scale * a as f32 + this_min - v;
                let diff = if p.use_mad { diff.abs() } else { diff * diff };
                cur_error += w * diff;
            }
            if cur_error < best_error {
                levels.copy_from_slice(aux);
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    (scale, -min)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_int_rounds_half_to_even() {
        for (x, want) in [
            (0.5, 0),
            (1.5, 2),
            (2.5, 2),
            (-0.5, 0),
            (-1.5, -2),
            (3.49, 3),
            (-7.6, -8),
            (4_194_303.0, 4_194_303),
        ] {
            assert_eq!(nearest_int(x), want, "{x}");
        }
        // Out of range: any value, no panic.
        let _ = nearest_int(f32::NAN);
        let _ = nearest_int(f32::INFINITY);
        let _ = nearest_int(-1e30);
    }

    #[test]
    fn best_index_picks_closest_level() {
        let v = crate::blocks::KVALUES_IQ4NL;
        assert_eq!(best_index_int8(&v, -200.0), 0);
        assert_eq!(best_index_int8(&v, 200.0), 15);
        assert_eq!(best_index_int8(&v, 0.0), 8);
        assert_eq!(best_index_int8(&v, -4.5), 8); // tie between -10 and 1 goes up
        assert_eq!(best_index_int8(&v, -4.6), 7);
        for (i, &l) in v.iter().enumerate() {
            assert_eq!(best_index_int8(&v, l as f32), i);
        }
    }
}
