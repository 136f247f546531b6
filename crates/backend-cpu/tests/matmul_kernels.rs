//! The quantized matmul kernels on every weight type, row length and batch size that selects a
//! different path: the pair scheme (rows of whole 64-value pairs, an even and an odd number of
//! them) and the plain scheme (an odd number of 32-value blocks), the small-batch kernels
//! (n <= 8, one and two rows at a time) and the decoded-rows kernel (n > 8).
//!
//! Each result must be (1) bitwise the same on the AVX2 and the portable build, (2) bitwise the
//! same for an activation row alone and inside a batch, and (3) within a tight bound of the f64
//! dot product of ggml's dequantized weights with the activations (the only error left is the
//! 8-bit activation quantization).

use lockstep_backend_cpu::{CpuBackend, CpuOptions, CpuTensor, Isa};
use lockstep_graph::{Backend, WeightView};
use lockstep_quant::GgmlType;
use lockstep_testkit::bits;

const TYPES: [GgmlType; 12] = [
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::Q8_0,
    GgmlType::Q2K,
    GgmlType::Q3K,
    GgmlType::Q4K,
    GgmlType::Q5K,
    GgmlType::Q6K,
    GgmlType::Iq4Nl,
    GgmlType::Iq4Xs,
];

fn backend(isa: Isa) -> CpuBackend {
    CpuBackend::new(CpuOptions {
        threads: Some(2),
        isa: Some(isa),
        ..CpuOptions::default()
    })
}

/// Deterministic values with mixed signs and magnitudes, a few outliers.
fn values(n: usize, seed: usize) -> Vec<f32> {
    (0..n)
        .map(|i| {
            let t = ((i * 7919 + seed * 104_729) % 10_007) as f32 / 10_007.0 - 0.5;
            if (i + seed).is_multiple_of(89) {
                t * 12.0
            } else {
                t * (1.0 + ((i / 64) % 5) as f32 * 0.3)
            }
        })
        .collect()
}

fn matmul(b: &CpuBackend, ty: GgmlType, w: &[u8], m: usize, k: usize, x: &[f32]) -> Vec<f32> {
    let dims = [k as u64, m as u64];
    let wt = b
        .load_weight(WeightView {
            name: "w",
            ty,
            dims: &dims,
            data: w,
        })
        .expect("load weight");
    let n = x.len() / k;
    b.matmul(&CpuTensor::from_vec(n, k, x.to_vec()), &wt)
        .data()
        .to_vec()
}

#[test]
fn every_type_path_and_batch_agrees_bitwise_and_with_exact_math() {
    let m = 37; // odd: the two-row small-batch kernels also run their one-row tail
    let isas = Isa::available();
    let mut checked = 0;
    for ty in TYPES {
        let ks: &[usize] = if ty.block_size() == 32 {
            &[640, 576, 96, 288]
        } else {
            &[512, 768]
        };
        for &k in ks {
            let wf = values(m * k, ty as usize);
            let wq = lockstep_quant::quantize(ty, &wf, m * k).expect("quantize");
            let deq = lockstep_quant::dequantize(ty, &wq, m * k).expect("dequantize");
            for n in [1usize, 2, 3, 8, 9, 20] {
                let x = values(n * k, 1000 + n);
                let per_isa: Vec<Vec<f32>> = isas
                    .iter()
                    .map(|&isa| matmul(&backend(isa), ty, &wq, m, k, &x))
                    .collect();
                for (isa, got) in isas.iter().zip(&per_isa) {
                    assert_eq!(
                        bits(got),
                        bits(&per_isa[0]),
                        "{ty} k={k} n={n}: {isa:?} differs from {:?}",
                        isas[0]
                    );
                }
                let b = backend(*isas.last().expect("an isa"));
                for c in 0..n {
                    let alone = matmul(&b, ty, &wq, m, k, &x[c * k..(c + 1) * k]);
                    assert_eq!(
                        bits(&alone),
                        bits(&per_isa[0][c * m..(c + 1) * m]),
                        "{ty} k={k} n={n}: row {c} alone differs from the batch"
                    );
                    let xr = &x[c * k..(c + 1) * k];
                    let xmax = xr.iter().fold(0f32, |a, v| a.max(v.abs())) as f64;
                    for j in 0..m {
                        let wr = &deq[j * k..(j + 1) * k];
                        let exact: f64 =
                            wr.iter().zip(xr).map(|(&w, &v)| w as f64 * v as f64).sum();
                        // Activation quantization: each value off by at most half a step of
                        // its block's scale (<= xmax / 254).
                        let bound: f64 =
                            wr.iter().map(|&w| w.abs() as f64).sum::<f64>() * xmax / 254.0;
                        let got = alone[j] as f64;
                        assert!(
                            (got - exact).abs() <= bound * 1.01 + 1e-4,
                            "{ty} k={k} n={n} row {c} col {j}: {got} vs exact {exact} (bound {bound})"
                        );
                    }
                }
                checked += 1;
            }
        }
    }
    assert_eq!(checked, (6 * 4 + 6 * 2) * 6);
}
