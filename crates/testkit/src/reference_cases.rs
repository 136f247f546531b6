//! The llama.cpp reference cases (`../shared/fixtures/reference/*/cases.json`) on any backend,
//! with the tolerances of the fixtures README:
//! - teacher-forced argmax equals llama.cpp's token wherever its top-1 margin >= 1.0;
//! - free-running greedy equals llama.cpp's ids up to the first step with margin < 1.0;
//! - full logits at steps 0 and 8: max|d| <= 3, RMS <= 1, KL(ref||ours) <= 0.15, top-20 overlap
//!   >= 16; top-20 lists at steps 0..8 overlap >= 16 with common logits within 2.5.
//!
//! All cases of a model run as one batch (sequences of different lengths side by side), so this
//! also exercises batching and the paged cache.

use crate::{fixtures, read_f32};
use lockstep_engine::{Engine, EngineConfig, Logits, SeqInput};
use lockstep_graph::{Backend, Taps};
use serde_json::Value;

const MARGIN: f64 = 1.0;

struct Case {
    idx: usize,
    name: String,
    prompt_ids: Vec<u32>,
    gen_ids: Vec<u32>,
    margins: Vec<f64>,
    topk: Vec<Vec<(u32, f64)>>,
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .expect("id array")
        .iter()
        .map(|x| x.as_u64().expect("id") as u32)
        .collect()
}

fn load_cases(model: &str) -> Vec<Case> {
    let path = fixtures().join("reference").join(model).join("cases.json");
    let j: Value = serde_json::from_slice(&std::fs::read(&path).expect("read cases.json"))
        .expect("parse cases.json");
    j["cases"]
        .as_array()
        .expect("cases")
        .iter()
        .filter(|c| c["kind"] != "batch")
        .map(|c| Case {
            idx: c["idx"].as_u64().expect("idx") as usize,
            name: c["name"].as_str().expect("name").to_string(),
            prompt_ids: ids(&c["prompt_ids"]),
            gen_ids: ids(&c["gen_ids"]),
            margins: c["gen_top1_margins"]
                .as_array()
                .expect("margins")
                .iter()
                .map(|m| m.as_f64().expect("margin"))
                .collect(),
            topk: c["topk"]
                .as_array()
                .expect("topk")
                .iter()
                .map(|s| {
                    s["top"]
                        .as_array()
                        .expect("top")
                        .iter()
                        .map(|p| {
                            (
                                p[0].as_u64().expect("id") as u32,
                                p[1].as_f64().expect("logit"),
                            )
                        })
                        .collect()
                })
                .collect(),
        })
        .collect()
}

fn argmax(x: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &v) in x.iter().enumerate() {
        if v > x[best] {
            best = i;
        }
    }
    best as u32
}

struct LogitStats {
    max_abs: f64,
    rms: f64,
    kl: f64,
    top20_overlap: usize,
}

fn top_n(x: &[f32], n: usize) -> Vec<u32> {
    let mut idx: Vec<u32> = (0..x.len() as u32).collect();
    idx.sort_by(|&a, &b| x[b as usize].total_cmp(&x[a as usize]).then(a.cmp(&b)));
    idx.truncate(n);
    idx
}

fn log_softmax(x: &[f32]) -> Vec<f64> {
    let max = x.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    let lse = x.iter().map(|&v| (v as f64 - max).exp()).sum::<f64>().ln() + max;
    x.iter().map(|&v| v as f64 - lse).collect()
}

fn stats(reference: &[f32], ours: &[f32]) -> LogitStats {
    let n = reference.len() as f64;
    let mut max_abs = 0f64;
    let mut ss = 0f64;
    for (&a, &b) in reference.iter().zip(ours) {
        let d = (a as f64 - b as f64).abs();
        max_abs = max_abs.max(d);
        ss += d * d;
    }
    let (lp, lq) = (log_softmax(reference), log_softmax(ours));
    let kl = lp.iter().zip(&lq).map(|(p, q)| p.exp() * (p - q)).sum();
    let tr = top_n(reference, 20);
    let to = top_n(ours, 20);
    LogitStats {
        max_abs,
        rms: (ss / n).sqrt(),
        kl,
        top20_overlap: tr.iter().filter(|i| to.contains(i)).count(),
    }
}

/// Engine settings that fit all cases of a model side by side.
pub fn engine_config() -> EngineConfig {
    EngineConfig {
        n_ctx: 2048,
        cache_tokens: 2 * 11 * 1024,
        ..EngineConfig::default()
    }
}

