//! Isolated-op verdicts: every op of side B recomputed on the reference backend from side B's
//! **own recorded inputs**, and compared with side B's recorded output.
//!
//! A whole-run diff compares B with a reference run whose inputs drifted along with it, so
//! its tolerances have to sit above the accumulated noise of 8-bit activations and an f16 KV
//! cache (NMSE ~1e-2 on the cpu backend) and a small systematic error hides under them. Here
//! each op starts from exactly the numbers B's op consumed (taps are copied out of the kernel
//! that made them, `docs/taps.md`), so the only difference left is the op's own arithmetic,
//! which is bounded per op from what B declares it does ([`Arithmetic`]):
//! `docs/verification.md` ("Isolated-op verdicts") derives every bound.
//!
//! Needs only B's trace and the model file (weights; positions from the trace metadata), so it
//! serves traces of other engines too. An op whose input or output tap is missing (filtered,
//! hidden by a fused kernel, not recorded by a foreign engine) is listed as not checked.

use std::collections::HashMap;
use std::fmt::Write as _;

use lockstep_backend_ref::{RefBackend, RefWeight};
use lockstep_gguf::GgufFile;
use lockstep_graph::taps::Recorder;
use lockstep_graph::{
    AttentionParams, Backend, Batch, BatchSeq, HostTensor, KvLayout, RopeParams, Taps,
};
use lockstep_models::{Model, ModelConfig};
use lockstep_quant::GgmlType;
use serde::Serialize;

use crate::diff::{fmt_e, DiffReport};
use crate::metrics::{compare, Metrics};
use crate::run::{AnyEngine, MaskMode, RunSpec, Stepper};
use crate::taps::TapFilter;
use crate::trace::{StepTrace, Trace};
use crate::VerifyError;

/// Unit roundoff of f32 (round to nearest): a correctly rounded operation is off by at most
/// `U` relative.
const U: f64 = 1.0 / 16_777_216.0;
/// f16: relative rounding error of a normal value, and the absolute one below the normal range
/// (half the spacing of f16 subnormals).
const U_F16: f64 = 1.0 / 2048.0;
const F16_SUBNORMAL_HALF_STEP: f64 = 1.0 / 33_554_432.0;
/// How side B does its arithmetic, which fixes each op's bound.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Arithmetic {
    /// The reference's very operations (`ref`, copies of its ops): every op bitwise.
    Exact,
    /// The cpu backend: activations quantized to 8 bits with an f32 scale per 32 values for
    /// every matmul with a quantized weight, K/V stored as f16, f32 everywhere else.
    Quant8,
    /// A float engine: f32 everywhere, f32 K/V.
    Float,
    /// ggml's CPU backend (llama.cpp on the CPU): each matmul's activations converted to its
    /// weight type's `vec_dot_type` (Q8_0 / Q8_1 with f16 scales, Q8_K, f16), an f16 KV cache,
    /// Q and the softmax weights converted to f16 for the attention products, GELU from an f16
    /// table, RoPE angles from a running f32 product ([`crate::ggml_cpu`]).
    #[serde(rename = "ggml-cpu")]
    GgmlCpu,
}

impl Arithmetic {
    pub fn parse(s: &str) -> Option<Arithmetic> {
        match s {
            "exact" => Some(Arithmetic::Exact),
            "quant8" => Some(Arithmetic::Quant8),
            "float" => Some(Arithmetic::Float),
            "ggml-cpu" => Some(Arithmetic::GgmlCpu),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Arithmetic::Exact => "exact",
            Arithmetic::Quant8 => "quant8",
            Arithmetic::Float => "float",
            Arithmetic::GgmlCpu => "ggml-cpu",
        }
    }

    /// What a backend (as named in a trace) declares: `ref` and `cuda-exact` (whose kernels
    /// keep the reference's operation order) the reference's operations, `cpu` 8-bit
    /// activations and an f16 cache, `cuda` and `cuda-det` (fast numerics) 8-bit activations
    /// for their quantized matmuls (the cache is f32, inside the f16 cache's bound, or f16 with
    /// `LOCKSTEP_CUDA_KV=f16`; see [`kv_cache_f16`]; `cuda`'s long prefills run in TF32,
    /// [`tensor_core_rows`]), anything else f32.
    pub fn for_backend(name: &str) -> Arithmetic {
        match name.split('[').next().unwrap_or(name) {
            "ref" | "cuda-exact" => Arithmetic::Exact,
            "cpu" | "cuda" | "cuda-det" => Arithmetic::Quant8,
            _ => Arithmetic::Float,
        }
    }

    /// What a foreign trace declares, from its metadata: llama.cpp's traces say which ggml
    /// backend computed the nodes (`ggml_backend`, written by `tools/llama_cpp_trace.py`);
    /// `CPU` means ggml-cpu's arithmetic. `None` for a llama.cpp trace of another (or an
    /// unstated) ggml backend, whose arithmetic has no derived bounds.
    pub fn for_foreign(backend: &str, ggml_backend: Option<&str>) -> Option<Arithmetic> {
        if backend.starts_with("llama.cpp") {
            match ggml_backend {
                Some("CPU") => Some(Arithmetic::GgmlCpu),
                _ => None,
            }
        } else {
            Some(Arithmetic::for_backend(backend))
        }
    }
}

/// The cuda backend (without `--deterministic`) multiplies the steps of at least this many
/// rows on the tensor cores, in f16 (or TF32 with `LOCKSTEP_CUDA_GEMM=tf32`): both keep 11
/// significant bits of every operand and accumulate in f32, so one bound holds both (`lockstep_backend_cuda::GEMM_MIN_ROWS`; the CLI asserts
/// the two agree).
pub const CUDA_GEMM_MIN_ROWS: usize = 65;

/// TF32's unit roundoff: 10 stored significand bits (f16's too, for values in its normal range;
/// below 2^-14 an f16 operand's error is at most 2^-25 absolute, negligible in the energy sum).
pub const U_TF32: f64 = 1.0 / 2048.0;

/// The steps whose matmuls backend `name` runs in TF32 (from this many rows on), if any.
pub fn tensor_core_rows(name: &str) -> Option<usize> {
    (name.split('[').next().unwrap_or(name) == "cuda").then_some(CUDA_GEMM_MIN_ROWS)
}

/// The NMSE bound of a TF32 tensor-core `y = x W^T`: every input rounded to 11 significant
/// bits (relative error at most `u_tf32` each, so `2 u_tf32` per product), products summed
/// in f32 in an unknown order (`(k + 8) u^2`, as [`matmul_bound`] for `Float`). The rounding
/// errors of different inputs are independent, so they add in quadrature:
/// `lambda^2 (4 u_tf32^2 + (k + 8) k u^2) sum_i x_i^2 sum_j w_ji^2 / sum y^2`.
pub fn tf32_matmul_bound(col_sq: &[f64], x: &HostTensor, y: &HostTensor) -> f64 {
    let k = col_sq.len();
    let mut energy = 0f64;
    for row in x.data.chunks_exact(k.max(1)) {
        energy += row
            .iter()
            .zip(col_sq)
            .map(|(&v, &ci)| f64::from(v) * f64::from(v) * ci)
            .sum::<f64>();
    }
    let den = plain_energy(y);
    if den == 0.0 {
        return 0.0;
    }
    let per_term = 4.0 * U_TF32 * U_TF32 + (k as f64 + 8.0) * k as f64 * U * U;
    ROUNDING_LAMBDA * ROUNDING_LAMBDA * per_term * energy / den
}

/// One op of one step, recomputed from B's inputs.
#[derive(Clone, Debug, Serialize)]
pub struct OpCheck {
    pub step: usize,
    /// The op: the weight's name for matmuls and norms (`blk.3.attn_v`), else the tap's.
    pub op: String,
    /// What it computes (`Q8_0 matmul`, `RMS norm`, `attention (scores, softmax, weighted sum)`).
    pub what: String,
    /// The output tap compared.
    pub tap: String,
    /// The taps of B it was recomputed from.
    pub inputs: Vec<String>,
    pub metrics: Metrics,
    /// NMSE allowed (0: bitwise).
    pub bound: f64,
    pub pass: bool,
}

