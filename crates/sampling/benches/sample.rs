//! Timing of one `sample` call on a 262144-entry vocabulary (Gemma 3 size).
//! A benchmark, not a test: `cargo bench -p lockstep-sampling --bench sample`.

use std::time::Instant;

use lockstep_sampling::{Sampler, SamplingParams};

/// Logits shaped like a language model's: a long tail and a few standouts.
fn lm_like_logits(n: usize) -> Vec<f32> {
    let mut s: u64 = 0x1234_5678_9ABC_DEF1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            let x = (s >> 40) as f32 / (1u64 << 24) as f32;
            // Cubing skews mass toward a few tokens, as after a real forward pass.
            -5.0 + 25.0 * x * x * x * x * x * x
        })
        .collect()
}

fn main() {
    let logits = lm_like_logits(262_144);
    let history: Vec<u32> = (0..4096).map(|i| (i * 61) % 262_144).collect();
    let configs: [(&str, SamplingParams); 5] = [
        ("greedy", SamplingParams::greedy()),
        ("defaults (k40 p0.95 minp0.05)", SamplingParams::default()),
        (
            "top_p 0.95 only",
            SamplingParams {
                top_k: 0,
                min_p: 0.0,
                ..SamplingParams::default()
            },
        ),
        (
            "no filters, T=1",
            SamplingParams {
                temperature: 1.0,
                top_k: 0,
                top_p: 1.0,
                min_p: 0.0,
                ..SamplingParams::default()
            },
        ),
        (
            "defaults + penalties, window 4096",
            SamplingParams {
                repeat_penalty: 1.1,
                frequency_penalty: 0.1,
                presence_penalty: 0.1,
                repeat_last_n: None,
                ..SamplingParams::default()
            },
        ),
    ];
    // Baselines on the same row, to judge the numbers below on a given
    // (possibly loaded) machine: one plain pass, and the full sort that the
    // bucketed top-p avoids.
    let iters = 50;
    let start = Instant::now();
    let mut sum = 0.0f32;
    for _ in 0..iters {
        sum += logits.iter().sum::<f32>();
    }
    println!(
        "{:<36} {:>10.2?} (checksum {sum})",
        "baseline: one summing pass",
        start.elapsed() / iters
    );
    let start = Instant::now();
    let mut first = 0u32;
    for _ in 0..iters {
        let mut c: Vec<(f32, u32)> = logits.iter().copied().zip(0u32..).collect();
        c.sort_unstable_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        first = first.wrapping_add(c.first().map_or(0, |x| x.1));
    }
    println!(
        "{:<36} {:>10.2?} (checksum {first})",
        "baseline: full sort of the row",
        start.elapsed() / iters
    );

    for (name, params) in configs {
        let mut s = Sampler::new(params).expect("valid");
        let iters = 200;
        let start = Instant::now();
        let mut acc = 0u64;
        for _ in 0..iters {
            acc += u64::from(s.sample(&logits, &history).expect("finite"));
        }
        let per = start.elapsed() / iters;
        println!("{name:<36} {per:>10.2?} per token (checksum {acc})");
    }
}
