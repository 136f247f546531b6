//! The one dot product of the reference backend, and a tiled matmul built from it.
//!
//! Every output element is `dot(x_row, w_row)`: eight interleaved f32 partial sums over the
//! row, a scalar tail, then a fixed reduction tree. The tiled kernel computes four such dots
//! at once (sharing the loads of `x`) but performs, per element, the very same operations in
//! the very same order, so tiling, batch size and thread count never change a result.
//! Rust never contracts `a * b + c` into an FMA, so the AVX2 build of the same code (chosen at
//! run time) is bitwise identical to the portable one; it is only wider.

/// Weight rows per parallel task.
pub const W_CHUNK: usize = 64;
/// Batch rows per cache tile.
const X_TILE: usize = 64;

#[inline(always)]
fn reduce(acc: &[f32; 8], tail: f32) -> f32 {
    ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7])) + tail
}

/// Dot product in the reference order.
#[inline(always)]
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len(), "dot of unequal lengths");
    let mut acc = [0f32; 8];
    let mut ca = a.chunks_exact(8);
    let mut cb = b.chunks_exact(8);
    for (x, y) in (&mut ca).zip(&mut cb) {
        for l in 0..8 {
            acc[l] += x[l] * y[l];
        }
    }
    let mut tail = 0f32;
    for (x, y) in ca.remainder().iter().zip(cb.remainder()) {
        tail += x * y;
    }
    reduce(&acc, tail)
}

/// Four dots of one `x` row against four weight rows; each equal bitwise to `dot`.
#[inline(always)]
fn dot4(x: &[f32], w: [&[f32]; 4]) -> [f32; 4] {
    let k = x.len();
    let chunks = k / 8;
    let mut acc = [[0f32; 8]; 4];
    for c in 0..chunks {
        let xs: &[f32; 8] = x[c * 8..c * 8 + 8].try_into().expect("8 lanes");
        for (r, wr) in w.iter().enumerate() {
            let ws: &[f32; 8] = wr[c * 8..c * 8 + 8].try_into().expect("8 lanes");
            for l in 0..8 {
                acc[r][l] += xs[l] * ws[l];
            }
        }
    }
    let mut out = [0f32; 4];
    for (r, wr) in w.iter().enumerate() {
        let mut tail = 0f32;
        for i in chunks * 8..k {
            tail += x[i] * wr[i];
        }
        out[r] = reduce(&acc[r], tail);
    }
    out
}

/// Four weight rows against two `x` rows: eight independent accumulator chains keep the
/// adder busy; per element the operations are still exactly those of `dot`.
#[inline(always)]
fn dot4x2(x0: &[f32], x1: &[f32], w: [&[f32]; 4]) -> [[f32; 4]; 2] {
    let k = x0.len();
    let chunks = k / 8;
    let mut a0 = [[0f32; 8]; 4];
    let mut a1 = [[0f32; 8]; 4];
    for c in 0..chunks {
        let xs0: &[f32; 8] = x0[c * 8..c * 8 + 8].try_into().expect("8 lanes");
        let xs1: &[f32; 8] = x1[c * 8..c * 8 + 8].try_into().expect("8 lanes");
        for (r, wr) in w.iter().enumerate() {
            let ws: &[f32; 8] = wr[c * 8..c * 8 + 8].try_into().expect("8 lanes");
            for l in 0..8 {
                a0[r][l] += xs0[l] * ws[l];
                a1[r][l] += xs1[l] * ws[l];
            }
        }
    }
    let mut out = [[0f32; 4]; 2];
    for (r, wr) in w.iter().enumerate() {
        let (mut t0, mut t1) = (0f32, 0f32);
        for i in chunks * 8..k {
            t0 += x0[i] * wr[i];
            t1 += x1[i] * wr[i];
        }
        out[0][r] = reduce(&a0[r], t0);
        out[1][r] = reduce(&a1[r], t1);
    }
    out
}

#[inline(always)]
fn matmul_block_generic(x: &[f32], n: usize, k: usize, w: &[f32], out_t: &mut [f32]) {
    let m = w.len() / k.max(1);
    for i0 in (0..n).step_by(X_TILE) {
        let i1 = (i0 + X_TILE).min(n);
        let mut j = 0;
        while j + 4 <= m {
            let rows = [
                &w[j * k..(j + 1) * k],
                &w[(j + 1) * k..(j + 2) * k],
                &w[(j + 2) * k..(j + 3) * k],
                &w[(j + 3) * k..(j + 4) * k],
            ];
            let mut i = i0;
            while i + 2 <= i1 {
                let d = dot4x2(&x[i * k..(i + 1) * k], &x[(i + 1) * k..(i + 2) * k], rows);
                for r in 0..4 {
                    out_t[(j + r) * n + i] = d[0][r];
                    out_t[(j + r) * n + i + 1] = d[1][r];
                }
                i += 2;
            }
            if i < i1 {
                let d = dot4(&x[i * k..(i + 1) * k], rows);
                for (r, v) in d.into_iter().enumerate() {
                    out_t[(j + r) * n + i] = v;
                }
            }
            j += 4;
        }
        while j < m {
            let wr = &w[j * k..(j + 1) * k];
            for i in i0..i1 {
                out_t[j * n + i] = dot(&x[i * k..(i + 1) * k], wr);
            }
            j += 1;
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn matmul_block_avx2(x: &[f32], n: usize, k: usize, w: &[f32], out_t: &mut [f32]) {
    matmul_block_generic(x, n, k, w, out_t)
}

/// `out_t[j * n + i] = dot(x_i, w_j)` for the weight rows in `w`.
pub fn matmul_block(x: &[f32], n: usize, k: usize, w: &[f32], out_t: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU supports AVX2 (checked just above); the function is the generic
            // safe code compiled with AVX2 enabled and does nothing else.
            unsafe { matmul_block_avx2(x, n, k, w, out_t) };
            return;
        }
    }
    matmul_block_generic(x, n, k, w, out_t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tiled_matmul_is_bitwise_dot() {
        let k = 67; // exercises the tail
        let (n, m) = (5, 11);
        let x: Vec<f32> = (0..n * k)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) * 0.013)
            .collect();
        let w: Vec<f32> = (0..m * k)
            .map(|i| ((i * 53 % 97) as f32 - 48.0) * 0.021)
            .collect();
        let mut out_t = vec![0f32; m * n];
        matmul_block(&x, n, k, &w, &mut out_t);
        for j in 0..m {
            for i in 0..n {
                let d = dot(&x[i * k..(i + 1) * k], &w[j * k..(j + 1) * k]);
                assert_eq!(out_t[j * n + i].to_bits(), d.to_bits(), "({i},{j})");
            }
        }
        let mut single = vec![0f32; m];
        matmul_block(&x[..k], 1, k, &w, &mut single);
        for j in 0..m {
            assert_eq!(single[j].to_bits(), out_t[j * n].to_bits());
        }
    }
}
