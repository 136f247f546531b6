//! qwen2 (q/k/v biases, NEOX RoPE, untied output) on a tiny random model whose expected logits
//! come from the fixtures' independent float64 NumPy forward pass (tools/make_qwen2_fixture.py).

mod common;

use common::*;
use lockstep_engine::{EngineConfig, Logits, SeqInput};
use lockstep_graph::Taps;
use lockstep_models::Arch;

#[test]
fn tiny_qwen2_matches_numpy_float64() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data");
    let bytes = std::fs::read(dir.join("tiny-qwen2.logits.safetensors")).expect("read");
    let st = safetensors::SafeTensors::deserialize(&bytes).expect("parse");
    let tokens: Vec<u32> = st
        .tensor("tokens")
        .expect("tokens")
        .data()
        .chunks_exact(4)
        .map(|b| i32::from_le_bytes([b[0], b[1], b[2], b[3]]) as u32)
        .collect();
    let exact = read_f32(&st, "exact_f64");
    let mut e = ref_engine(&dir.join("tiny-qwen2.gguf"), EngineConfig::default());
    assert_eq!(e.model.config.arch, Arch::Qwen2);
    assert!(e.model.output.is_some(), "qwen2 has its own output matrix");
    assert!(e.model.layers[0].bq.is_some(), "qwen2 has q/k/v biases");
    let s = e.new_sequence();
    let out = e
        .forward(
            &[SeqInput {
                seq: s,
                tokens: &tokens,
                logits: Logits::All,
                mask: None,
            }],
            &mut Taps::none(),
        )
        .expect("forward");
    let err = nmse(&out[0].data, &exact);
    println!("tiny qwen2: NMSE vs float64 NumPy {err:.2e}");
    assert!(err < 1e-9, "NMSE {err:e}");
}
