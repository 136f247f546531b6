//! The continuous-batching scheduler on the tiny-llama fixture (reference backend): outputs
//! bitwise equal to each request run alone (and to `generate`), chunked prefill, block
//! accounting, preemption by recompute, prefix-cache reuse, first-come-first-served admission,
//! cancellation and request validation.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;

use common::*;
use lockstep_engine::scheduler::{
    Event, Finished, Request, RequestId, Scheduler, SchedulerConfig, SubmitError,
};
use lockstep_engine::{generate, EngineConfig, FinishReason, MonitorConfig, SamplingParams};
use lockstep_gguf::GgufFile;
use lockstep_tokenizer::Tokenizer;

fn model() -> std::path::PathBuf {
    fixtures().join("tiny-llama/tiny-llama-Q4_0.gguf")
}

fn tokenizer() -> Arc<Tokenizer> {
    let f = GgufFile::open(model()).expect("open model");
    Arc::new(Tokenizer::from_metadata(f.metadata()).expect("tokenizer"))
}

fn scheduler(
    ecfg: EngineConfig,
    scfg: SchedulerConfig,
) -> Scheduler<lockstep_backend_ref::RefBackend> {
    Scheduler::new(ref_engine(&model(), ecfg), tokenizer(), scfg).expect("scheduler")
}

/// Deterministic pseudo-random prompt of `n` tokens (below the special ids 1022, 1023).
fn prompt(n: usize, salt: usize) -> Vec<u32> {
    (0..n)
        .map(|i| ((i * 7919 + salt * 104729 + 13) % 1000) as u32 + 3)
        .collect()
}

fn request(prompt: Vec<u32>, max_tokens: usize, seed: Option<u64>) -> Request {
    let params = match seed {
        Some(seed) => SamplingParams {
            seed,
            max_tokens: Some(max_tokens),
            ignore_eos: true,
            ..SamplingParams::default()
        },
        None => SamplingParams {
            max_tokens: Some(max_tokens),
            ignore_eos: true,
            ..SamplingParams::greedy()
        },
    };
    Request {
        prompt,
        params,
        logprobs: Some(5),
        logit_bias: Vec::new(),
        monitor: MonitorConfig::default(),
        capture_logits: false,
    }
}

/// What a request produced: tokens, the bits of every logprob, text, and how it ended.
#[derive(Debug, Default, Clone, PartialEq)]
struct Outcome {
    tokens: Vec<u32>,
    logprob_bits: Vec<u32>,
    text: String,
    finish: Option<FinishReason>,
}

fn collect(
    out: &mut BTreeMap<RequestId, Outcome>,
    events: Vec<(RequestId, Event)>,
) -> Vec<(RequestId, Finished)> {
    let mut finished = Vec::new();
    for (id, ev) in events {
        let o = out.entry(id).or_default();
        match ev {
            Event::Token {
                token,
                text,
                logprob,
                ..
            } => {
                assert!(o.finish.is_none(), "request {id}: token after its end");
                o.tokens.push(token);
                o.text.push_str(&text);
                let lp = logprob.expect("logprobs were asked for");
                assert_eq!(lp.token, token);
                assert_eq!(lp.top.len(), 5);
                o.logprob_bits.push(lp.logprob.to_bits());
                o.logprob_bits
                    .extend(lp.top.iter().map(|&(t, l)| t ^ l.to_bits()));
            }
            Event::Finished(f) => {
                o.text.push_str(&f.tail);
                o.finish = Some(f.finish);
                finished.push((id, f));
            }
            Event::Failed(m) => panic!("request {id} failed: {m}"),
            Event::Alarm(_) => {}
        }
    }
    finished
}

/// Steps until idle (bounded), returning every request's outcome and finish records in order.
fn run_all<B: lockstep_graph::Backend>(
    s: &mut Scheduler<B>,
) -> (BTreeMap<RequestId, Outcome>, Vec<(RequestId, Finished)>) {
    let mut out = BTreeMap::new();
    let mut finished = Vec::new();
    for _ in 0..10_000 {
        if !s.has_work() {
            return (out, finished);
        }
        finished.extend(collect(&mut out, s.step()));
    }
    panic!("scheduler did not finish in 10000 steps");
}

fn solo(req: &Request) -> Outcome {
    let mut s = scheduler(EngineConfig::default(), SchedulerConfig::default());
    let id = s.submit(req.clone()).expect("submit");
    let (mut out, _) = run_all(&mut s);
    out.remove(&id).expect("outcome")
}

