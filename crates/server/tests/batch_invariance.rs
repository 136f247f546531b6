//! Batch invariance of the serving path, as vLLM tests it: a *needle* request among many random
//! ones gives bitwise the tokens and logprobs it gives alone, whatever shares its batch, wherever
//! its blocks lie (scrambled allocation, other block size), whether its prompt is prefilled in
//! chunks or at once, whether its prefix comes from the prefix cache, and across preemption.
//! Both real models, cpu backend, greedy and seeded sampling.

mod common;

use std::collections::BTreeMap;

use common::*;
use lockstep_engine::scheduler::{Event, Request, RequestId, Scheduler, SchedulerConfig};
use lockstep_engine::{EngineConfig, MonitorConfig, SamplingParams};
use lockstep_graph::Backend;

/// Tokens, logprob bits (chosen and top 5) and cached-prompt count of one request.
#[derive(Clone, Debug, Default, PartialEq)]
struct Run {
    tokens: Vec<u32>,
    logprob_bits: Vec<u32>,
}

fn req(prompt: Vec<u32>, max_tokens: usize, seed: Option<u64>) -> Request {
    let base = match seed {
        Some(seed) => SamplingParams {
            temperature: 0.9,
            seed,
            ..SamplingParams::default()
        },
        None => SamplingParams::greedy(),
    };
    Request {
        prompt,
        params: SamplingParams {
            max_tokens: Some(max_tokens),
            ignore_eos: true,
            ..base
        },
        logprobs: Some(5),
        logit_bias: Vec::new(),
        monitor: MonitorConfig::default(),
        capture_logits: false,
    }
}

/// Steps until idle; returns each request's run and cached-prompt count.
fn drain<B: Backend>(
    s: &mut Scheduler<B>,
    out: &mut BTreeMap<RequestId, Run>,
    cached: &mut BTreeMap<RequestId, usize>,
    max_steps: usize,
) {
    for _ in 0..max_steps {
        if !s.has_work() {
            return;
        }
        step_into(s, out, cached);
    }
    panic!("not finished after {max_steps} steps");
}

fn step_into<B: Backend>(
    s: &mut Scheduler<B>,
    out: &mut BTreeMap<RequestId, Run>,
    cached: &mut BTreeMap<RequestId, usize>,
) {
    for (id, ev) in s.step() {
        match ev {
            Event::Token { token, logprob, .. } => {
                let r = out.entry(id).or_default();
                r.tokens.push(token);
                let lp = logprob.expect("logprobs");
                r.logprob_bits.push(lp.logprob.to_bits());
                for (t, l) in lp.top {
                    r.logprob_bits.push(t);
                    r.logprob_bits.push(l.to_bits());
                }
            }
            Event::Finished(f) => {
                cached.insert(id, f.n_cached_prompt);
            }
            Event::Failed(m) => panic!("request {id} failed: {m}"),
            Event::Alarm(_) => {}
        }
    }
}

/// A small deterministic generator (xorshift64*).
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

