//! Every quant type of the tiny-llama zoo: logits of the reference backend vs a float64
//! forward pass (`exact_f64`) and vs llama.cpp (`logits`).

mod common;

use common::*;
use lockstep_engine::{EngineConfig, Logits, SeqInput};
use lockstep_graph::Taps;

const TYPES: &[&str] = &[
    "F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K",
    "Q6_K", "IQ4_NL", "IQ4_XS",
];

#[test]
fn tiny_llama_every_quant_type_matches_exact_math() {
    let dir = fixtures().join("tiny-llama");
    let mut report = Vec::new();
    for ty in TYPES {
        let model = dir.join(format!("tiny-llama-{ty}.gguf"));
        let bytes = std::fs::read(dir.join(format!("tiny-llama-{ty}.logits.safetensors")))
            .expect("read logits fixture");
        let st = safetensors::SafeTensors::deserialize(&bytes).expect("parse safetensors");
        let tokens: Vec<u32> = {
            let t = st.tensor("tokens").expect("tokens");
            match t.dtype() {
                safetensors::Dtype::I32 => t
                    .data()
                    .chunks_exact(4)
                    .map(|b| i32::from_le_bytes([b[0], b[1], b[2], b[3]]) as u32)
                    .collect(),
                safetensors::Dtype::I64 => t
                    .data()
                    .chunks_exact(8)
                    .map(|b| i64::from_le_bytes(b.try_into().unwrap()) as u32)
                    .collect(),
                d => panic!("tokens dtype {d:?}"),
            }
        };
        let exact = read_f32(&st, "exact_f64");
        let llama = read_f32(&st, "logits");
        let mut engine = ref_engine(&model, EngineConfig::default());
        let seq = engine.new_sequence();
        let out = engine
            .forward(
                &[SeqInput {
                    seq,
                    tokens: &tokens,
                    logits: Logits::All,
                    mask: None,
                }],
                &mut Taps::none(),
            )
            .expect("forward");
        let got = &out[0].data;
        let e = nmse(got, &exact);
        let l = nmse(got, &llama);
        report.push(format!(
            "{ty:7} nmse vs exact {e:.2e}  vs llama.cpp {l:.2e}"
        ));
        assert!(e <= 1e-6, "{ty}: NMSE vs exact_f64 {e:e} > 1e-6");
        assert!(l <= 1e-3, "{ty}: NMSE vs llama.cpp {l:e} > 1e-3");
    }
    println!("{}", report.join("\n"));
}