fn mixed_requests() -> Vec<Request> {
    (0..6)
        .map(|i| {
            let seed = if i % 2 == 0 {
                None
            } else {
                Some(1000 + i as u64)
            };
            request(prompt(3 + i * 11, i), 6 + i, seed)
        })
        .collect()
}

#[test]
fn batched_requests_are_bitwise_their_solo_runs() {
    let reqs = mixed_requests();
    let alone: Vec<Outcome> = reqs.iter().map(solo).collect();
    // A small token budget forces chunked prefill alongside decode steps, and a scrambled
    // allocator puts the blocks elsewhere than in the solo runs.
    let mut s = scheduler(
        EngineConfig {
            block_size: 4,
            scramble_blocks: Some(99),
            ..EngineConfig::default()
        },
        SchedulerConfig {
            max_seqs: 4,
            max_batch_tokens: 9,
            max_queue: 16,
        },
    );
    let ids: Vec<RequestId> = reqs
        .iter()
        .map(|r| s.submit(r.clone()).expect("submit"))
        .collect();
    let (out, _) = run_all(&mut s);
    for (i, id) in ids.iter().enumerate() {
        let o = &out[id];
        assert_eq!(o.tokens.len(), reqs[i].params.max_tokens.unwrap_or(0));
        assert_eq!(o, &alone[i], "request {i} differs from its solo run");
        assert_eq!(o.finish, Some(FinishReason::Length));
    }
    assert!(
        s.stats().steps > 6,
        "expected many steps, got {}",
        s.stats().steps
    );
    assert_eq!(s.stats().kv_blocks_used, 0, "every block is returned");
}

#[test]
fn scheduler_matches_generate() {
    let tok = tokenizer();
    let mut e = ref_engine(&model(), EngineConfig::default());
    for req in mixed_requests().into_iter().take(3) {
        let g = generate(&mut e, &tok, &req.prompt, &req.params, |_| {}).expect("generate");
        let o = solo(&req);
        assert_eq!(o.tokens, g.ids);
        assert_eq!(o.text, g.text);
        assert_eq!(o.finish, Some(g.finish));
    }
}

#[test]
fn preemption_recomputes_and_changes_nothing() {
    let reqs: Vec<Request> = (0..4)
        .map(|i| request(prompt(6, 40 + i), 14, Some(i as u64)))
        .collect();
    let alone: Vec<Outcome> = reqs.iter().map(solo).collect();
    // 8 blocks of 4 tokens: each request needs 5 blocks at its end, so four at once cannot fit.
    let mut s = scheduler(
        EngineConfig {
            block_size: 4,
            cache_tokens: 32,
            ..EngineConfig::default()
        },
        SchedulerConfig {
            max_seqs: 4,
            max_batch_tokens: 64,
            max_queue: 16,
        },
    );
    let ids: Vec<RequestId> = reqs
        .iter()
        .map(|r| s.submit(r.clone()).expect("submit"))
        .collect();
    let mut out = BTreeMap::new();
    let mut finished = Vec::new();
    let mut peak = 0;
    for _ in 0..1000 {
        if !s.has_work() {
            break;
        }
        finished.extend(collect(&mut out, s.step()));
        let st = s.stats();
        assert!(st.kv_blocks_used <= st.kv_blocks_total);
        peak = peak.max(st.kv_blocks_used);
    }
    assert!(!s.has_work());
    assert!(s.stats().preemptions > 0, "the cache was meant to run out");
    assert_eq!(peak, 8, "the whole cache was used");
    assert!(finished.iter().any(|(_, f)| f.preemptions > 0));
    for (i, id) in ids.iter().enumerate() {
        assert_eq!(out[id], alone[i], "request {i} differs after preemption");
    }
    assert_eq!(s.stats().kv_blocks_used, 0);
}

