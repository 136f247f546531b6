//! Host emulation of the fast kernels (`kernels.cu`, section FAST NUMERICS): the activation
//! quantizer `quantize_q8_32` and `mmv_fast_<type>` / `gate_up_fast_<type>`, operation for
//! operation (the same bit extraction of every weight format, the same exact integer sums, the
//! same f32 products, FMAs (`f32::mul_add`) and butterfly), so the algorithm is proven here and
//! the GPU run only has to confirm that the device does what the emulation does.
//!
//! Checked for every type with a fast kernel: the NMSE against the reference's f64 dot on the
//! quantized activations stays inside the quant8 bound that `lockstep-verify` applies to the
//! cuda backend (`matmul_bound(Arithmetic::Quant8, ..)`); the quantizer is verify's declared
//! quant8 format bit for bit; and a row computed alone is bitwise the same row computed inside
//! tiles of any size at any place.

use lockstep_graph::HostTensor;
use lockstep_quant::{dequantize, fp16_to_f32, quantize, GgmlType};
use lockstep_verify::isolate::{column_squares, matmul_bound, quantize_q8_f32, Arithmetic};

/// The types `FAST_FOR` instantiates in kernels.cu.
const FAST: &[GgmlType] = &[
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::Q8_0,
    GgmlType::Q4K,
    GgmlType::Q5K,
    GgmlType::Q6K,
];

/// A deterministic generator (xorshift64*), so failures reproduce.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn unit(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 24) as f32
    }
    /// Roughly normal (sum of four uniforms), with occasional outliers.
    fn value(&mut self) -> f32 {
        let g = (self.unit() + self.unit() + self.unit() + self.unit() - 2.0) * 1.7;
        if self.next().is_multiple_of(97) {
            g * 12.0
        } else {
            g
        }
    }
}

/// One activation row as `quantize_q8_32` leaves it: q, and per 32 values (d, sum q).
struct Q8Row {
    q: Vec<i8>,
    d: Vec<f32>,
    s: Vec<i32>,
}

/// `quantize_q8_32`: max |x| by fmaxf (exact, any order), d = amax / 127, id = 1 / d (0 for
/// d = 0), q = rint(x * id) clamped (NaN to 0), the integer sum of q.
fn quantize_row(x: &[f32]) -> Q8Row {
    let mut r = Q8Row {
        q: Vec::with_capacity(x.len()),
        d: Vec::new(),
        s: Vec::new(),
    };
    for blk in x.chunks_exact(32) {
        let a = blk.iter().fold(0f32, |m, v| m.max(v.abs()));
        let d = a / 127.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        let mut s = 0i32;
        for &v in blk {
            let t = (v * id).round_ties_even();
            let qi = if t.is_nan() {
                0
            } else {
                t.clamp(-127.0, 127.0) as i32
            };
            s += qi;
            r.q.push(qi as i8);
        }
        r.d.push(d);
        r.s.push(s);
    }
    r
}