/// Runs every case of `model` (`smollm2` or `gemma3`) on `engine` (built with
/// [`engine_config`]) and panics with every failure found.
pub fn check<B: Backend>(model: &str, mut engine: Engine<B>) {
    let cases = load_cases(model);
    assert_eq!(cases.len(), 11, "{model}: expected 11 cases");
    let logits_file = std::fs::read(
        fixtures()
            .join("reference")
            .join(model)
            .join("logits.safetensors"),
    )
    .expect("read logits.safetensors");
    let ref_logits = safetensors::SafeTensors::deserialize(&logits_file).expect("parse logits");
    let mut failures = Vec::new();

    // Teacher forcing: prompt + llama.cpp's continuation, all cases in one batch.
    let inputs_tokens: Vec<Vec<u32>> = cases
        .iter()
        .map(|c| {
            let mut t = c.prompt_ids.clone();
            t.extend_from_slice(&c.gen_ids[..c.gen_ids.len() - 1]);
            t
        })
        .collect();
    let seqs: Vec<u64> = cases.iter().map(|_| engine.new_sequence()).collect();
    let inputs: Vec<SeqInput<'_>> = cases
        .iter()
        .zip(&seqs)
        .zip(&inputs_tokens)
        .map(|((c, &seq), toks)| SeqInput {
            seq,
            tokens: toks,
            logits: Logits::LastN(c.gen_ids.len()),
            mask: None,
        })
        .collect();
    let t0 = std::time::Instant::now();
    let out = engine.forward(&inputs, &mut Taps::none()).expect("forward");
    println!(
        "{model}: teacher-forced batch of {} sequences in {:.1?}",
        cases.len(),
        t0.elapsed()
    );
    for (c, lg) in cases.iter().zip(&out) {
        let steps: Vec<&[f32]> = (0..c.gen_ids.len()).map(|k| lg.row(k)).collect();
        let mut agree = 0;
        for (k, s) in steps.iter().enumerate() {
            let a = argmax(s);
            if a == c.gen_ids[k] {
                agree += 1;
            } else if c.margins[k] >= MARGIN {
                failures.push(format!(
                    "{model} #{} {}: teacher-forced step {k}: argmax {a} != {} (margin {:.3})",
                    c.idx, c.name, c.gen_ids[k], c.margins[k]
                ));
            }
        }
        for (k, top) in c.topk.iter().enumerate() {
            let ours = steps[k];
            let overlap = top
                .iter()
                .filter(|(id, _)| top_n(ours, 20).contains(id))
                .count();
            let worst = top
                .iter()
                .map(|&(id, l)| (ours[id as usize] as f64 - l).abs())
                .fold(0f64, f64::max);
            if overlap < 16 || worst > 2.5 {
                failures.push(format!(
                    "{model} #{}: step {k} top-20 overlap {overlap}, worst |d| {worst:.3}",
                    c.idx
                ));
            }
        }
        let mut line = format!(
            "{model} #{:2} {:15} teacher-forced top-1 {agree}/{}",
            c.idx,
            c.name,
            c.gen_ids.len()
        );
        for (step, name) in [(0, "last_prompt"), (8, "gen8")] {
            let r = read_f32(&ref_logits, &format!("p{}.{name}", c.idx));
            let s = stats(&r, steps[step]);
            line += &format!(
                " | {name}: max {:.3} rms {:.3} kl {:.2e} top20 {}",
                s.max_abs, s.rms, s.kl, s.top20_overlap
            );
            if s.max_abs > 3.0 || s.rms > 1.0 || s.kl > 0.15 || s.top20_overlap < 16 {
                failures.push(format!("{model} #{} {name}: outside tolerance", c.idx));
            }
        }
        println!("{line}");
    }
    for &s in &seqs {
        engine.free_sequence(s);
    }

    // Free-running greedy: prefill every prompt in one batch, then decode all sequences
    // together, one token each per step.
    let seqs: Vec<u64> = cases.iter().map(|_| engine.new_sequence()).collect();
    let limits: Vec<usize> = cases
        .iter()
        .map(|c| {
            c.margins
                .iter()
                .position(|&m| m < MARGIN)
                .unwrap_or(c.gen_ids.len())
        })
        .collect();
    let inputs: Vec<SeqInput<'_>> = cases
        .iter()
        .zip(&seqs)
        .map(|(c, &seq)| SeqInput {
            seq,
            tokens: &c.prompt_ids,
            logits: Logits::Last,
            mask: None,
        })
        .collect();
    let out = engine.forward(&inputs, &mut Taps::none()).expect("prefill");
    let mut next: Vec<u32> = out.iter().map(|l| argmax(l.row(0))).collect();
    let mut generated: Vec<Vec<u32>> = vec![Vec::new(); cases.len()];
    let t0 = std::time::Instant::now();
    loop {
        let mut inputs = Vec::new();
        let mut who = Vec::new();
        for i in 0..cases.len() {
            if generated[i].len() < limits[i] {
                generated[i].push(next[i]);
                if generated[i].len() < limits[i] {
                    who.push(i);
                }
            }
        }
        let toks: Vec<[u32; 1]> = who.iter().map(|&i| [next[i]]).collect();
        for (j, &i) in who.iter().enumerate() {
            inputs.push(SeqInput {
                seq: seqs[i],
                tokens: &toks[j],
                logits: Logits::Last,
                mask: None,
            });
        }
        if inputs.is_empty() {
            break;
        }
        let out = engine.forward(&inputs, &mut Taps::none()).expect("decode");
        for (j, &i) in who.iter().enumerate() {
            next[i] = argmax(out[j].row(0));
        }
    }
    println!("{model}: batched greedy decode in {:.1?}", t0.elapsed());
    for (i, c) in cases.iter().enumerate() {
        let n = limits[i];
        if generated[i][..n] != c.gen_ids[..n] {
            let at = (0..n)
                .find(|&k| generated[i][k] != c.gen_ids[k])
                .unwrap_or(n);
            failures.push(format!(
                "{model} #{} {}: greedy diverges at step {at} (must match up to {n})",
                c.idx, c.name
            ));
        }
        println!("{model} #{:2} greedy matches llama.cpp for {n} steps (up to the first low-margin step)", c.idx);
    }
    assert!(failures.is_empty(), "failures:\n{}", failures.join("\n"));
}