#[test]
fn prefix_cache_reuses_whole_blocks_bitwise() {
    let shared = prompt(37, 7);
    let mut second = shared[..33].to_vec();
    second.extend(prompt(5, 8));
    let first = request(shared.clone(), 5, None);
    let second = request(second, 7, Some(3));
    let alone = [solo(&first), solo(&second)];
    let mut s = scheduler(
        EngineConfig {
            block_size: 8,
            prefix_cache: true,
            ..EngineConfig::default()
        },
        SchedulerConfig::default(),
    );
    let a = s.submit(first.clone()).expect("submit");
    let (out_a, fin_a) = run_all(&mut s);
    assert_eq!(fin_a[0].1.n_cached_prompt, 0);
    let b = s.submit(second.clone()).expect("submit");
    let (out_b, fin_b) = run_all(&mut s);
    // 33 shared tokens = 4 whole blocks of 8.
    assert_eq!(fin_b[0].1.n_cached_prompt, 32);
    assert_eq!(out_a[&a], alone[0]);
    assert_eq!(out_b[&b], alone[1], "a prefix-cache hit changed the output");
    // The same prompt again: all but the last (partial) block comes from the cache, and at
    // least one token is always evaluated.
    let c = s.submit(first.clone()).expect("submit");
    let (out_c, fin_c) = run_all(&mut s);
    assert_eq!(fin_c[0].1.n_cached_prompt, 32);
    assert_eq!(out_c[&c], alone[0]);
    let st = s.stats();
    assert_eq!(
        st.kv_blocks_used, 0,
        "cached blocks nobody holds count as free"
    );
    assert!(st.prefix_blocks_hit >= 8);
}

#[test]
fn prefix_cache_blocks_are_evicted_when_needed() {
    // 6 blocks of 4: a first request leaves its blocks cached, a second unrelated one needs
    // them all.
    let mut s = scheduler(
        EngineConfig {
            block_size: 4,
            cache_tokens: 24,
            prefix_cache: true,
            ..EngineConfig::default()
        },
        SchedulerConfig::default(),
    );
    let a = request(prompt(16, 1), 4, None);
    let b = request(prompt(18, 2), 5, None);
    s.submit(a).expect("submit");
    run_all(&mut s);
    assert!(s.engine().prefix_cache_stats().2 >= 4);
    let id = s.submit(b.clone()).expect("submit");
    let (out, _) = run_all(&mut s);
    assert_eq!(out[&id], solo(&b));
}

#[test]
fn admission_is_first_come_first_served_and_the_queue_is_bounded() {
    let mut s = scheduler(
        EngineConfig::default(),
        SchedulerConfig {
            max_seqs: 1,
            max_batch_tokens: 64,
            max_queue: 3,
        },
    );
    let ids: Vec<RequestId> = (0..3)
        .map(|i| s.submit(request(prompt(5, i), 3, None)).expect("submit"))
        .collect();
    assert_eq!(
        s.submit(request(prompt(5, 9), 3, None)),
        Err(SubmitError::QueueFull(3))
    );
    let (_, finished) = run_all(&mut s);
    let order: Vec<RequestId> = finished.iter().map(|(id, _)| *id).collect();
    assert_eq!(order, ids);
}

#[test]
fn a_long_prompt_does_not_stall_decoding() {
    let mut s = scheduler(
        EngineConfig::default(),
        SchedulerConfig {
            max_seqs: 4,
            max_batch_tokens: 16,
            max_queue: 8,
        },
    );
    let short = s.submit(request(prompt(4, 1), 30, None)).expect("submit");
    s.step(); // the short prompt is prefilled
    let long = s.submit(request(prompt(200, 2), 2, None)).expect("submit");
    // While the 200-token prompt is prefilled in chunks of at most 15, the short request gets
    // a token every step.
    for step in 0..10 {
        let ev = s.step();
        assert!(
            ev.iter()
                .any(|(id, e)| *id == short && matches!(e, Event::Token { .. })),
            "step {step}: the decoding request got no token"
        );
        assert!(
            !ev.iter().any(|(id, _)| *id == long),
            "the long prompt cannot be done yet"
        );
    }
}

#[test]
fn cancellation_frees_blocks_at_the_next_step() {
    let mut s = scheduler(EngineConfig::default(), SchedulerConfig::default());
    let a = s.submit(request(prompt(40, 1), 50, None)).expect("submit");
    let b = s.submit(request(prompt(20, 2), 50, None)).expect("submit");
    s.step();
    s.step();
    let used_both = s.stats().kv_blocks_used;
    assert!(s.block_table(a).is_some());
    s.cancel(a);
    let ev = s.step();
    assert!(
        ev.iter().all(|(id, _)| *id == b),
        "no event for a cancelled request"
    );
    assert!(s.block_table(a).is_none());
    assert_eq!(
        s.stats().kv_blocks_used,
        used_both - 3,
        "a's 3 blocks of 16 are free"
    );
    // A waiting request leaves the queue at once.
    let c = s.submit(request(prompt(5, 3), 5, None)).expect("submit");
    s.cancel(c);
    assert_eq!(s.stats().waiting, 0);
    s.cancel(b);
    s.step();
    assert!(!s.has_work());
    assert_eq!(s.stats().kv_blocks_used, 0);
}

