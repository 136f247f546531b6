//! Isolated-op verdicts on the cpu backend (`lockstep diff --isolate`): on clean runs of both
//! real models every op of the cpu backend agrees with the reference on its own inputs within
//! its derived bound, and the reference agrees with itself bitwise; a 6% systematic error in
//! one matmul's output, which the whole-run diff cannot see under its noise floor, is named at
//! exactly that op, and no other op is blamed.
//!
//! The error is planted by `ScaleOneMatmul`, a wrapper around any backend that scales the
//! output of the matmul with one named weight (so every tap downstream is what a faulty kernel
//! would have produced). Faults inside the cpu kernels themselves come with the `faults`
//! feature (issue #11, part A).

mod common;

use common::*;
use lockstep_engine::{Engine, EngineConfig};
use lockstep_gguf::GgufFile;
use lockstep_graph::{
    Activation, AttentionParams, Backend, BackendError, Batch, HostTensor, KvLayout, RopeParams,
    Taps, WeightView,
};
use lockstep_models::Model;
use lockstep_verify::isolate::{isolate_trace, Arithmetic};
use lockstep_verify::{diff_traces, record, Profile, RunSpec, Trace, TraceMeta};

/// A backend whose matmul with weight `target` returns `factor` times the right product.
struct ScaleOneMatmul<B> {
    inner: B,
    target: &'static str,
    factor: f32,
}

struct Named<W> {
    w: W,
    hit: bool,
}

impl<B: Backend> Backend for ScaleOneMatmul<B> {
    type Tensor = B::Tensor;
    type Weight = Named<B::Weight>;
    type KvCache = B::KvCache;

    fn name(&self) -> &str {
        self.inner.name()
    }
    fn hidden_taps(&self) -> &'static [&'static str] {
        self.inner.hidden_taps()
    }
    fn load_weight(&self, w: WeightView<'_>) -> Result<Self::Weight, BackendError> {
        Ok(Named {
            hit: w.name == self.target,
            w: self.inner.load_weight(w)?,
        })
    }
    fn alloc_kv(&self, layout: KvLayout) -> Result<B::KvCache, BackendError> {
        self.inner.alloc_kv(layout)
    }
    fn to_host(&self, t: &B::Tensor) -> HostTensor {
        self.inner.to_host(t)
    }
    fn embed(&self, table: &Self::Weight, ids: &[u32]) -> Result<B::Tensor, BackendError> {
        self.inner.embed(&table.w, ids)
    }
    fn matmul(&self, x: &B::Tensor, w: &Self::Weight) -> B::Tensor {
        let y = self.inner.matmul(x, &w.w);
        if w.hit {
            self.inner.scale(&y, self.factor)
        } else {
            y
        }
    }
    fn add_bias(&self, x: &B::Tensor, bias: &Self::Weight) -> B::Tensor {
        self.inner.add_bias(x, &bias.w)
    }
    fn rms_norm(&self, x: &B::Tensor, weight: &Self::Weight, eps: f32) -> B::Tensor {
        self.inner.rms_norm(x, &weight.w, eps)
    }
    fn add(&self, a: &B::Tensor, b: &B::Tensor) -> B::Tensor {
        self.inner.add(a, b)
    }
    fn scale(&self, x: &B::Tensor, s: f32) -> B::Tensor {
        self.inner.scale(x, s)
    }
    fn act_mul(&self, gate: &B::Tensor, up: &B::Tensor, act: Activation) -> B::Tensor {
        self.inner.act_mul(gate, up, act)
    }
    fn rope(&self, x: &B::Tensor, positions: &[u32], p: RopeParams) -> B::Tensor {
        self.inner.rope(x, positions, p)
    }
    fn select_rows(&self, x: &B::Tensor, rows: &[usize]) -> B::Tensor {
        self.inner.select_rows(x, rows)
    }
    fn kv_store(
        &self,
        cache: &mut B::KvCache,
        layer: usize,
        k: &B::Tensor,
        v: &B::Tensor,
        batch: &Batch,
    ) -> Result<(), BackendError> {
        self.inner.kv_store(cache, layer, k, v, batch)
    }
    fn attention(
        &self,
        cache: &B::KvCache,
        layer: usize,
        q: &B::Tensor,
        batch: &Batch,
        p: AttentionParams,
        taps: &mut Taps<'_>,
    ) -> Result<B::Tensor, BackendError> {
        self.inner.attention(cache, layer, q, batch, p, taps)
    }
}

