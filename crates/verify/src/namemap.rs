//! Name maps: how a foreign engine's tensor names and layouts become lockstep taps.
//!
//! A map is a small text file (`docs/trace-format.md`, section "Name maps"), one rule a line:
//!
//! ```text
//! # comment
//! engine = llama.cpp
//! profile = quant
//! Qcur-{L}@ROPE            -> blk.{L}.q_rope     rows=2
//! cache_v_l{L} (view)@VIEW -> blk.{L}.v_read     permute=0,3,2,1 kv_rows=1 rows=2
//! kq-{L}@MUL_MAT           -> skip  llama.cpp's kq is unscaled and unmasked
//! ```
//!
//! The pattern (left of `->`) is the foreign name with `{L}` standing for a layer number (and
//! `{N}` for any other number); the
//! first rule whose pattern (and `arch=` condition) matches wins. The target is a tap name
//! with the same `{L}`, or `skip` followed by the reason the tensor is not a tap. Options
//! transform the stored array, in this order whatever order they are written in:
//!
//! - `permute=i,j,...`: reorder the axes (numpy `transpose` order);
//! - `kv_rows=AXIS`: keep the first `n_kv` entries of axis AXIS, where `n_kv` is the number of
//!   cached positions the step attended over (engines pad their caches);
//! - `halves_to_pairs`: within every `head_dim` values of the last axis, the rotate-half order
//!   (`x[i]`, `x[i + hd/2]`) becomes GGUF's adjacent pairs (`x[2i]`, `x[2i+1]`), the Q/K
//!   permutation GGUF's converter applies to llama;
//! - `min_is_masked`: values at or below -1e30 (a mask written as the dtype's minimum)
//!   become -inf, as lockstep writes masked scores;
//! - `rows=N`: the first N axes are rows and the rest are one row (default: all but the last
//!   axis are rows); `flat`: one dimension.
//!
//! `arch=llama,qwen2` restricts a rule to those architectures. Tensors no rule matches are
//! reported by name, never dropped silently; so are the skipped ones, with their reasons.

use lockstep_graph::HostTensor;

use crate::VerifyError;

/// The maps lockstep ships, by name (`--map llama.cpp`).
pub const SHIPPED: &[(&str, &str)] = &[
    ("llama.cpp", include_str!("../maps/llama.cpp.map")),
    ("transformers", include_str!("../maps/transformers.map")),
];

/// What a map may need to know about the model and the step.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MapContext {
    /// `general.architecture` of the GGUF (`llama`, `qwen2`, `gemma3`).
    pub arch: String,
    pub head_dim: usize,
}

#[derive(Clone, Debug, PartialEq)]
enum Target {
    Tap(String),
    Skip(String),
}

#[derive(Clone, Debug, Default, PartialEq)]
struct Transform {
    permute: Option<Vec<usize>>,
    kv_rows: Option<usize>,
    halves_to_pairs: bool,
    min_is_masked: bool,
    /// `Some(0)` = flat, `Some(n)` = first n axes are rows, `None` = all but the last.
    rows: Option<usize>,
}

/// A piece of a pattern: literal text, `{L}` (the layer number) or `{N}` (any number).
#[derive(Clone, Debug, PartialEq)]
enum Part {
    Text(String),
    Layer,
    Number,
}

#[derive(Clone, Debug, PartialEq)]
struct Rule {
    line: usize,
    parts: Vec<Part>,
    has_layer: bool,
    target: Target,
    archs: Option<Vec<String>>,
    transform: Transform,
}

/// A parsed name map.
#[derive(Clone, Debug, PartialEq)]
pub struct NameMap {
    /// Which engine's names this maps (`engine = ...`).
    pub engine: String,
    /// Tolerance profile for this engine against the reference (`profile = ...`), if the map
    /// names one.
    pub profile: Option<String>,
    rules: Vec<Rule>,
}

/// What became of one foreign tensor.
#[derive(Clone, Debug, PartialEq)]
pub enum Mapped {
    Tap(String, HostTensor),
    Skipped { reason: String },
    Unmapped,
}