impl OpCheck {
    /// NMSE over bound (0 when bitwise equal; infinite when a bitwise bound is broken).
    pub fn ratio(&self) -> f64 {
        if self.metrics.n_diff == 0 {
            0.0
        } else if self.bound == 0.0 {
            f64::INFINITY
        } else {
            self.metrics.nmse / self.bound
        }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct IsolationReport {
    pub backend: String,
    pub arithmetic: Arithmetic,
    pub checks: Vec<OpCheck>,
    /// Ops that could not be checked, with why (first occurrence per op and reason).
    pub unchecked: Vec<String>,
    pub seconds: f64,
}

fn step_words(step: usize) -> String {
    if step == 0 {
        "prefill (step 0)".to_string()
    } else {
        format!("decode step {step}")
    }
}

impl IsolationReport {
    /// The failed checks in execution order (step, then the tap's place in the graph, then
    /// the order checks were made: scores before softmax before weighted sum).
    pub fn failures(&self) -> Vec<&OpCheck> {
        let mut f: Vec<(usize, &OpCheck)> = self
            .checks
            .iter()
            .enumerate()
            .filter(|(_, c)| !c.pass)
            .collect();
        f.sort_by(|(ia, a), (ib, b)| {
            (a.step, crate::taps::order_key(&a.tap), *ia).cmp(&(
                b.step,
                crate::taps::order_key(&b.tap),
                *ib,
            ))
        });
        f.into_iter().map(|(_, c)| c).collect()
    }

    pub fn agree(&self) -> bool {
        self.checks.iter().all(|c| c.pass)
    }

    /// The verdict: the first op that is wrong on identical inputs, or that every op agrees.
    pub fn sentence(&self) -> String {
        let fails = self.failures();
        let Some(first) = fails.first() else {
            return format!(
                "every op agrees in isolation ({} op checks over {} steps)",
                self.checks.len(),
                self.checks
                    .iter()
                    .map(|c| c.step)
                    .max()
                    .map_or(0, |s| s + 1)
            );
        };
        let mut s = format!(
            "{}: {} ({}) is wrong on identical inputs: NMSE {}, bound {}",
            step_words(first.step),
            first.op,
            first.what,
            fmt_e(first.metrics.nmse),
            if first.bound == 0.0 {
                "bitwise".to_string()
            } else {
                fmt_e(first.bound)
            }
        );
        // Other ops wrong in isolation (a shared kernel bug shows in every op using it).
        let mut others: Vec<String> = Vec::new();
        for f in &fails[1..] {
            if f.op != first.op && !others.contains(&f.op) {
                others.push(f.op.clone());
            }
        }
        if others.is_empty() {
            s.push_str("; every other op agrees in isolation");
        } else {
            let n = others.len();
            others.truncate(6);
            let _ = write!(
                s,
                "; {n} other op{} also wrong in isolation: {}{}",
                if n == 1 { " is" } else { "s are" },
                others.join(", "),
                if n > 6 { ", ..." } else { "" }
            );
        }
        s
    }

    /// How the isolated verdict bears on a whole-run verdict: confirms it, refines it (names
    /// an earlier or a different op), or finds every op right on its own inputs.
    pub fn relate(&self, whole: &DiffReport) -> String {
        let first = self.failures().first().copied();
        match (&whole.verdict, first) {
            (None, None) => "the whole-run diff and every isolated op agree".into(),
            (None, Some(f)) => format!(
                "the whole-run diff AGREES within its tolerances, but in isolation {} at {} is wrong (a small systematic error under the whole-run noise floor)",
                f.op,
                step_words(f.step)
            ),
            (Some(v), None) => format!(
                "every op agrees in isolation, so no single op is wrong on its own inputs: the whole-run divergence at {} ({}) is accumulated numerical error, or lies between taps",
                v.tap,
                step_words(v.step)
            ),
            (Some(v), Some(f)) => {
                if f.step == v.step && f.tap == v.tap {
                    format!(
                        "confirmed: {} ({}) is wrong on identical inputs",
                        f.op,
                        step_words(f.step)
                    )
                } else {
                    format!(
                        "refined: the whole-run diff first saw {} ({}), but the op wrong on identical inputs is {} ({}, tap {})",
                        v.tap,
                        step_words(v.step),
                        f.op,
                        step_words(f.step),
                        f.tap
                    )
                }
            }
        }
    }

    /// Worst NMSE / bound per kind of op: what calibration reads.
    pub fn worst_by_kind(&self) -> Vec<(String, usize, &OpCheck)> {
        let mut out: Vec<(String, usize, &OpCheck)> = Vec::new();
        for c in &self.checks {
            let kind = op_kind(&c.what);
            match out.iter_mut().find(|(k, _, _)| *k == kind) {
                Some(e) => {
                    e.1 += 1;
                    if c.ratio() > e.2.ratio() {
                        e.2 = c;
                    }
                }
                None => out.push((kind, 1, c)),
            }
        }
        out
    }
}

/// `Q4_1 matmul` and `Q8_0 matmul` are both `matmul (quantized)`; the rest as named.
fn op_kind(what: &str) -> String {
    if what.contains("matmul") {
        if what.starts_with("F32") || what.starts_with("F16") || what.starts_with("BF16") {
            "matmul (float weight)".into()
        } else {
            "matmul (quantized weight)".into()
        }
    } else {
        what.to_string()
    }
}

/// The isolation report as text: per kind of op, the worst check relative to its bound, then
/// the failures and the verdict.
pub fn render_isolation(r: &IsolationReport) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "isolated ops: B = {}, arithmetic `{}` ({} checks, {:.1}s)",
        r.backend,
        r.arithmetic.name(),
        r.checks.len(),
        r.seconds
    );
    let _ = writeln!(
        s,
        "  {:<44} {:>6} {:>10} {:>10} {:>8}  worst at",
        "op kind", "checks", "NMSE", "bound", "NMSE/bd"
    );
    for (kind, n, c) in r.worst_by_kind() {
        let _ = writeln!(
            s,
            "  {:<44} {:>6} {:>10} {:>10} {:>8}  {} step {}",
            kind,
            n,
            fmt_e(c.metrics.nmse),
            if c.bound == 0.0 {
                "bitwise".into()
            } else {
                fmt_e(c.bound)
            },
            fmt_e(c.ratio()),
            c.op,
            c.step
        );
    }
    let fails = r.failures();
    if !fails.is_empty() {
        let _ = writeln!(s, "wrong in isolation:");
        for f in fails.iter().take(12) {
            let _ = writeln!(
                s,
                "  step {:<3} {:<24} {:<28} NMSE {:>9}  bound {:>9}  from {}",
                f.step,
                f.op,
                f.what,
                fmt_e(f.metrics.nmse),
                fmt_e(f.bound),
                f.inputs.join(", ")
            );
        }
        if fails.len() > 12 {
            let _ = writeln!(s, "  ... {} more", fails.len() - 12);
        }
    }
    if !r.unchecked.is_empty() {
        let mut ex = r.unchecked.clone();
        let n = ex.len();
        ex.truncate(4);
        let _ = writeln!(s, "not checked ({n}): {}", ex.join("; "));
    }
    let _ = writeln!(s, "isolated verdict: {}", r.sentence());
    s
}

/// Per-op recomputation on the reference backend, one step of B's taps at a time.
pub struct Isolator {
    backend: RefBackend,
    model: std::sync::Arc<Model<RefBackend>>,
    types: HashMap<String, GgmlType>,
    arith: Arithmetic,
    /// Column sums of squares of each matmul weight (`sum_j w_ji^2`), by weight name.
    col_sq: HashMap<String, Vec<f64>>,
    /// `GgmlCpu`: the block mins of each Q4_1 / Q5_1 weight (their dot with Q8_1 activations
    /// uses the stored block sums), by weight name.
    mins: HashMap<String, Vec<f32>>,
    /// `GgmlCpu`: the trace says the build quantizes with the x86 AVX code, which
    /// [`crate::ggml_cpu::consume`] reproduces exactly: no bound for values on a rounding
    /// boundary.
    x86_quantizer: bool,
    /// Per layer: B's K (after RoPE) and V rows of every position so far, what the cache must
    /// hold; `None` once a step lacked them.
    kv_hist: Vec<Option<(Vec<f32>, Vec<f32>)>>,
    checks: Vec<OpCheck>,
    unchecked: Vec<String>,
    seconds: f64,
    backend_name: String,
    /// B multiplies steps of at least this many rows in TF32 ([`tensor_core_rows`]).
    tensor_rows: Option<usize>,
}

struct StepCtx<'a> {
    st: &'a StepTrace,
}

impl<'a> StepCtx<'a> {
    fn get(&self, name: &str) -> Option<&'a HostTensor> {
        self.st.get(name)
    }
}

impl Isolator {
    /// Loads the model's weights on the reference backend. `backend` names side B (for the
    /// report); `arith` is what B declares it computes.
    pub fn new(file: &GgufFile, backend: &str, arith: Arithmetic) -> Result<Isolator, VerifyError> {
        let rb = RefBackend::new();
        let model = Model::load(file, &rb)
            .map_err(|e| VerifyError::Input(format!("{}: {e}", file.path().display())))?;
        let types = file
            .tensors()
            .iter()
            .map(|t| (t.name.clone(), t.ty))
            .collect();
        let n_layers = model.config.n_layers;
        let mut mins = HashMap::new();
        if arith == Arithmetic::GgmlCpu {
            for t in file.tensors() {
                if let Some(m) = crate::ggml_cpu::block_mins(file, &t.name) {
                    mins.insert(t.name.clone(), m);
                }
            }
        }
        Ok(Isolator {
            backend: rb,
            model: std::sync::Arc::new(model),
            types,
            arith,
            col_sq: HashMap::new(),
            mins,
            x86_quantizer: false,
            kv_hist: vec![Some((Vec::new(), Vec::new())); n_layers],
            checks: Vec::new(),
            unchecked: Vec::new(),
            seconds: 0.0,
            backend_name: backend.to_string(),
            tensor_rows: tensor_core_rows(backend),
        })
    }

