//! What `lockstep diff --a ref --b cpu` checks, as a test: on every fixture prompt of both real
//! models and on every tiny-llama quant type, the cpu backend agrees with the reference backend
//! at every tap of the prefill and of two greedy decode steps (one for the ~780-token prompt),
//! within the calibrated `ref`/`cpu` tolerance profile.

mod common;

use std::path::Path;

use common::*;
use lockstep_engine::EngineConfig;
use lockstep_verify::{diff_engines, render, Profile, RunSpec, TapFilter};

fn cfg() -> EngineConfig {
    EngineConfig {
        n_ctx: 1024,
        cache_tokens: 1024,
        ..EngineConfig::default()
    }
}

/// Diffs the two backends on `prompt`; returns the report's rendering when they disagree.
fn disagreement(path: &Path, prompt: &[u32]) -> Option<String> {
    let mut r = ref_engine(path, cfg());
    let mut c = cpu_engine(path, 2, cfg());
    // Long prompts: without the O(n^2) attention score taps, and one decode step.
    let long = prompt.len() > 100;
    let spec = RunSpec {
        prompt: prompt.to_vec(),
        decode: if long { 1 } else { 2 },
        filter: if long {
            TapFilter::parse("-blk.*.kq,-blk.*.kq_softmax")
        } else {
            TapFilter::all()
        },
        ..RunSpec::default()
    };
    let report =
        diff_engines(&mut r, &mut c, &spec, Profile::for_backends("ref", "cpu")).expect("diff");
    assert!(
        report.steps.iter().all(|s| !s.taps.is_empty()),
        "no taps compared"
    );
    (!report.agree()).then(|| render(&report, false))
}

fn every_prompt(model: &str) {
    let path = model_path(model);
    let ps = fixture_prompts(model);
    assert!(ps.len() >= 10, "{model}: expected the fixture prompts");
    let failures: Vec<String> = ps
        .iter()
        .enumerate()
        .filter_map(|(i, p)| disagreement(&path, p).map(|r| format!("{model} prompt {i}:\n{r}")))
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn cpu_agrees_with_reference_on_every_smollm2_prompt() {
    every_prompt("smollm2");
}

#[test]
fn cpu_agrees_with_reference_on_every_gemma3_prompt() {
    every_prompt("gemma3");
}

#[test]
fn cpu_agrees_with_reference_on_every_tiny_llama_type() {
    let dir = fixtures().join("tiny-llama");
    let mut n = 0;
    let mut failures = Vec::new();
    for entry in std::fs::read_dir(&dir).expect("tiny-llama dir") {
        let path = entry.expect("entry").path();
        if path.extension().and_then(|e| e.to_str()) != Some("gguf") {
            continue;
        }
        let prompt: Vec<u32> = (0..24u32).map(|i| (i * 37 + 5) % 1000).collect();
        if let Some(r) = disagreement(&path, &prompt) {
            failures.push(format!("{}:\n{r}", path.display()));
        }
        n += 1;
    }
    assert!(
        n >= 15,
        "expected the tiny-llama quant zoo, found {n} models"
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
