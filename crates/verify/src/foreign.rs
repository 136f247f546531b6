//! Verdicts on traces written by other engines: read a trace (canonical tap names, or the
//! engine's own names with a name map), run lockstep's reference on the trace's own tokens
//! (prompt, then the trace's decode tokens, teacher-forced), and compare tap by tap.
//!
//! The trace format is `docs/trace-format.md`; name maps are [`crate::namemap`].

use std::collections::BTreeMap;
use std::path::Path;

use serde::Serialize;

use crate::diff::{Comparer, DiffReport};
use crate::namemap::{MapContext, Mapped, NameMap};
use crate::run::{AnyEngine, RunSpec, Stepper};
use crate::taps::{cmp_taps, parse_tap, TapFilter};
use crate::tolerance::Profile;
use crate::trace::{RawTrace, Trace};
use crate::VerifyError;

/// Metadata key naming the map a trace's tensor names need (`llama.cpp`, `transformers`, or
/// a map file's path).
pub const NAMEMAP_KEY: &str = "namemap";

/// The name map a trace file's metadata asks for, reading only the file's header (traces can
/// be large). `None` when the file uses tap names.
pub fn namemap_of(path: &Path) -> Result<Option<String>, VerifyError> {
    use std::io::Read as _;
    let io = |e| VerifyError::Io(path.display().to_string(), e);
    let mut f = std::fs::File::open(path).map_err(io)?;
    let mut n = [0u8; 8];
    f.read_exact(&mut n).map_err(io)?;
    let n = u64::from_le_bytes(n);
    // safetensors caps its header at 100 MB; a larger claim is not a trace.
    if n > 100_000_000 {
        return Err(VerifyError::Trace(format!(
            "{}: header length {n} is not a safetensors header",
            path.display()
        )));
    }
    let mut h = vec![0u8; n as usize];
    f.read_exact(&mut h).map_err(io)?;
    let j: serde_json::Value = serde_json::from_slice(&h)
        .map_err(|e| VerifyError::Trace(format!("{}: header: {e}", path.display())))?;
    Ok(j["__metadata__"][NAMEMAP_KEY]
        .as_str()
        .filter(|s| !s.is_empty())
        .map(str::to_string))
}

/// A foreign trace read into tap names, with what could not be mapped.
#[derive(Clone, Debug)]
pub struct ForeignTrace {
    pub trace: Trace,
    /// The map applied (`None`: the file already used tap names).
    pub map: Option<NameMap>,
    /// Foreign tensor names no rule matched (name, steps it occurred in).
    pub unmapped: BTreeMap<String, Vec<usize>>,
    /// Foreign names the map skips on purpose, with the map's reason.
    pub skipped: BTreeMap<String, String>,
    /// Taps two foreign tensors both mapped to in one step (the later name is kept).
    pub duplicates: Vec<String>,
    /// The trace's `ggml_backend` metadata (llama.cpp traces: the ggml buffers the nodes were
    /// computed in, `CPU` for ggml-cpu), which picks the isolated pass's arithmetic.
    pub ggml_backend: Option<String>,
    /// The trace's `ggml_cpu_features` metadata (llama.cpp's system info: `AVX = 1 | ...`).
    pub ggml_cpu_features: Option<String>,
}

/// Reads a trace, applying `map` (or the map its metadata names) with `ctx`.
pub fn load_foreign(
    path: &Path,
    map: Option<&str>,
    ctx: &MapContext,
) -> Result<ForeignTrace, VerifyError> {
    let raw = RawTrace::load(path)?;
    map_trace(raw, map, ctx)
}

/// The layer number of a layer-generic foreign name (`Qcur-17@ROPE` -> `Qcur-{L}@ROPE`), so
/// reports group 30 layers' worth of one tensor into one line.
fn generic_name(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut digits = false;
    for c in name.chars() {
        if c.is_ascii_digit() {
            if !digits {
                out.push_str("{N}");
            }
            digits = true;
        } else {
            digits = false;
            out.push(c);
        }
    }
    out
}