fn cfg() -> EngineConfig {
    EngineConfig {
        n_ctx: 512,
        cache_tokens: 512,
        ..EngineConfig::default()
    }
}

fn trace_of(e: &mut dyn lockstep_verify::AnyEngine, spec: &RunSpec) -> Trace {
    let meta = TraceMeta {
        backend: e.backend_name(),
        ..TraceMeta::default()
    };
    record(e, spec, meta).expect("record")
}

fn spec(model: &str) -> RunSpec {
    RunSpec {
        prompt: fixture_prompts(model)[0].clone(),
        decode: 3,
        ..RunSpec::default()
    }
}

fn clean_runs_agree_in_isolation(model: &str) {
    let path = model_path(model);
    let file = GgufFile::open(&path).expect("open model");
    let spec = spec(model);
    let a = trace_of(&mut ref_engine(&path, cfg()), &spec);
    let b = trace_of(&mut cpu_engine(&path, 2, cfg()), &spec);

    let iso = isolate_trace(&b, &file, Arithmetic::for_backend("cpu")).expect("isolate cpu");
    assert!(iso.agree(), "{model}: {}", iso.sentence());
    // Every kind of op was checked, on every step; the score-level checks wherever the backend
    // exposes the scores (a fused kernel that hides them leaves the whole-attention check).
    let kinds: Vec<String> = iso.worst_by_kind().into_iter().map(|k| k.0).collect();
    let hidden = cpu(2).hidden_taps();
    let mut required = vec![
        "embedding lookup",
        "RMS norm",
        "matmul (quantized weight)",
        "RoPE",
        "KV store + read (f16 cache)",
        "attention (scores, softmax, weighted sum)",
        "residual add",
    ];
    if !hidden.contains(&"kq") {
        required.push("attention scores (scaled Q.K, masked)");
    }
    if !hidden.contains(&"kq_softmax") {
        required.extend(["softmax", "attention weighted sum (softmax x V)"]);
    }
    for kind in required {
        assert!(
            kinds.iter().any(|k| k == kind),
            "{model}: no `{kind}` check in {kinds:?}"
        );
    }
    let steps: std::collections::BTreeSet<usize> = iso.checks.iter().map(|c| c.step).collect();
    assert_eq!(steps.len(), 4, "{model}: checked steps {steps:?}");
    // The cpu backend's errors are real but far inside the bounds (not a bound that cannot
    // fail): some ops differ from the reference in bits.
    assert!(iso.checks.iter().any(|c| c.metrics.n_diff > 0));

    // The reference against itself: every op bitwise, except the weighted sum re-done from the
    // recorded f32 probabilities (the reference weights V by its unrounded f64 ones).
    let iso_ref = isolate_trace(&a, &file, Arithmetic::Exact).expect("isolate ref");
    assert!(iso_ref.agree(), "{model} ref: {}", iso_ref.sentence());
    for c in &iso_ref.checks {
        if c.what != "attention weighted sum (softmax x V)" {
            assert_eq!(
                c.metrics.n_diff, 0,
                "{model} ref: {} step {} not bitwise",
                c.op, c.step
            );
        }
    }
    assert!(diff_traces(&a, &b, Profile::Quant).agree());
}

fn small_systematic_error_is_named_in_isolation(model: &str, target: &'static str, op: &str) {
    let path = model_path(model);
    let file = GgufFile::open(&path).expect("open model");
    let spec = spec(model);
    let a = trace_of(&mut ref_engine(&path, cfg()), &spec);
    let faulty = ScaleOneMatmul {
        inner: cpu(2),
        target,
        factor: 1.06,
    };
    let model_b = Model::load(&file, &faulty).expect("load");
    let mut eb = Engine::new(faulty, model_b, cfg()).expect("engine");
    let b = trace_of(&mut eb, &spec);

    // The whole-run diff cannot see a 6% error (NMSE 3.6e-3) under its noise floor.
    let whole = diff_traces(&a, &b, Profile::Quant);
    assert!(
        whole.agree(),
        "{model}: the whole-run diff was expected to miss it"
    );

    let iso = isolate_trace(&b, &file, Arithmetic::Quant8).expect("isolate");
    let fails = iso.failures();
    assert!(
        !fails.is_empty(),
        "{model}: isolation missed the planted error"
    );
    assert_eq!(fails[0].op, op, "{model}: {}", iso.sentence());
    assert_eq!(fails[0].step, 0);
    // Named at every step, and nothing else is blamed.
    assert_eq!(fails.len(), 4, "{model}: {}", iso.sentence());
    assert!(
        fails.iter().all(|f| f.op == op),
        "{model}: {}",
        iso.sentence()
    );
    let nmse = fails[0].metrics.nmse;
    assert!(
        (nmse - 0.06f64.powi(2)).abs() < 1e-4,
        "{model}: NMSE {nmse}"
    );
    let s = iso.sentence();
    eprintln!("{model}: {s}\n{model}: {}", iso.relate(&whole));
    assert!(
        s.contains(&format!("{op} (")) && s.contains("every other op agrees in isolation"),
        "{s}"
    );
    assert!(iso.relate(&whole).contains("AGREES within its tolerances"));
}