impl NameMap {
    /// A shipped map by name, or a map file by path.
    pub fn load(name_or_path: &str) -> Result<NameMap, VerifyError> {
        if let Some((_, text)) = SHIPPED.iter().find(|(n, _)| *n == name_or_path) {
            return NameMap::parse(text);
        }
        let text = std::fs::read_to_string(name_or_path).map_err(|e| {
            VerifyError::Io(
                format!(
                    "name map `{name_or_path}` (not a shipped map: {}; nor a readable file)",
                    SHIPPED
                        .iter()
                        .map(|(n, _)| *n)
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                e,
            )
        })?;
        NameMap::parse(&text).map_err(|e| match e {
            VerifyError::Input(m) => VerifyError::Input(format!("{name_or_path}: {m}")),
            other => other,
        })
    }

    pub fn parse(text: &str) -> Result<NameMap, VerifyError> {
        let mut engine = None;
        let mut profile = None;
        let mut rules = Vec::new();
        for (i, raw) in text.lines().enumerate() {
            let line_no = i + 1;
            let bad = |m: String| VerifyError::Input(format!("name map line {line_no}: {m}"));
            let line = raw.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let Some((lhs, rhs)) = line.split_once("->") else {
                match line.split_once('=') {
                    Some((k, v)) if k.trim() == "engine" => engine = Some(v.trim().to_string()),
                    Some((k, v)) if k.trim() == "profile" => profile = Some(v.trim().to_string()),
                    _ => {
                        return Err(bad(format!(
                            "`{line}` is neither `PATTERN -> TAP [options]` nor `engine = ...` / `profile = ...`"
                        )))
                    }
                }
                continue;
            };
            let pattern = lhs.trim();
            if pattern.is_empty() {
                return Err(bad("empty pattern".into()));
            }
            let parts = parse_pattern(pattern);
            let n_layer = parts.iter().filter(|p| **p == Part::Layer).count();
            if n_layer > 1 {
                return Err(bad(format!("`{pattern}` has `{{L}}` twice")));
            }
            let has_layer = n_layer == 1;
            let mut words = rhs.split_whitespace();
            let Some(tap) = words.next() else {
                return Err(bad(format!("`{pattern} ->` names no tap")));
            };
            if tap == "skip" {
                let reason: Vec<&str> = words.collect();
                if reason.is_empty() {
                    return Err(bad(format!("`skip` of `{pattern}` needs a reason")));
                }
                rules.push(Rule {
                    line: line_no,
                    parts,
                    has_layer,
                    target: Target::Skip(reason.join(" ")),
                    archs: None,
                    transform: Transform::default(),
                });
                continue;
            }
            if tap.contains("{L}") != has_layer {
                return Err(bad(format!(
                    "`{pattern}` and `{tap}` must both have `{{L}}` or neither"
                )));
            }
            let mut t = Transform::default();
            let mut archs = None;
            for w in words {
                let (k, v) = match w.split_once('=') {
                    Some((k, v)) => (k, Some(v)),
                    None => (w, None),
                };
                let num = |v: Option<&str>| -> Result<usize, VerifyError> {
                    v.and_then(|v| v.parse().ok())
                        .ok_or_else(|| bad(format!("`{w}`: expected `{k}=<number>`")))
                };
                match (k, v) {
                    ("permute", Some(v)) => {
                        let axes: Result<Vec<usize>, _> =
                            v.split(',').map(|a| a.trim().parse::<usize>()).collect();
                        let axes = axes.map_err(|_| bad(format!("`{w}`: bad axis list")))?;
                        let mut sorted = axes.clone();
                        sorted.sort_unstable();
                        if sorted != (0..axes.len()).collect::<Vec<_>>() {
                            return Err(bad(format!("`{w}` is not a permutation of 0..n")));
                        }
                        t.permute = Some(axes);
                    }
                    ("kv_rows", _) => t.kv_rows = Some(num(v)?),
                    ("rows", _) => {
                        let n = num(v)?;
                        if n == 0 {
                            return Err(bad("`rows=0`: use `flat`".into()));
                        }
                        t.rows = Some(n);
                    }
                    ("flat", None) => t.rows = Some(0),
                    ("halves_to_pairs", None) => t.halves_to_pairs = true,
                    ("min_is_masked", None) => t.min_is_masked = true,
                    ("arch", Some(v)) => {
                        archs = Some(v.split(',').map(|a| a.trim().to_string()).collect())
                    }
                    _ => return Err(bad(format!("unknown option `{w}`"))),
                }
            }
            rules.push(Rule {
                line: line_no,
                parts,
                has_layer,
                target: Target::Tap(tap.to_string()),
                archs,
                transform: t,
            });
        }
        let Some(engine) = engine else {
            return Err(VerifyError::Input(
                "name map: no `engine = NAME` line".into(),
            ));
        };
        Ok(NameMap {
            engine,
            profile,
            rules,
        })
    }

    pub fn n_rules(&self) -> usize {
        self.rules.len()
    }

    /// Maps one foreign tensor (`shape` in row-major order, values already f32). `n_kv` is
    /// the number of cached positions the step attended over.
    pub fn apply(
        &self,
        name: &str,
        shape: &[usize],
        data: Vec<f32>,
        ctx: &MapContext,
        n_kv: usize,
    ) -> Result<Mapped, VerifyError> {
        for r in &self.rules {
            if let Some(a) = &r.archs {
                if !a.contains(&ctx.arch) {
                    continue;
                }
            }
            let Some(layer) = match_parts(&r.parts, name) else {
                continue;
            };
            return match &r.target {
                Target::Skip(reason) => Ok(Mapped::Skipped {
                    reason: reason.clone(),
                }),
                Target::Tap(tap) => {
                    let tap = match (r.has_layer, layer) {
                        (true, Some(l)) => tap.replace("{L}", l),
                        _ => tap.clone(),
                    };
                    let t = r
                        .transform
                        .run(shape.to_vec(), data, ctx, n_kv)
                        .map_err(|m| {
                            VerifyError::Input(format!(
                                "`{name}` -> {tap} (map line {}): {m}",
                                r.line
                            ))
                        })?;
                    Ok(Mapped::Tap(tap, t))
                }
            };
        }
        Ok(Mapped::Unmapped)
    }
}

fn parse_pattern(p: &str) -> Vec<Part> {
    let mut parts = Vec::new();
    let mut rest = p;
    while !rest.is_empty() {
        let next = [("{L}", Part::Layer), ("{N}", Part::Number)]
            .into_iter()
            .filter_map(|(tok, part)| rest.find(tok).map(|i| (i, part)))
            .min_by_key(|(i, _)| *i);
        match next {
            Some((i, part)) => {
                if i > 0 {
                    parts.push(Part::Text(rest[..i].to_string()));
                }
                parts.push(part);
                rest = &rest[i + 3..];
            }
            None => {
                parts.push(Part::Text(rest.to_string()));
                rest = "";
            }
        }
    }
    parts
}

/// Matches `name` against a pattern; numbers are maximal runs of digits. Returns the layer
/// number's text (`None` inside when the pattern has no `{L}`), or `None` for no match.
fn match_parts<'a>(parts: &[Part], name: &'a str) -> Option<Option<&'a str>> {
    let mut rest = name;
    let mut layer = None;
    for p in parts {
        match p {
            Part::Text(t) => rest = rest.strip_prefix(t.as_str())?,
            Part::Layer | Part::Number => {
                let n = rest.bytes().take_while(u8::is_ascii_digit).count();
                if n == 0 {
                    return None;
                }
                if *p == Part::Layer {
                    layer = Some(&rest[..n]);
                }
                rest = &rest[n..];
            }
        }
    }
    rest.is_empty().then_some(layer)
}