pub fn map_trace(
    raw: RawTrace,
    map: Option<&str>,
    ctx: &MapContext,
) -> Result<ForeignTrace, VerifyError> {
    let map_name = map
        .map(str::to_string)
        .or_else(|| raw.metadata.get(NAMEMAP_KEY).cloned())
        .filter(|m| !m.is_empty());
    let map = match &map_name {
        Some(m) => Some(NameMap::load(m)?),
        None => None,
    };
    let ggml_backend = raw.metadata.get("ggml_backend").cloned();
    let ggml_cpu_features = raw.metadata.get("ggml_cpu_features").cloned();
    let mut steps = raw.steps;
    let mut unmapped: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    let mut skipped = BTreeMap::new();
    let mut duplicates = Vec::new();
    for t in raw.tensors {
        let Some(step) = steps.iter_mut().find(|s| s.step == t.step) else {
            return Err(VerifyError::Trace(format!(
                "tensor `s{}/{}`: step {} is not in `steps`",
                t.step, t.name, t.step
            )));
        };
        let n_kv = step.positions.last().map_or(0, |p| *p as usize + 1);
        let (tap, tensor) = match &map {
            None => {
                let shape = t.shape;
                (t.name, lockstep_graph::HostTensor::new(shape, t.data))
            }
            Some(m) => match m.apply(&t.name, &t.shape, t.data, ctx, n_kv)? {
                Mapped::Tap(tap, tensor) => (tap, tensor),
                Mapped::Skipped { reason } => {
                    skipped.insert(generic_name(&t.name), reason);
                    continue;
                }
                Mapped::Unmapped => {
                    unmapped.entry(t.name).or_default().push(t.step);
                    continue;
                }
            },
        };
        if let Some(i) = step.taps.iter().position(|(n, _)| *n == tap) {
            duplicates.push(format!("s{}/{tap}", step.step));
            step.taps.remove(i);
        }
        step.taps.push((tap, tensor));
    }
    steps.sort_by_key(|s| s.step);
    for s in &mut steps {
        s.taps.sort_by(|a, b| cmp_taps(&a.0, &b.0));
    }
    let mut meta = raw.meta;
    if meta.backend.is_empty() {
        meta.backend = map
            .as_ref()
            .map_or_else(|| "foreign".to_string(), |m| m.engine.clone());
    }
    Ok(ForeignTrace {
        trace: Trace { meta, steps },
        map,
        unmapped,
        skipped,
        duplicates,
        ggml_backend,
        ggml_cpu_features,
    })
}

/// Checks the steps form one sequence from position 0 with consecutive positions, the only
/// shape of run the reference can be teacher-forced along.
fn check_steps(t: &Trace) -> Result<(), VerifyError> {
    let mut next = 0u32;
    let Some(first) = t.steps.first() else {
        return Err(VerifyError::Input("the trace has no steps".into()));
    };
    if first.step != 0 {
        return Err(VerifyError::Input(format!(
            "the trace's first step is {}, expected 0 (the prompt)",
            first.step
        )));
    }
    for (i, s) in t.steps.iter().enumerate() {
        if s.step != i {
            return Err(VerifyError::Input(format!(
                "steps are not numbered 0, 1, 2, ...: step {} at index {i}",
                s.step
            )));
        }
        if s.tokens.is_empty() || s.tokens.len() != s.positions.len() {
            return Err(VerifyError::Input(format!(
                "step {}: {} tokens but {} positions",
                s.step,
                s.tokens.len(),
                s.positions.len()
            )));
        }
        for &p in &s.positions {
            if p != next {
                return Err(VerifyError::Input(format!(
                    "step {}: position {p} where {next} was expected (one sequence from 0)",
                    s.step
                )));
            }
            next += 1;
        }
    }
    Ok(())
}

