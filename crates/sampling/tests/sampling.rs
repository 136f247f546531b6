//! Behavioural tests of the sampler, penalties, params and finish reasons,
//! against hand-computed values.

use lockstep_sampling::{
    apply_penalties, draw_row, row_total, FinishReason, Sampler, SamplingError, SamplingParams,
    DEFAULT_SEED,
};

/// Temperature 1 and every filter/penalty off: draws follow the plain softmax.
fn plain(seed: u64) -> SamplingParams {
    SamplingParams {
        temperature: 1.0,
        top_k: 0,
        top_p: 1.0,
        min_p: 0.0,
        seed,
        ..SamplingParams::default()
    }
}

fn softmax(logits: &[f32], temperature: f64) -> Vec<f64> {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let w: Vec<f64> = logits
        .iter()
        .map(|&l| ((f64::from(l) - f64::from(max)) / temperature).exp())
        .collect();
    let total: f64 = w.iter().sum();
    w.iter().map(|x| x / total).collect()
}

/// Deterministic pseudo-random logits (xorshift64), values in [-range, range].
fn pseudo_logits(n: usize, seed: u64, range: f32) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            let x = (s >> 40) as f32 / (1u64 << 24) as f32;
            (x * 2.0 - 1.0) * range
        })
        .collect()
}

fn empirical(params: SamplingParams, logits: &[f32], draws: usize) -> Vec<f64> {
    let mut sampler = Sampler::new(params).expect("valid params");
    let mut counts = vec![0usize; logits.len()];
    for _ in 0..draws {
        let t = sampler.sample(logits, &[]).expect("finite logits");
        counts[t as usize] += 1;
    }
    counts.iter().map(|&c| c as f64 / draws as f64).collect()
}

fn max_abs_diff(a: &[f64], b: &[f64]) -> f64 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f64::max)
}

fn assert_dist(got: &[(u32, f64)], want: &[(u32, f64)]) {
    assert_eq!(got.len(), want.len(), "got {got:?}, want {want:?}");
    for (g, w) in got.iter().zip(want) {
        assert_eq!(g.0, w.0, "got {got:?}, want {want:?}");
        // Logits are ln(p) rounded to f32, so expect ~1e-7 relative error.
        assert!((g.1 - w.1).abs() < 1e-6, "got {got:?}, want {want:?}");
    }
}

// ---------------------------------------------------------------- greedy

#[test]
fn greedy_picks_argmax() {
    let mut s = Sampler::new(SamplingParams::greedy()).unwrap();
    assert_eq!(s.sample(&[0.1, -3.0, 2.5, 2.4, 0.0], &[]).unwrap(), 2);
    assert_eq!(s.sample(&[-5.0, -4.0, -4.5], &[]).unwrap(), 1);
    assert_eq!(s.sample(&[7.0], &[]).unwrap(), 0);
}

#[test]
fn greedy_ties_go_to_lowest_id() {
    let mut s = Sampler::new(SamplingParams::greedy()).unwrap();
    assert_eq!(s.sample(&[1.0, 3.0, 2.0, 3.0, 3.0], &[]).unwrap(), 1);
    assert_eq!(s.sample(&[0.0; 8], &[]).unwrap(), 0);
    // -0.0 == 0.0, so this is a tie too.
    assert_eq!(s.sample(&[-1.0, -0.0, 0.0], &[]).unwrap(), 1);
}

#[test]
fn greedy_still_applies_penalties() {
    let params = SamplingParams {
        repeat_penalty: 1.1,
        ..SamplingParams::greedy()
    };
    let mut s = Sampler::new(params).unwrap();
    // 2.0 / 1.1 = 1.818... < 1.9, so the repeated token 0 loses.
    assert_eq!(s.sample(&[2.0, 1.9], &[]).unwrap(), 0);
    assert_eq!(s.sample(&[2.0, 1.9], &[0]).unwrap(), 1);
}