#[test]
fn bad_requests_are_refused_with_the_reason() {
    let mut s = scheduler(
        EngineConfig {
            n_ctx: 64,
            ..EngineConfig::default()
        },
        SchedulerConfig::default(),
    );
    assert_eq!(
        s.submit(request(Vec::new(), 3, None)),
        Err(SubmitError::EmptyPrompt)
    );
    assert!(matches!(
        s.submit(request(prompt(64, 1), 3, None)),
        Err(SubmitError::PromptTooLong {
            n_prompt: 64,
            limit: 63,
            ..
        })
    ));
    assert_eq!(
        s.submit(request(vec![1, 5000], 3, None)),
        Err(SubmitError::TokenOutOfRange {
            index: 1,
            id: 5000,
            vocab: 1024
        })
    );
    let mut r = request(prompt(4, 1), 3, None);
    r.logit_bias = vec![(2000, 1.0)];
    assert_eq!(
        s.submit(r),
        Err(SubmitError::BiasOutOfRange {
            id: 2000,
            vocab: 1024
        })
    );
    let mut r = request(prompt(4, 1), 3, None);
    r.logprobs = Some(21);
    assert_eq!(s.submit(r), Err(SubmitError::TooManyLogprobs(21)));
    let mut r = request(prompt(4, 1), 3, None);
    r.params.top_p = 0.0;
    assert!(matches!(s.submit(r), Err(SubmitError::Params(e)) if e.field == "top_p"));
    assert!(!s.has_work(), "refused requests leave no trace");
}

#[test]
fn logit_bias_steers_the_choice_and_length_is_capped_by_the_context() {
    let mut s = scheduler(
        EngineConfig {
            n_ctx: 24,
            ..EngineConfig::default()
        },
        SchedulerConfig::default(),
    );
    let mut r = request(prompt(20, 1), 100, None);
    r.logit_bias = vec![(777, 100.0)];
    let id = s.submit(r).expect("submit");
    let (out, fin) = run_all(&mut s);
    assert_eq!(
        out[&id].tokens,
        vec![777; 4],
        "20 prompt + 4 generated = the context of 24"
    );
    assert_eq!(fin[0].1.finish, FinishReason::Length);
}

#[test]
fn monitor_alarms_are_events_when_they_fire_and_listed_at_the_end() {
    let mut s = scheduler(EngineConfig::default(), SchedulerConfig::default());
    let mut r = request(prompt(5, 1), 10, None);
    r.logit_bias = vec![(777, 100.0)];
    let id = s.submit(r).expect("submit");
    // (tokens seen when it fired, kind)
    let mut alarms = Vec::new();
    let mut tokens = 0;
    let mut finished = None;
    for _ in 0..100 {
        for (rid, ev) in s.step() {
            assert_eq!(rid, id);
            match ev {
                Event::Token { .. } => tokens += 1,
                Event::Alarm(w) => alarms.push((tokens, w.kind)),
                Event::Finished(f) => finished = Some(f),
                Event::Failed(m) => panic!("{m}"),
            }
        }
        if !s.has_work() {
            break;
        }
    }
    // The 8th identical token fires the repeat monitor, right after that token's event. (The
    // tiny fixture's random weights also make its logits nearly flat from the first token.)
    assert!(
        alarms.contains(&(8, lockstep_engine::WarningKind::RepeatedToken)),
        "{alarms:?}"
    );
    let f = finished.expect("finished");
    let listed: Vec<_> = f.warnings.iter().map(|w| w.kind).collect();
    let fired: Vec<_> = alarms.iter().map(|&(_, k)| k).collect();
    assert_eq!(listed, fired, "each alarm once, and all of them at the end");
}