/// Taps the reference recorded that the foreign trace lacked, grouped by op
/// (`blk.*.kq` over 30 layers).
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Lacked {
    pub tap: String,
    /// How many (step, layer) instances were missing.
    pub count: usize,
}

pub fn lacked_taps(r: &DiffReport) -> Vec<Lacked> {
    let mut by_op: Vec<Lacked> = Vec::new();
    for s in &r.steps {
        for name in &s.only_a {
            let t = parse_tap(name);
            let key = match t.layer {
                Some(_) => format!("blk.*.{}", t.op),
                None => name.clone(),
            };
            match by_op.iter_mut().find(|l| l.tap == key) {
                Some(l) => l.count += 1,
                None => by_op.push(Lacked { tap: key, count: 1 }),
            }
        }
    }
    by_op
}

/// Runs `reference` on the trace's tokens and compares: the reference is side A (NMSE is
/// normalised by its values), the foreign trace side B.
pub fn diff_reference_vs_foreign(
    reference: &mut dyn AnyEngine,
    foreign: &Trace,
    filter: TapFilter,
    profile: Profile,
) -> Result<DiffReport, VerifyError> {
    check_steps(foreign)?;
    let first = &foreign.steps[0];
    let vocab = reference.n_vocab();
    for s in &foreign.steps {
        if let Some(&bad) = s.tokens.iter().find(|&&t| t as usize >= vocab) {
            return Err(VerifyError::Input(format!(
                "step {}: token id {bad} is outside the model's vocabulary of {vocab}",
                s.step
            )));
        }
    }
    // Logits of every prompt position when the foreign engine recorded them all.
    let all_logits = first
        .logits()
        .is_some_and(|l| l.shape.len() == 2 && l.rows() == first.tokens.len() && l.rows() > 1);
    let spec = RunSpec {
        prompt: first.tokens.clone(),
        decode: foreign.steps.len() - 1,
        filter,
        all_logits,
        ..RunSpec::default()
    };
    let name_a = reference.backend_name();
    let mut stepper = Stepper::new(reference, spec)?;
    let mut c = Comparer::new(profile);
    for fs in &foreign.steps {
        let Some(rs) = stepper.step(Some(fs.tokens.clone()))? else {
            break;
        };
        c.add_step(&rs, fs);
    }
    Ok(c.finish(name_a, foreign.meta.backend.clone()))
}

/// The tolerance profile for a foreign engine: the map's `profile = ...` when it names one,
/// else the one calibrated for the backend pair.
pub fn foreign_profile(f: &ForeignTrace, reference: &str) -> Result<Profile, VerifyError> {
    match f.map.as_ref().and_then(|m| m.profile.as_deref()) {
        Some(p) => Profile::parse(p).ok_or_else(|| {
            VerifyError::Input(format!(
                "name map for {}: unknown profile `{p}` (exact, float, quant)",
                f.map.as_ref().map_or("?", |m| m.engine.as_str())
            ))
        }),
        None => Ok(Profile::for_backends(reference, &f.trace.meta.backend)),
    }
}

