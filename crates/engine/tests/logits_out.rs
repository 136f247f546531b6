//! Reduced logits (`LogitsOut::Top`): the summaries a step returns are the reference reduction
//! of its full logits, and generation from them picks exactly the tokens that sampling the
//! full rows picks.

mod common;

use common::*;
use lockstep_engine::{
    generate_with, EngineConfig, GenerateOptions, Logits, LogitsSummary, SamplingParams, SeqInput,
};
use lockstep_gguf::GgufFile;
use lockstep_graph::{draw_row, RowDraw, Taps};
use lockstep_tokenizer::Tokenizer;

fn model() -> std::path::PathBuf {
    fixtures().join("tiny-llama/tiny-llama-Q4_0.gguf")
}

#[test]
fn summaries_are_the_reduction_of_the_full_rows() {
    let mut e = ref_engine(&model(), EngineConfig::default());
    let (a, b) = (e.new_sequence(), e.new_sequence());
    let prompt_a = [1u32, 15, 27, 99, 4];
    let prompt_b = [1u32, 3, 8];
    let inputs = |la, lb| {
        [
            SeqInput {
                seq: a,
                tokens: &prompt_a[..],
                logits: la,
                mask: None,
            },
            SeqInput {
                seq: b,
                tokens: &prompt_b[..],
                logits: lb,
                mask: None,
            },
        ]
    };
    let full = e
        .forward(&inputs(Logits::All, Logits::Last), &mut Taps::none())
        .expect("forward");
    // The same step again on fresh sequences, reduced.
    e.free_sequence(a);
    e.free_sequence(b);
    let (a, b) = (e.new_sequence(), e.new_sequence());
    let inputs = [
        SeqInput {
            seq: a,
            tokens: &prompt_a[..],
            logits: Logits::All,
            mask: None,
        },
        SeqInput {
            seq: b,
            tokens: &prompt_b[..],
            logits: Logits::Last,
            mask: None,
        },
    ];
    let top = e
        .forward_top(&inputs, &mut Taps::none(), 7)
        .expect("forward_top");
    assert_eq!(top.len(), 2);
    assert_eq!(top[0].len(), prompt_a.len());
    assert_eq!(top[1].len(), 1);
    for (t, f) in top.iter().zip(&full) {
        for (r, s) in t.iter().enumerate() {
            let want = LogitsSummary::of_row(f.row(r), 7);
            assert_eq!(s, &want);
            assert_eq!(s.top.len(), 7);
            assert!(s.entropy > 0.0);
        }
    }
}

#[test]
fn generation_from_summaries_is_generation_from_full_rows() {
    let f = GgufFile::open(model()).expect("open model");
    let tok = Tokenizer::from_metadata(f.metadata()).expect("tokenizer");
    let prompt = [1u32, 450, 496, 173, 701];
    let cases = [
        (0.0, 40, 1.0, 0.0),
        (0.9, 40, 0.9, 0.05),
        (1.5, 64, 1.0, 0.0),
        (0.7, 5, 0.5, 0.1),
        // Whole-row draws (no top-k, no top-p): the backend draws.
        (1.0, 0, 1.0, 0.0),
        (0.6, 0, 1.0, 0.05),
    ];
    for (ci, &(temperature, top_k, top_p, min_p)) in cases.iter().enumerate() {
        let params = SamplingParams {
            temperature,
            top_k,
            top_p,
            min_p,
            seed: 1000 + ci as u64,
            max_tokens: Some(24),
            ignore_eos: true,
            ..SamplingParams::default()
        };
        let mut ids = Vec::new();
        for full_logits in [true, false] {
            let mut e = ref_engine(&model(), EngineConfig::default());
            let opts = GenerateOptions {
                full_logits,
                ..GenerateOptions::default()
            };
            let out =
                generate_with(&mut e, &tok, &prompt, &params, &opts, |_| {}).expect("generate");
            assert_eq!(out.ids.len(), 24);
            ids.push(out.ids);
        }
        assert_eq!(ids[0], ids[1], "case {ci}");
    }
}

#[test]
fn summaries_carry_the_draw_from_the_full_row() {
    let mut e = ref_engine(&model(), EngineConfig::default());
    let prompt = [1u32, 15, 27, 99, 4];
    let a = e.new_sequence();
    let full = e
        .forward(
            &[SeqInput {
                seq: a,
                tokens: &prompt[..],
                logits: Logits::All,
                mask: None,
            }],
            &mut Taps::none(),
        )
        .expect("forward");
    e.free_sequence(a);
    let a = e.new_sequence();
    // A draw for every row but the second, at spread temperatures and uniforms.
    let draws: Vec<Option<RowDraw>> = (0..prompt.len())
        .map(|r| {
            (r != 1).then_some(RowDraw {
                temperature: 0.5 + r as f32 * 0.4,
                ln_min_p: if r == 3 {
                    0.05f64.ln()
                } else {
                    f64::NEG_INFINITY
                },
                u: (r as f64 * 0.23 + 0.11).fract(),
            })
        })
        .collect();
    let top = e
        .forward_top_draw(
            &[SeqInput {
                seq: a,
                tokens: &prompt[..],
                logits: Logits::All,
                mask: None,
            }],
            &mut Taps::none(),
            3,
            &draws,
        )
        .expect("forward_top_draw");
    let mut distinct = std::collections::BTreeSet::new();
    for (r, s) in top[0].iter().enumerate() {
        assert_eq!(s.top, LogitsSummary::of_row(full[0].row(r), 3).top);
        let want = draws[r].and_then(|d| draw_row(full[0].row(r), &d));
        assert_eq!(s.drawn, want, "row {r}");
        assert_eq!(s.drawn.is_some(), r != 1);
        distinct.extend(s.drawn);
    }
    // Not the argmax every time: the draws spread.
    assert!(distinct.len() > 1, "{distinct:?}");
}