#[test]
fn top_k_1_equals_greedy_for_any_temperature() {
    for case in 0..20u64 {
        let logits = pseudo_logits(1000, case, 10.0);
        let mut greedy = Sampler::new(SamplingParams::greedy()).unwrap();
        let want = greedy.sample(&logits, &[]).unwrap();
        for &temperature in &[0.01f32, 0.5, 1.0, 3.0, 100.0] {
            let params = SamplingParams {
                temperature,
                top_k: 1,
                top_p: 1.0,
                min_p: 0.0,
                seed: case,
                ..SamplingParams::default()
            };
            let mut s = Sampler::new(params).unwrap();
            for _ in 0..10 {
                assert_eq!(s.sample(&logits, &[]).unwrap(), want, "T={temperature}");
            }
        }
    }
}

// ---------------------------------------------------------------- seeding

#[test]
fn same_seed_same_sequence_different_seed_differs() {
    // Flat-ish: 50 tokens with logits 0.00..0.49.
    let logits: Vec<f32> = (0..50).map(|i| i as f32 * 0.01).collect();
    let run = |seed: u64| {
        let mut s = Sampler::new(plain(seed)).unwrap();
        (0..100)
            .map(|_| s.sample(&logits, &[]).unwrap())
            .collect::<Vec<u32>>()
    };
    let a = run(1234);
    assert_eq!(a, run(1234));
    let b = run(1235);
    assert_ne!(a, b);
    // Not just different: nearly every position differs for independent
    // streams over ~50 roughly equally likely tokens.
    let same = a.iter().zip(&b).filter(|(x, y)| x == y).count();
    assert!(same < 15, "{same} of 100 positions coincide");
    // The draws really are spread out, not stuck.
    let mut distinct = a.clone();
    distinct.sort_unstable();
    distinct.dedup();
    assert!(
        distinct.len() > 30,
        "only {} distinct tokens",
        distinct.len()
    );
}

#[test]
fn default_seed_is_fixed_and_reset_rewinds() {
    assert_eq!(SamplingParams::default().seed, DEFAULT_SEED);
    let logits: Vec<f32> = (0..20).map(|i| (i % 5) as f32 * 0.1).collect();
    let mut s = Sampler::new(plain(DEFAULT_SEED)).unwrap();
    let first: Vec<u32> = (0..30).map(|_| s.sample(&logits, &[]).unwrap()).collect();
    s.reset();
    let again: Vec<u32> = (0..30).map(|_| s.sample(&logits, &[]).unwrap()).collect();
    assert_eq!(first, again);
}

#[test]
fn distribution_does_not_consume_randomness() {
    let logits: Vec<f32> = (0..30).map(|i| (i % 7) as f32 * 0.2).collect();
    let mut a = Sampler::new(plain(9)).unwrap();
    let mut b = Sampler::new(plain(9)).unwrap();
    for _ in 0..50 {
        b.distribution(&logits, &[]).unwrap();
        assert_eq!(
            a.sample(&logits, &[]).unwrap(),
            b.sample(&logits, &[]).unwrap()
        );
    }
}

// ---------------------------------------------------------------- distribution

#[test]
fn empirical_frequencies_match_softmax_at_temperature_1() {
    let logits = [1.0f32, 2.0, 0.5, -1.0, 1.5, 0.0];
    let want = softmax(&logits, 1.0);
    let got = empirical(plain(7), &logits, 20_000);
    let diff = max_abs_diff(&got, &want);
    assert!(
        diff < 0.01,
        "max |freq - p| = {diff}: got {got:?} want {want:?}"
    );
    // Chi-square with 5 degrees of freedom; 20.5 is the 0.999 quantile.
    let chi2: f64 = got
        .iter()
        .zip(&want)
        .map(|(g, p)| 20_000.0 * (g - p).powi(2) / p)
        .sum();
    assert!(chi2 < 20.5, "chi-square {chi2}");
}