/// Tokens and text of every request, logprobs not asked for.
fn plain_outcomes<B: lockstep_graph::Backend>(
    s: &mut Scheduler<B>,
    reqs: &[Request],
) -> Vec<(Vec<u32>, String)> {
    let ids: Vec<RequestId> = reqs
        .iter()
        .map(|r| s.submit(r.clone()).expect("submit"))
        .collect();
    let mut out: BTreeMap<RequestId, (Vec<u32>, String)> = BTreeMap::new();
    for _ in 0..10_000 {
        if !s.has_work() {
            break;
        }
        for (id, ev) in s.step() {
            let o = out.entry(id).or_default();
            match ev {
                Event::Token { token, text, .. } => {
                    o.0.push(token);
                    o.1.push_str(&text);
                }
                Event::Finished(f) => o.1.push_str(&f.tail),
                Event::Failed(m) => panic!("request {id} failed: {m}"),
                Event::Alarm(_) => {}
            }
        }
    }
    assert!(!s.has_work(), "scheduler did not finish");
    ids.iter()
        .map(|id| out.remove(id).unwrap_or_default())
        .collect()
}

#[test]
fn reduced_rows_sample_what_full_rows_sample() {
    // Greedy and top-k requests (reduced rows), one with a logit bias (full rows for the whole
    // step when it samples) and one with logprobs (reduced, with the row's total), batched
    // together.
    let mut reqs: Vec<Request> = mixed_requests()
        .into_iter()
        .map(|mut r| {
            r.logprobs = None;
            r
        })
        .collect();
    reqs[1].params.top_k = 64;
    reqs[3].params.temperature = 1.4;
    reqs[4].logit_bias = vec![(7, 3.0)];
    reqs[5].logprobs = Some(2);
    let run = |full: bool, reqs: &[Request]| {
        let mut s = scheduler(
            EngineConfig::default(),
            SchedulerConfig {
                max_seqs: 3,
                ..SchedulerConfig::default()
            },
        );
        s.set_full_logits(full);
        plain_outcomes(&mut s, reqs)
    };
    for subset in [&reqs[..4], &reqs[..]] {
        let reduced = run(false, subset);
        let full = run(true, subset);
        assert_eq!(reduced, full);
        for (i, (t, _)) in reduced.iter().enumerate() {
            assert_eq!(
                t.len(),
                subset[i].params.max_tokens.unwrap_or(0),
                "request {i}"
            );
        }
    }
}

#[test]
fn whole_row_picks_sample_what_full_rows_sample() {
    // Temperature sampling without top-k (the backend draws from the whole row, or for top-p
    // sums it), batched with greedy and top-k requests (reduced rows).
    let mut reqs: Vec<Request> = mixed_requests()
        .into_iter()
        .map(|mut r| {
            r.logprobs = None;
            r
        })
        .collect();
    let draw = |r: &mut Request, temperature: f32, min_p: f32, seed: u64| {
        r.params.temperature = temperature;
        r.params.top_k = 0;
        r.params.top_p = 1.0;
        r.params.min_p = min_p;
        r.params.seed = seed;
    };
    draw(&mut reqs[1], 1.0, 0.0, 7);
    draw(&mut reqs[2], 0.6, 0.05, 8);
    draw(&mut reqs[5], 1.3, 0.0, 9);
    // Top-p without top-k: the total beside the 64 largest logits (or the row).
    draw(&mut reqs[3], 0.9, 0.0, 10);
    reqs[3].params.top_p = 0.3;
    draw(&mut reqs[4], 1.0, 0.0, 11);
    reqs[4].params.top_p = 0.95;
    let run = |full: bool| {
        let mut s = scheduler(
            EngineConfig::default(),
            SchedulerConfig {
                max_seqs: 3,
                ..SchedulerConfig::default()
            },
        );
        s.set_full_logits(full);
        let out = plain_outcomes(&mut s, &reqs);
        (out, s.stats())
    };
    let (drawn, stats) = run(false);
    let (full, full_stats) = run(true);
    assert_eq!(drawn, full);
    let generated: usize = reqs.iter().filter_map(|r| r.params.max_tokens).sum();
    let by_draw: usize = [1, 2, 3, 4, 5]
        .iter()
        .filter_map(|&i| reqs[i].params.max_tokens)
        .sum();
    assert_eq!(stats.rows_picked as usize, by_draw);
    assert_eq!(stats.rows_reduced as usize, generated - by_draw);
    assert_eq!(stats.rows_full, 0);
    assert_eq!(full_stats.rows_full as usize, generated);
    assert_eq!(full_stats.rows_picked + full_stats.rows_reduced, 0);
}

