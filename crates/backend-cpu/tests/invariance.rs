//! Bitwise invariances of the cpu backend: batch vs alone, one prefill vs prefix + decode (the
//! decode steps take the small-batch kernels, the prefill the decoded-rows kernels), block size
//! and fragmented block tables, explicit all-true mask vs none, 1 vs 2 threads, two runs of the
//! same input, and (gemma3) a prompt longer than the sliding window.

#![allow(clippy::needless_range_loop)] // row indices address two parallel arrays

mod common;

use common::*;
use lockstep_engine::{Engine, EngineConfig, Logits, SeqInput};
use lockstep_graph::{Backend, Taps};

/// Rows compared per prompt: the last `KEEP` (a long prompt's vocabulary-wide logits for
/// every row would cost more than the rest of the test).
const KEEP: usize = 40;

fn base(len: usize) -> usize {
    len.saturating_sub(KEEP)
}

/// Logits of the last `KEEP` positions of `tokens`, evaluated as one prefill.
fn alone<B: Backend>(e: &mut Engine<B>, tokens: &[u32]) -> Vec<Vec<u32>> {
    let s = e.new_sequence();
    let out = e
        .forward(
            &[SeqInput {
                seq: s,
                tokens,
                logits: Logits::LastN(KEEP),
                mask: None,
            }],
            &mut Taps::none(),
        )
        .expect("forward");
    e.free_sequence(s);
    (0..tokens.len() - base(tokens.len()))
        .map(|r| bits(out[0].row(r)))
        .collect()
}

fn prompts(vocab: u32, long: usize) -> Vec<Vec<u32>> {
    // Deterministic, different lengths, crossing block boundaries (block size 16 / 4).
    [5usize, 17, 33, long]
        .iter()
        .filter(|&&n| n > 0)
        .enumerate()
        .map(|(p, &n)| {
            (0..n)
                .map(|i| ((i * 7919 + p * 104729 + 13) as u32) % vocab)
                .collect()
        })
        .collect()
}

fn check_model(path: &std::path::Path, long: usize) {
    let mut e = cpu_engine(path, 2, EngineConfig::default());
    let vocab = e.n_vocab() as u32;
    let ps = prompts(vocab.min(30000), long);
    let reference: Vec<Vec<Vec<u32>>> = ps.iter().map(|p| alone(&mut e, p)).collect();

    // 0. The same input again, and with one thread, gives the same bits.
    let again: Vec<Vec<Vec<u32>>> = ps.iter().map(|p| alone(&mut e, p)).collect();
    assert!(again == reference, "two runs of the same input differ");
    let mut e1 = cpu_engine(path, 1, EngineConfig::default());
    let one: Vec<Vec<Vec<u32>>> = ps.iter().map(|p| alone(&mut e1, p)).collect();
    assert!(one == reference, "1 thread and 2 threads differ");
    drop(e1);

    // 1. All prompts in one batch.
    let seqs: Vec<u64> = ps.iter().map(|_| e.new_sequence()).collect();
    let inputs: Vec<SeqInput<'_>> = ps
        .iter()
        .zip(&seqs)
        .map(|(p, &seq)| SeqInput {
            seq,
            tokens: p,
            logits: Logits::LastN(KEEP),
            mask: None,
        })
        .collect();
    let out = e.forward(&inputs, &mut Taps::none()).expect("batch");
    for (i, p) in ps.iter().enumerate() {
        for r in base(p.len())..p.len() {
            let k = r - base(p.len());
            assert_eq!(
                bits(out[i].row(k)),
                reference[i][k],
                "batch vs alone: prompt {i} row {r}"
            );
        }
    }
    for s in seqs {
        e.free_sequence(s);
    }

    // 2. Prefix prefill, then token-by-token decode of the rest, all prompts decoding together.
    let seqs: Vec<u64> = ps.iter().map(|_| e.new_sequence()).collect();
    // Each prompt's prefix in one batch, then its last tokens (at most 10) decoded one at a time.
    let split: Vec<usize> = ps
        .iter()
        .map(|p| p.len().saturating_sub(10).max(3))
        .collect();
    let inputs: Vec<SeqInput<'_>> = ps
        .iter()
        .zip(&seqs)
        .enumerate()
        .map(|(i, (p, &seq))| SeqInput {
            seq,
            tokens: &p[..split[i]],
            logits: Logits::LastN(split[i].saturating_sub(base(p.len()))),
            mask: None,
        })
        .collect();
    let out = e.forward(&inputs, &mut Taps::none()).expect("prefix");
    for (i, p) in ps.iter().enumerate() {
        for r in base(p.len())..split[i] {
            let k = r - base(p.len());
            assert_eq!(
                bits(out[i].row(k)),
                reference[i][k],
                "prefix: prompt {i} row {r}"
            );
        }
    }
    let longest = ps.iter().map(|p| p.len()).max().unwrap_or(0);
    let first = split.iter().copied().min().unwrap_or(0);
    for pos in first..longest {
        let active: Vec<usize> = (0..ps.len())
            .filter(|&i| pos >= split[i] && pos < ps[i].len())
            .collect();
        if active.is_empty() {
            continue;
        }
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
                reference[i][pos - base(ps[i].len())],
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
    let mut e2 = cpu_engine(
        path,
        2,
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
                tokens: &ps[2][..],
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
fn tiny_llama_is_batch_thread_and_split_invariant() {
    for ty in ["Q4_K", "Q5_K", "Q2_K", "IQ4_XS", "Q4_1", "F16"] {
        check_model(
            &fixtures().join(format!("tiny-llama/tiny-llama-{ty}.gguf")),
            0,
        );
    }
}

#[test]
fn smollm2_is_batch_thread_and_split_invariant() {
    check_model(&model_path("smollm2"), 0);
}

#[test]
fn gemma3_is_batch_thread_and_split_invariant() {
    // 530 tokens: past the 512-token sliding window of the local layers.
    check_model(&model_path("gemma3"), 530);
}