/// Human-readable lines about the mapping: what the foreign trace lacked, what the map
/// skipped and why, and every foreign name nothing mapped.
pub fn render_coverage(f: &ForeignTrace, r: &DiffReport) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    if let Some(m) = &f.map {
        let _ = writeln!(s, "name map: {} ({} rules)", m.engine, m.n_rules());
    }
    let lacked = lacked_taps(r);
    if lacked.is_empty() {
        let _ = writeln!(s, "the foreign trace lacked no tap the reference records");
    } else {
        let parts: Vec<String> = lacked
            .iter()
            .map(|l| format!("{} ({}x)", l.tap, l.count))
            .collect();
        let _ = writeln!(s, "the foreign trace lacked: {}", parts.join(", "));
    }
    let extra: usize = r.steps.iter().map(|s| s.only_b.len()).sum();
    if extra > 0 {
        let names: Vec<String> = r
            .steps
            .iter()
            .flat_map(|s| s.only_b.iter().map(move |n| format!("s{}/{n}", s.step)))
            .take(8)
            .collect();
        let _ = writeln!(
            s,
            "taps only the foreign trace has (not compared): {extra} (e.g. {})",
            names.join(", ")
        );
    }
    for (name, reason) in &f.skipped {
        let _ = writeln!(s, "skipped by the map: {name}: {reason}");
    }
    if !f.unmapped.is_empty() {
        let mut groups: BTreeMap<String, usize> = BTreeMap::new();
        for (n, steps) in &f.unmapped {
            *groups.entry(generic_name(n)).or_default() += steps.len();
        }
        let _ = writeln!(
            s,
            "UNMAPPED foreign tensors ({} names; no rule matched, not compared):",
            f.unmapped.len()
        );
        for (g, n) in groups {
            let _ = writeln!(s, "  {g} ({n}x)");
        }
    }
    for d in &f.duplicates {
        let _ = writeln!(
            s,
            "warning: two foreign tensors map to {d}; the later one is compared"
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::{StepTrace, TraceMeta};
    use lockstep_graph::HostTensor;

    #[test]
    fn generic_names_group_layers() {
        assert_eq!(generic_name("Qcur-17@ROPE"), "Qcur-{N}@ROPE");
        assert_eq!(
            generic_name("cache_k_l3 (view)@VIEW"),
            "cache_k_l{N} (view)@VIEW"
        );
    }

    #[test]
    fn maps_names_reports_unmapped_and_skipped() {
        let mut md = std::collections::HashMap::new();
        md.insert(NAMEMAP_KEY.to_string(), "llama.cpp".to_string());
        let raw = RawTrace {
            meta: TraceMeta::default(),
            metadata: md,
            steps: vec![StepTrace {
                step: 0,
                tokens: vec![1, 2],
                positions: vec![0, 1],
                taps: vec![],
            }],
            tensors: vec![
                crate::trace::RawTensor {
                    step: 0,
                    name: "attn_norm-3@MUL".into(),
                    shape: vec![1, 1, 2, 3],
                    data: vec![0.0; 6],
                },
                crate::trace::RawTensor {
                    step: 0,
                    name: "mystery-3@ADD".into(),
                    shape: vec![2],
                    data: vec![0.0; 2],
                },
                crate::trace::RawTensor {
                    step: 0,
                    name: "norm-3@RMS_NORM".into(),
                    shape: vec![1, 1, 2, 3],
                    data: vec![0.0; 6],
                },
            ],
        };
        let f = map_trace(
            raw,
            None,
            &MapContext {
                arch: "llama".into(),
                head_dim: 2,
            },
        )
        .expect("map");
        assert_eq!(f.trace.meta.backend, "llama.cpp");
        let t = f.trace.steps[0].get("blk.3.attn_norm").expect("mapped");
        assert_eq!(t, &HostTensor::matrix(2, 3, vec![0.0; 6]));
        assert_eq!(f.unmapped.keys().collect::<Vec<_>>(), ["mystery-3@ADD"]);
        assert!(
            f.skipped.contains_key("norm-{N}@RMS_NORM"),
            "{:?}",
            f.skipped
        );
    }

    #[test]
    fn step_shape_is_checked() {
        let step = |step, tokens: Vec<u32>, positions: Vec<u32>| StepTrace {
            step,
            tokens,
            positions,
            taps: vec![],
        };
        let ok = Trace {
            meta: TraceMeta::default(),
            steps: vec![step(0, vec![1, 2], vec![0, 1]), step(1, vec![3], vec![2])],
        };
        assert!(check_steps(&ok).is_ok());
        let gap = Trace {
            meta: TraceMeta::default(),
            steps: vec![step(0, vec![1, 2], vec![0, 1]), step(1, vec![3], vec![5])],
        };
        assert!(check_steps(&gap).is_err());
        let empty = Trace::default();
        assert!(check_steps(&empty).is_err());
    }
}