#[test]
fn temperature_scales_logits_before_softmax() {
    let logits = [1.0f32, 2.0, 0.5, -1.0, 1.5, 0.0];
    for &t in &[0.5f32, 2.0] {
        let params = SamplingParams {
            temperature: t,
            ..plain(11)
        };
        let want = softmax(&logits, f64::from(t));
        let got = empirical(params.clone(), &logits, 20_000);
        let diff = max_abs_diff(&got, &want);
        assert!(diff < 0.01, "T={t}: got {got:?} want {want:?}");
        // The exact distribution too.
        let mut s = Sampler::new(params).unwrap();
        let dist = s.distribution(&logits, &[]).unwrap();
        for (id, p) in dist {
            assert!((p - want[id as usize]).abs() < 1e-12);
        }
    }
}

// ---------------------------------------------------------------- filters

/// Logits whose softmax is exactly `probs` (they sum to 1).
fn ln(probs: &[f64]) -> Vec<f32> {
    probs.iter().map(|p| p.ln() as f32).collect()
}

#[test]
fn top_p_keeps_smallest_set_reaching_p() {
    // Sorted: id1 0.4, id3 0.3, id4 0.15, id0 0.1, id2 0.05.
    let logits = ln(&[0.1, 0.4, 0.05, 0.3, 0.15]);
    let dist = |top_p: f32| {
        let params = SamplingParams { top_p, ..plain(1) };
        Sampler::new(params)
            .unwrap()
            .distribution(&logits, &[])
            .unwrap()
    };
    // 0.4 < 0.6 <= 0.4 + 0.3: {1, 3}, renormalized over 0.7.
    assert_dist(&dist(0.6), &[(1, 0.4 / 0.7), (3, 0.3 / 0.7)]);
    // 0.7 < 0.75 <= 0.85: {1, 3, 4}.
    assert_dist(
        &dist(0.75),
        &[(1, 0.4 / 0.85), (3, 0.3 / 0.85), (4, 0.15 / 0.85)],
    );
    // Even a tiny p keeps the single most likely token.
    assert_dist(&dist(0.01), &[(1, 1.0)]);
    // 0.95 < 0.95 + 0.05: all five; p = 1 is off.
    assert_eq!(dist(0.96).len(), 5);
    assert_eq!(dist(1.0).len(), 5);

    // Draws only ever land in the nucleus, with renormalized frequencies.
    let freq = empirical(
        SamplingParams {
            top_p: 0.6,
            ..plain(5)
        },
        &logits,
        20_000,
    );
    let want = [0.0, 0.4 / 0.7, 0.0, 0.3 / 0.7, 0.0];
    assert_eq!(freq[0] + freq[2] + freq[4], 0.0);
    assert!(max_abs_diff(&freq, &want) < 0.01, "{freq:?}");
}

#[test]
fn top_p_applies_to_top_k_survivors() {
    let logits = ln(&[0.1, 0.4, 0.05, 0.3, 0.15]);
    // top_k = 3 leaves {1: 0.4, 3: 0.3, 4: 0.15}, renormalized to
    // 0.4/0.85 = 0.4706, 0.3529, 0.1765; p = 0.8 needs 0.4706 + 0.3529 = 0.8235.
    let params = SamplingParams {
        top_k: 3,
        top_p: 0.8,
        ..plain(1)
    };
    let dist = Sampler::new(params)
        .unwrap()
        .distribution(&logits, &[])
        .unwrap();
    assert_dist(&dist, &[(1, 0.4 / 0.7), (3, 0.3 / 0.7)]);
}

