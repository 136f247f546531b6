//! Comparing two runs tap by tap, and naming the first op that diverges.
//!
//! The rule: walk the steps in order (prefill, then decode steps) and, within a step, the taps
//! in execution order; the first tap whose error exceeds its tolerance is where the two
//! backends part. Everything before it agreed, so the taps it consumes agreed too; the verdict
//! prints them with their errors as evidence.
//!
//! A backend whose fused kernels never hold some intermediates declares them
//! (`Backend::hidden_taps`, recorded in traces as `hidden_taps`). Such a tap is not missing
//! evidence: the verdict looks through it to the taps it was computed from, which both sides
//! have, and says which taps the backend does not expose.

use std::fmt::Write as _;

use serde::Serialize;

use crate::metrics::{argmax, compare, kl_divergence, Metrics};
use crate::run::{AnyEngine, RunSpec, Stepper};
use crate::taps::{cmp_taps, explain, inputs_of, parse_tap};
use crate::tolerance::{kind_of, tolerance, Profile, Tolerance};
#[cfg(test)]
use crate::trace::TraceMeta;
use crate::trace::{StepTrace, Trace};
use crate::VerifyError;

#[derive(Clone, Debug, Serialize)]
pub struct TapDiff {
    pub name: String,
    pub kind: &'static str,
    pub shape_a: Vec<usize>,
    pub shape_b: Vec<usize>,
    pub metrics: Metrics,
    pub tolerance: Tolerance,
    pub pass: bool,
}

#[derive(Clone, Debug, Serialize)]
pub struct PositionStat {
    pub step: usize,
    pub position: u32,
    pub kl: f64,
    pub top1_a: u32,
    pub top1_b: u32,
}

#[derive(Clone, Debug, Serialize)]
pub struct StepDiff {
    pub step: usize,
    pub kind: &'static str,
    pub tokens: Vec<u32>,
    pub taps: Vec<TapDiff>,
    /// Taps only one side recorded.
    pub only_a: Vec<String>,
    pub only_b: Vec<String>,
    /// The two sides were fed different tokens (only possible when diffing two files).
    pub tokens_differ: bool,
}

impl StepDiff {
    pub fn n_fail(&self) -> usize {
        self.taps.iter().filter(|t| !t.pass).count()
    }

