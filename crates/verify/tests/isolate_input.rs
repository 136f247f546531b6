//! Isolated verdicts on traces that are not what a backend would write: wrong shapes, missing
//! taps and ids outside the vocabulary are reported, never a panic (tiny-llama fixture, the
//! reference backend, so every op must agree bitwise when the trace is intact).

use std::path::PathBuf;

use lockstep_backend_ref::RefBackend;
use lockstep_engine::{Engine, EngineConfig};
use lockstep_gguf::GgufFile;
use lockstep_graph::HostTensor;
use lockstep_models::Model;
use lockstep_verify::isolate::{isolate_trace, Arithmetic};
use lockstep_verify::{record, RunSpec, Trace, TraceMeta};

fn tiny() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/fixtures/tiny-llama/tiny-llama-Q4_0.gguf")
}

fn ref_trace(file: &GgufFile) -> Trace {
    let b = RefBackend::new();
    let model = Model::load(file, &b).expect("load tiny-llama");
    let mut e = Engine::new(b, model, EngineConfig::default()).expect("engine");
    let spec = RunSpec {
        prompt: vec![1, 17, 300, 42, 9],
        decode: 2,
        ..RunSpec::default()
    };
    let meta = TraceMeta {
        backend: "ref".into(),
        ..TraceMeta::default()
    };
    record(&mut e, &spec, meta).expect("record")
}

#[test]
fn intact_reference_trace_agrees_bitwise() {
    let file = GgufFile::open(tiny()).expect("tiny-llama fixture (../shared/fixtures)");
    let t = ref_trace(&file);
    let r = isolate_trace(&t, &file, Arithmetic::Exact).expect("isolate");
    assert!(r.agree(), "{}", r.sentence());
    // Per layer: 2 norms, 7 matmuls, 2 RoPE, K and V reads, scores, softmax, weighted sum,
    // whole attention, the activation, 2 adds (20); plus embedding, final norm, head.
    assert_eq!(r.checks.len(), 3 * (2 * 20 + 3), "{:?}", r.unchecked);
    assert!(r.unchecked.is_empty(), "{:?}", r.unchecked);
}

#[test]
fn malformed_traces_are_reported_not_panics() {
    let file = GgufFile::open(tiny()).expect("tiny-llama fixture (../shared/fixtures)");
    let intact = ref_trace(&file);

    // A norm output one column too wide, feeding Q, K and V.
    let mut t = intact.clone();
    let st = &mut t.steps[0];
    let (rows, cols) = {
        let x = st.get("blk.0.attn_norm").expect("tap");
        (x.rows(), x.cols())
    };
    for (name, v) in &mut st.taps {
        if name == "blk.0.attn_norm" {
            *v = HostTensor::matrix(rows, cols + 1, vec![0.5; rows * (cols + 1)]);
        }
    }
    let r = isolate_trace(&t, &file, Arithmetic::Exact).expect("isolate");
    let fails = r.failures();
    assert_eq!(fails[0].tap, "blk.0.attn_norm", "{}", r.sentence());
    assert!(fails
        .iter()
        .any(|f| f.tap == "blk.0.q" && f.what.starts_with("shape check")));

    // A missing tap: the ops reading or writing it are listed as not checked.
    let mut t = intact.clone();
    t.steps[1].taps.retain(|(n, _)| n != "blk.1.k_rope");
    let r = isolate_trace(&t, &file, Arithmetic::Exact).expect("isolate");
    assert!(r.agree(), "{}", r.sentence());
    assert!(
        r.unchecked.iter().any(|u| u.starts_with("blk.1.k_rope")),
        "{:?}",
        r.unchecked
    );
    assert!(
        r.unchecked.iter().any(|u| u.starts_with("blk.1.k_read")),
        "{:?}",
        r.unchecked
    );

    // A token outside the vocabulary: an error naming it.
    let mut t = intact.clone();
    t.steps[0].tokens[2] = 1_000_000;
    let err = isolate_trace(&t, &file, Arithmetic::Exact).expect_err("bad token");
    assert!(err.to_string().contains("1000000"), "{err}");

    // Positions that do not match the tokens: an error.
    let mut t = intact;
    t.steps[2].positions.clear();
    assert!(isolate_trace(&t, &file, Arithmetic::Exact).is_err());
}