#[test]
fn min_p_drops_tokens_below_fraction_of_max() {
    let logits = ln(&[0.5, 0.2, 0.04, 0.15, 0.11]);
    let dist = |min_p: f32| {
        let params = SamplingParams { min_p, ..plain(1) };
        Sampler::new(params)
            .unwrap()
            .distribution(&logits, &[])
            .unwrap()
    };
    // Threshold 0.25 * 0.5 = 0.125: keeps 0.5, 0.2, 0.15; drops 0.11, 0.04.
    assert_dist(
        &dist(0.25),
        &[(0, 0.5 / 0.85), (1, 0.2 / 0.85), (3, 0.15 / 0.85)],
    );
    // Threshold 0.05: keeps all but 0.04.
    assert_dist(
        &dist(0.1),
        &[
            (0, 0.5 / 0.96),
            (1, 0.2 / 0.96),
            (3, 0.15 / 0.96),
            (4, 0.11 / 0.96),
        ],
    );
    // Tight margins: threshold 0.3 * 0.5 = 0.15 keeps 0.155, drops 0.145.
    let tight = ln(&[0.5, 0.155, 0.145, 0.2]);
    let params = SamplingParams {
        min_p: 0.3,
        ..plain(1)
    };
    let got = Sampler::new(params)
        .unwrap()
        .distribution(&tight, &[])
        .unwrap();
    assert_dist(
        &got,
        &[(0, 0.5 / 0.855), (3, 0.2 / 0.855), (1, 0.155 / 0.855)],
    );
    // min_p = 1 keeps only the max.
    assert_dist(&dist(1.0), &[(0, 1.0)]);
    assert_eq!(dist(0.0).len(), 5);
}

#[test]
fn top_k_keeps_k_most_likely_renormalized() {
    let logits = ln(&[0.1, 0.4, 0.05, 0.3, 0.15]);
    let params = SamplingParams {
        top_k: 2,
        ..plain(1)
    };
    let dist = Sampler::new(params)
        .unwrap()
        .distribution(&logits, &[])
        .unwrap();
    assert_dist(&dist, &[(1, 0.4 / 0.7), (3, 0.3 / 0.7)]);
}

#[test]
fn filters_then_temperature_on_large_vocab() {
    // A 262144-entry row with every filter on: the result is a valid token
    // among the top 40, and the distribution sums to 1.
    let logits = pseudo_logits(262_144, 3, 12.0);
    let mut s = Sampler::new(SamplingParams::default()).unwrap();
    let dist = s.distribution(&logits, &[]).unwrap();
    assert!(!dist.is_empty() && dist.len() <= 40);
    let total: f64 = dist.iter().map(|&(_, p)| p).sum();
    assert!((total - 1.0).abs() < 1e-9);
    let mut sorted = logits.clone();
    sorted.sort_by(|a, b| b.total_cmp(a));
    let kth = sorted[39];
    for _ in 0..20 {
        let t = s.sample(&logits, &[]).unwrap() as usize;
        assert!(logits[t] >= kth);
    }
    // Top-p alone (the bucketing path) on the same row.
    let params = SamplingParams {
        top_k: 0,
        min_p: 0.0,
        top_p: 0.9,
        ..SamplingParams::default()
    };
    let mut s = Sampler::new(params).unwrap();
    let dist = s.distribution(&logits, &[]).unwrap();
    assert!(!dist.is_empty());
    assert!(dist.windows(2).all(|w| w[0].1 >= w[1].1));
}

// ---------------------------------------------------------------- penalties

const ROW: [f32; 6] = [2.0, -1.0, 0.5, 3.0, 0.0, -2.0];
/// With repeat_last_n = 5 the window is [3, 1, 3, 4, 3]: token 3 three times,
/// tokens 1 and 4 once; token 5 (first) falls outside.
const HISTORY: [u32; 6] = [5, 3, 1, 3, 4, 3];

fn penalized(params: &SamplingParams) -> Vec<f32> {
    let mut row = ROW.to_vec();
    apply_penalties(&mut row, &HISTORY, params).unwrap();
    row
}

#[test]
fn repeat_penalty_divides_positive_and_multiplies_non_positive() {
    let params = SamplingParams {
        repeat_penalty: 2.0,
        repeat_last_n: Some(5),
        ..SamplingParams::default()
    };
    // 3.0 / 2 = 1.5 (once, though it occurs 3 times); -1.0 * 2 = -2.0;
    // 0.0 * 2 = 0.0; token 5 is outside the window.
    assert_eq!(penalized(&params), vec![2.0, -2.0, 0.5, 1.5, 0.0, -2.0]);
}