impl Transform {
    fn run(
        &self,
        mut shape: Vec<usize>,
        mut data: Vec<f32>,
        ctx: &MapContext,
        n_kv: usize,
    ) -> Result<HostTensor, String> {
        if shape.iter().product::<usize>() != data.len() {
            return Err(format!("shape {shape:?} vs {} values", data.len()));
        }
        if let Some(p) = &self.permute {
            if p.len() != shape.len() {
                return Err(format!(
                    "permute={p:?} needs {} axes, the tensor has shape {shape:?}",
                    p.len()
                ));
            }
            (shape, data) = permute(&shape, &data, p);
        }
        if let Some(axis) = self.kv_rows {
            let Some(&len) = shape.get(axis) else {
                return Err(format!("kv_rows={axis}: shape {shape:?} has no such axis"));
            };
            if len < n_kv {
                return Err(format!(
                    "kv_rows={axis}: axis has {len} entries, fewer than the {n_kv} cached positions"
                ));
            }
            if len > n_kv {
                (shape, data) = truncate_axis(&shape, &data, axis, n_kv);
            }
        }
        if self.halves_to_pairs {
            let hd = ctx.head_dim;
            if hd == 0
                || !hd.is_multiple_of(2)
                || !data.len().is_multiple_of(hd)
                || shape.last().is_none_or(|l| !l.is_multiple_of(hd))
            {
                return Err(format!(
                    "halves_to_pairs: the last axis of {shape:?} is not whole heads of {hd}"
                ));
            }
            let half = hd / 2;
            for head in data.chunks_exact_mut(hd) {
                let src = head.to_vec();
                for i in 0..half {
                    head[2 * i] = src[i];
                    head[2 * i + 1] = src[i + half];
                }
            }
        }
        if self.min_is_masked {
            for v in &mut data {
                if *v <= -1e30 {
                    *v = f32::NEG_INFINITY;
                }
            }
        }
        let n = data.len();
        let out_shape = match self.rows {
            Some(0) => vec![n],
            Some(r) => {
                if r > shape.len() {
                    return Err(format!("rows={r}: shape {shape:?} has fewer axes"));
                }
                let rows: usize = shape[..r].iter().product();
                if r == shape.len() {
                    vec![rows, 1]
                } else {
                    vec![rows, shape[r..].iter().product()]
                }
            }
            None => {
                if shape.len() <= 1 {
                    vec![n]
                } else {
                    let last = shape[shape.len() - 1];
                    vec![n / last.max(1), last]
                }
            }
        };
        Ok(HostTensor::new(out_shape, data))
    }
}