    /// `GgmlCpu`: whether B's build quantizes activations with ggml's x86 AVX code (see
    /// [`crate::ggml_cpu::x86_avx_quantizer`]); otherwise values on a rounding boundary are
    /// bounded as possibly rounded the other way.
    pub fn set_x86_quantizer(&mut self, yes: bool) {
        self.x86_quantizer = yes;
    }

    pub fn config(&self) -> &ModelConfig {
        &self.model.config
    }

    fn note_unchecked(&mut self, op: &str, why: &str) {
        let line = format!("{op}: {why}");
        if !self.unchecked.contains(&line) {
            self.unchecked.push(line);
        }
    }

    // One call per check reads best with the op's facts spelled out at the call site.
    #[allow(clippy::too_many_arguments)]
    fn push(
        &mut self,
        step: usize,
        op: String,
        what: String,
        tap: &str,
        inputs: &[&str],
        expected: &HostTensor,
        got: &HostTensor,
        bound: f64,
    ) {
        let metrics = if expected.shape == got.shape {
            compare(&expected.data, &got.data)
        } else {
            Metrics::broken(expected.data.len().max(got.data.len()))
        };
        // A bound of 0 demands bitwise equality (every op of `Exact` arithmetic but one).
        let pass = metrics.bitwise_equal()
            || (bound > 0.0 && metrics.nmse.is_finite() && metrics.nmse <= bound);
        self.checks.push(OpCheck {
            step,
            op,
            what,
            tap: tap.to_string(),
            inputs: inputs.iter().map(|s| s.to_string()).collect(),
            metrics,
            bound,
            pass,
        });
    }

    fn col_sq(&mut self, name: &str, w: &RefWeight) -> &[f64] {
        self.col_sq
            .entry(name.to_string())
            .or_insert_with(|| column_squares(&w.data, w.cols))
    }

    /// Whether a matmul of `rows` activation rows ran on B's tensor cores (TF32, activations
    /// not quantized).
    fn tensor_step(&self, rows: usize) -> bool {
        self.tensor_rows.is_some_and(|r| rows >= r)
    }

    fn quantizes(&self, wname: &str, rows: usize) -> bool {
        !self.tensor_step(rows)
            && self
                .types
                .get(wname)
                .is_some_and(|&ty| quantizes(self.arith, ty))
    }

    /// `x W^T` as B computes it, on the activations B's arithmetic says the matmul consumes:
    /// (those activations, the product). `quant8`: 8-bit blocks of 32 with an f32 scale for
    /// quantized weights; `ggml-cpu`: the weight type's `vec_dot_type`, with the Q8_1 block-sum
    /// term of Q4_1 / Q5_1 weights; otherwise `x` itself.
    fn matmul_as_b(
        &self,
        b: &RefBackend,
        wname: &str,
        w: &RefWeight,
        x: &HostTensor,
    ) -> (HostTensor, HostTensor, Vec<crate::ggml_cpu::Ambiguous>) {
        if self.arith == Arithmetic::GgmlCpu {
            if let Some(&ty) = self.types.get(wname) {
                let c = crate::ggml_cpu::consume(x, crate::ggml_cpu::VecDot::of(ty));
                let mut y = b.matmul(&c.x, w);
                if let (Some(delta), Some(mins)) = (&c.q8_1_delta, self.mins.get(wname)) {
                    crate::ggml_cpu::add_q8_1_term(&mut y, mins, delta);
                }
                return (c.x, y, c.ambiguous);
            }
        }
        let xq = if self.quantizes(wname, x.rows()) {
            quantize_q8_f32(x)
        } else {
            x.clone()
        };
        let y = b.matmul(&xq, w);
        (xq, y, Vec::new())
    }

    /// The matmul bound plus, for `ggml-cpu`, what activations lying on a rounding boundary
    /// may add ([`crate::ggml_cpu::ambiguity_bound`]).
    fn matmul_bound_amb(
        &mut self,
        wname: &str,
        w: &RefWeight,
        x: &HostTensor,
        y: &HostTensor,
        amb: &[crate::ggml_cpu::Ambiguous],
    ) -> f64 {
        let base = self.matmul_bound(wname, w, x, y);
        if amb.is_empty() || self.x86_quantizer {
            return base;
        }
        let e = plain_energy(y);
        let min_sq = self
            .mins
            .get(wname)
            .map(|m| crate::ggml_cpu::min_squares(m, w.rows));
        base + crate::ggml_cpu::ambiguity_bound(amb, self.col_sq(wname, w), min_sq.as_deref(), e)
    }

    fn matmul_bound(&mut self, wname: &str, w: &RefWeight, x: &HostTensor, y: &HostTensor) -> f64 {
        if self.tensor_step(x.rows()) {
            return tf32_matmul_bound(self.col_sq(wname, w), x, y);
        }
        let arith = self.arith;
        matmul_bound(arith, self.col_sq(wname, w), x, y)
    }

    fn rel_bound(eps: &[f64], y: &HostTensor) -> f64 {
        rel_bound(eps, y)
    }

    /// Recomputes every op of one step of B's trace whose input and output taps are present.
    pub fn add_step(&mut self, st: &StepTrace) -> Result<(), VerifyError> {
        let t0 = std::time::Instant::now();
        let r = self.add_step_inner(st);
        self.seconds += t0.elapsed().as_secs_f64();
        r
    }