#[test]
fn frequency_and_presence_penalties_follow_openai() {
    let params = SamplingParams {
        frequency_penalty: 0.5,
        presence_penalty: 0.25,
        repeat_last_n: Some(5),
        ..SamplingParams::default()
    };
    // token 3: 3.0 - (3 * 0.5 + 0.25) = 1.25
    // token 1: -1.0 - (1 * 0.5 + 0.25) = -1.75
    // token 4: 0.0 - 0.75 = -0.75
    assert_eq!(penalized(&params), vec![2.0, -1.75, 0.5, 1.25, -0.75, -2.0]);
}

#[test]
fn all_penalties_combined_repeat_first() {
    let params = SamplingParams {
        repeat_penalty: 2.0,
        frequency_penalty: 0.5,
        presence_penalty: 0.25,
        repeat_last_n: Some(5),
        ..SamplingParams::default()
    };
    // token 3: 3.0 / 2 - 1.75 = -0.25; token 1: -2.0 - 0.75 = -2.75;
    // token 4: 0.0 - 0.75 = -0.75.
    assert_eq!(
        penalized(&params),
        vec![2.0, -2.75, 0.5, -0.25, -0.75, -2.0]
    );
}

#[test]
fn penalty_window_sizes() {
    let base = SamplingParams {
        repeat_penalty: 2.0,
        ..SamplingParams::default()
    };
    // Whole history: token 5 (-2.0) is penalized too.
    let whole = SamplingParams {
        repeat_last_n: None,
        ..base.clone()
    };
    assert_eq!(penalized(&whole), vec![2.0, -2.0, 0.5, 1.5, 0.0, -4.0]);
    // Window of 1: only the last token (3).
    let one = SamplingParams {
        repeat_last_n: Some(1),
        ..base.clone()
    };
    assert_eq!(penalized(&one), vec![2.0, -1.0, 0.5, 1.5, 0.0, -2.0]);
    // Window 0 disables penalties.
    let zero = SamplingParams {
        repeat_last_n: Some(0),
        ..base
    };
    assert_eq!(penalized(&zero), ROW.to_vec());
    // Default window is 64: larger than this history, so same as whole.
    assert_eq!(SamplingParams::default().repeat_last_n, Some(64));
}

#[test]
fn penalties_off_leave_logits_untouched() {
    assert_eq!(penalized(&SamplingParams::default()), ROW.to_vec());
}

#[test]
fn penalty_errors() {
    let params = SamplingParams {
        repeat_penalty: 1.5,
        ..SamplingParams::default()
    };
    let mut row = ROW.to_vec();
    assert_eq!(
        apply_penalties(&mut row, &[1, 6], &params),
        Err(SamplingError::TokenOutOfRange {
            token: 6,
            vocab_size: 6
        })
    );
    assert_eq!(row, ROW.to_vec(), "row untouched on range error");
    let mut s = Sampler::new(params).unwrap();
    assert!(matches!(
        s.sample(&ROW, &[100]),
        Err(SamplingError::TokenOutOfRange { token: 100, .. })
    ));
    // Overflow from a tiny repeat penalty is reported, not propagated as inf.
    let tiny = SamplingParams {
        repeat_penalty: 1e-38,
        ..SamplingParams::default()
    };
    let mut row = vec![1e3f32, 0.0];
    assert!(matches!(
        apply_penalties(&mut row, &[0], &tiny),
        Err(SamplingError::NonFinitePenalizedLogit { index: 0, .. })
    ));
}

#[test]
fn sampler_uses_penalized_logits() {
    // Token 0 is far ahead, but a presence penalty of 10 removes it.
    let params = SamplingParams {
        presence_penalty: 10.0,
        top_k: 1,
        ..plain(3)
    };
    let mut s = Sampler::new(params).unwrap();
    assert_eq!(s.sample(&[5.0, 1.0, 0.0], &[0]).unwrap(), 1);
    assert_eq!(s.sample(&[5.0, 1.0, 0.0], &[1, 2]).unwrap(), 0);
}