fn ld_a2(b: &[u8], o: usize) -> u32 {
    u32::from(b[o])
        | u32::from(b[o + 1]) << 8
        | u32::from(b[o + 2]) << 16
        | u32::from(b[o + 3]) << 24
}
fn ldh(b: &[u8], o: usize) -> f32 {
    fp16_to_f32(u16::from(b[o]) | u16::from(b[o + 1]) << 8)
}
/// `__dp4a(a, b, c)`, signed bytes.
fn dp4a(a: u32, b: u32, c: i32) -> i32 {
    let mut s = c;
    for i in 0..4 {
        s += i32::from((a >> (8 * i)) as u8 as i8) * i32::from((b >> (8 * i)) as u8 as i8);
    }
    s
}
/// `__vsub4`: per-byte wrapping subtraction.
fn vsub4(a: u32, b: u32) -> u32 {
    let mut r = 0u32;
    for i in 0..4 {
        let x = ((a >> (8 * i)) as u8).wrapping_sub((b >> (8 * i)) as u8);
        r |= u32::from(x) << (8 * i);
    }
    r
}
fn hb4(v: u32) -> u32 {
    ((v & 1) << 4) | ((v & 2) << 11) | ((v & 4) << 18) | ((v & 8) << 25)
}
/// Activation ints 0..8 of block `ab` (32 values), optionally from value `off`.
fn xints(x: &Q8Row, ab: usize, off: usize, n: usize) -> Vec<u32> {
    (0..n)
        .map(|i| {
            let p = ab * 32 + off + 4 * i;
            u32::from_le_bytes([
                x.q[p] as u8,
                x.q[p + 1] as u8,
                x.q[p + 2] as u8,
                x.q[p + 3] as u8,
            ])
        })
        .collect()
}
fn scale_min_k4(j: usize, q: &[u8]) -> (i32, i32) {
    if j < 4 {
        (i32::from(q[j] & 63), i32::from(q[j + 4] & 63))
    } else {
        (
            i32::from((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4)),
            i32::from((q[j + 4] >> 4) | ((q[j] >> 6) << 4)),
        )
    }
}

fn unit_elems(ty: GgmlType) -> usize {
    match ty {
        GgmlType::Q4K | GgmlType::Q5K | GgmlType::Q6K => 64,
        _ => 32,
    }
}

