//! The fault table as a test: every fault planted in the cpu backend's own kernels, on both
//! real models, is localised by the whole-run diff against the reference
//! (`lockstep diff --a ref --b cpu --inject F`) to exactly the tap (op, and sub-op where the
//! kernel exposes it) and step where it enters, with every input of that tap agreeing; faults
//! below the whole-run noise floor are asserted to AGREE there and to be named by the
//! isolated-op verdict (`--isolate`: the block-scale error) or by the invariance `check`
//! declares bitwise (the explicit-mask drift); and clean runs of every fixture prompt with 8
//! decode steps raise no alarm, whole-run and isolated. One process per model, models loaded
//! once.

use std::collections::HashMap;
use std::path::Path;
use std::time::Instant;

use lockstep_backend_cpu::{CpuBackend, CpuOptions};
use lockstep_backend_ref::RefBackend;
use lockstep_engine::{Engine, EngineConfig};
use lockstep_fault_table::{expected, BetweenOps, Expect, Fault, ModelFacts, OpFault};
use lockstep_gguf::{GgmlType, GgufFile};
use lockstep_models::Model;
use lockstep_testkit::{fixture_prompts, model_path};
use lockstep_verify::isolate::{isolate_trace, Arithmetic};
use lockstep_verify::{
    diff_engine_vs_trace, diff_engines, record, render, DiffReport, MaskMode, Profile, RunSpec,
    TapFilter, TraceMeta,
};

fn cfg() -> EngineConfig {
    EngineConfig {
        n_ctx: 1024,
        cache_tokens: 1024,
        ..EngineConfig::default()
    }
}

fn engines(path: &Path) -> (Engine<RefBackend>, Engine<CpuBackend>) {
    let file = GgufFile::open(path).expect("open model");
    let rb = RefBackend::new();
    let rm = Model::load(&file, &rb).expect("load");
    let cb = CpuBackend::new(CpuOptions::default());
    let cm = Model::load(&file, &cb).expect("load");
    (
        Engine::new(rb, rm, cfg()).expect("engine"),
        Engine::new(cb, cm, cfg()).expect("engine"),
    )
}

/// The first tap, in execution order, computed by a matmul with a Q8_0 weight.
fn first_q8_matmul(file: &GgufFile, n_layers: usize) -> String {
    let ty = |n: &str| file.header().tensor(n).map(|t| t.ty);
    for l in 0..n_layers {
        for (w, tap) in [
            ("attn_q", "q"),
            ("attn_k", "k"),
            ("attn_v", "v"),
            ("attn_output", "attn_out"),
            ("ffn_gate", "ffn_gate"),
            ("ffn_up", "ffn_up"),
            ("ffn_down", "ffn_out"),
        ] {
            if ty(&format!("blk.{l}.{w}.weight")) == Some(GgmlType::Q8_0) {
                return format!("blk.{l}.{tap}");
            }
        }
    }
    let head = if file.header().tensor("output.weight").is_some() {
        "output.weight"
    } else {
        "token_embd.weight"
    };
    assert_eq!(
        ty(head),
        Some(GgmlType::Q8_0),
        "the model has no Q8_0 matmul"
    );
    "result_output".into()
}

/// The largest NMSE of tap `name` over all steps (how far below its tolerance a small fault
/// sits, and that it is there at all).
fn worst_nmse(r: &DiffReport, name: &str) -> f64 {
    r.steps
        .iter()
        .flat_map(|s| s.taps.iter())
        .filter(|t| t.name == name)
        .map(|t| t.metrics.nmse)
        .fold(0.0, f64::max)
}