fn check_model(name: &str, n_random: usize) {
    let path = model_path(name);
    let prompts = fixture_prompts(name);
    let vocab = {
        let e = engine(&path, cpu(2), EngineConfig::default());
        e.n_vocab()
    };
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ vocab as u64);
    // The needle: the first 40 tokens of the longest fixture prompt (real text, several
    // blocks).
    let mut needle_prompt = prompts
        .iter()
        .max_by_key(|p| p.len())
        .cloned()
        .expect("prompts");
    assert!(
        needle_prompt.len() >= 40,
        "{name}: the longest fixture prompt is short"
    );
    needle_prompt.truncate(40);
    let needles = [
        req(needle_prompt.clone(), 10, None),
        req(needle_prompt.clone(), 10, Some(77)),
    ];

    // Solo runs, on an engine with a different block size and no prefix cache.
    let solo: Vec<Run> = needles
        .iter()
        .map(|n| {
            let mut s = scheduler(
                &path,
                cpu(2),
                EngineConfig {
                    block_size: 32,
                    ..EngineConfig::default()
                },
                SchedulerConfig::default(),
            );
            let id = s.submit(n.clone()).expect("submit");
            let mut out = BTreeMap::new();
            drain(&mut s, &mut out, &mut BTreeMap::new(), 1000);
            out.remove(&id).expect("needle ran")
        })
        .collect();
    assert_ne!(
        solo[0].tokens, solo[1].tokens,
        "greedy and seeded needles should differ"
    );

    // The haystack: random prompts (a third share the needle's first blocks, to share cached
    // blocks with it), random lengths, greedy or seeded; the needles join mid-run.
    let mut s = scheduler(
        &path,
        cpu(2),
        EngineConfig {
            block_size: 16,
            scramble_blocks: Some(rng.next()),
            prefix_cache: true,
            cache_tokens: 4096,
            ..EngineConfig::default()
        },
        SchedulerConfig {
            max_seqs: 8,
            max_batch_tokens: 48,
            max_queue: 256,
        },
    );
    let mut out = BTreeMap::new();
    let mut cached = BTreeMap::new();
    let random_request = |rng: &mut Rng| {
        let len = 3 + rng.below(45);
        let mut p: Vec<u32> = (0..len)
            .map(|_| rng.below(vocab.min(30000)) as u32)
            .collect();
        if rng.below(3) == 0 {
            let k = 16 * (1 + rng.below(2));
            p.splice(0..0, needle_prompt[..k].iter().copied());
        }
        let seed = if rng.below(2) == 0 {
            None
        } else {
            Some(rng.next())
        };
        req(p, 2 + rng.below(10), seed)
    };
    // A first wave of random requests, which also fills the prefix cache with needle blocks.
    for _ in 0..n_random / 2 {
        s.submit(random_request(&mut rng)).expect("submit");
    }
    for _ in 0..3 {
        step_into(&mut s, &mut out, &mut cached);
    }
    let needle_ids: Vec<RequestId> = needles
        .iter()
        .map(|n| s.submit(n.clone()).expect("submit"))
        .collect();
    for _ in n_random / 2..n_random {
        s.submit(random_request(&mut rng)).expect("submit");
        step_into(&mut s, &mut out, &mut cached);
    }
    drain(&mut s, &mut out, &mut cached, 5000);
    for (i, id) in needle_ids.iter().enumerate() {
        assert_eq!(
            out[id], solo[i],
            "{name}: needle {i} in a batch differs from its solo run"
        );
    }

    // The needles again, now with their whole prompt but the last block in the cache, among
    // random requests, on a cache so small that requests are preempted and recomputed.
    let mut s2 = scheduler(
        &path,
        cpu(2),
        EngineConfig {
            block_size: 8,
            scramble_blocks: Some(rng.next()),
            prefix_cache: true,
            cache_tokens: 96,
            ..EngineConfig::default()
        },
        SchedulerConfig {
            max_seqs: 6,
            max_batch_tokens: 64,
            max_queue: 256,
        },
    );
    // Request ids restart in a new scheduler.
    out.clear();
    cached.clear();
    let warm = s2
        .submit(req(needle_prompt.clone(), 1, None))
        .expect("submit");
    drain(&mut s2, &mut out, &mut cached, 1000);
    assert_eq!(cached[&warm], 0);
    let again: Vec<RequestId> = needles
        .iter()
        .map(|n| s2.submit(n.clone()).expect("submit"))
        .collect();
    for _ in 0..6 {
        let mut r = random_request(&mut rng);
        r.prompt.truncate(20);
        s2.submit(r).expect("submit");
    }
    drain(&mut s2, &mut out, &mut cached, 5000);
    let cached_needle = cached[&again[0]];
    assert!(
        cached_needle >= 32,
        "{name}: the needle's prefix came from the cache ({cached_needle} tokens)"
    );
    assert!(
        s2.stats().preemptions > 0,
        "{name}: the small cache was meant to force preemption"
    );
    for (i, id) in again.iter().enumerate() {
        assert_eq!(
            out[id], solo[i],
            "{name}: needle {i} with a prefix-cache hit (and preemption) differs from its solo run"
        );
    }
}

#[test]
fn smollm2_needle_among_random_requests_is_bitwise_its_solo_run() {
    check_model("smollm2", 24);
}

#[test]
fn gemma3_needle_among_random_requests_is_bitwise_its_solo_run() {
    check_model("gemma3", 16);
}