/// `FastUnit<TY>::load` then `dot`: unit `u` of `row` against activation row `x`, into acc.
fn unit_dot(ty: GgmlType, row: &[u8], u: usize, x: &Q8Row, acc: f32) -> f32 {
    match ty {
        GgmlType::Q4_0 | GgmlType::Q4_1 | GgmlType::Q5_0 | GgmlType::Q5_1 | GgmlType::Q8_0 => {
            let ts = ty.type_size();
            let b = &row[u * ts..(u + 1) * ts];
            let xa = xints(x, u, 0, 8);
            let (d, m, q): (f32, f32, Vec<u32>) = match ty {
                GgmlType::Q4_0 => {
                    let v: Vec<u32> = (0..4).map(|i| ld_a2(b, 2 + 4 * i)).collect();
                    let mut q: Vec<u32> = v.iter().map(|v| v & 0x0F0F_0F0F).collect();
                    q.extend(v.iter().map(|v| (v >> 4) & 0x0F0F_0F0F));
                    (ldh(b, 0), 0.0, q)
                }
                GgmlType::Q4_1 => {
                    let v: Vec<u32> = (0..4).map(|i| ld_a2(b, 4 + 4 * i)).collect();
                    let mut q: Vec<u32> = v.iter().map(|v| v & 0x0F0F_0F0F).collect();
                    q.extend(v.iter().map(|v| (v >> 4) & 0x0F0F_0F0F));
                    (ldh(b, 0), ldh(b, 2), q)
                }
                GgmlType::Q5_0 | GgmlType::Q5_1 => {
                    let (qh, qs, m) = if ty == GgmlType::Q5_0 {
                        (ld_a2(b, 2), 6, 0.0)
                    } else {
                        (ld_a2(b, 4), 8, ldh(b, 2))
                    };
                    let mut q = vec![0u32; 8];
                    for i in 0..4 {
                        let v = ld_a2(b, qs + 4 * i);
                        q[i] = (v & 0x0F0F_0F0F) | hb4(qh >> (4 * i));
                        q[4 + i] = ((v >> 4) & 0x0F0F_0F0F) | hb4(qh >> (16 + 4 * i));
                    }
                    (ldh(b, 0), m, q)
                }
                _ => (
                    ldh(b, 0),
                    0.0,
                    (0..8).map(|i| ld_a2(b, 2 + 4 * i)).collect(),
                ),
            };
            // The kernel's dp4a order: Q4_0 / Q4_1 interleave low and high ints; the order of an
            // exact integer sum does not matter, but keep it anyway.
            let mut s = 0i32;
            if matches!(ty, GgmlType::Q4_0 | GgmlType::Q4_1) {
                for i in 0..4 {
                    s = dp4a(q[i], xa[i], s);
                    s = dp4a(q[4 + i], xa[4 + i], s);
                }
            } else {
                for i in 0..8 {
                    s = dp4a(q[i], xa[i], s);
                }
            }
            let (dx, xs) = (x.d[u], x.s[u]);
            match ty {
                GgmlType::Q4_0 => (d * dx).mul_add((s - 8 * xs) as f32, acc),
                GgmlType::Q5_0 => (d * dx).mul_add((s - 16 * xs) as f32, acc),
                GgmlType::Q8_0 => (d * dx).mul_add(s as f32, acc),
                _ => {
                    let acc = (d * dx).mul_add(s as f32, acc);
                    (m * dx).mul_add(xs as f32, acc)
                }
            }
        }
        GgmlType::Q4K | GgmlType::Q5K => {
            let ts = ty.type_size();
            let (sb, jp) = (u >> 2, u & 3);
            let b = &row[sb * ts..(sb + 1) * ts];
            let (d, dmin) = (ldh(b, 0), ldh(b, 2));
            // The kernel's scale_min_k4 on three little-endian words (bytes 4..8, 8..12, 12..16).
            let (wy, wz, ww) = (ld_a2(b, 4), ld_a2(b, 8), ld_a2(b, 12));
            let qs = if ty == GgmlType::Q4K { 16 } else { 48 } + 32 * jp;
            let mut q = [0u32; 16];
            for i in 0..8 {
                let v = ld_a2(b, qs + 4 * i);
                q[i] = v & 0x0F0F_0F0F;
                q[8 + i] = (v >> 4) & 0x0F0F_0F0F;
                if ty == GgmlType::Q5K {
                    let h = ld_a2(b, 16 + 4 * i);
                    q[i] |= ((h >> (2 * jp)) & 0x0101_0101) << 4;
                    q[8 + i] |= ((h >> (2 * jp + 1)) & 0x0101_0101) << 4;
                }
            }
            let mut acc = acc;
            for s in 0..2 {
                let j = 2 * jp + s;
                let i = j & 3;
                let (a, c, e) = (
                    (wy >> (8 * i)) & 0xFF,
                    (wz >> (8 * i)) & 0xFF,
                    (ww >> (8 * i)) & 0xFF,
                );
                let (sc, mn) = if j < 4 {
                    ((a & 63) as i32, (c & 63) as i32)
                } else {
                    (
                        ((e & 0xF) | ((a >> 6) << 4)) as i32,
                        ((e >> 4) | ((c >> 6) << 4)) as i32,
                    )
                };
                assert_eq!((sc, mn), scale_min_k4(j, &b[4..16]), "{ty} sub-block {j}");
                let ab = sb * 8 + 2 * jp + s;
                let xa = xints(x, ab, 0, 8);
                let mut is = 0i32;
                for i in 0..8 {
                    is = dp4a(q[8 * s + i], xa[i], is);
                }
                acc = (d * x.d[ab]).mul_add((sc * is) as f32, acc);
                acc = (dmin * x.d[ab]).mul_add((-(mn * x.s[ab])) as f32, acc);
            }
            acc
        }
        GgmlType::Q6K => {
            let (sb, n, h) = (u >> 2, (u >> 1) & 1, u & 1);
            let b = &row[sb * 210..(sb + 1) * 210];
            let d = ldh(b, 208);
            let sc: Vec<i32> = (0..4)
                .map(|k| i32::from(b[192 + 8 * n + 2 * k + h] as i8))
                .collect();
            let mut q = [0u32; 16];
            for i in 0..4 {
                let a = ld_a2(b, 64 * n + 16 * h + 4 * i);
                let bb = ld_a2(b, 64 * n + 32 + 16 * h + 4 * i);
                let hh = ld_a2(b, 128 + 32 * n + 16 * h + 4 * i);
                let c = 0x2020_2020;
                q[i] = vsub4((a & 0x0F0F_0F0F) | ((hh << 4) & 0x3030_3030), c);
                q[4 + i] = vsub4((bb & 0x0F0F_0F0F) | ((hh << 2) & 0x3030_3030), c);
                q[8 + i] = vsub4(((a >> 4) & 0x0F0F_0F0F) | (hh & 0x3030_3030), c);
                q[12 + i] = vsub4(((bb >> 4) & 0x0F0F_0F0F) | ((hh >> 2) & 0x3030_3030), c);
            }
            let mut acc = acc;
            for k in 0..4 {
                let ab = sb * 8 + 4 * n + k;
                let xa = xints(x, ab, 16 * h, 4);
                let mut is = 0i32;
                for i in 0..4 {
                    is = dp4a(q[4 * k + i], xa[i], is);
                }
                acc = (d * x.d[ab]).mul_add((sc[k] * is) as f32, acc);
            }
            acc
        }
        other => panic!("no fast kernel for {other}"),
    }
}