fn localise_all(model: &str) {
    let path = model_path(model);
    let file = GgufFile::open(&path).expect("open");
    let (mut re, mut ce) = engines(&path);
    let facts = ModelFacts {
        n_kv_heads: re.model.config.n_kv_heads,
        first_q8_matmul: first_q8_matmul(&file, re.model.config.n_layers),
    };
    let vocab = re.n_vocab() as u32;
    let ps = fixture_prompts(model);
    // A short prompt (every fault shows on it), and for the embedding fault one containing an
    // id from the upper half of the vocabulary.
    let short = ps[0].clone();
    let upper = ps
        .iter()
        .filter(|p| p.len() <= 40)
        .find(|p| p.iter().any(|&t| t >= vocab / 2))
        .expect("a short fixture prompt with an id in the upper half of the vocabulary")
        .clone();
    let mut traces = HashMap::new();
    let mut failures = Vec::new();
    for f in Fault::ALL {
        let prompt = if f == Fault::EmbedZeros {
            &upper
        } else {
            &short
        };
        let mask = if f == Fault::MaskDrift {
            MaskMode::AllTrue
        } else {
            MaskMode::None
        };
        let spec = RunSpec {
            prompt: prompt.clone(),
            decode: 2,
            filter: TapFilter::all(),
            mask,
            ..RunSpec::default()
        };
        let key = (prompt.clone(), mask);
        if !traces.contains_key(&key) {
            let meta = TraceMeta {
                backend: "ref".into(),
                ..TraceMeta::default()
            };
            let t = record(&mut re, &spec, meta).expect("ref trace");
            traces.insert(key.clone(), t);
        }
        let t0 = Instant::now();
        ce.backend.set_fault(Some(f));
        let report =
            diff_engine_vs_trace(&traces[&key], &mut ce, &spec, Profile::Quant).expect("diff");
        let secs = t0.elapsed().as_secs_f64();
        let verdict = report.verdict.as_ref().map(|v| v.sentence());
        let line = verdict.clone().unwrap_or_else(|| "AGREE".into());
        match expected(f, &facts) {
            Expect::At { step, tap } => match &report.verdict {
                Some(v) if v.step == step && v.tap == tap => {
                    eprintln!("{model} | {} | exact ({secs:.1}s) | {line}", f.name());
                    if !v.inputs.iter().all(|(_, _, pass)| *pass) {
                        failures.push(format!("{model} {}: inputs must agree: {line}", f.name()));
                    }
                }
                _ => failures.push(format!(
                    "{model} {}: expected step {step} {tap}, got {line}",
                    f.name()
                )),
            },
            Expect::NoEffect(why) => {
                eprintln!("{model} | {} | no effect: {why} | {line}", f.name());
                if !report.agree() {
                    failures.push(format!("{model} {}: no effect expected: {line}", f.name()));
                }
            }
            Expect::NeedsIsolate { op } => {
                eprintln!(
                    "{model} | {} | whole-run AGREE, {op} NMSE {:.2e} (isolate needed) | {line}",
                    f.name(),
                    worst_nmse(&report, &op)
                );
                if !report.agree() {
                    failures.push(format!(
                        "{model} {}: the whole-run diff now sees it ({line}): update the table",
                        f.name()
                    ));
                }
                // The small fault is real and sits where the table says: against a clean
                // cpu run (same kernels, no fault) the first bitwise difference is `op`.
                ce.backend.set_fault(None);
                let meta = TraceMeta {
                    backend: "cpu".into(),
                    ..TraceMeta::default()
                };
                let clean = record(&mut ce, &spec, meta).expect("clean cpu trace");
                ce.backend.set_fault(Some(f));
                let vs_clean =
                    diff_engine_vs_trace(&clean, &mut ce, &spec, Profile::Exact).expect("diff");
                match &vs_clean.verdict {
                    Some(v) if v.step == 0 && v.tap == op => eprintln!(
                        "{model} | {} | vs clean cpu (exact): {}",
                        f.name(),
                        v.sentence()
                    ),
                    other => failures.push(format!(
                        "{model} {}: vs clean cpu expected {op}, got {:?}",
                        f.name(),
                        other.as_ref().map(|v| v.sentence())
                    )),
                }
                if f == Fault::MaskDrift {
                    // A few ulps in the softmax of the explicit-mask path: inside any bound
                    // an isolated softmax may have, but the invariance `lockstep check`
                    // declares bitwise (an all-true mask vs none) names it.
                    let no_mask = RunSpec {
                        mask: MaskMode::None,
                        ..spec.clone()
                    };
                    let meta = TraceMeta {
                        backend: "cpu".into(),
                        ..TraceMeta::default()
                    };
                    let unmasked = record(&mut ce, &no_mask, meta).expect("cpu trace, no mask");
                    let inv = diff_engine_vs_trace(&unmasked, &mut ce, &spec, Profile::Exact)
                        .expect("diff");
                    match &inv.verdict {
                        Some(v) if v.step == 0 && v.tap == op => eprintln!(
                            "{model} | {} | all-true mask vs none (check): {}",
                            f.name(),
                            v.sentence()
                        ),
                        other => failures.push(format!(
                            "{model} {}: all-true mask vs none expected {op}, got {:?}",
                            f.name(),
                            other.as_ref().map(|v| v.sentence())
                        )),
                    }
                } else {
                    // The isolated-op verdict on the faulty run's own trace names the op.
                    let meta = TraceMeta {
                        backend: "cpu".into(),
                        ..TraceMeta::default()
                    };
                    let faulty = record(&mut ce, &spec, meta).expect("faulty cpu trace");
                    let iso = isolate_trace(&faulty, &file, Arithmetic::for_backend("cpu"))
                        .expect("isolate");
                    match iso.failures().first() {
                        Some(c) if c.step == 0 && c.tap == op => {
                            eprintln!("{model} | {} | isolated: {}", f.name(), iso.sentence())
                        }
                        _ => failures.push(format!(
                            "{model} {}: isolated verdict expected {op}, got {}",
                            f.name(),
                            iso.sentence()
                        )),
                    }
                }
            }
        }
    }
    ce.backend.set_fault(None);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Zero false alarms: every fixture prompt, prefill and 8 greedy decode steps, clean cpu
/// (built with the fault code, none selected) against the reference. The ~780-token prompts
/// without the O(n^2) attention score taps.
fn clean_all(model: &str) {
    let path = model_path(model);
    let file = GgufFile::open(&path).expect("open");
    let (mut re, mut ce) = engines(&path);
    ce.backend.set_fault(None);
    let mut alarms = Vec::new();
    for (i, p) in fixture_prompts(model).iter().enumerate() {
        let t0 = Instant::now();
        let long = p.len() > 100;
        let spec = RunSpec {
            prompt: p.clone(),
            decode: 8,
            filter: if long {
                TapFilter::parse("-blk.*.kq,-blk.*.kq_softmax")
            } else {
                TapFilter::all()
            },
            ..RunSpec::default()
        };
        let report = diff_engines(&mut re, &mut ce, &spec, Profile::Quant).expect("diff");
        assert_eq!(report.steps.len(), 9);
        assert!(report.steps.iter().all(|s| !s.taps.is_empty()));
        if !report.agree() {
            alarms.push(format!("{model} prompt {i}: {}", render(&report, false)));
        }
        // Isolated: every op of the cpu run recomputed on the reference from its own inputs.
        let meta = TraceMeta {
            backend: "cpu".into(),
            ..TraceMeta::default()
        };
        let trace = record(&mut ce, &spec, meta).expect("cpu trace");
        let iso = isolate_trace(&trace, &file, Arithmetic::for_backend("cpu")).expect("isolate");
        assert!(
            iso.checks.len() > 100,
            "{model} prompt {i}: isolation checked too little"
        );
        if !iso.agree() {
            alarms.push(format!("{model} prompt {i}, isolated: {}", iso.sentence()));
        }
        eprintln!(
            "{model} clean prompt {i} ({} tokens, 9 steps, {} isolated op checks): {:.1}s",
            p.len(),
            iso.checks.len(),
            t0.elapsed().as_secs_f64()
        );
    }
    assert!(alarms.is_empty(), "false alarms:\n{}", alarms.join("\n"));
}

/// Faults between ops, planted by the generic wrapper around the cpu backend.
fn between_ops_all(model: &str) {
    let path = model_path(model);
    let file = GgufFile::open(&path).expect("open");
    let rb = RefBackend::new();
    let rm = Model::load(&file, &rb).expect("load");
    let mut re = Engine::new(rb, rm, cfg()).expect("engine");
    let wb = BetweenOps::new(CpuBackend::new(CpuOptions::default()));
    let wm = Model::load(&file, &wb).expect("load");
    let mut we = Engine::new(wb, wm, cfg()).expect("engine");
    let spec = RunSpec {
        prompt: fixture_prompts(model)[0].clone(),
        decode: 2,
        ..RunSpec::default()
    };
    let meta = TraceMeta {
        backend: "ref".into(),
        ..TraceMeta::default()
    };
    let trace = record(&mut re, &spec, meta).expect("ref trace");
    let clean = diff_engine_vs_trace(&trace, &mut we, &spec, Profile::Quant).expect("diff");
    assert!(clean.agree(), "clean wrapper: {}", render(&clean, false));
    let mut failures = Vec::new();
    for f in OpFault::ALL {
        we.backend.set_fault(Some(f));
        let r = diff_engine_vs_trace(&trace, &mut we, &spec, Profile::Quant).expect("diff");
        let (step, tap) = f.expected();
        match &r.verdict {
            Some(v) if v.step == step && v.tap == tap && v.inputs.iter().all(|i| i.2) => {
                eprintln!(
                    "{model} | {} (wrapper) | exact | {}",
                    f.name(),
                    v.sentence()
                )
            }
            other => failures.push(format!(
                "{model} {}: expected step {step} {tap}, got {:?}",
                f.name(),
                other.as_ref().map(|v| v.sentence())
            )),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn between_op_faults_localised() {
    between_ops_all("smollm2");
    between_ops_all("gemma3");
}

#[test]
fn faults_localised_smollm2() {
    localise_all("smollm2");
}

#[test]
fn faults_localised_gemma3() {
    localise_all("gemma3");
}

#[test]
fn clean_runs_agree_smollm2() {
    clean_all("smollm2");
}

#[test]
fn clean_runs_agree_gemma3() {
    clean_all("gemma3");
}