    #[allow(clippy::too_many_lines)]
    fn add_step_inner(&mut self, st: &StepTrace) -> Result<(), VerifyError> {
        let cx = StepCtx { st };
        let step = st.step;
        // A handle of its own, so ops can read weights while checks are recorded.
        let model = std::sync::Arc::clone(&self.model);
        let cfg = model.config.clone();
        let b = RefBackend::new();
        let n_t = st.tokens.len();
        if st.positions.len() != n_t {
            return Err(VerifyError::Trace(format!(
                "step {step}: {} tokens but {} positions",
                n_t,
                st.positions.len()
            )));
        }
        let float_bound = match self.arith {
            Arithmetic::Exact => 0.0,
            _ => 1.0,
        };

        // Embedding and scale.
        if let Some(e) = cx.get("inp_embd") {
            if let Some(&bad) = st.tokens.iter().find(|&&t| t as usize >= cfg.n_vocab) {
                return Err(VerifyError::Trace(format!(
                    "step {step}: token {bad} is outside the vocabulary ({})",
                    cfg.n_vocab
                )));
            }
            let exp = b
                .embed(&model.token_embd, &st.tokens)
                .map_err(|e| VerifyError::Trace(e.to_string()))?;
            let bound = rounding_bound(self.arith);
            self.push(
                step,
                "token_embd".into(),
                "embedding lookup".into(),
                "inp_embd",
                &[],
                &exp,
                e,
                bound,
            );
        }
        if let (Some(s), Some(x), Some(y)) =
            (cfg.embd_scale, cx.get("inp_embd"), cx.get("inp_scaled"))
        {
            let exp = b.scale(x, s);
            self.push(
                step,
                "inp_scaled".into(),
                "scale".into(),
                "inp_scaled",
                &["inp_embd"],
                &exp,
                y,
                rounding_bound(self.arith),
            );
        }
        let residual0 = if cfg.embd_scale.is_some() {
            "inp_scaled"
        } else {
            "inp_embd"
        };

        for il in 0..cfg.n_layers {
            let t = |o: &str| format!("blk.{il}.{o}");
            let wn = |o: &str| format!("blk.{il}.{o}.weight");
            let res_in = if il == 0 {
                residual0.to_string()
            } else {
                format!("blk.{}.l_out", il - 1)
            };
            let local = cfg.is_local_layer(il);
            // Norms.
            let norm_checks: Vec<(String, String, String, &RefWeight)> = {
                let w = &model.layers[il];
                let mut v = vec![
                    (
                        res_in.clone(),
                        t("attn_norm"),
                        wn("attn_norm"),
                        &w.attn_norm,
                    ),
                    (t("ffn_inp"), t("ffn_norm"), wn("ffn_norm"), &w.ffn_norm),
                ];
                if let Some(n) = &w.q_norm {
                    v.push((t("q"), t("q_norm"), wn("attn_q_norm"), n));
                }
                if let Some(n) = &w.k_norm {
                    v.push((t("k"), t("k_norm"), wn("attn_k_norm"), n));
                }
                if let Some(n) = &w.post_attn_norm {
                    v.push((
                        t("attn_out"),
                        t("attn_post_norm"),
                        wn("post_attention_norm"),
                        n,
                    ));
                }
                if let Some(n) = &w.post_ffn_norm {
                    v.push((t("ffn_out"), t("ffn_post_norm"), wn("post_ffw_norm"), n));
                }
                v
            };
            let mut pending = Vec::new();
            let mut broken: Vec<(String, &str)> = Vec::new();
            for (input, output, wname, w) in norm_checks {
                match (cx.get(&input), cx.get(&output)) {
                    (Some(x), Some(_)) if x.cols() % w.data.len().max(1) != 0 => {
                        broken.push((output, "input width is not whole groups of the norm"));
                    }
                    (Some(x), Some(y)) => {
                        let exp = b.rms_norm(x, w, cfg.rms_eps);
                        // Sum of squares over the group (relative error <= g u), the inverse
                        // square root, and two multiplies: (g + 8) u per element.
                        let g = w.data.len();
                        let bound = norm_bound(self.arith, g);
                        pending.push((
                            wname.trim_end_matches(".weight").to_string(),
                            output,
                            input,
                            exp,
                            y,
                            bound,
                        ));
                    }
                    _ => self.note_unchecked(&output, "input or output tap not recorded"),
                }
            }
            for (op, output, input, exp, y, bound) in pending {
                self.push(
                    step,
                    op,
                    "RMS norm".into(),
                    &output,
                    &[&input],
                    &exp,
                    y,
                    bound,
                );
            }
            for (output, why) in broken {
                self.push_broken(step, &output, why);
            }

            // Projections (matmul, + bias for qwen2).
            let proj: Vec<(&str, &str, &str, Option<&str>)> = vec![
                ("attn_norm", "q", "attn_q", Some("attn_q.bias")),
                ("attn_norm", "k", "attn_k", Some("attn_k.bias")),
                ("attn_norm", "v", "attn_v", Some("attn_v.bias")),
                ("kqv", "attn_out", "attn_output", None),
                ("ffn_norm", "ffn_gate", "ffn_gate", None),
                ("ffn_norm", "ffn_up", "ffn_up", None),
                ("ffn_act", "ffn_out", "ffn_down", None),
            ];
            for (inp, out, wstem, bias) in proj {
                let (Some(x), Some(y)) = (cx.get(&t(inp)), cx.get(&t(out))) else {
                    self.note_unchecked(&t(out), "input or output tap not recorded");
                    continue;
                };
                let lw = &model.layers[il];
                let w = match wstem {
                    "attn_q" => &lw.wq,
                    "attn_k" => &lw.wk,
                    "attn_v" => &lw.wv,
                    "attn_output" => &lw.wo,
                    "ffn_gate" => &lw.ffn_gate,
                    "ffn_up" => &lw.ffn_up,
                    _ => &lw.ffn_down,
                };
                let bias_w = match (bias, wstem) {
                    (Some(_), "attn_q") => lw.bq.as_ref(),
                    (Some(_), "attn_k") => lw.bk.as_ref(),
                    (Some(_), "attn_v") => lw.bv.as_ref(),
                    _ => None,
                };
                if x.cols() != w.cols {
                    self.push_broken(
                        step,
                        &t(out),
                        &format!("{} has {} columns, the weight {}", t(inp), x.cols(), w.cols),
                    );
                    continue;
                }
                let name = format!("{}.weight", t(wstem));
                let (xq, mut exp, amb) = self.matmul_as_b(&b, &name, w, x);
                let plain = exp.clone();
                if let Some(bw) = bias_w {
                    exp = b.add_bias(&exp, bw);
                }
                let bound = self.matmul_bound_amb(&name, w, &xq, &plain, &amb)
                    * (plain_energy(&plain) / plain_energy(&exp).max(f64::MIN_POSITIVE));
                let ty = self
                    .types
                    .get(&name)
                    .map_or("?".to_string(), |t| t.name().to_string());
                let what = if bias_w.is_some() {
                    format!("{ty} matmul + bias")
                } else {
                    format!("{ty} matmul")
                };
                self.push(step, t(wstem), what, &t(out), &[&t(inp)], &exp, y, bound);
            }

            // RoPE.
            let rope = RopeParams {
                style: cfg.rope_style,
                head_dim: cfg.head_dim,
                n_rot: cfg.n_rot,
                base: if local {
                    cfg.rope_base_local
                } else {
                    cfg.rope_base
                },
            };
            let lw = &model.layers[il];
            let normed = [lw.q_norm.is_some(), lw.k_norm.is_some()];
            for ((which, norm), has_norm) in
                [("q", "q_norm"), ("k", "k_norm")].into_iter().zip(normed)
            {
                let input = if has_norm { t(norm) } else { t(which) };
                let out = t(&format!("{which}_rope"));
                match (cx.get(&input), cx.get(&out)) {
                    (Some(x), Some(y)) if x.rows() == n_t && x.cols() % cfg.head_dim == 0 => {
                        let exp = b.rope(x, &st.positions, rope);
                        // cos and sin rounded to f32 (u each), two products and a sum (3u):
                        // a rotation keeps norms, so 6u of each pair's norm; 8u for margin.
                        // ggml-cpu: plus the error of its running-product angles.
                        let e = if self.arith == Arithmetic::GgmlCpu {
                            let eps = crate::ggml_cpu::rope_eps(
                                &st.positions,
                                x.cols(),
                                cfg.head_dim,
                                cfg.n_rot,
                                rope.base,
                                cfg.rope_style == lockstep_graph::RopeStyle::Neox,
                            );
                            rel_bound(&eps, &exp).sqrt()
                        } else {
                            rope_bound(self.arith).sqrt()
                        };
                        self.push(
                            step,
                            out.clone(),
                            "RoPE".into(),
                            &out,
                            &[&input],
                            &exp,
                            y,
                            e * e,
                        );
                    }
                    (Some(_), Some(_)) => {
                        self.push_broken(step, &out, "shape does not match the positions")
                    }
                    _ => self.note_unchecked(&out, "input or output tap not recorded"),
                }
            }

            // KV store + read: the rows read must be what was stored at every position so far.
            self.check_kv(step, il, &cx, n_t)?;

            // Attention.
            self.check_attention(step, il, &cx, local)?;

            // Activation.
            if let (Some(g), Some(u), Some(a)) = (
                cx.get(&t("ffn_gate")),
                cx.get(&t("ffn_up")),
                cx.get(&t("ffn_act")),
            ) {
                if g.shape == u.shape {
                    let exp = b.act_mul(g, u, cfg.activation);
                    let bound = if self.arith == Arithmetic::GgmlCpu
                        && cfg.activation == lockstep_graph::Activation::GeluTanh
                    {
                        let num = crate::ggml_cpu::gelu_table_err2(&g.data, &u.data, &exp.data);
                        let den = plain_energy(&exp);
                        if den == 0.0 {
                            0.0
                        } else {
                            num / den
                        }
                    } else {
                        act_bound(self.arith, cfg.activation, &g.data, &exp)
                    };
                    let what = match cfg.activation {
                        lockstep_graph::Activation::Silu => "SiLU(gate) * up",
                        lockstep_graph::Activation::GeluTanh => "GELU-tanh(gate) * up",
                    };
                    self.push(
                        step,
                        t("ffn_act"),
                        what.into(),
                        &t("ffn_act"),
                        &[&t("ffn_gate"), &t("ffn_up")],
                        &exp,
                        a,
                        bound,
                    );
                } else {
                    self.push_broken(step, &t("ffn_act"), "gate and up differ in shape");
                }
            } else {
                self.note_unchecked(&t("ffn_act"), "input or output tap not recorded");
            }

            // Residual adds.
            let attn_branch = if model.layers[il].post_attn_norm.is_some() {
                t("attn_post_norm")
            } else {
                t("attn_out")
            };
            let ffn_branch = if model.layers[il].post_ffn_norm.is_some() {
                t("ffn_post_norm")
            } else {
                t("ffn_out")
            };
            for (a_name, b_name, out) in [
                (res_in.clone(), attn_branch, t("ffn_inp")),
                (t("ffn_inp"), ffn_branch, t("l_out")),
            ] {
                match (cx.get(&a_name), cx.get(&b_name), cx.get(&out)) {
                    (Some(x), Some(y), Some(z)) if x.shape == y.shape => {
                        let exp = b.add(x, y);
                        self.push(
                            step,
                            out.clone(),
                            "residual add".into(),
                            &out,
                            &[&a_name, &b_name],
                            &exp,
                            z,
                            rounding_bound(self.arith),
                        );
                    }
                    (Some(_), Some(_), Some(_)) => {
                        self.push_broken(step, &out, "the summands differ in shape")
                    }
                    _ => self.note_unchecked(&out, "input or output tap not recorded"),
                }
            }
        }

        // Head: final norm of the output rows, then the LM head.
        let last = format!("blk.{}.l_out", cfg.n_layers.saturating_sub(1));
        match (cx.get(&last), cx.get("result_norm")) {
            (Some(x), Some(y))
                if y.rows() <= x.rows()
                    && x.cols() == y.cols()
                    && x.cols() == model.output_norm.data.len() =>
            {
                let rows: Vec<usize> = (x.rows() - y.rows()..x.rows()).collect();
                let sel = b.select_rows(x, &rows);
                let exp = b.rms_norm(&sel, &model.output_norm, cfg.rms_eps);
                let eps = (cfg.n_embd as f64 + 8.0) * U * float_bound;
                self.push(
                    step,
                    "output_norm".into(),
                    "RMS norm".into(),
                    "result_norm",
                    &[&last],
                    &exp,
                    y,
                    eps * eps,
                );
            }
            (Some(_), Some(_)) => {
                self.push_broken(step, "result_norm", "more output rows than rows")
            }
            _ => self.note_unchecked("result_norm", "input or output tap not recorded"),
        }
        match (cx.get("result_norm"), cx.get("result_output")) {
            (Some(x), Some(y)) => {
                let (w, name) = match &model.output {
                    Some(w) => (w.clone(), "output.weight"),
                    None => (model.token_embd.clone(), "token_embd.weight"),
                };
                if x.cols() == w.cols {
                    let (xq, exp, amb) = self.matmul_as_b(&b, name, &w, x);
                    let bound = self.matmul_bound_amb(name, &w, &xq, &exp, &amb);
                    let ty = self
                        .types
                        .get(name)
                        .map_or("?".to_string(), |t| t.name().to_string());
                    let what = if name == "token_embd.weight" {
                        format!("{ty} matmul, LM head tied to the embedding")
                    } else {
                        format!("{ty} matmul, LM head")
                    };
                    self.push(
                        step,
                        name.trim_end_matches(".weight").into(),
                        what,
                        "result_output",
                        &["result_norm"],
                        &exp,
                        y,
                        bound,
                    );
                } else {
                    self.push_broken(step, "result_output", "result_norm has the wrong width");
                }
            }
            _ => self.note_unchecked("result_output", "input or output tap not recorded"),
        }
        Ok(())
    }

