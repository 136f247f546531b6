//! Generation monitors: each fires on its seed symptom (a fault planted in the cpu backend's
//! kernels) within 16 tokens and stays silent on clean cpu runs of every fixture prompt (16
//! greedy tokens, watch mode on).

use lockstep_backend_cpu::{CpuBackend, CpuOptions};
use lockstep_engine::{
    generate_with, Engine, EngineConfig, GenerateError, GenerateOptions, MonitorConfig,
    MonitorWarning, SamplingParams, WarningKind,
};
use lockstep_fault_table::Fault;
use lockstep_gguf::GgufFile;
use lockstep_models::Model;
use lockstep_testkit::{fixture_prompts, model_path};
use lockstep_tokenizer::Tokenizer;

const HORIZON: usize = 16;

struct Setup {
    engine: Engine<CpuBackend>,
    tok: Tokenizer,
}

fn setup(model: &str) -> Setup {
    let path = model_path(model);
    let file = GgufFile::open(&path).expect("open");
    let tok = Tokenizer::from_metadata(file.metadata()).expect("tokenizer");
    let b = CpuBackend::new(CpuOptions::default());
    let m = Model::load(&file, &b).expect("load");
    let cfg = EngineConfig {
        n_ctx: 1024,
        cache_tokens: 1024,
        ..EngineConfig::default()
    };
    Setup {
        engine: Engine::new(b, m, cfg).expect("engine"),
        tok,
    }
}

/// Greedy generation of HORIZON tokens with every monitor on; the warnings (a NaN stop
/// counts as its warning).
fn run(s: &mut Setup, prompt: &[u32]) -> Vec<MonitorWarning> {
    let params = SamplingParams {
        temperature: 0.0,
        max_tokens: Some(HORIZON),
        ignore_eos: true,
        ..SamplingParams::default()
    };
    let opts = GenerateOptions {
        monitor: MonitorConfig {
            watch: true,
            ..MonitorConfig::default()
        },
        full_logits: false,
    };
    match generate_with(&mut s.engine, &s.tok, prompt, &params, &opts, |_| {}) {
        Ok(out) => out.warnings,
        Err(GenerateError::Monitor(w)) => vec![w],
        Err(e) => panic!("generate: {e}"),
    }
}

fn check(model: &str, seeds: &[(WarningKind, Fault)]) {
    let mut s = setup(model);
    let ps = fixture_prompts(model);
    let mut failures = Vec::new();
    for &(kind, fault) in seeds {
        s.engine.backend.set_fault(Some(fault));
        let w = run(&mut s, &ps[0]);
        match w.iter().find(|w| w.kind == kind) {
            Some(x) if x.step < HORIZON => eprintln!("{model} {:<24} -> {x}", fault.name()),
            _ => failures.push(format!(
                "{model}: {kind:?} did not fire on {} within {HORIZON} tokens: {w:?}",
                fault.name()
            )),
        }
    }
    s.engine.backend.set_fault(None);
    for (i, p) in ps.iter().enumerate() {
        let w = run(&mut s, p);
        if !w.is_empty() {
            failures.push(format!("{model} clean prompt {i}: false alarm {w:?}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn monitors_smollm2() {
    use Fault::*;
    use WarningKind::*;
    check(
        "smollm2",
        &[
            (RepeatedToken, Q8WrongScale),
            (NonFinite, CausalOffByOne),
            (FlatLogits, OutputNormZero),
            (UniformAttention, SoftmaxScale),
            (UniformAttention, SoftmaxFlat),
            (DeadLayer, FfnDownZero),
            (FrozenHidden, EmbedBroadcast),
        ],
    );
}

#[test]
fn monitors_gemma3() {
    use Fault::*;
    use WarningKind::*;
    check(
        "gemma3",
        &[
            (RepeatedToken, HeadOffset),
            (Cycle, SoftmaxScale),
            (SpecialToken, LmHeadSkipped),
            (NonFinite, CausalOffByOne),
            (FlatLogits, OutputNormZero),
            (UniformAttention, SoftmaxScale),
            (UniformAttention, SoftmaxFlat),
            (DeadLayer, FfnDownZero),
            (FrozenHidden, EmbedBroadcast),
        ],
    );
}
