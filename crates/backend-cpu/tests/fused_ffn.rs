//! The fused gate/up/activation op against the three separate ops, bitwise, on the real
//! feed-forward weights of both models (Q4_1; Q5_0), for batch sizes that take the small-batch
//! kernel (1, 3, 8) and the decoded-rows kernel (9, 40), on every kernel build.

use lockstep_backend_cpu::{CpuBackend, CpuOptions, CpuTensor, Isa};
use lockstep_gguf::GgufFile;
use lockstep_graph::{Activation, Backend, WeightView};
use lockstep_testkit::{bits, model_path};

fn check(model: &str, layer: usize, act: Activation) {
    let path = model_path(model);
    let f = GgufFile::open(&path).expect("open model");
    for isa in Isa::available() {
        let b = CpuBackend::new(CpuOptions {
            threads: Some(2),
            isa: Some(isa),
            ..CpuOptions::default()
        });
        let load = |name: &str| {
            let info = f.header().tensor(name).expect("tensor");
            b.load_weight(WeightView {
                name: &info.name,
                ty: info.ty,
                dims: &info.dims,
                data: f.tensor_data(info),
            })
            .expect("load")
        };
        let gate = load(&format!("blk.{layer}.ffn_gate.weight"));
        let up = load(&format!("blk.{layer}.ffn_up.weight"));
        let k = f
            .header()
            .tensor(&format!("blk.{layer}.ffn_gate.weight"))
            .expect("gate")
            .dims[0] as usize;
        for n in [1usize, 3, 8, 9, 40] {
            // Activations shaped like a normed hidden state: mixed signs, a few large values.
            let x: Vec<f32> = (0..n * k)
                .map(|i| {
                    let t = (i as f32 * 0.618_034).fract() - 0.5;
                    if i % 97 == 0 {
                        t * 40.0
                    } else {
                        t * 3.0
                    }
                })
                .collect();
            let x1 = CpuTensor::from_vec(n, k, x.clone());
            let x2 = CpuTensor::from_vec(n, k, x);
            let (g, u, a) = b.gate_up_act(&x1, &gate, &up, act);
            let g2 = b.matmul(&x2, &gate);
            let u2 = b.matmul(&x2, &up);
            let a2 = b.act_mul(&g2, &u2, act);
            assert_eq!(
                bits(g.data()),
                bits(g2.data()),
                "{model} {isa:?} n={n}: gate"
            );
            assert_eq!(bits(u.data()), bits(u2.data()), "{model} {isa:?} n={n}: up");
            assert_eq!(
                bits(a.data()),
                bits(a2.data()),
                "{model} {isa:?} n={n}: act"
            );
            assert!(a.data().iter().any(|&v| v != 0.0) && a.data().iter().all(|v| v.is_finite()));
        }
    }
}

#[test]
fn fused_gate_up_act_is_bitwise_the_separate_ops_smollm2() {
    check("smollm2", 3, Activation::Silu);
}

#[test]
fn fused_gate_up_act_is_bitwise_the_separate_ops_gemma3() {
    check("gemma3", 5, Activation::GeluTanh);
}