    fn push_broken(&mut self, step: usize, tap: &str, why: &str) {
        self.checks.push(OpCheck {
            step,
            op: tap.to_string(),
            what: format!("shape check: {why}"),
            tap: tap.to_string(),
            inputs: Vec::new(),
            metrics: Metrics::broken(0),
            bound: 0.0,
            pass: false,
        });
    }

    fn check_kv(
        &mut self,
        step: usize,
        il: usize,
        cx: &StepCtx<'_>,
        n_t: usize,
    ) -> Result<(), VerifyError> {
        let t = |o: &str| format!("blk.{il}.{o}");
        let kv_dim = self.model.config.kv_dim();
        let first_pos = cx.st.positions.first().copied().unwrap_or(0) as usize;
        let (kr, vr, ks, vs) = (
            cx.get(&t("k_read")),
            cx.get(&t("v_read")),
            cx.get(&t("k_rope")),
            cx.get(&t("v")),
        );
        // Extend the history with this step's rows (what kv_store was handed).
        let hist = match (&mut self.kv_hist[il], ks, vs) {
            (Some((hk, hv)), Some(k), Some(v))
                if k.cols() == kv_dim && v.cols() == kv_dim && hk.len() == first_pos * kv_dim =>
            {
                hk.extend_from_slice(&k.data);
                hv.extend_from_slice(&v.data);
                debug_assert_eq!(hk.len(), (first_pos + n_t) * kv_dim);
                Some((hk.clone(), hv.clone()))
            }
            _ => None,
        };
        if hist.is_none() {
            self.kv_hist[il] = None;
        }
        for (name, read, idx) in [("k_read", kr, 0usize), ("v_read", vr, 1usize)] {
            let tap = t(name);
            match (read, &hist) {
                (Some(got), Some(h)) => {
                    let rows = if idx == 0 { &h.0 } else { &h.1 };
                    let exp = HostTensor::matrix(rows.len() / kv_dim.max(1), kv_dim, rows.clone());
                    let bound = match self.arith {
                        Arithmetic::Exact => 0.0,
                        Arithmetic::Float => U * U,
                        Arithmetic::Quant8 | Arithmetic::GgmlCpu => kv_f16_bound(&exp.data),
                    };
                    let src = if idx == 0 { t("k_rope") } else { t("v") };
                    let what = match self.arith {
                        Arithmetic::Quant8 | Arithmetic::GgmlCpu => "KV store + read (f16 cache)",
                        _ => "KV store + read",
                    };
                    self.push(
                        step,
                        tap.clone(),
                        what.into(),
                        &tap,
                        &[&format!("{src} (steps 0..={step})")],
                        &exp,
                        got,
                        bound,
                    );
                }
                (Some(_), None) => {
                    self.note_unchecked(&tap, "K/V of an earlier step or this one not recorded")
                }
                (None, _) => self.note_unchecked(&tap, "tap not recorded"),
            }
        }
        Ok(())
    }