/// `out[i_p0, i_p1, ...] = in[i_0, i_1, ...]`, numpy's `transpose(p)`.
fn permute(shape: &[usize], data: &[f32], p: &[usize]) -> (Vec<usize>, Vec<f32>) {
    let nd = shape.len();
    let mut strides = vec![1usize; nd];
    for i in (0..nd.saturating_sub(1)).rev() {
        strides[i] = strides[i + 1] * shape[i + 1];
    }
    let out_shape: Vec<usize> = p.iter().map(|&a| shape[a]).collect();
    let out_strides: Vec<usize> = p.iter().map(|&a| strides[a]).collect();
    let mut out = Vec::with_capacity(data.len());
    let mut idx = vec![0usize; nd];
    for _ in 0..data.len() {
        let off: usize = idx.iter().zip(&out_strides).map(|(i, s)| i * s).sum();
        out.push(data[off]);
        for d in (0..nd).rev() {
            idx[d] += 1;
            if idx[d] < out_shape[d] {
                break;
            }
            idx[d] = 0;
        }
    }
    (out_shape, out)
}

/// Keeps the first `keep` entries of `axis`.
fn truncate_axis(
    shape: &[usize],
    data: &[f32],
    axis: usize,
    keep: usize,
) -> (Vec<usize>, Vec<f32>) {
    let outer: usize = shape[..axis].iter().product();
    let inner: usize = shape[axis + 1..].iter().product();
    let len = shape[axis];
    let mut out = Vec::with_capacity(outer * keep * inner);
    for o in 0..outer {
        let base = o * len * inner;
        out.extend_from_slice(&data[base..base + keep * inner]);
    }
    let mut s = shape.to_vec();
    s[axis] = keep;
    (s, out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx(arch: &str, hd: usize) -> MapContext {
        MapContext {
            arch: arch.into(),
            head_dim: hd,
        }
    }

    fn tap(m: Mapped) -> (String, HostTensor) {
        match m {
            Mapped::Tap(n, t) => (n, t),
            other => panic!("expected a tap, got {other:?}"),
        }
    }

    #[test]
    fn layer_patterns_targets_and_first_match() {
        let m = NameMap::parse(
            "engine = e\nQcur-{L}@ROPE -> blk.{L}.q_rope\nQcur-{L}@MUL_MAT -> blk.{L}.q\nnorm-{L}@RMS_NORM -> skip weight not applied yet\nresult_output@MUL_MAT -> result_output\n",
        )
        .expect("parse");
        let c = ctx("llama", 2);
        let (n, t) = tap(m
            .apply("Qcur-17@ROPE", &[1, 2], vec![1.0, 2.0], &c, 0)
            .expect("ok"));
        assert_eq!(
            (n.as_str(), t.shape.as_slice()),
            ("blk.17.q_rope", &[1usize, 2][..])
        );
        let (n, _) = tap(m
            .apply("Qcur-3@MUL_MAT", &[2], vec![1.0, 2.0], &c, 0)
            .expect("ok"));
        assert_eq!(n, "blk.3.q");
        assert_eq!(
            m.apply("norm-3@RMS_NORM", &[2], vec![1.0, 2.0], &c, 0)
                .expect("ok"),
            Mapped::Skipped {
                reason: "weight not applied yet".into()
            }
        );
        // Not a layer number, or nothing matches: unmapped, never an error.
        for name in ["Qcur-x@ROPE", "Qcur-@ROPE", "Qcur-3@ADD", "other"] {
            assert_eq!(
                m.apply(name, &[1], vec![0.0], &c, 0).expect("ok"),
                Mapped::Unmapped,
                "{name}"
            );
        }
        let (n, _) = tap(m
            .apply("result_output@MUL_MAT", &[1], vec![0.0], &c, 0)
            .expect("ok"));
        assert_eq!(n, "result_output");
    }

    #[test]
    fn permute_kv_rows_and_rows() {
        // A transposed V cache [hd=2, heads=1, cells=3] read as [cells, heads * hd], cut to
        // the 2 positions the step attended over.
        let m =
            NameMap::parse("engine = e\nv{L} -> blk.{L}.v_read permute=2,1,0 kv_rows=0 rows=1\n")
                .expect("parse");
        // in[d][h][c] = 10 d + c
        let data = vec![0.0, 1.0, 2.0, 10.0, 11.0, 12.0];
        let (_, t) = tap(m
            .apply("v0", &[2, 1, 3], data, &ctx("llama", 2), 2)
            .expect("ok"));
        assert_eq!(t.shape, vec![2, 2]);
        assert_eq!(t.data, vec![0.0, 10.0, 1.0, 11.0]);
        // Scores [heads=2, q=1, kv=3] -> [q, heads, kv] flat, kv cut to 2.
        let m = NameMap::parse("engine = e\nkq{L} -> blk.{L}.kq permute=1,0,2 kv_rows=2 flat\n")
            .expect("parse");
        let (_, t) = tap(m
            .apply(
                "kq4",
                &[2, 1, 3],
                vec![1.0, 2.0, 9.0, 3.0, 4.0, 9.0],
                &ctx("x", 1),
                2,
            )
            .expect("ok"));
        assert_eq!(
            (t.shape.clone(), t.data),
            (vec![4], vec![1.0, 2.0, 3.0, 4.0])
        );
        // Default: all axes but the last are rows.
        let m = NameMap::parse("engine = e\nx -> inp_embd\n").expect("parse");
        let (_, t) = tap(m
            .apply("x", &[1, 3, 2], vec![0.0; 6], &ctx("x", 1), 0)
            .expect("ok"));
        assert_eq!(t.shape, vec![3, 2]);
        // Too few cached cells is an error naming the rule, not a panic.
        let m = NameMap::parse("engine = e\nk{L} -> blk.{L}.k_read kv_rows=0\n").expect("parse");
        let e = m
            .apply("k1", &[2, 1], vec![0.0; 2], &ctx("x", 1), 5)
            .expect_err("short");
        assert!(e.to_string().contains("line 2"), "{e}");
    }

    #[test]
    fn halves_to_pairs_is_ggufs_qk_permutation_and_arch_gated() {
        let m = NameMap::parse(
            "engine = e\nq{L} -> blk.{L}.q halves_to_pairs arch=llama\nq{L} -> blk.{L}.q\n",
        )
        .expect("parse");
        // Two heads of 4: rotate-half [a0 a1 b0 b1] -> pairs [a0 b0 a1 b1].
        let hf = vec![0.0, 1.0, 10.0, 11.0, 20.0, 21.0, 30.0, 31.0];
        let (_, t) = tap(m
            .apply("q0", &[1, 8], hf.clone(), &ctx("llama", 4), 0)
            .expect("ok"));
        assert_eq!(t.data, vec![0.0, 10.0, 1.0, 11.0, 20.0, 30.0, 21.0, 31.0]);
        let (_, t) = tap(m
            .apply("q0", &[1, 8], hf.clone(), &ctx("gemma3", 4), 0)
            .expect("ok"));
        assert_eq!(t.data, hf, "gemma3 uses NEOX RoPE: no permutation");
        let e = m.apply("q0", &[1, 6], vec![0.0; 6], &ctx("llama", 4), 0);
        assert!(e.is_err());
    }

    #[test]
    fn min_is_masked_and_errors() {
        let m = NameMap::parse("engine = e\ns -> blk.0.kq min_is_masked flat\n").expect("parse");
        let (_, t) = tap(m
            .apply("s", &[3], vec![0.5, f32::MIN, -3.0e38], &ctx("x", 1), 0)
            .expect("ok"));
        assert_eq!(t.data, vec![0.5, f32::NEG_INFINITY, f32::NEG_INFINITY]);
        for bad in [
            "x -> y\n",                          // no engine
            "engine = e\nx\n",                   // no arrow
            "engine = e\nx{L} -> y\n",           // {L} on one side only
            "engine = e\nx -> y permute=0,0\n",  // not a permutation
            "engine = e\nx -> y frobnicate\n",   // unknown option
            "engine = e\nx -> skip\n",           // skip without a reason
            "engine = e\n{L}{L} -> blk.{L}.q\n", // two layer numbers
        ] {
            assert!(NameMap::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn shipped_maps_parse() {
        for (name, _) in SHIPPED {
            let m = NameMap::load(name).expect(name);
            assert_eq!(m.engine, *name);
        }
        assert!(NameMap::load("/nonexistent/map").is_err());
    }
}