/// `warp_sum_fixed`: v[L] = v[L] + v[L ^ o] for o = 16, 8, 4, 2, 1; every lane ends equal.
fn butterfly(mut v: [f32; 32]) -> f32 {
    for o in [16, 8, 4, 2, 1] {
        let p = v;
        for (l, x) in v.iter_mut().enumerate() {
            *x = p[l] + p[l ^ o];
        }
    }
    assert!(v.iter().all(|x| x.to_bits() == v[0].to_bits()));
    v[0]
}

/// `fast_rows<TY, NT>`: NT activation rows from `t` against one weight row, each lane loading
/// a unit once and applying it to every row of the tile in order.
#[allow(clippy::needless_range_loop)] // `lane` is the kernel's lane index
fn fast_rows(ty: GgmlType, row: &[u8], xs: &[Q8Row], t: usize, nt: usize, k: usize) -> Vec<f32> {
    let units = k / unit_elems(ty);
    let mut lanes = vec![[0f32; 32]; nt];
    for lane in 0..32 {
        let mut acc = vec![0f32; nt];
        let mut u = lane;
        while u < units {
            for (i, a) in acc.iter_mut().enumerate() {
                *a = unit_dot(ty, row, u, &xs[t + i], *a);
            }
            u += 32;
        }
        for (i, a) in acc.iter().enumerate() {
            lanes[i][lane] = *a;
        }
    }
    lanes.into_iter().map(butterfly).collect()
}

/// `mmv_fast_body` for one weight row: tiles of 8 from `tile0`, strided by `stride` tiles
/// (grid.y), a short tile as 4 + 2 + 1.
fn mmv_row(ty: GgmlType, row: &[u8], xs: &[Q8Row], k: usize, gy: usize) -> Vec<f32> {
    let n = xs.len();
    let mut y = vec![f32::NAN; n];
    for by in 0..gy {
        let mut t0 = by * 8;
        while t0 < n {
            let nt = (n - t0).min(8);
            let mut t = t0;
            for part in [8, 4, 2, 1] {
                if (nt == 8 && part == 8) || (nt < 8 && nt & part != 0) {
                    for (i, v) in fast_rows(ty, row, xs, t, part, k).into_iter().enumerate() {
                        y[t + i] = v;
                    }
                    t += part;
                }
            }
            t0 += gy * 8;
        }
    }
    y
}

fn weights(ty: GgmlType, rows: usize, k: usize, rng: &mut Rng) -> Vec<u8> {
    let w: Vec<f32> = (0..rows * k).map(|_| rng.value() * 0.02).collect();
    quantize(ty, &w, w.len()).unwrap_or_else(|e| panic!("{ty}: {e}"))
}

fn activations(n: usize, k: usize, rng: &mut Rng) -> Vec<f32> {
    (0..n * k).map(|_| rng.value()).collect()
}