#[test]
fn penalized_and_biased_rows_sample_what_full_rows_sample() {
    // Penalties and logit biases adjust a few logits: greedy and top-k requests with them get
    // the row's largest logits and those tokens' logits (`Sampler::top_needed_adjusted`), not
    // the row, and sample what the row gives. Penalties that lower and raise logits, a bias
    // that promotes a token from deep in the row and one that sinks the likeliest, logprobs.
    let mut reqs: Vec<Request> = mixed_requests()
        .into_iter()
        .map(|mut r| {
            r.logprobs = None;
            r.params.max_tokens = Some(24);
            r
        })
        .collect();
    reqs[0].params.repeat_penalty = 1.5;
    reqs[0].params.repeat_last_n = Some(16);
    reqs[1].params.top_k = 40;
    reqs[1].params.frequency_penalty = 0.8;
    reqs[1].params.presence_penalty = 0.5;
    reqs[1].params.repeat_last_n = Some(20);
    reqs[2].params.repeat_penalty = 0.9;
    reqs[2].params.presence_penalty = -0.7;
    reqs[2].params.repeat_last_n = Some(8);
    reqs[2].logit_bias = vec![(777, 9.0), (12, -4.0), (777, 0.25)];
    reqs[3].params.top_k = 5;
    reqs[3].params.temperature = 1.3;
    reqs[3].params.repeat_penalty = 1.2;
    reqs[3].params.repeat_last_n = Some(10);
    reqs[3].logprobs = Some(3);
    reqs[4].logit_bias = vec![(500, 12.0)];
    reqs[5].params.top_k = 20;
    reqs[5].params.frequency_penalty = 1.0;
    reqs[5].params.repeat_last_n = Some(12);
    let run = |full: bool, reqs: &[Request]| {
        let mut s = scheduler(
            EngineConfig::default(),
            SchedulerConfig {
                max_seqs: 3,
                ..SchedulerConfig::default()
            },
        );
        s.set_full_logits(full);
        let out = plain_outcomes(&mut s, reqs);
        (out, s.stats())
    };
    let (adjusted, stats) = run(false, &reqs);
    let (full, full_stats) = run(true, &reqs);
    assert_eq!(adjusted, full);
    let generated = 24 * reqs.len();
    assert_eq!(stats.rows_full, 0, "no row crossed whole");
    assert_eq!(stats.rows_picked as usize, generated);
    assert_eq!(full_stats.rows_full as usize, generated);
    // The adjustments changed what was sampled: without them, other tokens.
    let plain: Vec<Request> = reqs
        .iter()
        .map(|r| {
            let mut r = r.clone();
            r.logit_bias.clear();
            r.params.repeat_penalty = 1.0;
            r.params.frequency_penalty = 0.0;
            r.params.presence_penalty = 0.0;
            r
        })
        .collect();
    let (unadjusted, _) = run(false, &plain);
    // Penalties alone (greedy, and top-k sampling), penalties and a bias, a bias alone.
    for i in [0, 1, 2, 4] {
        assert_ne!(unadjusted[i].0, adjusted[i].0, "request {i}");
    }
    // A window of more distinct tokens than fit beside the largest logits (the 64 largest
    // and the window's, the row itself when those hold too few outside the window): the same
    // tokens. (A window past `MAX_ADJUSTED_TOKENS` takes the row: the sampler's unit tests.)
    let mut wide = reqs[1].clone();
    wide.params.repeat_last_n = None;
    wide.params.top_k = 60;
    wide.prompt = prompt(100, 9);
    let (a, st) = run(false, std::slice::from_ref(&wide));
    let (b, _) = run(true, std::slice::from_ref(&wide));
    assert_eq!(a, b);
    assert_eq!((st.rows_full, st.rows_picked), (0, 24));
    assert!(st.adjusted_rows_copied > 0, "{st:?}");
}

