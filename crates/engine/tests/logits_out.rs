//! Reduced logits (`LogitsOut::Top`): the summaries a step returns are the reference reduction
//! of its full logits, and generation from them picks exactly the tokens that sampling the
//! full rows picks.

mod common;

use common::*;
use lockstep_engine::{
    generate_with, EngineConfig, GenerateOptions, Logits, LogitsSummary, SamplingParams, SeqInput,
};
use lockstep_gguf::GgufFile;
use lockstep_graph::{draw_row, nucleus_len, nucleus_prefix, row_total, RowDraw, RowPick, Taps};
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
fn lent_rows_are_the_full_rows() {
    let mut e = ref_engine(&model(), EngineConfig::default());
    let prompt_a = [1u32, 15, 27, 99, 4];
    let prompt_b = [1u32, 3, 8];
    let run = |e: &mut lockstep_engine::Engine<_>, lend: bool| {
        let (a, b) = (e.new_sequence(), e.new_sequence());
        let inputs = [
            SeqInput {
                seq: a,
                tokens: &prompt_a[..],
                logits: Logits::LastN(2),
                mask: None,
            },
            SeqInput {
                seq: b,
                tokens: &prompt_b[..],
                logits: Logits::Last,
                mask: None,
            },
        ];
        let out = if lend {
            let kept = std::cell::RefCell::new(Vec::new());
            let calls = std::cell::Cell::new(0);
            let ranges = e
                .forward_lend(&inputs, &mut Taps::none(), &|rows: &[f32]| {
                    calls.set(calls.get() + 1);
                    kept.borrow_mut().extend_from_slice(rows);
                })
                .expect("forward_lend");
            assert_eq!(calls.get(), 1);
            assert_eq!(ranges, vec![0..2, 2..3]);
            kept.into_inner()
        } else {
            let full = e.forward(&inputs, &mut Taps::none()).expect("forward");
            assert_eq!((full[0].rows(), full[1].rows()), (2, 1));
            full.iter().flat_map(|t| t.data.iter().copied()).collect()
        };
        e.free_sequence(a);
        e.free_sequence(b);
        out
    };
    let full = run(&mut e, false);
    let lent = run(&mut e, true);
    assert_eq!(full.len(), 3 * e.n_vocab());
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&lent), bits(&full));
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
        // Top-p without top-k: the row's total beside its largest logits (the row itself
        // when the nucleus reaches past them: tiny-llama's rows are flat).
        (1.0, 0, 0.9, 0.0),
        (0.8, 0, 0.2, 0.05),
    ];
    // Penalties (repeat, frequency, presence, window): greedy and top-k get the row's largest
    // logits and the window's tokens' (`Sampler::top_needed_adjusted`); the wider windows
    // outgrow what a summary carries and take the row from some step on.
    let penalties = [
        (1.0, 0.0, 0.0, Some(64)),
        (1.0, 0.0, 0.0, Some(64)),
        (1.0, 0.0, 0.0, Some(64)),
        (1.0, 0.0, 0.0, Some(64)),
        (1.0, 0.0, 0.0, Some(64)),
        (1.0, 0.0, 0.0, Some(64)),
        (1.0, 0.0, 0.0, Some(64)),
        (1.0, 0.0, 0.0, Some(64)),
        (1.3, 0.0, 0.0, Some(16)),
        (1.1, 0.5, 0.2, Some(32)),
        (0.9, -0.3, 0.0, Some(12)),
        (1.0, 0.0, 1.5, None),
    ];
    let cases: Vec<_> = cases
        .iter()
        .copied()
        .chain([
            (0.0, 1, 1.0, 0.0),
            (0.9, 40, 0.9, 0.05),
            (1.2, 8, 1.0, 0.0),
            (0.0, 1, 1.0, 0.0),
        ])
        .zip(penalties)
        .collect();
    for (ci, &((temperature, top_k, top_p, min_p), (rp, fp, pp, window))) in
        cases.iter().enumerate()
    {
        let params = SamplingParams {
            temperature,
            top_k,
            top_p,
            min_p,
            repeat_penalty: rp,
            frequency_penalty: fp,
            presence_penalty: pp,
            repeat_last_n: window,
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
fn summaries_carry_the_picks_from_the_full_rows() {
    let mut e = ref_engine(&model(), EngineConfig::default());
    let prompt = [1u32, 15, 27, 99, 4, 8];
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
    // Draws at spread temperatures and uniforms, nuclei small and large, one row without.
    let picks: Vec<Option<RowPick>> = (0..prompt.len())
        .map(|r| match r {
            1 => None,
            4 => Some(RowPick::nucleus(0.05)),
            5 => Some(RowPick::nucleus(0.95)),
            _ => {
                let d = RowPick::draw(RowDraw {
                    temperature: 0.5 + r as f32 * 0.4,
                    ln_min_p: if r == 3 {
                        0.05f64.ln()
                    } else {
                        f64::NEG_INFINITY
                    },
                    u: (r as f64 * 0.23 + 0.11).fract(),
                });
                // With the total too, as logprobs ask.
                Some(if r == 2 { d.with_total() } else { d })
            }
        })
        .collect();
    let k = 8;
    let top = e
        .forward_top_pick(
            &[SeqInput {
                seq: a,
                tokens: &prompt[..],
                logits: Logits::All,
                mask: None,
            }],
            &mut Taps::none(),
            k,
            &picks,
        )
        .expect("forward_top_pick");
    let mut distinct = std::collections::BTreeSet::new();
    for (r, s) in top[0].iter().enumerate() {
        let row = full[0].row(r);
        assert_eq!(s.top, LogitsSummary::of_row(row, k).top);
        let pick = picks[r].unwrap_or_default();
        if pick.wants_total() {
            let total = row_total(row).expect("finite");
            assert_eq!(s.total.map(f64::to_bits), Some(total.to_bits()), "row {r}");
        } else {
            assert_eq!(s.total, None);
        }
        match (pick.draw, pick.nucleus) {
            (Some(d), _) => {
                assert_eq!(s.drawn, draw_row(row, &d), "row {r}");
                let t = s.drawn.expect("drawn");
                assert_eq!(s.drawn_logit, Some(row[t as usize]));
                distinct.insert(t);
            }
            (None, Some(p)) => {
                let total = row_total(row).expect("finite");
                // The host's reduction hands back the nucleus itself.
                let nucleus = s.nucleus.as_deref().expect("a nucleus");
                assert_eq!(Some(nucleus.to_vec()), nucleus_prefix(row, p));
                assert_eq!(nucleus_len(nucleus, total, p), Some(nucleus.len()));
                assert_eq!(&LogitsSummary::of_row(row, nucleus.len()).top, nucleus);
                assert!(s.row.is_none());
                if p < 0.5 {
                    assert!(nucleus.len() < 8, "row {r}: {}", nucleus.len());
                } else {
                    assert!(nucleus.len() > 8, "row {r}: {}", nucleus.len());
                }
            }
            (None, None) => assert_eq!(
                (s.drawn, s.total, s.nucleus.is_some(), s.row.is_some()),
                (None, None, false, false)
            ),
        }
    }
    // Not the argmax every time: the draws spread.
    assert!(distinct.len() > 1, "{distinct:?}");
}