// ---------------------------------------------------------------- bad logits

#[test]
fn non_finite_logits_are_errors_naming_the_index() {
    for params in [
        SamplingParams::greedy(),
        plain(1),
        SamplingParams::default(),
    ] {
        let mut s = Sampler::new(params).unwrap();
        match s.sample(&[0.0, 1.0, f32::NAN, 2.0], &[]) {
            Err(SamplingError::NonFiniteLogit { index, value }) => {
                assert_eq!(index, 2);
                assert!(value.is_nan());
            }
            other => panic!("expected NonFiniteLogit, got {other:?}"),
        }
        assert_eq!(
            s.sample(&[0.0, f32::INFINITY], &[]),
            Err(SamplingError::NonFiniteLogit {
                index: 1,
                value: f32::INFINITY
            })
        );
        assert_eq!(
            s.sample(&[f32::NEG_INFINITY], &[]),
            Err(SamplingError::NonFiniteLogit {
                index: 0,
                value: f32::NEG_INFINITY
            })
        );
        assert_eq!(s.sample(&[], &[]), Err(SamplingError::EmptyLogits));
    }
    let err = Sampler::new(plain(1))
        .unwrap()
        .sample(&[0.0, f32::NAN], &[])
        .unwrap_err();
    assert!(err.to_string().contains("index 1"), "{err}");
}

// ---------------------------------------------------------------- params

#[test]
fn validation_errors_name_the_field() {
    let d = SamplingParams::default();
    let cases: Vec<(&str, SamplingParams)> = vec![
        (
            "temperature",
            SamplingParams {
                temperature: -0.1,
                ..d.clone()
            },
        ),
        (
            "temperature",
            SamplingParams {
                temperature: f32::NAN,
                ..d.clone()
            },
        ),
        (
            "temperature",
            SamplingParams {
                temperature: f32::INFINITY,
                ..d.clone()
            },
        ),
        (
            "top_p",
            SamplingParams {
                top_p: 0.0,
                ..d.clone()
            },
        ),
        (
            "top_p",
            SamplingParams {
                top_p: 1.01,
                ..d.clone()
            },
        ),
        (
            "top_p",
            SamplingParams {
                top_p: f32::NAN,
                ..d.clone()
            },
        ),
        (
            "min_p",
            SamplingParams {
                min_p: -0.01,
                ..d.clone()
            },
        ),
        (
            "min_p",
            SamplingParams {
                min_p: 1.5,
                ..d.clone()
            },
        ),
        (
            "min_p",
            SamplingParams {
                min_p: f32::NAN,
                ..d.clone()
            },
        ),
        (
            "repeat_penalty",
            SamplingParams {
                repeat_penalty: 0.0,
                ..d.clone()
            },
        ),
        (
            "repeat_penalty",
            SamplingParams {
                repeat_penalty: -1.0,
                ..d.clone()
            },
        ),
        (
            "repeat_penalty",
            SamplingParams {
                repeat_penalty: f32::NAN,
                ..d.clone()
            },
        ),
        (
            "presence_penalty",
            SamplingParams {
                presence_penalty: f32::NAN,
                ..d.clone()
            },
        ),
        (
            "frequency_penalty",
            SamplingParams {
                frequency_penalty: f32::NEG_INFINITY,
                ..d.clone()
            },
        ),
        (
            "max_tokens",
            SamplingParams {
                max_tokens: Some(0),
                ..d.clone()
            },
        ),
        (
            "stop[1]",
            SamplingParams {
                stop: vec!["END".into(), String::new()],
                ..d.clone()
            },
        ),
    ];
    for (field, params) in cases {
        let err = params.validate().unwrap_err();
        assert_eq!(err.field, field, "{err}");
        assert!(err.to_string().contains(&format!("`{field}`")), "{err}");
        let err = Sampler::new(params).unwrap_err();
        assert_eq!(err.field, field);
    }
}