#[test]
fn a_row_that_needs_all_of_itself_leaves_the_others_reduced() {
    // Penalties with temperature sampling without top-k (the draw needs the penalized row),
    // and captured logits, cross whole; the greedy, top-k and biased requests batched with
    // them still cross reduced, and every request samples what whole rows give.
    let mut reqs: Vec<Request> = mixed_requests()
        .into_iter()
        .map(|mut r| {
            r.logprobs = None;
            r
        })
        .collect();
    reqs[1].params.top_k = 0;
    reqs[1].params.temperature = 0.9;
    reqs[1].params.frequency_penalty = 0.7;
    reqs[2].capture_logits = true;
    reqs[4].logit_bias = vec![(12, 4.0)];
    reqs[5].params.top_k = 20;
    let run = |full: bool| {
        let mut s = scheduler(
            EngineConfig::default(),
            SchedulerConfig {
                max_seqs: 6,
                ..SchedulerConfig::default()
            },
        );
        s.set_full_logits(full);
        let ids: Vec<RequestId> = reqs
            .iter()
            .map(|r| s.submit(r.clone()).expect("submit"))
            .collect();
        // Per request its tokens; the captured rows' bits.
        let mut tokens: BTreeMap<RequestId, Vec<u32>> = BTreeMap::new();
        let mut captured: Vec<Vec<u32>> = Vec::new();
        for _ in 0..10_000 {
            if !s.has_work() {
                break;
            }
            for (id, ev) in s.step() {
                match ev {
                    Event::Token { token, logits, .. } => {
                        tokens.entry(id).or_default().push(token);
                        if let Some(l) = logits {
                            assert_eq!(id, ids[2], "only request 2 captures");
                            captured.push(l.iter().map(|v| v.to_bits()).collect());
                        }
                    }
                    Event::Failed(m) => panic!("request {id} failed: {m}"),
                    _ => {}
                }
            }
        }
        assert!(!s.has_work());
        let tokens: Vec<Vec<u32>> = ids.iter().map(|id| tokens[id].clone()).collect();
        (tokens, captured, s.stats())
    };
    let (reduced, captured, stats) = run(false);
    let (full, full_captured, _) = run(true);
    assert_eq!(reduced, full);
    assert_eq!(captured.len(), reqs[2].params.max_tokens.unwrap_or(0));
    assert_eq!(captured, full_captured, "the captured rows, bit for bit");
    let whole: usize = [1, 2]
        .iter()
        .map(|&i| reqs[i].params.max_tokens.unwrap_or(0))
        .sum();
    let generated: usize = reqs.iter().filter_map(|r| r.params.max_tokens).sum();
    assert_eq!(stats.rows_full as usize, whole);
    assert_eq!(
        (stats.rows_reduced + stats.rows_picked) as usize,
        generated - whole
    );
}

#[test]
fn logprobs_from_reduced_rows_are_the_full_rows_logprobs() {
    // Logprobs (5 alternatives) of greedy, top-k, whole-row draw and top-p requests, batched:
    // the rows reduced with their totals give the tokens and logprob bits whole rows give.
    let mut reqs = mixed_requests();
    let no_top_k = |r: &mut Request, temperature: f32, top_p: f32, min_p: f32| {
        r.params.temperature = temperature;
        r.params.top_k = 0;
        r.params.top_p = top_p;
        r.params.min_p = min_p;
        r.params.seed = 40 + r.prompt.len() as u64;
    };
    no_top_k(&mut reqs[2], 1.0, 1.0, 0.0);
    no_top_k(&mut reqs[3], 0.9, 0.5, 0.0);
    no_top_k(&mut reqs[4], 0.7, 1.0, 0.05);
    no_top_k(&mut reqs[5], 1.2, 0.95, 0.0);
    let run = |full: bool| {
        let mut s = scheduler(
            EngineConfig::default(),
            SchedulerConfig {
                max_seqs: 4,
                ..SchedulerConfig::default()
            },
        );
        s.set_full_logits(full);
        let ids: Vec<RequestId> = reqs
            .iter()
            .map(|r| s.submit(r.clone()).expect("submit"))
            .collect();
        let (mut out, _) = run_all(&mut s);
        let outcomes: Vec<Outcome> = ids
            .iter()
            .map(|id| out.remove(id).expect("outcome"))
            .collect();
        (outcomes, s.stats())
    };
    let (reduced, stats) = run(false);
    let (full, full_stats) = run(true);
    assert_eq!(reduced, full);
    for (i, o) in reduced.iter().enumerate() {
        assert_eq!(o.tokens.len(), reqs[i].params.max_tokens.unwrap_or(0));
    }
    let generated: usize = reqs.iter().filter_map(|r| r.params.max_tokens).sum();
    // Every row reduced with its total (picked); none whole.
    assert_eq!(stats.rows_full, 0);
    assert_eq!(stats.rows_picked as usize, generated);
    assert_eq!(full_stats.rows_full as usize, generated);
}