    fn check_attention(
        &mut self,
        step: usize,
        il: usize,
        cx: &StepCtx<'_>,
        local: bool,
    ) -> Result<(), VerifyError> {
        let cfg = &self.model.config;
        let t = |o: &str| format!("blk.{il}.{o}");
        let hd = cfg.head_dim;
        let (nh, nkv) = (cfg.n_heads, cfg.n_kv_heads);
        let kv_dim = cfg.kv_dim();
        let group = nh / nkv.max(1);
        let window = if local { cfg.sliding_window } else { None };
        let scale = cfg.attn_scale;
        let n_q = cx.st.tokens.len();
        let first_pos = cx.st.positions.first().copied().unwrap_or(0);
        let n_kv = first_pos as usize + n_q;
        let visible = |i: usize, j: usize| -> bool {
            let pos = first_pos + i as u32;
            let j = j as u32;
            j <= pos && window.is_none_or(|w| pos - j < w)
        };
        let float_bound = if self.arith == Arithmetic::Exact {
            0.0
        } else {
            1.0
        };
        let (q, kr, vr) = (
            cx.get(&t("q_rope")),
            cx.get(&t("k_read")),
            cx.get(&t("v_read")),
        );
        let (kq, sm, kqv) = (
            cx.get(&t("kq")),
            cx.get(&t("kq_softmax")),
            cx.get(&t("kqv")),
        );
        let shapes_ok = |q: &HostTensor, k: &HostTensor, v: &HostTensor| {
            q.rows() == n_q
                && q.cols() == nh * hd
                && k.rows() == n_kv
                && k.cols() == kv_dim
                && v.shape == k.shape
        };
        let n_scores = n_q * nh * n_kv;

        // Softmax on B's own scores.
        if let (Some(s), Some(p)) = (kq, sm) {
            if s.data.len() == n_scores && p.data.len() == n_scores {
                let mut exp = vec![0f32; n_scores];
                let mut eps = vec![0f64; n_scores];
                for (r, (srow, erow)) in s
                    .data
                    .chunks(n_kv.max(1))
                    .zip(exp.chunks_mut(n_kv.max(1)))
                    .enumerate()
                {
                    let _ = r;
                    let max = srow.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                    let e: Vec<f64> = srow
                        .iter()
                        .map(|&v| {
                            if v == f32::NEG_INFINITY {
                                0.0
                            } else {
                                (f64::from(v) - f64::from(max)).exp()
                            }
                        })
                        .collect();
                    let sum: f64 = e.iter().sum();
                    let n_vis = srow.iter().filter(|v| **v != f32::NEG_INFINITY).count() as f64;
                    for (j, (o, ev)) in erow.iter_mut().zip(&e).enumerate() {
                        *o = (ev / sum) as f32;
                        let d = if srow[j] == f32::NEG_INFINITY {
                            0.0
                        } else {
                            (f64::from(srow[j]) - f64::from(max)).abs()
                        };
                        // exp's argument s - max carries u|s - max|, exp itself ~2u, the sum
                        // of n terms n u, the division u.
                        eps[r * n_kv + j] = (d + n_vis + 4.0) * U * float_bound;
                    }
                }
                let exp = HostTensor::new(vec![n_scores], exp);
                let bound = Self::rel_bound(&eps, &exp);
                self.push(
                    step,
                    t("kq_softmax"),
                    "softmax".into(),
                    &t("kq_softmax"),
                    &[&t("kq")],
                    &exp,
                    p,
                    bound,
                );
            } else {
                self.push_broken(step, &t("kq_softmax"), "scores are not [n_q, heads, n_kv]");
            }
        } else {
            self.note_unchecked(
                &t("kq_softmax"),
                "kq or kq_softmax not recorded (hidden by a fused kernel, filtered, or the engine has no such tensor)",
            );
        }

        // Weighted sum on B's own probabilities and V rows.
        if let (Some(p), Some(v), Some(o)) = (sm, vr, kqv) {
            if p.data.len() == n_scores
                && v.rows() == n_kv
                && v.cols() == kv_dim
                && o.rows() == n_q
                && o.cols() == nh * hd
            {
                let mut exp = vec![0f32; n_q * nh * hd];
                let mut abs_sum = vec![0f64; n_q * nh * hd];
                // ggml-cpu: the f16 rounding of the probabilities (KQ·V is an f16 matmul).
                let mut p16 = vec![0f64; n_q * nh * hd];
                let ggml = self.arith == Arithmetic::GgmlCpu;
                for i in 0..n_q {
                    for h in 0..nh {
                        let kh = h / group;
                        let prow = &p.data[(i * nh + h) * n_kv..(i * nh + h + 1) * n_kv];
                        let mut acc = vec![0f64; hd];
                        let mut acc_abs = vec![0f64; hd];
                        for (j, &pj) in prow.iter().enumerate() {
                            if pj == 0.0 {
                                continue;
                            }
                            let vrow = &v.data[j * kv_dim + kh * hd..j * kv_dim + (kh + 1) * hd];
                            for d in 0..hd {
                                acc[d] += f64::from(pj) * f64::from(vrow[d]);
                                acc_abs[d] += (f64::from(pj) * f64::from(vrow[d])).abs();
                            }
                        }
                        let base = (i * nh + h) * hd;
                        for d in 0..hd {
                            exp[base + d] = acc[d] as f32;
                            abs_sum[base + d] = acc_abs[d];
                            if ggml {
                                p16[base + d] = crate::ggml_cpu::p_f16_term(
                                    ROUNDING_LAMBDA,
                                    prow.iter()
                                        .enumerate()
                                        .map(|(j, &pj)| (pj, v.data[j * kv_dim + kh * hd + d])),
                                );
                            }
                        }
                    }
                }
                let exp = HostTensor::matrix(n_q, nh * hd, exp);
                // f32 accumulation over n_kv keys ((n_kv + 2) u of sum p|v|), and B normalizing
                // after the sum instead of before (u). Not bitwise even for the reference, which
                // weights V by its unrounded f64 probabilities, not the recorded f32 ones.
                let gamma = (n_kv as f64 + 3.0) * U;
                let bound = if ggml {
                    let per: Vec<f64> = abs_sum
                        .iter()
                        .zip(&p16)
                        .map(|(&a, &p)| gamma * a + p)
                        .collect();
                    abs_bound(1.0, &per, &exp)
                } else {
                    abs_bound(gamma, &abs_sum, &exp)
                };
                self.push(
                    step,
                    t("kqv"),
                    "attention weighted sum (softmax x V)".into(),
                    &t("kqv"),
                    &[&t("kq_softmax"), &t("v_read")],
                    &exp,
                    o,
                    bound,
                );
            }
        }

        // Scores and the whole attention on the reference backend, from B's q_rope, k_read, v_read.
        let (Some(q), Some(k), Some(v)) = (q, kr, vr) else {
            self.note_unchecked(&t("kqv"), "q_rope, k_read or v_read not recorded");
            return Ok(());
        };
        if !shapes_ok(q, k, v) {
            self.push_broken(
                step,
                &t("kqv"),
                "q_rope/k_read/v_read shapes do not match the step",
            );
            return Ok(());
        }
        let b = &self.backend;
        let layout = KvLayout {
            n_layers: 1,
            n_blocks: 1,
            block_size: n_kv.max(1),
            kv_dim,
        };
        let err = |e: lockstep_graph::BackendError| VerifyError::Trace(e.to_string());
        let mut cache = b.alloc_kv(layout).map_err(err)?;
        let slots: Vec<u32> = (0..n_kv as u32).collect();
        let store = Batch {
            tokens: vec![0; n_kv],
            positions: slots.clone(),
            slots: slots.clone(),
            seqs: Vec::new(),
            output_rows: Vec::new(),
        };
        b.kv_store(&mut cache, 0, k, v, &store).map_err(err)?;
        let batch = Batch {
            tokens: vec![0; n_q],
            positions: cx.st.positions.clone(),
            slots: (first_pos..first_pos + n_q as u32).collect(),
            seqs: vec![BatchSeq {
                first_row: 0,
                n_rows: n_q,
                first_pos,
                kv_slots: slots,
                mask: None,
            }],
            output_rows: Vec::new(),
        };
        let mut rec = Recorder::new();
        let exp_kqv = b
            .attention(
                &cache,
                0,
                q,
                &batch,
                AttentionParams {
                    n_heads: nh,
                    n_kv_heads: nkv,
                    head_dim: hd,
                    scale,
                    window,
                },
                &mut Taps::new(&mut rec),
            )
            .map_err(err)?;
        let ref_kq = rec.get("blk.0.kq").cloned();
        let ref_p = rec.get("blk.0.kq_softmax").cloned();
        let (Some(ref_kq), Some(ref_p)) = (ref_kq, ref_p) else {
            return Err(VerifyError::Trace(
                "the reference attention emitted no scores".into(),
            ));
        };
        let geom = AttnGeom {
            n_q,
            n_kv,
            n_heads: nh,
            n_kv_heads: nkv,
            head_dim: hd,
            scale,
        };
        let (score_err, kqv_err, _) = attention_error_bounds(
            self.arith,
            &geom,
            &q.data,
            &k.data,
            &v.data,
            &ref_kq.data,
            &ref_p.data,
            &visible,
        );
        if let Some(s) = kq {
            if s.data.len() == n_scores {
                let den: f64 = ref_kq
                    .data
                    .iter()
                    .filter(|v| v.is_finite())
                    .map(|&v| f64::from(v) * f64::from(v))
                    .sum();
                let num = score_err;
                let bound = if den == 0.0 { 0.0 } else { num / den };
                self.push(
                    step,
                    t("kq"),
                    "attention scores (scaled Q.K, masked)".into(),
                    &t("kq"),
                    &[&t("q_rope"), &t("k_read")],
                    &ref_kq,
                    s,
                    bound,
                );
            } else {
                self.push_broken(step, &t("kq"), "scores are not [n_q, heads, n_kv]");
            }
        }
        if let Some(o) = kqv {
            let abs_sum = kqv_err;
            let bound = abs_bound(1.0, &abs_sum, &exp_kqv);
            self.push(
                step,
                t("attention"),
                "attention (scores, softmax, weighted sum)".into(),
                &t("kqv"),
                &[&t("q_rope"), &t("k_read"), &t("v_read")],
                &exp_kqv,
                o,
                bound,
            );
        }
        Ok(())
    }

    pub fn finish(self) -> IsolationReport {
        IsolationReport {
            backend: self.backend_name,
            arithmetic: self.arith,
            checks: self.checks,
            unchecked: self.unchecked,
            seconds: self.seconds,
        }
    }
}

/// Whether B, declaring `arith`, stores its KV cache as f16: ggml-cpu and quant8 say so (the
/// cpu backend), except for cuda's fast numerics (`cuda`, `cuda-det`), whose quant8 covers the
/// matmuls and whose cache is f32 unless the process runs with `LOCKSTEP_CUDA_KV=f16` (the
/// backend reads the same variable when it compiles its kernels and allocates its cache).
/// (An f32 cache is inside every f16 bound; the op harness needs to know which values the
/// cache holds to feed the reference the same ones.)
pub fn kv_cache_f16(arith: Arithmetic, backend: &str) -> bool {
    let cuda_fast = matches!(
        backend.split('[').next().unwrap_or(backend),
        "cuda" | "cuda-det"
    );
    let cuda_f16 = std::env::var("LOCKSTEP_CUDA_KV").is_ok_and(|v| v == "f16");
    arith == Arithmetic::GgmlCpu || (arith == Arithmetic::Quant8 && (!cuda_fast || cuda_f16))
}

/// Whether B quantizes the activations of a matmul against a weight of type `ty`.
pub fn quantizes(arith: Arithmetic, ty: GgmlType) -> bool {
    arith == Arithmetic::Quant8 && !matches!(ty, GgmlType::F32 | GgmlType::F16 | GgmlType::Bf16)
}

/// Sums of squares of a weight's columns (`sum_j w_ji^2`, `w` as `[rows, cols]`).
pub fn column_squares(w: &[f32], cols: usize) -> Vec<f64> {
    let mut c = vec![0f64; cols];
    for row in w.chunks_exact(cols.max(1)) {
        for (ci, &v) in c.iter_mut().zip(row) {
            *ci += f64::from(v) * f64::from(v);
        }
    }
    c
}

/// How many standard deviations of accumulated rounding error a matmul bound allows (the
/// probabilistic rounding-error analysis of Higham and Mary: a sum of `n` terms is off by at
/// most `lambda sqrt(n) u sum|terms|` except with probability about `2 exp(-lambda^2 / 2)`,
/// 7e-4 per dot for 4, and the NMSE averages over every output of the step).
pub const ROUNDING_LAMBDA: f64 = 4.0;

/// The NMSE bound of `y = x W^T` on B's (possibly quantized, see [`quantize_q8_f32`])
/// activations `x`: every output is a dot of `k` terms accumulated by B in `n = k/4 + 8`
/// sequential f32 steps (eight-lane or per-32-block sums, the reference's eight-lane sum, the
/// rounding of dequantized weights; `n = k + 8` for an engine of unknown order), so it is off
/// by at most `lambda sqrt(n) u sum_i |w_ji x_i|`; Cauchy-Schwarz turns that into
/// `lambda^2 n u^2 k sum_i x_i^2 sum_j w_ji^2` over all rows, divided by `sum y^2`.
/// `col_sq` is [`column_squares`] of W.
pub fn matmul_bound(arith: Arithmetic, col_sq: &[f64], x: &HostTensor, y: &HostTensor) -> f64 {
    let k = col_sq.len();
    let n_acc = match arith {
        Arithmetic::Exact => return 0.0,
        Arithmetic::Quant8 | Arithmetic::GgmlCpu => k as f64 / 4.0 + 8.0,
        Arithmetic::Float => k as f64 + 8.0,
    };
    let mut energy = 0f64;
    for row in x.data.chunks_exact(k.max(1)) {
        energy += row
            .iter()
            .zip(col_sq)
            .map(|(&v, &ci)| f64::from(v) * f64::from(v) * ci)
            .sum::<f64>();
    }
    let den = plain_energy(y);
    if den == 0.0 {
        return 0.0;
    }
    ROUNDING_LAMBDA * ROUNDING_LAMBDA * n_acc * U * U * k as f64 * energy / den
}