#[test]
fn valid_edge_values_pass() {
    let ok = SamplingParams {
        temperature: 0.0,
        top_k: 0,
        top_p: 1.0,
        min_p: 1.0,
        repeat_penalty: 0.5,
        repeat_last_n: None,
        presence_penalty: -2.0,
        frequency_penalty: 2.0,
        max_tokens: Some(1),
        stop: vec!["\n\n".into()],
        ..SamplingParams::default()
    };
    assert_eq!(ok.validate(), Ok(()));
    assert_eq!(SamplingParams::default().validate(), Ok(()));
    assert_eq!(SamplingParams::greedy().validate(), Ok(()));
}

#[test]
fn serde_defaults_and_repeat_last_n_forms() {
    let p: SamplingParams = serde_json::from_str(r#"{"temperature": 0.2, "stop": ["x"]}"#).unwrap();
    assert_eq!(
        p,
        SamplingParams {
            temperature: 0.2,
            stop: vec!["x".into()],
            ..SamplingParams::default()
        }
    );
    let p: SamplingParams = serde_json::from_str(r#"{"repeat_last_n": -1}"#).unwrap();
    assert_eq!(p.repeat_last_n, None);
    let p: SamplingParams = serde_json::from_str(r#"{"repeat_last_n": null}"#).unwrap();
    assert_eq!(p.repeat_last_n, None);
    let p: SamplingParams = serde_json::from_str(r#"{"repeat_last_n": 128}"#).unwrap();
    assert_eq!(p.repeat_last_n, Some(128));
    let err = serde_json::from_str::<SamplingParams>(r#"{"repeat_last_n": -2}"#).unwrap_err();
    assert!(err.to_string().contains("repeat_last_n"), "{err}");
    // Round trip.
    let p = SamplingParams {
        seed: 42,
        max_tokens: Some(10),
        ignore_eos: true,
        repeat_last_n: None,
        ..SamplingParams::default()
    };
    let json = serde_json::to_string(&p).unwrap();
    assert_eq!(serde_json::from_str::<SamplingParams>(&json).unwrap(), p);
}

#[test]
fn length_reached() {
    let p = SamplingParams {
        max_tokens: Some(3),
        ..SamplingParams::default()
    };
    assert!(!p.length_reached(2));
    assert!(p.length_reached(3));
    assert!(!SamplingParams::default().length_reached(usize::MAX));
}

// ---------------------------------------------------------------- finish reason

#[test]
fn finish_reason_openai_names() {
    assert_eq!(FinishReason::Stop.to_string(), "stop");
    assert_eq!(FinishReason::StopString.to_string(), "stop");
    assert_eq!(FinishReason::Length.to_string(), "length");
    assert_eq!(FinishReason::Length.as_openai_str(), "length");
}

#[test]
fn row_draws_made_elsewhere_are_the_samplers_draws() {
    // A backend draws with `begin_row_draw`'s parameters (`draw_row`); the tokens, and the
    // RNG stream, are those of `sample` on the same rows.
    let settings = [
        (1.0, 0, 0.0),
        (0.6, 0, 0.05),
        (1.4, 5000, 0.0),
        (2.0, 0, 0.3),
    ];
    for (si, &(temperature, top_k, min_p)) in settings.iter().enumerate() {
        let params = SamplingParams {
            temperature,
            top_k,
            min_p,
            ..plain(77 + si as u64)
        };
        let mut host = Sampler::new(params.clone()).expect("valid");
        let mut remote = Sampler::new(params).expect("valid");
        let mut seen = std::collections::BTreeSet::new();
        for step in 0..200u64 {
            let row = pseudo_logits(3000, step * 31 + si as u64, 6.0);
            assert!(remote.row_draw_needed(row.len()), "setting {si}");
            let want = host.sample(&row, &[]).expect("finite");
            let d = remote.begin_row_draw();
            let got = remote
                .finish_row_draw(draw_row(&row, &d), row.len(), None)
                .expect("drawn");
            assert_eq!(got, want, "setting {si}, step {step}");
            seen.insert(got);
        }
        assert!(
            seen.len() > 20,
            "setting {si}: {} distinct tokens",
            seen.len()
        );
    }
}

#[test]
fn a_failed_row_draw_gives_its_random_value_back() {
    let mut a = Sampler::new(plain(5)).expect("valid");
    let mut b = Sampler::new(plain(5)).expect("valid");
    let row = pseudo_logits(500, 9, 4.0);
    // b's backend found a NaN: the error `sample` gives, and nothing consumed.
    let d = b.begin_row_draw();
    let err = b.finish_row_draw(None, row.len(), Some((17, f32::NAN)));
    assert!(matches!(
        err,
        Err(SamplingError::NonFiniteLogit { index: 17, .. })
    ));
    // A token past the vocabulary is no draw either.
    let _ = b.begin_row_draw();
    assert!(b.finish_row_draw(Some(500), row.len(), None).is_err());
    let again = b.begin_row_draw();
    assert_eq!(again, d);
    let want = a.sample(&row, &[]).expect("finite");
    assert_eq!(
        b.finish_row_draw(draw_row(&row, &again), row.len(), None),
        Ok(want)
    );
}

#[test]
fn only_whole_row_draws_without_penalties_are_made_elsewhere() {
    let n = 1000;
    let needed = |p: SamplingParams| Sampler::new(p).expect("valid").row_draw_needed(n);
    assert!(needed(plain(1)));
    assert!(needed(SamplingParams {
        top_k: n,
        ..plain(1)
    }));
    assert!(!needed(SamplingParams {
        top_k: 40,
        ..plain(1)
    }));
    assert!(!needed(SamplingParams {
        top_p: 0.9,
        ..plain(1)
    }));
    assert!(!needed(SamplingParams {
        temperature: 0.0,
        ..plain(1)
    }));
    assert!(!needed(SamplingParams {
        repeat_penalty: 1.1,
        ..plain(1)
    }));
}

#[test]
fn nuclei_from_the_largest_logits_are_the_samplers_nuclei() {
    // Top-p without top-k from a row's 64 largest logits and its total: the token `sample`
    // picks on the row when the nucleus lies within them, `None` (nothing consumed) when not.
    let (mut within, mut past) = (0, 0);
    for (si, &(temperature, top_p, min_p)) in
        [(1.0f32, 0.9f32, 0.0f32), (0.7, 0.3, 0.05), (1.5, 0.95, 0.0)]
            .iter()
            .enumerate()
    {
        let params = SamplingParams {
            temperature,
            top_p,
            min_p,
            ..plain(300 + si as u64)
        };
        let mut host = Sampler::new(params.clone()).expect("valid");
        let mut remote = Sampler::new(params).expect("valid");
        for step in 0..120u64 {
            // Flat rows, and rows with a few logits far above the rest.
            let mut row = pseudo_logits(4000, step * 17 + si as u64, 3.0);
            if step % 2 == 0 {
                for j in 0..6 {
                    row[(step as usize * 131 + j * 577) % 4000] = 12.0 - j as f32;
                }
            }
            assert!(remote.nucleus_needed(row.len()));
            let want = host.sample(&row, &[]).expect("finite");
            let mut top: Vec<(u32, f32)> = row
                .iter()
                .enumerate()
                .map(|(i, &l)| (i as u32, l))
                .collect();
            top.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
            top.truncate(64);
            let total = row_total(&row).expect("finite");
            let got = match remote
                .sample_from_nucleus(&top, total, row.len(), None)
                .expect("no error")
            {
                Some(t) => {
                    within += 1;
                    t
                }
                None => {
                    past += 1;
                    remote.sample(&row, &[]).expect("finite")
                }
            };
            assert_eq!(got, want, "setting {si}, step {step}");
        }
    }
    assert!(within > 100 && past > 50, "within {within}, past {past}");
}