#[test]
fn quantizer_is_the_declared_quant8_format() {
    let mut rng = Rng(7);
    let k = 256;
    let mut x = activations(4, k, &mut rng);
    // Edge cases: an all-zero block, exact ties of x * id, a huge value and a NaN (an infinite
    // activation makes its block NaN in every format, so it is not compared).
    x[..32].fill(0.0);
    for (i, v) in x[32..64].iter_mut().enumerate() {
        *v = (i as f32 - 16.0) * 0.5;
    }
    x[64] = 127.0;
    x[65] = 63.5;
    x[100] = f32::NAN;
    x[130] = 3.0e38;
    let declared = quantize_q8_f32(&HostTensor::matrix(4, k, x.clone()));
    for (r, xr) in x.chunks_exact(k).enumerate() {
        let q = quantize_row(xr);
        for j in 0..k {
            let v = f32::from(q.q[j]) * q.d[j / 32];
            let want = declared.data[r * k + j];
            assert!(
                v.to_bits() == want.to_bits()
                    || (v == 0.0 && want == 0.0)
                    || (v.is_nan() && want.is_nan()),
                "row {r} value {j}: {v} vs declared {want}"
            );
        }
        for b in 0..k / 32 {
            let s: i32 = q.q[32 * b..32 * b + 32].iter().map(|&v| i32::from(v)).sum();
            assert_eq!(s, q.s[b]);
        }
    }
}

/// NMSE of the emulated kernel against the f64 dot of the dequantized weights and the
/// quantized activations, against verify's quant8 matmul bound, per type and shape.
#[test]
fn every_fast_type_is_inside_the_quant8_bound() {
    let mut rng = Rng(0x5eed);
    for &ty in FAST {
        let shapes: &[usize] = if unit_elems(ty) == 64 {
            &[256, 768, 2048, 4352]
        } else {
            &[64, 576, 1536, 4096]
        };
        for &k in shapes {
            let (rows, n) = (24, 3);
            let w = weights(ty, rows, k, &mut rng);
            let wf = dequantize(ty, &w, rows * k).unwrap_or_else(|e| panic!("{ty}: {e}"));
            let x = activations(n, k, &mut rng);
            let xq = quantize_q8_f32(&HostTensor::matrix(n, k, x.clone()));
            let qrows: Vec<Q8Row> = x.chunks_exact(k).map(quantize_row).collect();
            let rb = w.len() / rows;
            let mut got = vec![0f32; n * rows];
            let mut want = vec![0f64; n * rows];
            for r in 0..rows {
                let y = mmv_row(ty, &w[r * rb..(r + 1) * rb], &qrows, k, 1);
                for t in 0..n {
                    got[t * rows + r] = y[t];
                    want[t * rows + r] = (0..k)
                        .map(|j| f64::from(wf[r * k + j]) * f64::from(xq.data[t * k + j]))
                        .sum();
                }
            }
            let err: f64 = got
                .iter()
                .zip(&want)
                .map(|(&g, &w)| (f64::from(g) - w).powi(2))
                .sum();
            let energy: f64 = want.iter().map(|w| w * w).sum();
            let nmse = err / energy;
            let yref = HostTensor::matrix(n, rows, want.iter().map(|&v| v as f32).collect());
            let bound = matmul_bound(Arithmetic::Quant8, &column_squares(&wf, k), &xq, &yref);
            eprintln!(
                "{ty:>5} k={k:>5}: nmse {nmse:.3e}  bound {bound:.3e}  ratio {:.3}",
                nmse / bound
            );
            assert!(
                nmse <= bound,
                "{ty} k={k}: NMSE {nmse:e} over the quant8 bound {bound:e}"
            );
            // Far from bitwise-lucky: the unit decoding must be right to land this close.
            assert!(nmse < 1e-10, "{ty} k={k}: NMSE {nmse:e}");
        }
    }
}