/// Element-wise ops: a relative error bound per element, as an NMSE.
pub fn rel_bound(eps: &[f64], y: &HostTensor) -> f64 {
    let mut num = 0f64;
    let mut den = 0f64;
    for (&e, &v) in eps.iter().zip(&y.data) {
        let v = f64::from(v);
        num += e * e * v * v;
        den += v * v;
    }
    if den == 0.0 {
        0.0
    } else {
        num / den
    }
}

/// A single correctly rounded f32 operation (embedding dequantization, scale, add, bias): `u^2`.
pub fn rounding_bound(arith: Arithmetic) -> f64 {
    match arith {
        Arithmetic::Exact => 0.0,
        _ => U * U,
    }
}

/// RMS norm over groups of `g`: the sum of squares (relative error <= g u), the inverse square
/// root and two multiplies: `(g + 8) u` per element.
pub fn norm_bound(arith: Arithmetic, g: usize) -> f64 {
    match arith {
        Arithmetic::Exact => 0.0,
        _ => ((g as f64 + 8.0) * U).powi(2),
    }
}

/// RoPE: cos and sin rounded to f32 (u each), two products and a sum (3u); a rotation keeps
/// norms, so 6u of each pair's norm; 8u for margin.
pub fn rope_bound(arith: Arithmetic) -> f64 {
    match arith {
        Arithmetic::Exact => 0.0,
        _ => (8.0 * U).powi(2),
    }
}

/// `act(gate) * up`: the sigmoid argument z carries ~4u relative error from its own arithmetic;
/// exp(-z) turns that into `4u |z|`, plus ~8u for exp, the division and the products.
pub fn act_bound(
    arith: Arithmetic,
    act: lockstep_graph::Activation,
    gate: &[f32],
    out: &HostTensor,
) -> f64 {
    if arith == Arithmetic::Exact {
        return 0.0;
    }
    let eps: Vec<f64> = gate
        .iter()
        .map(|&gv| {
            let gv = f64::from(gv);
            let z = match act {
                lockstep_graph::Activation::Silu => gv,
                lockstep_graph::Activation::GeluTanh => {
                    1.595_769_2 * (gv + 0.044715 * gv * gv * gv)
                }
            };
            (8.0 + 4.0 * z.abs()) * U
        })
        .collect();
    rel_bound(&eps, out)
}

/// K/V stored as f16 and read back: 2^-11 relative for normal values, half a subnormal step
/// (2^-25) absolute below them; as an NMSE of the stored values.
pub fn kv_f16_bound(stored: &[f32]) -> f64 {
    let mut num = 0f64;
    let mut den = 0f64;
    for &v in stored {
        let v = f64::from(v);
        let e = (U_F16 * v.abs()).max(F16_SUBNORMAL_HALF_STEP);
        num += e * e;
        den += v * v;
    }
    if den == 0.0 {
        0.0
    } else {
        num / den
    }
}

/// The shape of one sequence's attention.
pub struct AttnGeom {
    pub n_q: usize,
    pub n_kv: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    pub scale: f32,
}

/// Error bounds of one sequence's attention computed by B from `q` (`[n_q, heads * hd]`), `k`
/// and `v` (`[n_kv, kv_heads * hd]`), given the reference's scores and probabilities on the
/// same inputs (`[n_q, heads, n_kv]`). Returns the bound on the summed squared score error,
/// the per-element absolute error bound of the output (`[n_q, heads * hd]`), and per query row
/// and head the relative error bound of every probability.
///
/// Scores: an f32 dot of `hd` terms is off by at most `hd u sum_i |q_i k_i| <= hd u |q| |k|`
/// (times the scale). Output: score errors `ds_j` move every probability by at most
/// `2 max_j ds_j` relative; the rest is relative to `sum_j p_j |v_j|`. A softmax formed per key
/// (exp's argument, exp, the sum of n terms, the division: `(max|s - max| + n + 4) u`) and then
/// the weighted sum (`(n + 3) u`) stays within `(2 max|s - max| + 2 n + 12) u`, the bound of a
/// split (flash-decoding) softmax in f32, which the cuda backend's decode steps run: each key's
/// weight `expf(s - m_span) expf(m_span - max)` carries two arguments (`2 max|s - max| u`),
/// two f32 exps of at most 2 ulp (`8 u`) and their product (`u`); the normalizer and each
/// output sum n terms through the span sums and their combination (at most n additions on any
/// term's path, `n u` each); the products with V and the final division add `2 u`. Kernels
/// that run an online softmax over chunks of at least 8 keys (the cuda split-key kernel within
/// a span, heads of up to 256 values; the flash prefill kernels' tiles of 64) rescale their
/// running sums by `expf(m_old - m_new)` where a chunk raises the maximum: a key's exponent
/// arguments then form a chain whose magnitudes add up to `|s - max|` (within the arguments'
/// term), and each later chunk adds at most one exp and one product, `5 u`, at most
/// `ceil(n / 8)` of them: `5 ceil(n / 8) u` more.
#[allow(clippy::too_many_arguments)]
pub fn attention_error_bounds(
    arith: Arithmetic,
    g: &AttnGeom,
    q: &[f32],
    k: &[f32],
    v: &[f32],
    ref_kq: &[f32],
    ref_p: &[f32],
    visible: &dyn Fn(usize, usize) -> bool,
) -> (f64, Vec<f64>, Vec<f64>) {
    let (hd, nh, nkv, n_kv) = (g.head_dim, g.n_heads, g.n_kv_heads, g.n_kv);
    let kv_dim = nkv * hd;
    let group = nh / nkv.max(1);
    let fb = if arith == Arithmetic::Exact { 0.0 } else { 1.0 };
    let qn: Vec<f64> = q.chunks(hd.max(1)).map(norm2).collect();
    let kn: Vec<f64> = k.chunks(hd.max(1)).map(norm2).collect();
    // ggml-cpu converts Q to f16 for the KQ product (K is already f16) and the probabilities
    // to f16 for KQ·V: 2^-11 of |q||k| more per score, 2^-11 more per probability, and half an
    // f16 subnormal step for probabilities below the normal range.
    let ggml = arith == Arithmetic::GgmlCpu;
    let q16 = if ggml { crate::ggml_cpu::U_F16 } else { 0.0 };
    let gamma_hd = (hd as f64 * U * fb + q16) * f64::from(g.scale);
    let mut score_num = 0f64;
    let mut out = vec![0f64; g.n_q * nh * hd];
    let mut p_eps = vec![0f64; g.n_q * nh];
    for i in 0..g.n_q {
        for h in 0..nh {
            let kh = h / group;
            let row = (i * nh + h) * n_kv;
            let srow = &ref_kq[row..row + n_kv];
            let smax = srow.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let (mut max_ds, mut max_spread, mut n_vis) = (0f64, 0f64, 0f64);
            for j in 0..n_kv {
                if !visible(i, j) {
                    continue;
                }
                n_vis += 1.0;
                let ds = gamma_hd * qn[i * nh + h] * kn[j * nkv + kh];
                score_num += ds * ds;
                max_ds = max_ds.max(ds);
                max_spread = max_spread.max(f64::from(smax) - f64::from(srow[j]));
            }
            let rescales = 5.0 * (n_vis / 8.0).ceil();
            let eps =
                2.0 * max_ds + (2.0 * max_spread + 2.0 * n_vis + rescales + 12.0) * U * fb + q16;
            p_eps[i * nh + h] = eps;
            let base = (i * nh + h) * hd;
            let mut tiny = vec![0f64; hd];
            for (j, &pj) in ref_p[row..row + n_kv].iter().enumerate() {
                if pj == 0.0 {
                    continue;
                }
                let vrow = &v[j * kv_dim + kh * hd..j * kv_dim + (kh + 1) * hd];
                for (o, &vv) in out[base..base + hd].iter_mut().zip(vrow) {
                    *o += (f64::from(pj) * f64::from(vv)).abs();
                }
                if ggml {
                    for (t, &vv) in tiny.iter_mut().zip(vrow) {
                        *t += crate::ggml_cpu::F16_HALF_SUBNORMAL * f64::from(vv).abs();
                    }
                }
            }
            for (o, t) in out[base..base + hd].iter_mut().zip(&tiny) {
                *o = *o * eps + t;
            }
        }
    }
    (score_num, out, p_eps)
}

/// The activation format of [`Arithmetic::Quant8`], as values: each run of 32 values of a row
/// (the last run may be shorter) becomes `q * d` with `d = max|x| / 127` (f32) and
/// `q = round_half_even(x * (1 / d))` clamped to +-127. This is the declared format itself
/// (what the op is specified to consume), so the reference's product of it differs from B's
/// only by float rounding.
pub fn quantize_q8_f32(x: &HostTensor) -> HostTensor {
    let k = x.cols().max(1);
    let mut out = Vec::with_capacity(x.data.len());
    for row in x.data.chunks(k) {
        for blk in row.chunks(32) {
            let amax = blk.iter().fold(0f32, |m, v| m.max(v.abs()));
            let d = amax / 127.0;
            let id = if d != 0.0 { 1.0 / d } else { 0.0 };
            out.extend(blk.iter().map(|&v| {
                let q = (v * id).round_ties_even().clamp(-127.0, 127.0);
                if q.is_nan() {
                    0.0
                } else {
                    q * d
                }
            }));
        }
    }
    HostTensor::new(x.shape.clone(), out)
}

