//! Bitwise invariances of the reference backend: batch vs alone, one prefill vs prefix + decode,
//! block size and fragmented block tables, explicit all-true mask vs none.

#![allow(clippy::needless_range_loop)] // row indices address two parallel arrays

mod common;

use common::*;
use lockstep_engine::{Engine, EngineConfig, Logits, SeqInput};
use lockstep_graph::{Backend, Taps};

/// Logits of every position of `tokens`, evaluated as one prefill.
fn alone<B: Backend>(e: &mut Engine<B>, tokens: &[u32]) -> Vec<Vec<u32>> {
    let s = e.new_sequence();
    let out = e
        .forward(
            &[SeqInput {
                seq: s,
                tokens,
                logits: Logits::All,
                mask: None,
            }],
            &mut Taps::none(),
        )
        .expect("forward");
    e.free_sequence(s);
    (0..tokens.len()).map(|r| bits(out[0].row(r))).collect()
}

fn prompts(vocab: u32) -> Vec<Vec<u32>> {
    // Deterministic, different lengths, crossing block boundaries (block size 16 / 4).
    [5usize, 17, 33]
        .iter()
        .enumerate()
        .map(|(p, &n)| {
            (0..n)
                .map(|i| ((i * 7919 + p * 104729 + 13) as u32) % vocab)
                .collect()
        })
        .collect()
}

fn check_model(path: &std::path::Path) {
    let mut e = ref_engine(path, EngineConfig::default());
    let vocab = e.n_vocab() as u32;
    let ps = prompts(vocab.min(30000));
    let reference: Vec<Vec<Vec<u32>>> = ps.iter().map(|p| alone(&mut e, p)).collect();

    // 1. All prompts in one batch.
    let seqs: Vec<u64> = ps.iter().map(|_| e.new_sequence()).collect();
    let inputs: Vec<SeqInput<'_>> = ps
        .iter()
        .zip(&seqs)
        .map(|(p, &seq)| SeqInput {
            seq,
            tokens: p,
            logits: Logits::All,
            mask: None,
        })
        .collect();
    let out = e.forward(&inputs, &mut Taps::none()).expect("batch");
    for (i, p) in ps.iter().enumerate() {
        for r in 0..p.len() {
            assert_eq!(
                bits(out[i].row(r)),
                reference[i][r],
                "batch vs alone: prompt {i} row {r}"
            );
        }
    }
    for s in seqs {
        e.free_sequence(s);
    }

    // 2. Prefix prefill, then token-by-token decode of the rest, all prompts decoding together.
    let seqs: Vec<u64> = ps.iter().map(|_| e.new_sequence()).collect();
    let split = 3;
    let inputs: Vec<SeqInput<'_>> = ps
        .iter()
        .zip(&seqs)
        .map(|(p, &seq)| SeqInput {
            seq,
            tokens: &p[..split],
            logits: Logits::All,
            mask: None,
        })
        .collect();
    let out = e.forward(&inputs, &mut Taps::none()).expect("prefix");
    for (i, _) in ps.iter().enumerate() {
        for r in 0..split {
            assert_eq!(
                bits(out[i].row(r)),
                reference[i][r],
                "prefix: prompt {i} row {r}"
            );
        }
    }
    let longest = ps.iter().map(|p| p.len()).max().unwrap_or(0);
    for pos in split..longest {
        let active: Vec<usize> = (0..ps.len()).filter(|&i| pos < ps[i].len()).collect();
        let inputs: Vec<SeqInput<'_>> = active
            .iter()
            .map(|&i| SeqInput {
                seq: seqs[i],
                tokens: &ps[i][pos..pos + 1],
                logits: Logits::Last,
                mask: None,
            })
            .collect();
        let out = e.forward(&inputs, &mut Taps::none()).expect("decode");
        for (j, &i) in active.iter().enumerate() {
            assert_eq!(
                bits(out[j].row(0)),
                reference[i][pos],
                "decode: prompt {i} pos {pos}"
            );
        }
    }
    for s in seqs {
        e.free_sequence(s);
    }

    // 3. An explicit all-true mask gives the same bits as no mask.
    let p = &ps[1];
    let s = e.new_sequence();
    let out = e
        .forward(
            &[SeqInput {
                seq: s,
                tokens: p,
                logits: Logits::All,
                mask: Some(vec![true; p.len() * p.len()]),
            }],
            &mut Taps::none(),
        )
        .expect("masked");
    for r in 0..p.len() {
        assert_eq!(
            bits(out[0].row(r)),
            reference[1][r],
            "all-true mask: row {r}"
        );
    }
    e.free_sequence(s);

    // 4. Another block size with a scrambled (fragmented) block table.
    let mut e2 = ref_engine(
        path,
        EngineConfig {
            block_size: 4,
            scramble_blocks: Some(12345),
            ..EngineConfig::default()
        },
    );
    let s = e2.new_sequence();
    let out = e2
        .forward(
            &[SeqInput {
                seq: s,
                tokens: &ps[2],
                logits: Logits::All,
                mask: None,
            }],
            &mut Taps::none(),
        )
        .expect("fragmented");
    let table = e2.block_table(s).expect("table").to_vec();
    assert!(
        table.windows(2).any(|w| w[1] != w[0] + 1),
        "block table {table:?} should be fragmented"
    );
    for r in 0..ps[2].len() {
        assert_eq!(
            bits(out[0].row(r)),
            reference[2][r],
            "fragmented blocks: row {r}"
        );
    }
}

#[test]
fn tiny_llama_is_batch_and_split_invariant() {
    check_model(&fixtures().join("tiny-llama/tiny-llama-Q4_K.gguf"));
}

#[test]
fn smollm2_is_batch_and_split_invariant() {
    check_model(&model_path("smollm2"));
}

#[test]
fn gemma3_is_batch_and_split_invariant() {
    check_model(&model_path("gemma3"));
}