/// The same bound on weights quantized by llama.cpp: every matrix of the fast types in the
/// tiny-llama fixtures (one file per type), against random activations with outliers.
#[test]
fn llama_cpp_quantized_fixture_weights_are_inside_the_quant8_bound() {
    let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/fixtures/tiny-llama");
    let mut rng = Rng(0xf17e);
    for &ty in FAST {
        let path = dir.join(format!("tiny-llama-{ty}.gguf"));
        let file = lockstep_gguf::GgufFile::open(&path)
            .unwrap_or_else(|e| panic!("fixture {}: {e}", path.display()));
        let mut checked = 0;
        let mut worst = 0f64;
        for t in file
            .tensors()
            .iter()
            .filter(|t| t.ty == ty && t.dims.len() == 2)
        {
            let k = t.dims[0] as usize;
            let rows = (t.dims[1] as usize).min(48);
            let rb = k / ty.block_size() * ty.type_size();
            let w = &file.tensor_data(t)[..rows * rb];
            let wf = dequantize(ty, w, rows * k).unwrap_or_else(|e| panic!("{ty}: {e}"));
            let n = 2;
            let x = activations(n, k, &mut rng);
            let xq = quantize_q8_f32(&HostTensor::matrix(n, k, x.clone()));
            let qrows: Vec<Q8Row> = x.chunks_exact(k).map(quantize_row).collect();
            let (mut err, mut energy) = (0f64, 0f64);
            let mut want32 = vec![0f32; n * rows];
            for r in 0..rows {
                let y = mmv_row(ty, &w[r * rb..(r + 1) * rb], &qrows, k, 1);
                for (i, &g) in y.iter().enumerate() {
                    let want: f64 = (0..k)
                        .map(|j| f64::from(wf[r * k + j]) * f64::from(xq.data[i * k + j]))
                        .sum();
                    err += (f64::from(g) - want).powi(2);
                    energy += want * want;
                    want32[i * rows + r] = want as f32;
                }
            }
            let yref = HostTensor::matrix(n, rows, want32);
            let bound = matmul_bound(Arithmetic::Quant8, &column_squares(&wf, k), &xq, &yref);
            let nmse = err / energy;
            assert!(
                nmse <= bound,
                "{ty} {}: NMSE {nmse:e} over {bound:e}",
                t.name
            );
            worst = worst.max(nmse / bound);
            checked += 1;
        }
        eprintln!("{ty:>5}: {checked} matrices, worst NMSE / bound {worst:.2e}");
        assert!(
            checked > 0,
            "{ty}: no matrix of that type in {}",
            path.display()
        );
    }
}

/// A row's output is bitwise the same alone, in a batch of any size at any place, and whatever
/// the grid's tile stride.
#[test]
fn rows_are_bitwise_batch_invariant() {
    let mut rng = Rng(42);
    for &ty in FAST {
        let k = if unit_elems(ty) == 64 { 2304 } else { 1088 };
        let rows = 3;
        let w = weights(ty, rows, k, &mut rng);
        let rb = w.len() / rows;
        let x = activations(19, k, &mut rng);
        let qrows: Vec<Q8Row> = x.chunks_exact(k).map(quantize_row).collect();
        for r in 0..rows {
            let row = &w[r * rb..(r + 1) * rb];
            let alone: Vec<u32> = (0..qrows.len())
                .map(|t| mmv_row(ty, row, &qrows[t..=t], k, 1)[0].to_bits())
                .collect();
            for n in [2, 3, 5, 7, 8, 9, 13, 19] {
                for gy in [1, 2, 3] {
                    for start in [0, 19 - n] {
                        let y = mmv_row(ty, row, &qrows[start..start + n], k, gy);
                        for (i, v) in y.iter().enumerate() {
                            assert_eq!(
                                v.to_bits(),
                                alone[start + i],
                                "{ty} row {r}: activation row {} in a batch of {n} (grid.y {gy})",
                                start + i
                            );
                        }
                    }
                }
            }
        }
    }
}