fn norm2(x: &[f32]) -> f64 {
    x.iter()
        .map(|&v| f64::from(v) * f64::from(v))
        .sum::<f64>()
        .sqrt()
}

fn plain_energy(t: &HostTensor) -> f64 {
    t.data.iter().map(|&v| f64::from(v) * f64::from(v)).sum()
}

/// NMSE bound from per-element absolute error bounds `gamma * abs[i]` against output `y`.
fn abs_bound(gamma: f64, abs: &[f64], y: &HostTensor) -> f64 {
    let num: f64 = abs.iter().map(|&a| (gamma * a) * (gamma * a)).sum();
    let den = plain_energy(y);
    if den == 0.0 {
        0.0
    } else {
        num / den
    }
}

/// Isolates every step of a saved trace (side B) against `file`'s weights.
pub fn isolate_trace(
    trace: &Trace,
    file: &GgufFile,
    arith: Arithmetic,
) -> Result<IsolationReport, VerifyError> {
    isolate_trace_with(trace, file, arith, false)
}

/// [`isolate_trace`], saying whether B (`GgmlCpu`) quantizes with ggml's x86 AVX code.
pub fn isolate_trace_with(
    trace: &Trace,
    file: &GgufFile,
    arith: Arithmetic,
    x86_quantizer: bool,
) -> Result<IsolationReport, VerifyError> {
    let mut iso = Isolator::new(file, &trace.meta.backend, arith)?;
    iso.set_x86_quantizer(x86_quantizer);
    for st in &trace.steps {
        iso.add_step(st)?;
    }
    Ok(iso.finish())
}

/// Re-runs engine B on the given tokens per step (prefill, then one token per decode step) and
/// isolates every step as it comes (one step of taps held at a time).
pub fn isolate_engine(
    engine: &mut dyn AnyEngine,
    steps: &[Vec<u32>],
    filter: TapFilter,
    mask: MaskMode,
    file: &GgufFile,
    arith: Arithmetic,
) -> Result<IsolationReport, VerifyError> {
    let Some(prompt) = steps.first() else {
        return Err(VerifyError::Input("no steps to isolate".into()));
    };
    let name = engine.backend_name();
    let mut iso = Isolator::new(file, &name, arith)?;
    let spec = RunSpec {
        prompt: prompt.clone(),
        decode: steps.len() - 1,
        filter,
        mask,
        ..RunSpec::default()
    };
    let mut s = Stepper::new(engine, spec)?;
    for toks in steps {
        let Some(st) = s.step(Some(toks.clone()))? else {
            break;
        };
        iso.add_step(&st)?;
    }
    Ok(iso.finish())
}

#[cfg(test)]
mod tf32_tests {
    use super::*;

    /// Rounds to TF32 (10 stored significand bits, nearest, ties to even), as tensor cores
    /// read f32 operands.
    fn tf32(v: f32) -> f32 {
        let b = v.to_bits();
        let lsb = (b >> 13) & 1;
        f32::from_bits((b + 0x0fff + lsb) & !0x1fff)
    }

    fn lcg(s: &mut u64) -> f32 {
        *s = s
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((*s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }

    #[test]
    fn tf32_bound_holds_for_tf32_rounding_and_catches_a_small_error() {
        let (n, k, m) = (70, 512, 96);
        let mut s = 7u64;
        let x: Vec<f32> = (0..n * k).map(|_| lcg(&mut s) * 3.0).collect();
        let w: Vec<f32> = (0..m * k).map(|_| lcg(&mut s) * 0.05).collect();
        let exact = |xs: &[f32], ws: &[f32]| -> HostTensor {
            let mut y = vec![0f32; n * m];
            for i in 0..n {
                for j in 0..m {
                    let d: f64 = (0..k)
                        .map(|t| f64::from(xs[i * k + t]) * f64::from(ws[j * k + t]))
                        .sum();
                    y[i * m + j] = d as f32;
                }
            }
            HostTensor::matrix(n, m, y)
        };
        let want = exact(&x, &w);
        let xt: Vec<f32> = x.iter().map(|&v| tf32(v)).collect();
        let wt: Vec<f32> = w.iter().map(|&v| tf32(v)).collect();
        let got = exact(&xt, &wt);
        let xh = HostTensor::matrix(n, k, x.clone());
        let bound = tf32_matmul_bound(&column_squares(&w, k), &xh, &want);
        let nmse = compare(&want.data, &got.data).nmse;
        assert!(
            nmse > 0.0 && nmse < bound / 10.0,
            "nmse {nmse} bound {bound}"
        );
        // Four weight rows of 96 5% off (a wrong scale on a few rows) fail the bound.
        let mut wb = wt.clone();
        for v in &mut wb[5 * k..9 * k] {
            *v *= 1.05;
        }
        let bad = compare(&want.data, &exact(&xt, &wb).data).nmse;
        assert!(bad > bound, "bad {bad} bound {bound}");
        assert_eq!(tensor_core_rows("cuda"), Some(CUDA_GEMM_MIN_ROWS));
        assert_eq!(
            tensor_core_rows("cuda[mask-drift]"),
            Some(CUDA_GEMM_MIN_ROWS)
        );
        assert_eq!(tensor_core_rows("cuda-det"), None);
        assert_eq!(tensor_core_rows("cpu"), None);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backends_declare_their_arithmetic() {
        assert_eq!(Arithmetic::for_backend("ref"), Arithmetic::Exact);
        assert_eq!(Arithmetic::for_backend("cuda-exact"), Arithmetic::Exact);
        assert_eq!(
            Arithmetic::for_backend("cuda-exact[q4k-wrong-scale]"),
            Arithmetic::Exact
        );
        assert_eq!(Arithmetic::for_backend("cpu"), Arithmetic::Quant8);
        assert_eq!(Arithmetic::for_backend("cuda"), Arithmetic::Quant8);
        assert_eq!(
            Arithmetic::for_backend("cuda[kv-skip-prefill]"),
            Arithmetic::Quant8
        );
        assert_eq!(Arithmetic::for_backend("llama.cpp"), Arithmetic::Float);
        // The cpu's quant8 keeps an f16 cache; cuda's fast numerics an f32 one.
        assert!(kv_cache_f16(Arithmetic::Quant8, "cpu"));
        let f16 = std::env::var("LOCKSTEP_CUDA_KV").is_ok_and(|v| v == "f16");
        assert_eq!(kv_cache_f16(Arithmetic::Quant8, "cuda"), f16);
        assert_eq!(kv_cache_f16(Arithmetic::Quant8, "cuda[wrong-kv-head]"), f16);
        assert_eq!(kv_cache_f16(Arithmetic::Quant8, "cuda-det"), f16);
        assert!(!kv_cache_f16(Arithmetic::Exact, "cuda-exact"));
        assert!(!kv_cache_f16(Arithmetic::Exact, "cpu"));
        assert!(crate::check::bitwise_invariances("cuda").len() > 1);
        assert_eq!(
            crate::check::bitwise_invariances("cuda-exact"),
            crate::check::bitwise_invariances("ref")
        );
        use crate::tolerance::Profile;
        assert_eq!(Profile::for_backends("ref", "cuda"), Profile::Quant);
        assert_eq!(Profile::for_backends("ref", "cuda-det"), Profile::Quant);
        assert_eq!(Arithmetic::for_backend("cuda-det"), Arithmetic::Quant8);
        assert_eq!(Profile::for_backends("ref", "cuda-exact"), Profile::Float);
        assert_eq!(Profile::for_backends("ref", "cpu"), Profile::Quant);
    }

    #[test]
    fn llama_cpp_traces_declare_ggml_cpu_only_on_the_cpu() {
        assert_eq!(
            Arithmetic::for_foreign("llama.cpp", Some("CPU")),
            Some(Arithmetic::GgmlCpu)
        );
        assert_eq!(Arithmetic::for_foreign("llama.cpp", Some("CUDA0")), None);
        assert_eq!(
            Arithmetic::for_foreign("llama.cpp", Some("CPU,CUDA0")),
            None
        );
        assert_eq!(Arithmetic::for_foreign("llama.cpp", None), None);
        assert_eq!(
            Arithmetic::for_foreign("hf-transformers", None),
            Some(Arithmetic::Float)
        );
        assert_eq!(Arithmetic::parse("ggml-cpu"), Some(Arithmetic::GgmlCpu));
        assert_eq!(Arithmetic::GgmlCpu.name(), "ggml-cpu");
        assert_eq!(
            serde_json::to_string(&Arithmetic::GgmlCpu).ok().as_deref(),
            Some("\"ggml-cpu\"")
        );
    }
}