    pub fn worst(&self) -> Option<&TapDiff> {
        self.taps.iter().max_by(|a, b| {
            let key = |t: &TapDiff| {
                if t.metrics.nmse.is_nan() {
                    f64::INFINITY
                } else {
                    t.metrics.nmse
                }
            };
            key(a).total_cmp(&key(b))
        })
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct Verdict {
    pub step: usize,
    pub step_kind: &'static str,
    pub tap: String,
    pub metrics: Metrics,
    pub tolerance: Tolerance,
    /// The taps `tap` consumes, with their errors in the same step (looking through taps a
    /// side does not expose to what they were computed from).
    pub inputs: Vec<(String, Option<Metrics>, bool)>,
    /// Per backend, the taps between those inputs and `tap` it does not expose.
    pub not_exposed: Vec<(String, Vec<String>)>,
    /// When `tap` is within its kind's tolerance but the cache read that copies it is not:
    /// that read and its error (the read only carried the error on).
    pub carried_into: Option<(String, Metrics)>,
    pub explanation: String,
}

impl Verdict {
    pub fn sentence(&self) -> String {
        let step = if self.step == 0 {
            "prefill (step 0)".to_string()
        } else {
            format!("decode step {}", self.step)
        };
        let mut s = format!(
            "{step}: {} diverges (NMSE {}, max|d| {}, cos {:.4}; tolerance {})",
            self.tap,
            fmt_e(self.metrics.nmse),
            fmt_e(self.metrics.max_abs),
            self.metrics.cosine,
            fmt_tol(&self.tolerance)
        );
        if let Some((carrier, m)) = &self.carried_into {
            let what = if matches!(parse_tap(carrier).op, "q_rope" | "k_rope") {
                format!("the rotation {carrier} (RoPE, norm-preserving) computed from it")
            } else {
                format!("the cache read {carrier} that copies it")
            };
            let _ = write!(
                s,
                ", within that band but {what} fails with the same error (NMSE {})",
                fmt_e(m.nmse)
            );
        }
        if self.inputs.is_empty() {
            s.push_str(" and it has no tap inputs (it reads the token ids, which are identical)");
        } else {
            let parts: Vec<String> = self
                .inputs
                .iter()
                .map(|(n, m, pass)| match m {
                    Some(m) => format!(
                        "{n} {} (NMSE {})",
                        if *pass { "agrees" } else { "DIFFERS" },
                        fmt_e(m.nmse)
                    ),
                    None => format!("{n} (not compared)"),
                })
                .collect();
            let _ = write!(s, " while {}", parts.join(" and "));
        }
        for (backend, taps) in &self.not_exposed {
            let _ = write!(s, "; backend {backend} does not expose {}", taps.join(", "));
        }
        let _ = write!(s, ": {}", self.explanation);
        s
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct DiffReport {
    pub backend_a: String,
    pub backend_b: String,
    pub profile: Profile,
    pub steps: Vec<StepDiff>,
    pub positions: Vec<PositionStat>,
    pub verdict: Option<Verdict>,
    /// Per backend, the per-layer taps it declares it does not expose (`hidden_taps`).
    pub hidden_taps: Vec<(String, Vec<String>)>,
    /// Seconds spent comparing (beyond running the backends).
    pub compare_seconds: f64,
}

impl DiffReport {
    pub fn agree(&self) -> bool {
        self.verdict.is_none()
    }
}

/// Accumulates step comparisons.
pub struct Comparer {
    profile: Profile,
    /// Per side: backend name and the per-layer taps it does not expose.
    hidden: [(String, Vec<String>); 2],
    steps: Vec<StepDiff>,
    positions: Vec<PositionStat>,
    verdict: Option<Verdict>,
    seconds: f64,
}

impl Comparer {
    pub fn new(profile: Profile) -> Comparer {
        Comparer {
            profile,
            hidden: Default::default(),
            steps: Vec::new(),
            positions: Vec::new(),
            verdict: None,
            seconds: 0.0,
        }
    }

    /// Declares the per-layer taps each side does not expose (`Backend::hidden_taps`, or a
    /// trace's `hidden_taps`), with the backends' names for the verdict.
    pub fn set_hidden(&mut self, a: (String, Vec<String>), b: (String, Vec<String>)) {
        self.hidden = [a, b];
    }

    /// The backends that do not expose tap `name` (a per-layer tap in their hidden list).
    fn hidden_by(&self, name: &str) -> Vec<String> {
        let t = parse_tap(name);
        if t.layer.is_none() {
            return Vec::new();
        }
        self.hidden
            .iter()
            .filter(|(_, ops)| ops.iter().any(|o| o == t.op))
            .map(|(b, _)| b.clone())
            .collect()
    }

    /// The compared taps `name` was computed from, looking through taps a side does not
    /// expose (recorded in `not_exposed`, per backend).
    fn resolve_inputs(
        &self,
        name: &str,
        compared: &dyn Fn(&str) -> bool,
        out: &mut Vec<String>,
        not_exposed: &mut Vec<(String, Vec<String>)>,
    ) {
        let known = |n: &str| compared(n) || !self.hidden_by(n).is_empty();
        for input in inputs_of(name, &known) {
            let by = self.hidden_by(&input);
            if by.is_empty() || compared(&input) {
                if !out.contains(&input) {
                    out.push(input);
                }
                continue;
            }
            for b in by {
                match not_exposed.iter_mut().find(|(x, _)| *x == b) {
                    Some((_, taps)) if taps.contains(&input) => {}
                    Some((_, taps)) => taps.push(input.clone()),
                    None => not_exposed.push((b, vec![input.clone()])),
                }
            }
            self.resolve_inputs(&input, compared, out, not_exposed);
        }
    }

    pub fn add_step(&mut self, a: &StepTrace, b: &StepTrace) {
        let t0 = std::time::Instant::now();
        let mut names: Vec<&str> = a.taps.iter().map(|(n, _)| n.as_str()).collect();
        names.sort_by(|x, y| cmp_taps(x, y));
        let mut taps = Vec::with_capacity(names.len());
        let mut only_a = Vec::new();
        for name in names {
            let Some(ta) = a.get(name) else { continue };
            let Some(tb) = b.get(name) else {
                only_a.push(name.to_string());
                continue;
            };
            let metrics = if ta.shape == tb.shape {
                compare(&ta.data, &tb.data)
            } else {
                Metrics::broken(ta.data.len())
            };
            let tol = tolerance(self.profile, name);
            taps.push(TapDiff {
                name: name.to_string(),
                kind: kind_of(name),
                shape_a: ta.shape.clone(),
                shape_b: tb.shape.clone(),
                pass: tol.passes(&metrics),
                metrics,
                tolerance: tol,
            });
        }
        let only_b: Vec<String> = b
            .taps
            .iter()
            .filter(|(n, _)| a.get(n).is_none())
            .map(|(n, _)| n.clone())
            .collect();

        // Final logits: KL and top-1 per position.
        if let (Some(la), Some(lb)) = (a.logits(), b.logits()) {
            if la.shape == lb.shape {
                let rows = la.rows();
                // Rows are the last `rows` positions of the step.
                let first = a.positions.len().saturating_sub(rows);
                for r in 0..rows {
                    let pos = a.positions.get(first + r).copied().unwrap_or(r as u32);
                    self.positions.push(PositionStat {
                        step: a.step,
                        position: pos,
                        kl: kl_divergence(la.row(r), lb.row(r)),
                        top1_a: argmax(la.row(r)),
                        top1_b: argmax(lb.row(r)),
                    });
                }
            }
        }

        let sd = StepDiff {
            step: a.step,
            kind: a.kind(),
            tokens: a.tokens.clone(),
            tokens_differ: a.tokens != b.tokens,
            taps,
            only_a,
            only_b,
        };
        if self.verdict.is_none() {
            if let Some(failing) = sd.taps.iter().find(|t| !t.pass) {
                let present = |n: &str| sd.taps.iter().any(|t| t.name == n);
                let find = |n: &str| sd.taps.iter().find(|t| t.name == n);
                // A cache read only copies its input through f16, and RoPE rotates pairs of
                // values (norm-preserving, a few ulps of its own): when that input already
                // carries (at least half) the op's error, within its own kind's wider band,
                // the error entered there.
                let mut first = failing;
                let mut carried_into = None;
                while matches!(
                    parse_tap(&first.name).op,
                    "k_read" | "v_read" | "q_rope" | "k_rope"
                ) {
                    let ins = inputs_of(&first.name, &present);
                    let Some(src) = ins.first().and_then(|n| find(n)) else {
                        break;
                    };
                    let (e_src, e_read) = (src.metrics.nmse, first.metrics.nmse);
                    if ins.len() != 1 || !e_src.is_finite() || e_src < 0.5 * e_read || e_src == 0.0
                    {
                        break;
                    }
                    carried_into.get_or_insert((failing.name.clone(), failing.metrics));
                    first = src;
                }
                let (mut names, mut not_exposed) = (Vec::new(), Vec::new());
                self.resolve_inputs(&first.name, &present, &mut names, &mut not_exposed);
                for (_, taps) in &mut not_exposed {
                    taps.sort_by(|x, y| cmp_taps(x, y));
                }
                let inputs = names
                    .into_iter()
                    .map(|n| {
                        let t = sd.taps.iter().find(|t| t.name == n);
                        (n, t.map(|t| t.metrics), t.is_some_and(|t| t.pass))
                    })
                    .collect();
                let mut explanation = explain(&first.name);
                if !not_exposed.is_empty() && parse_tap(&first.name).op == "kqv" {
                    explanation = "the fused attention is wrong (its scores, softmax or weighted \
                                   sum: the kernel does not expose which)"
                        .into();
                }
                self.verdict = Some(Verdict {
                    step: sd.step,
                    step_kind: sd.kind,
                    tap: first.name.clone(),
                    metrics: first.metrics,
                    tolerance: first.tolerance,
                    inputs,
                    not_exposed,
                    carried_into,
                    explanation,
                });
            }
        }
        self.steps.push(sd);
        self.seconds += t0.elapsed().as_secs_f64();
    }

    pub fn finish(self, backend_a: String, backend_b: String) -> DiffReport {
        DiffReport {
            backend_a,
            backend_b,
            profile: self.profile,
            steps: self.steps,
            positions: self.positions,
            verdict: self.verdict,
            hidden_taps: self
                .hidden
                .into_iter()
                .filter(|(_, ops)| !ops.is_empty())
                .collect(),
            compare_seconds: self.seconds,
        }
    }
}

/// Compares two saved traces step by step (matched by step number).
pub fn diff_traces(a: &Trace, b: &Trace, profile: Profile) -> DiffReport {
    let mut c = Comparer::new(profile);
    c.set_hidden(
        (a.meta.backend.clone(), a.meta.hidden_taps.clone()),
        (b.meta.backend.clone(), b.meta.hidden_taps.clone()),
    );
    for sa in &a.steps {
        if let Some(sb) = b.steps.iter().find(|s| s.step == sa.step) {
            c.add_step(sa, sb);
        }
    }
    c.finish(a.meta.backend.clone(), b.meta.backend.clone())
}

/// Runs `b` against a recorded trace of `a`, teacher-forcing `b` with the trace's tokens, one
/// step at a time (nothing of `b` is kept beyond the step being compared).
pub fn diff_engine_vs_trace(
    a: &Trace,
    b: &mut dyn AnyEngine,
    spec: &RunSpec,
    profile: Profile,
) -> Result<DiffReport, VerifyError> {
    let name_b = b.backend_name();
    let mut spec = spec.clone();
    spec.prompt = a
        .steps
        .first()
        .map(|s| s.tokens.clone())
        .unwrap_or_default();
    spec.decode = a.steps.len().saturating_sub(1);
    let hidden_b = (name_b.clone(), b.hidden_taps());
    let mut sb = Stepper::new(b, spec)?;
    let mut c = Comparer::new(profile);
    c.set_hidden(
        (a.meta.backend.clone(), a.meta.hidden_taps.clone()),
        hidden_b,
    );
    for sa in &a.steps {
        let Some(tb) = sb.step(Some(sa.tokens.clone()))? else {
            break;
        };
        c.add_step(sa, &tb);
    }
    Ok(c.finish(a.meta.backend.clone(), name_b))
}

/// Runs both engines in lockstep: prefill, then `spec.decode` steps in which both are fed
/// A's next token (greedy from A's logits, or `spec.force`). Only one step of taps is held
/// at a time.
pub fn diff_engines(
    a: &mut dyn AnyEngine,
    b: &mut dyn AnyEngine,
    spec: &RunSpec,
    profile: Profile,
) -> Result<DiffReport, VerifyError> {
    let (name_a, name_b) = (a.backend_name(), b.backend_name());
    let hidden = (
        (name_a.clone(), a.hidden_taps()),
        (name_b.clone(), b.hidden_taps()),
    );
    let mut sa = Stepper::new(a, spec.clone())?;
    let mut sb = Stepper::new(b, spec.clone())?;
    let mut c = Comparer::new(profile);
    c.set_hidden(hidden.0, hidden.1);
    while let Some(ta) = sa.step(None)? {
        let Some(tb) = sb.step(Some(ta.tokens.clone()))? else {
            break;
        };
        c.add_step(&ta, &tb);
    }
    Ok(c.finish(name_a, name_b))
}

pub fn fmt_e(x: f64) -> String {
    if x == 0.0 {
        "0".to_string()
    } else if x.is_infinite() {
        "inf".to_string()
    } else if x.is_nan() {
        "nan".to_string()
    } else {
        format!("{x:.2e}")
    }
}

fn fmt_tol(t: &Tolerance) -> String {
    if t.nmse == 0.0 {
        "bitwise".to_string()
    } else {
        format!("NMSE {}", fmt_e(t.nmse))
    }
}

/// The human-readable report: a table of steps, the taps around the divergence, logits
/// agreement, and the verdict.
pub fn render(r: &DiffReport, verbose: bool) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "lockstep diff: A = {}, B = {}, tolerance profile `{}`",
        r.backend_a,
        r.backend_b,
        r.profile.name()
    );
    let _ = writeln!(
        s,
        "{:<5} {:<8} {:>6} {:>5} {:>5}  {:<28} {:>9}  {:>9} {:>5}",
        "step", "kind", "tokens", "taps", "fail", "worst tap", "NMSE", "KL(A||B)", "top1"
    );
    for st in &r.steps {
        let pos: Vec<&PositionStat> = r.positions.iter().filter(|p| p.step == st.step).collect();
        let kl = pos.iter().map(|p| p.kl).fold(0.0, f64::max);
        let agree = pos.iter().filter(|p| p.top1_a == p.top1_b).count();
        let (wname, wn) = match st.worst() {
            Some(w) if w.metrics.n_diff > 0 => (w.name.clone(), fmt_e(w.metrics.nmse)),
            _ => ("-".to_string(), "0".to_string()),
        };
        let _ = writeln!(
            s,
            "{:<5} {:<8} {:>6} {:>5} {:>5}  {:<28} {:>9}  {:>9} {:>2}/{:<2}{}",
            st.step,
            st.kind,
            st.tokens.len(),
            st.taps.len(),
            st.n_fail(),
            wname,
            wn,
            fmt_e(kl),
            agree,
            pos.len(),
            if st.tokens_differ {
                "  (tokens differ!)"
            } else {
                ""
            }
        );
    }
    for (backend, ops) in &r.hidden_taps {
        let _ = writeln!(
            s,
            "not exposed by {backend} (its fused kernels never hold them): {}",
            ops.join(", ")
        );
    }
    let declared = |n: &&String| {
        let op = parse_tap(n).op;
        r.hidden_taps
            .iter()
            .any(|(_, ops)| ops.iter().any(|o| o == op))
    };
    let only_a: usize = r
        .steps
        .iter()
        .map(|s| s.only_a.iter().filter(|n| !declared(n)).count())
        .sum();
    let only_b: usize = r
        .steps
        .iter()
        .map(|s| s.only_b.iter().filter(|n| !declared(n)).count())
        .sum();
    if only_a + only_b > 0 {
        let example = r
            .steps
            .iter()
            .flat_map(|s| s.only_a.iter().chain(&s.only_b))
            .filter(|n| !declared(n))
            .take(3)
            .cloned()
            .collect::<Vec<_>>()
            .join(", ");
        let _ = writeln!(
            s,
            "not compared: {only_a} taps only in A, {only_b} only in B (e.g. {example})"
        );
    }
    let n = r.positions.len();
    if n > 0 {
        let mean_kl = r.positions.iter().map(|p| p.kl).sum::<f64>() / n as f64;
        let max_kl = r.positions.iter().map(|p| p.kl).fold(0.0, f64::max);
        let top1 = r.positions.iter().filter(|p| p.top1_a == p.top1_b).count();
        let _ = writeln!(
            s,
            "final logits over {n} positions: KL(A||B) mean {} max {}, top-1 agreement {top1}/{n} ({:.1}%)",
            fmt_e(mean_kl),
            fmt_e(max_kl),
            100.0 * top1 as f64 / n as f64
        );
    }
    if let Some(v) = &r.verdict {
        if let Some(st) = r.steps.iter().find(|s| s.step == v.step) {
            let idx = st.taps.iter().position(|t| t.name == v.tap).unwrap_or(0);
            let lo = idx.saturating_sub(if verbose { st.taps.len() } else { 4 });
            let hi = (idx + if verbose { st.taps.len() } else { 4 }).min(st.taps.len());
            let _ = writeln!(s, "taps around the divergence (step {}):", v.step);
            let _ = writeln!(
                s,
                "  {:<24} {:<10} {:>10} {:>10} {:>8} {:>10}  status",
                "tap", "kind", "NMSE", "max|d|", "cos", "tol"
            );
            for t in &st.taps[lo..hi] {
                let _ = writeln!(
                    s,
                    "  {:<24} {:<10} {:>10} {:>10} {:>8.5} {:>10}  {}",
                    t.name,
                    t.kind,
                    fmt_e(t.metrics.nmse),
                    fmt_e(t.metrics.max_abs),
                    t.metrics.cosine,
                    fmt_tol(&t.tolerance),
                    if t.pass { "ok" } else { "FAIL" }
                );
            }
        }
        let _ = writeln!(s, "verdict: DIVERGE. {}", v.sentence());
    } else {
        let taps: usize = r.steps.iter().map(|s| s.taps.len()).sum();
        let _ = writeln!(
            s,
            "verdict: AGREE. {taps} taps over {} steps within tolerance",
            r.steps.len()
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use lockstep_graph::HostTensor;

    fn step(taps: &[(&str, f32)]) -> StepTrace {
        StepTrace {
            step: 0,
            tokens: vec![1, 2],
            positions: vec![0, 1],
            taps: taps
                .iter()
                .map(|&(n, v)| (n.to_string(), HostTensor::matrix(1, 2, vec![v, 1.0])))
                .collect(),
        }
    }

    /// Side B's fused attention hides `kq`/`kq_softmax`: a wrong `kqv` is blamed on the fused
    /// attention with the inputs both sides have (q_rope, k_read, v_read) as evidence, and the
    /// hidden taps are named, from engines or from trace metadata alike.
    #[test]
    fn verdict_looks_through_hidden_taps() {
        let common = [
            ("blk.3.q_rope", 1.0),
            ("blk.3.k_rope", 1.0),
            ("blk.3.k_read", 1.0),
            ("blk.3.v_read", 1.0),
        ];
        let mut a_taps = common.to_vec();
        a_taps.extend([
            ("blk.3.kq", 1.0),
            ("blk.3.kq_softmax", 1.0),
            ("blk.3.kqv", 1.0),
        ]);
        let mut b_taps = common.to_vec();
        b_taps.push(("blk.3.kqv", -5.0));
        let (a, b) = (step(&a_taps), step(&b_taps));
        let mut c = Comparer::new(Profile::Exact);
        c.set_hidden(
            ("ref".into(), Vec::new()),
            ("fused".into(), vec!["kq".into(), "kq_softmax".into()]),
        );
        c.add_step(&a, &b);
        let r = c.finish("ref".into(), "fused".into());
        let v = r.verdict.as_ref().expect("a divergence");
        assert_eq!(v.tap, "blk.3.kqv");
        let names: Vec<&str> = v.inputs.iter().map(|(n, _, _)| n.as_str()).collect();
        assert_eq!(names, ["blk.3.q_rope", "blk.3.k_read", "blk.3.v_read"]);
        assert!(v.inputs.iter().all(|(_, m, pass)| m.is_some() && *pass));
        assert_eq!(
            v.not_exposed,
            [(
                "fused".to_string(),
                vec!["blk.3.kq".to_string(), "blk.3.kq_softmax".to_string()]
            )]
        );
        let text = render(&r, false);
        assert!(
            text.contains(
                "backend fused does not expose blk.3.kq, blk.3.kq_softmax: the fused attention"
            ),
            "{text}"
        );
        assert!(text.contains("not exposed by fused"), "{text}");
        assert!(!text.contains("not compared"), "{text}");

        // The same from trace files: the hidden list travels in the metadata.
        let meta = |backend: &str, hidden: Vec<String>| TraceMeta {
            backend: backend.into(),
            hidden_taps: hidden,
            ..TraceMeta::default()
        };
        let ta = Trace {
            meta: meta("ref", Vec::new()),
            steps: vec![a],
        };
        let tb = Trace {
            meta: meta("fused", vec!["kq".into(), "kq_softmax".into()]),
            steps: vec![b],
        };
        let tb = Trace::from_bytes(&tb.to_bytes().expect("bytes")).expect("parse");
        let r2 = diff_traces(&ta, &tb, Profile::Exact);
        let v2 = r2.verdict.expect("a divergence");
        assert_eq!(v2.sentence(), v.sentence());

        // Without the declaration the missing scores are just not compared, and the verdict
        // names only v_read as kqv's input: what this test guards against.
        let mut c = Comparer::new(Profile::Exact);
        c.add_step(&ta.steps[0], &tb.steps[0]);
        let v3 = c
            .finish("ref".into(), "fused".into())
            .verdict
            .expect("divergence");
        let names: Vec<&str> = v3.inputs.iter().map(|(n, _, _)| n.as_str()).collect();
        assert_eq!(names, ["blk.3.v_read"]);
    }

    /// A Q projection within the matmul band whose error RoPE (a tighter band) carries on: the
    /// verdict names the projection (session 10: a seeded Q4_K scale fault on a one-token
    /// prompt was blamed on RoPE); a RoPE that adds its own error stays blamed.
    #[test]
    fn error_carried_into_rope_is_blamed_where_it_entered() {
        let a = step(&[
            ("blk.0.attn_norm", 1.0),
            ("blk.0.q", 1.0),
            ("blk.0.q_rope", 1.0),
        ]);
        // NMSE 0.18 in both: inside the quant matmul band, outside RoPE's.
        let b = step(&[
            ("blk.0.attn_norm", 1.0),
            ("blk.0.q", 0.4),
            ("blk.0.q_rope", 0.4),
        ]);
        let mut c = Comparer::new(Profile::Quant);
        c.add_step(&a, &b);
        let v = c
            .finish("ref".into(), "cuda".into())
            .verdict
            .expect("divergence");
        assert_eq!(v.tap, "blk.0.q");
        assert_eq!(
            v.carried_into.as_ref().map(|x| x.0.as_str()),
            Some("blk.0.q_rope")
        );
        let s = v.sentence();
        assert!(s.contains("the Q projection") && s.contains("RoPE"), "{s}");

        let b = step(&[
            ("blk.0.attn_norm", 1.0),
            ("blk.0.q", 1.01),
            ("blk.0.q_rope", 0.4),
        ]);
        let mut c = Comparer::new(Profile::Quant);
        c.add_step(&a, &b);
        let v = c
            .finish("ref".into(), "cuda".into())
            .verdict
            .expect("divergence");
        assert_eq!(v.tap, "blk.0.q_rope");
        assert!(v.carried_into.is_none());
    }

    /// A projection within the matmul band whose error the (tighter) cache read carries on:
    /// the verdict names the projection, not the read; a read that adds its own error stays.
    #[test]
    fn error_carried_into_a_cache_read_is_blamed_where_it_entered() {
        let a = step(&[
            ("blk.0.attn_norm", 1.0),
            ("blk.0.v", 1.0),
            ("blk.0.v_read", 1.0),
        ]);
        // NMSE (1 - 0.4)^2 / 2 = 0.18: inside the quant matmul band, outside kv_read's.
        let b = step(&[
            ("blk.0.attn_norm", 1.0),
            ("blk.0.v", 0.4),
            ("blk.0.v_read", 0.4),
        ]);
        let mut c = Comparer::new(Profile::Quant);
        c.add_step(&a, &b);
        let v = c
            .finish("ref".into(), "cpu".into())
            .verdict
            .expect("divergence");
        assert_eq!(v.tap, "blk.0.v");
        assert_eq!(
            v.carried_into.as_ref().map(|x| x.0.as_str()),
            Some("blk.0.v_read")
        );
        assert!(
            v.sentence().contains("the V projection"),
            "{}",
            v.sentence()
        );

        let b = step(&[
            ("blk.0.attn_norm", 1.0),
            ("blk.0.v", 1.01),
            ("blk.0.v_read", 0.4),
        ]);
        let mut c = Comparer::new(Profile::Quant);
        c.add_step(&a, &b);
        let v = c
            .finish("ref".into(), "cpu".into())
            .verdict
            .expect("divergence");
        assert_eq!(v.tap, "blk.0.v_read");
        assert!(v.carried_into.is_none());
    }
}
