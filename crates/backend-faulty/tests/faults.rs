//! Every seeded fault, on both real models, must be localised by `lockstep diff` to exactly
//! the tap (and step) where it first shows; clean runs of every fixture prompt must agree
//! bitwise (zero false alarms).

use std::path::Path;
use std::time::Instant;

use lockstep_backend_faulty::{Fault, FaultyBackend};
use lockstep_backend_ref::RefBackend;
use lockstep_engine::{Engine, EngineConfig};
use lockstep_gguf::{GgmlType, GgufFile};
use lockstep_models::Model;
use lockstep_testkit::{fixture_prompts, model_path};
use lockstep_verify::{
    diff_engine_vs_trace, diff_engines, record, MaskMode, Profile, RunSpec, TapFilter, TraceMeta,
};

fn cfg() -> EngineConfig {
    EngineConfig {
        n_ctx: 1024,
        cache_tokens: 1024,
        ..EngineConfig::default()
    }
}

fn engines(path: &Path) -> (Engine<RefBackend>, Engine<FaultyBackend>) {
    let file = GgufFile::open(path).expect("open model");
    let rb = RefBackend::new();
    let rm = Model::load(&file, &rb).expect("load");
    let fb = FaultyBackend::new(None);
    let fm = Model::load(&file, &fb).expect("load");
    (
        Engine::new(rb, rm, cfg()).expect("engine"),
        Engine::new(fb, fm, cfg()).expect("engine"),
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

/// Where each fault must be localised: (step, tap).
fn expected(f: Fault, q8_tap: &str) -> (usize, String) {
    let s = |step: usize, t: &str| (step, t.to_string());
    match f {
        Fault::PrefillNoKvWrite => s(1, "blk.0.k_read"),
        Fault::KvWrongLayer => s(0, "blk.1.k_read"),
        Fault::AttnOutSwapped => s(0, "blk.0.attn_out"),
        Fault::KvF16AsF32 => s(0, "blk.0.k_read"),
        Fault::EmbedZeros => s(0, "inp_embd"),
        Fault::Q8WrongScale => s(0, q8_tap),
        Fault::HeadOffset => s(0, "blk.0.kq"),
        Fault::MaskDrift => s(0, "blk.0.kqv"),
        Fault::LmHeadSkipped => s(0, "result_output"),
        Fault::SoftmaxScale => s(0, "blk.0.kq"),
        Fault::RopeDecodeOffByOne => s(1, "blk.0.q_rope"),
        Fault::FfnDownZero => s(0, "blk.1.ffn_out"),
        Fault::EmbedBroadcast => s(0, "inp_embd"),
        Fault::CausalOffByOne => s(0, "blk.0.kq"),
        Fault::OutputNormZero => s(0, "result_norm"),
    }
}

fn localise_all(model: &str) {
    let path = model_path(model);
    let file = GgufFile::open(&path).expect("open");
    let (mut re, mut fe) = engines(&path);
    let q8_tap = first_q8_matmul(&file, re.model.config.n_layers);
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
    let mut traces = std::collections::HashMap::new();
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
            traces.insert(
                key.clone(),
                record(&mut re, &spec, meta).expect("ref trace"),
            );
        }
        let t0 = Instant::now();
        fe.backend.set_fault(Some(f));
        let report = diff_engine_vs_trace(
            &traces[&key],
            &mut fe,
            &spec,
            Profile::for_backends("ref", "faulty"),
        )
        .expect("diff");
        let (step, tap) = expected(f, &q8_tap);
        match &report.verdict {
            Some(v) if v.step == step && v.tap == tap => {
                eprintln!(
                    "{model} {:<24} ok ({:.1}s): {}",
                    f.name(),
                    t0.elapsed().as_secs_f64(),
                    v.sentence()
                );
                assert!(
                    v.inputs.iter().all(|(_, _, pass)| *pass),
                    "{model} {}: inputs must agree",
                    f.name()
                );
            }
            other => failures.push(format!(
                "{model} {}: expected step {step} {tap}, got {:?}",
                f.name(),
                other.as_ref().map(|v| v.sentence())
            )),
        }
    }
    fe.backend.set_fault(None);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

fn clean_all(model: &str) {
    let path = model_path(model);
    let (mut re, mut fe) = engines(&path);
    for (i, p) in fixture_prompts(model).iter().enumerate() {
        let t0 = Instant::now();
        // Short prompts: every tap, prefill and two decode steps. Long prompts (~780 tokens):
        // prefill and one decode step, without the O(n^2) attention score taps (1.3 GB).
        let long = p.len() > 100;
        let spec = RunSpec {
            prompt: p.clone(),
            decode: if long { 1 } else { 2 },
            filter: if long {
                TapFilter::parse("-blk.*.kq,-blk.*.kq_softmax")
            } else {
                TapFilter::all()
            },
            ..RunSpec::default()
        };
        let report = diff_engines(
            &mut re,
            &mut fe,
            &spec,
            Profile::for_backends("ref", "faulty"),
        )
        .expect("diff");
        eprintln!(
            "{model} clean prompt {i} ({} tokens): {:.1}s",
            p.len(),
            t0.elapsed().as_secs_f64()
        );
        assert!(
            report.agree(),
            "{model} prompt {i}: false alarm: {}",
            lockstep_verify::render(&report, false)
        );
        assert!(report.steps.iter().all(|s| !s.taps.is_empty()));
    }
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