#[test]
fn smollm2_clean_runs_agree_in_isolation() {
    clean_runs_agree_in_isolation("smollm2");
}

#[test]
fn gemma3_clean_runs_agree_in_isolation() {
    clean_runs_agree_in_isolation("gemma3");
}

#[test]
fn smollm2_scaled_v_projection_is_named_in_isolation() {
    small_systematic_error_is_named_in_isolation("smollm2", "blk.3.attn_v.weight", "blk.3.attn_v");
}

#[test]
fn gemma3_scaled_ffn_up_is_named_in_isolation() {
    small_systematic_error_is_named_in_isolation("gemma3", "blk.7.ffn_up.weight", "blk.7.ffn_up");
}

/// A copy of `path` in which the block scales of one row of one weight are `factor` times
/// larger (the kind of error a kernel reading scales wrongly for some rows makes).
fn with_row_scales_scaled(
    path: &std::path::Path,
    tensor: &str,
    row: usize,
    factor: f32,
) -> std::path::PathBuf {
    let file = GgufFile::open(path).expect("open");
    let t = file.header().tensor(tensor).expect("tensor").clone();
    let range = file.header().tensor_range(&t);
    let mut bytes = std::fs::read(path).expect("read model");
    let row_bytes = t.ty.row_bytes(t.dims[0]).expect("row bytes") as usize;
    let block = t.ty.type_size();
    let start = range.start + row * row_bytes;
    // Every legacy 32-value block starts with its f16 scale `d`.
    for b in (start..start + row_bytes).step_by(block) {
        let d = lockstep_quant::fp16_to_f32(u16::from_le_bytes([bytes[b], bytes[b + 1]]));
        let nd = lockstep_quant::f32_to_fp16(d * factor).to_le_bytes();
        bytes[b..b + 2].copy_from_slice(&nd);
    }
    let dir = std::env::temp_dir().join(format!("lockstep-isolate-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let out = dir.join("smollm2-one-row-scaled.gguf");
    std::fs::write(&out, bytes).expect("write patched model");
    out
}

#[test]
fn one_row_of_wrong_block_scales_is_named_in_isolation() {
    let path = model_path("smollm2");
    let file = GgufFile::open(&path).expect("open model");
    let spec = spec("smollm2");
    let tensor = "blk.5.attn_q.weight";
    assert_eq!(
        file.header().tensor(tensor).map(|t| t.ty),
        Some(lockstep_quant::GgmlType::Q4_1)
    );
    let patched = with_row_scales_scaled(&path, tensor, 7, 1.06);
    let a = trace_of(&mut ref_engine(&path, cfg()), &spec);
    // B runs the model whose one row of scales is off; isolation judges it against the
    // original weights.
    let b = trace_of(&mut cpu_engine(&patched, 2, cfg()), &spec);
    let _ = std::fs::remove_dir_all(patched.parent().expect("dir"));
    assert!(
        diff_traces(&a, &b, Profile::Quant).agree(),
        "the whole-run diff was expected to miss it"
    );
    let iso = isolate_trace(&b, &file, Arithmetic::Quant8).expect("isolate");
    let fails = iso.failures();
    assert!(
        !fails.is_empty(),
        "isolation missed one row of wrong scales"
    );
    assert_eq!(fails[0].op, "blk.5.attn_q", "{}", iso.sentence());
    assert!(
        fails.iter().all(|f| f.op == "blk.5.attn_q"),
        "{}",
        iso.sentence()
    );
    assert_eq!(fails.len(), 4, "{}", iso.sentence());
    eprintln!("one row of scales: {}", iso.sentence());
}
