//! `lockstep check --ops`: every op of the [`Backend`] interface on random inputs against the
//! reference backend, over many shapes and every weight type (the role of llama.cpp's
//! `test-backend-ops`). Written against the trait alone, so any backend (the CUDA one too) runs
//! it by calling [`check_ops`] with itself and the [`Arithmetic`] it declares.
//!
//! Inputs reach the backend through the interface: an activation is an F32 table loaded with
//! `load_weight` and gathered with `embed` (so the values are exact), weights are quantized
//! here with `lockstep-quant` and loaded like model weights. The reference computes each op on
//! exactly what B's arithmetic declares it consumes (8-bit activations for quantized matmuls,
//! f16-rounded K/V for an f16 cache), so what remains is float rounding, bounded per op as in
//! the isolated verdicts (`crate::isolate`; derivations in `docs/verification.md`). A NaN or
//! infinity in any output of B fails the case.

use std::fmt::Write as _;
use std::time::Instant;

use lockstep_backend_ref::{RefBackend, RefWeight};
use lockstep_graph::taps::Recorder;
use lockstep_graph::{
    rope_store_attention_unfused, Activation, AttentionParams, Backend, BackendError, Batch,
    BatchSeq, HostTensor, KvLayout, LogitsOut, LogitsSummary, NormThen, QkvIn, RopeParams,
    RopeStyle, RowDraw, RowPick, StepOut, Taps, WeightView,
};
use lockstep_quant::{GgmlType, ALL_TYPES};
use serde::Serialize;

use crate::diff::fmt_e;
use crate::isolate::{
    act_bound, attention_error_bounds, column_squares, kv_cache_f16, kv_f16_bound, matmul_bound,
    norm_bound, quantize_q8_f32, quantizes, rope_bound, rounding_bound, tensor_core_rows,
    tf32_matmul_bound, Arithmetic, AttnGeom,
};
use crate::metrics::{compare, Metrics};
use crate::taps::TapFilter;

/// The rows of a `logits_top` case.
#[derive(Clone, Copy, Debug)]
enum TopRows {
    /// Normal values.
    Spread,
    /// Few distinct values, both zeros.
    Ties,
    /// Every value the same.
    Flat,
    /// NaNs and infinities in some rows.
    NonFinite,
    /// A few logits far above the rest (a real model's confident step: a top-p nucleus of
    /// a few tokens).
    Peaked,
}

/// One op on one shape.
#[derive(Clone, Debug, Serialize)]
pub struct OpCase {
    pub op: String,
    pub shape: String,
    /// Weight type (or `-`).
    pub ty: String,
    pub metrics: Metrics,
    pub bound: f64,
    pub pass: bool,
    /// Why it failed beyond the numbers (NaN, an error from the backend), or why skipped.
    pub note: String,
    /// The backend does not support this case (a weight type it rejects at load): not run.
    pub unsupported: bool,
}

#[derive(Clone, Debug, Serialize)]
pub struct OpsReport {
    pub backend: String,
    pub arithmetic: Arithmetic,
    pub cases: Vec<OpCase>,
    pub seconds: f64,
}

impl OpsReport {
    pub fn pass(&self) -> bool {
        self.cases.iter().all(|c| c.pass || c.unsupported)
    }

    pub fn n_run(&self) -> usize {
        self.cases.iter().filter(|c| !c.unsupported).count()
    }
}

/// The table: op, shape, type, error, bound, pass; then the totals and the runtime.
pub fn render_ops(r: &OpsReport, all: bool) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "lockstep check --ops: backend {} (arithmetic `{}`) against ref",
        r.backend,
        r.arithmetic.name()
    );
    let _ = writeln!(
        s,
        "  {:<16} {:<44} {:<7} {:>10} {:>10}  result",
        "op", "shape", "type", "NMSE", "bound"
    );
    for c in &r.cases {
        if !all && c.pass && !c.unsupported {
            continue;
        }
        let _ = writeln!(
            s,
            "  {:<16} {:<44} {:<7} {:>10} {:>10}  {}{}",
            c.op,
            c.shape,
            c.ty,
            if c.unsupported {
                "-".into()
            } else {
                fmt_e(c.metrics.nmse)
            },
            if c.unsupported {
                "-".into()
            } else if c.bound == 0.0 {
                "bitwise".into()
            } else {
                fmt_e(c.bound)
            },
            if c.unsupported {
                "unsupported"
            } else if c.pass {
                "ok"
            } else {
                "FAIL"
            },
            if c.note.is_empty() {
                String::new()
            } else {
                format!(" ({})", c.note)
            }
        );
    }
    let fails = r.cases.iter().filter(|c| !c.pass && !c.unsupported).count();
    let unsupported = r.cases.iter().filter(|c| c.unsupported).count();
    let mut ops: Vec<&str> = r.cases.iter().map(|c| c.op.as_str()).collect();
    ops.dedup();
    ops.sort_unstable();
    ops.dedup();
    let _ = writeln!(
        s,
        "{} cases of {} ops run, {} failed, {} unsupported, in {:.1}s: {}",
        r.n_run(),
        ops.len(),
        fails,
        unsupported,
        r.seconds,
        if r.pass() { "PASS" } else { "FAIL" }
    );
    s
}

/// A small deterministic generator (splitmix64): the cases are the same on every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in [-1, 1).
    fn uniform(&mut self) -> f32 {
        ((self.next() >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }
    /// Roughly normal (sum of four uniforms), scaled.
    fn normal(&mut self, sigma: f32) -> f32 {
        (self.uniform() + self.uniform() + self.uniform() + self.uniform()) * 0.866 * sigma
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
    /// Activations with what real ones have: mixed row scales, an outlier, a zero run.
    fn activations(&mut self, rows: usize, cols: usize) -> Vec<f32> {
        let mut v = Vec::with_capacity(rows * cols);
        for r in 0..rows {
            let sigma = [1.0, 0.05, 8.0][r % 3];
            for _ in 0..cols {
                v.push(self.normal(sigma));
            }
        }
        if rows * cols > 40 {
            let o = self.below(rows * cols);
            v[o] = 60.0;
            let z = self.below(rows * cols - 32);
            if cols >= 64 {
                v[z..z + 32].fill(0.0);
            }
        }
        v
    }
}

/// One attention case: head layout, window, and per sequence `(first_pos, new rows)`.
struct AttnCase<'a> {
    label: &'a str,
    n_heads: usize,
    n_kv_heads: usize,
    head_dim: usize,
    window: Option<u32>,
    seqs: &'a [(u32, usize)],
    masked: bool,
}

/// Runs B's op and the reference's; failures of B's op are reported, never panics.
struct Harness<'b, B: Backend> {
    b: &'b B,
    r: RefBackend,
    arith: Arithmetic,
    /// The backend's name (which declares, with `arith`, how its cache stores K/V).
    name: String,
    filter: TapFilter,
    cases: Vec<OpCase>,
    rng: Rng,
}

fn bytes_f32(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

impl<'b, B: Backend> Harness<'b, B> {
    fn wants(&self, op: &str, ty: &str) -> bool {
        self.filter.matches(op) || self.filter.matches(&format!("{op}.{ty}"))
    }

    /// An activation `[rows, cols]` on B (an F32 table gathered by `embed`), and the same on
    /// the reference.
    fn upload(
        &self,
        rows: usize,
        cols: usize,
        data: &[f32],
    ) -> Result<(B::Tensor, HostTensor), BackendError> {
        let bytes = bytes_f32(data);
        let dims = [cols as u64, rows as u64];
        let view = WeightView {
            name: "check_ops.input",
            ty: GgmlType::F32,
            dims: &dims,
            data: &bytes,
        };
        let w = self.b.load_weight(view)?;
        let ids: Vec<u32> = (0..rows as u32).collect();
        let t = self.b.embed(&w, &ids)?;
        Ok((t, HostTensor::matrix(rows, cols, data.to_vec())))
    }

    /// A weight `[rows, cols]` of type `ty` from `data`, on B and on the reference (which
    /// dequantizes the very same bytes).
    fn weight(
        &self,
        ty: GgmlType,
        rows: usize,
        cols: usize,
        data: &[f32],
    ) -> Result<(B::Weight, RefWeight), String> {
        let bytes = lockstep_quant::quantize(ty, data, rows * cols).map_err(|e| e.to_string())?;
        let dims: Vec<u64> = if rows == 1 {
            vec![cols as u64]
        } else {
            vec![cols as u64, rows as u64]
        };
        let view = WeightView {
            name: "check_ops.weight",
            ty,
            dims: &dims,
            data: &bytes,
        };
        let rw = self.r.load_weight(view).map_err(|e| e.to_string())?;
        let bw = self.b.load_weight(view).map_err(|e| e.to_string())?;
        Ok((bw, rw))
    }

    fn record(
        &mut self,
        op: &str,
        shape: String,
        ty: &str,
        exp: &HostTensor,
        got: &HostTensor,
        bound: f64,
    ) {
        let nan = got.data.iter().any(|v| v.is_nan()) && !exp.data.iter().any(|v| v.is_nan());
        let metrics = if exp.shape == got.shape {
            compare(&exp.data, &got.data)
        } else {
            Metrics::broken(exp.data.len())
        };
        let within = metrics.bitwise_equal()
            || (bound > 0.0 && metrics.nmse.is_finite() && metrics.nmse <= bound);
        let guards = self.b.guard_violations();
        let note = if !guards.is_empty() {
            format!("out-of-bounds write: {}", guards.join("; "))
        } else if nan {
            "NaN in the output".to_string()
        } else if exp.shape != got.shape {
            format!("shape {:?}, expected {:?}", got.shape, exp.shape)
        } else {
            String::new()
        };
        self.cases.push(OpCase {
            op: op.into(),
            shape,
            ty: ty.into(),
            metrics,
            bound,
            pass: within && !nan && guards.is_empty(),
            note,
            unsupported: false,
        });
    }

    fn error(&mut self, op: &str, shape: String, ty: &str, why: String, unsupported: bool) {
        self.cases.push(OpCase {
            op: op.into(),
            shape,
            ty: ty.into(),
            metrics: Metrics::broken(0),
            bound: 0.0,
            pass: false,
            note: why,
            unsupported,
        });
    }

    /// `logits_out(Top(k))` on rows of `vocab` logits against [`LogitsSummary::of_row`]: the
    /// same ids and values bit for bit, the same non-finite counts and first index; the
    /// entropy (summed in another order) within 1e-9 relative. With `pick`,
    /// `logits_out(TopPick(k, ..))`: also what each row's [`RowPick`] asks, bitwise what
    /// [`RowPick::fill`] gives on the row: a token drawn from the whole row (spread
    /// temperatures, min-p on some rows, uniforms from 0 to just under 1), or for top-p the
    /// row's total weight and the row itself when the nucleus reaches past the k largest.
    /// Some rows ask for a draw and the total (logprobs), one for the total alone, some for a
    /// few tokens' logits ([`RowPick::gather`], bitwise), one for a draw and the row itself
    /// ([`RowPick::whole`]), some for nothing.
    fn logits_top_case(&mut self, rows: usize, vocab: usize, k: usize, kind: TopRows, pick: bool) {
        if !self.wants("logits_top", "-") {
            return;
        }
        let shape = format!(
            "{rows}x{vocab} k={k} {kind:?}{}",
            if pick { " +pick" } else { "" }
        );
        let mut data: Vec<f32> = (0..rows * vocab).map(|_| self.rng.normal(4.0)).collect();
        match kind {
            TopRows::Spread => {}
            // Few distinct values: long runs of ties, broken by id; both zeros.
            TopRows::Ties => {
                for (i, v) in data.iter_mut().enumerate() {
                    *v = (*v * 0.5).round();
                    if *v == 0.0 && i % 2 == 1 {
                        *v = -0.0;
                    }
                }
            }
            TopRows::Flat => data.iter_mut().for_each(|v| *v = 1.5),
            TopRows::Peaked => {
                for r in 0..rows {
                    for j in 0..12 {
                        let i = (r * 7919 + j * 104_729) % vocab;
                        data[r * vocab + i] = 30.0 - j as f32 * 0.75;
                    }
                }
            }
            TopRows::NonFinite => {
                // Row 0 clean, row 1 a NaN and an infinity, row 2 only an infinity.
                let at = |r: usize, i: usize| r * vocab + i;
                data[at(1, vocab - 3)] = f32::NAN;
                data[at(1, 17)] = f32::NEG_INFINITY;
                data[at(2, vocab / 2)] = f32::INFINITY;
            }
        }
        // Tokens whose logits some rows ask for (penalties' and biases' tokens): both ends of
        // the row, repeats, one past it (NaN comes back); row 7 of 8 also half of its own
        // largest, with more untouched tokens wanted than the rest of them (the row comes
        // back: RowPick::needs_row).
        let gathers: Vec<(Vec<u32>, usize)> = (0..rows)
            .map(|r| {
                let v = vocab as u32;
                let mut ids = vec![0, v - 1, (r as u32 * 7919) % v, v, v - 1, (r as u32) % v];
                match r % 8 {
                    3 | 4 => (ids, 1),
                    7 => {
                        let row = &data[r * vocab..(r + 1) * vocab];
                        ids.extend(
                            LogitsSummary::of_row(row, k.div_ceil(2))
                                .top
                                .iter()
                                .map(|t| t.0),
                        );
                        (ids, k)
                    }
                    _ => (Vec::new(), 0),
                }
            })
            .collect();
        let picks: Vec<Option<RowPick>> = (0..rows)
            .map(|r| {
                let u = match r % 3 {
                    0 => f64::from(self.rng.uniform() * 0.5 + 0.5),
                    1 => 0.0,
                    _ => 1.0 - 1e-12,
                };
                let draw = RowPick::draw(RowDraw {
                    temperature: [1.0, 0.7, 1.6][r % 3],
                    ln_min_p: if r % 2 == 1 {
                        0.05f64.ln()
                    } else {
                        f64::NEG_INFINITY
                    },
                    u,
                });
                // Draws (every other one with the total too, as logprobs ask), nuclei, a
                // total alone, a few tokens' logits alone or beside a draw, a draw and the row
                // itself, nothing.
                let (gather, untouched) = (&gathers[r].0[..], gathers[r].1);
                let wanted = match r % 8 {
                    0 => Some(draw),
                    1 => Some(RowPick {
                        whole: true,
                        ..draw
                    }),
                    4 => Some(RowPick {
                        gather,
                        untouched,
                        ..draw.with_total()
                    }),
                    2 | 6 => Some(RowPick::nucleus([0.9, 0.3, 0.999][r % 3])),
                    5 => Some(RowPick::default().with_total()),
                    3 | 7 => Some(RowPick::gathering(gather, untouched)),
                    _ => None,
                };
                wanted.filter(|_| pick)
            })
            .collect();
        let (t, host) = match self.upload(rows, vocab, &data) {
            Ok(x) => x,
            Err(e) => return self.error("logits_top", shape, "-", e.to_string(), false),
        };
        let want: Vec<LogitsSummary> = (0..rows)
            .map(|r| LogitsSummary::of_row(host.row(r), k))
            .collect();
        let out = if pick {
            LogitsOut::TopPick(k, &picks)
        } else {
            LogitsOut::Top(k)
        };
        let got = match self.b.logits_out(&t, out) {
            Ok(StepOut::Top(g)) => g,
            Ok(StepOut::Full(_) | StepOut::Lent { .. }) => {
                return self.error(
                    "logits_top",
                    shape,
                    "-",
                    "rows returned instead of summaries".into(),
                    false,
                )
            }
            Err(e) => return self.error("logits_top", shape, "-", e.to_string(), false),
        };
        let mut why = Vec::new();
        // The rows lent where they landed on the host (`LogitsOut::Lend`) are the rows, bitwise.
        let lent = std::cell::RefCell::new(None::<Vec<u32>>);
        let keep = |r: &[f32]| *lent.borrow_mut() = Some(r.iter().map(|v| v.to_bits()).collect());
        let lend = lockstep_graph::LendRows(&keep);
        match self.b.logits_out(&t, LogitsOut::Lend(&lend)) {
            Ok(StepOut::Lent { rows: lr, n_vocab }) if lr == rows && n_vocab == vocab => {
                let want: Vec<u32> = host.data.iter().map(|v| v.to_bits()).collect();
                match lent.borrow().as_ref() {
                    Some(g) if *g == want => {}
                    Some(g) => {
                        let first = g.iter().zip(&want).position(|(a, b)| a != b);
                        why.push(format!(
                            "lent rows differ: {} values, {} expected, first at {first:?}",
                            g.len(),
                            want.len()
                        ));
                    }
                    None => why.push("nothing lent".into()),
                }
            }
            Ok(o) => why.push(format!("lending the rows returned {o:?}")),
            Err(e) => why.push(format!("lending the rows: {e}")),
        }
        if got.len() != want.len() {
            why.push(format!("{} rows, expected {}", got.len(), want.len()));
        }
        let (mut ev, mut gv) = (Vec::new(), Vec::new());
        for (r, (g, w)) in got.iter().zip(&want).enumerate() {
            let bits = |t: &[(u32, f32)]| -> Vec<(u32, u32)> {
                t.iter().map(|&(i, v)| (i, v.to_bits())).collect()
            };
            if bits(&g.top) != bits(&w.top) {
                let first = g
                    .top
                    .iter()
                    .zip(&w.top)
                    .position(|(a, b)| a.0 != b.0 || a.1.to_bits() != b.1.to_bits());
                why.push(format!(
                    "row {r}: top differs ({} of {} entries; first at rank {first:?})",
                    g.top.len(),
                    w.top.len()
                ));
            }
            let nf = |s: &LogitsSummary| {
                (
                    s.n_vocab,
                    s.non_finite,
                    s.nan,
                    s.first_non_finite.map(|f| (f.0, f.1.to_bits())),
                )
            };
            if nf(g) != nf(w) {
                why.push(format!("row {r}: counts {:?}, expected {:?}", nf(g), nf(w)));
            }
            let mut want_pick = w.clone();
            if let Some(Some(p)) = picks.get(r) {
                p.fill(host.row(r), &mut want_pick);
            }
            if g.drawn != want_pick.drawn {
                why.push(format!(
                    "row {r}: drew {:?}, expected {:?}",
                    g.drawn, want_pick.drawn
                ));
            }
            let gathered = |s: &LogitsSummary| -> Vec<(u32, u32)> {
                s.gathered.iter().map(|&(i, v)| (i, v.to_bits())).collect()
            };
            if gathered(g) != gathered(&want_pick) {
                why.push(format!(
                    "row {r}: gathered {:?}, expected {:?}",
                    g.gathered, want_pick.gathered
                ));
            }
            if g.total.map(f64::to_bits) != want_pick.total.map(f64::to_bits) {
                why.push(format!(
                    "row {r}: total {:?}, expected {:?}",
                    g.total, want_pick.total
                ));
            }
            if picks
                .get(r)
                .copied()
                .flatten()
                .is_some_and(|p| p.nucleus.is_some())
            {
                // A prefix of the row in the sampler's order holding the nucleus, or (for a
                // nucleus longer than any backend need gather, 64) the row itself.
                let want_nuc = want_pick.nucleus.clone().unwrap_or_default();
                let bits = |t: &[(u32, f32)]| -> Vec<(u32, u32)> {
                    t.iter().map(|&(i, v)| (i, v.to_bits())).collect()
                };
                match (&g.nucleus, &g.row) {
                    (Some(pre), None) => {
                        let sorted = LogitsSummary::of_row(host.row(r), pre.len()).top;
                        if pre.len() < want_nuc.len() || bits(pre) != bits(&sorted) {
                            why.push(format!(
                                "row {r}: a prefix of {} that is not the row's first (nucleus {})",
                                pre.len(),
                                want_nuc.len()
                            ));
                        }
                    }
                    (None, Some(row)) => {
                        let same = row
                            .iter()
                            .map(|v| v.to_bits())
                            .eq(host.row(r).iter().map(|v| v.to_bits()));
                        if !same || want_nuc.len() <= 64 {
                            why.push(format!(
                                "row {r}: the row handed back ({}) for a nucleus of {}",
                                if same { "exact" } else { "differs" },
                                want_nuc.len()
                            ));
                        }
                    }
                    _ if want_pick.total.is_none() => {}
                    _ => why.push(format!("row {r}: neither a prefix nor the row")),
                }
            } else if g.nucleus.is_some() || g.total.is_some() && want_pick.total.is_none() {
                why.push(format!("row {r}: a nucleus it did not ask for"));
            } else if g
                .row
                .as_ref()
                .map(|w| w.iter().map(|v| v.to_bits()).collect::<Vec<_>>())
                != want_pick
                    .row
                    .as_ref()
                    .map(|w| w.iter().map(|v| v.to_bits()).collect::<Vec<_>>())
            {
                why.push(format!(
                    "row {r}: the row {}handed back, {}expected",
                    if g.row.is_some() { "" } else { "not " },
                    if want_pick.row.is_some() { "" } else { "not " }
                ));
            }
            let rel = (g.entropy - w.entropy).abs() / w.entropy.abs().max(1e-300);
            if !(g.entropy == w.entropy || rel <= 1e-9) {
                why.push(format!("row {r}: entropy {} vs {}", g.entropy, w.entropy));
            }
            ev.extend(w.top.iter().map(|t| t.1));
            gv.extend(g.top.iter().map(|t| t.1));
            ev.push(w.entropy as f32);
            gv.push(g.entropy as f32);
        }
        let metrics = if ev.len() == gv.len() {
            compare(&ev, &gv)
        } else {
            Metrics::broken(ev.len())
        };
        let guards = self.b.guard_violations();
        if !guards.is_empty() {
            why.push(format!("out-of-bounds write: {}", guards.join("; ")));
        }
        self.cases.push(OpCase {
            op: "logits_top".into(),
            shape,
            ty: "-".into(),
            metrics,
            bound: 0.0,
            pass: why.is_empty(),
            note: why.join("; "),
            unsupported: false,
        });
    }

    fn embed_cases(&mut self, ty: GgmlType) {
        if !self.wants("embed", ty.name()) {
            return;
        }
        let cols = 256;
        let rows = 37;
        let data = self.rng.activations(rows, cols);
        let shape = format!("table [{rows}, {cols}], ids [3, 0, 36, 3, 17]");
        match self.weight(ty, rows, cols, &data) {
            Ok((bw, rw)) => {
                let ids = [3u32, 0, 36, 3, 17];
                match (self.b.embed(&bw, &ids), self.r.embed(&rw, &ids)) {
                    (Ok(got), Ok(exp)) => {
                        let got = self.b.to_host(&got);
                        self.record(
                            "embed",
                            shape,
                            ty.name(),
                            &exp,
                            &got,
                            rounding_bound(self.arith),
                        );
                    }
                    (Err(e), _) | (_, Err(e)) => {
                        self.error("embed", shape, ty.name(), e.to_string(), false)
                    }
                }
                // An id outside the table must be an error, never a panic or a read past it.
                if self.b.embed(&bw, &[rows as u32]).is_ok() {
                    self.error(
                        "embed",
                        "id = rows (out of range)".into(),
                        ty.name(),
                        "accepted an id outside the table".into(),
                        false,
                    );
                }
            }
            Err(e) => self.error("embed", shape, ty.name(), e, true),
        }
    }

    fn matmul_case(&mut self, ty: GgmlType, n: usize, k: usize, m: usize) {
        if !self.wants("matmul", ty.name()) {
            return;
        }
        let shape = format!("x [{n}, {k}] . W [{m}, {k}]^T");
        let wdata: Vec<f32> = (0..m * k).map(|_| self.rng.normal(0.05)).collect();
        let xdata = self.rng.activations(n, k);
        let (bw, rw) = match self.weight(ty, m, k, &wdata) {
            Ok(w) => w,
            Err(e) => return self.error("matmul", shape, ty.name(), e, true),
        };
        let (bx, rx) = match self.upload(n, k, &xdata) {
            Ok(x) => x,
            Err(e) => return self.error("matmul", shape, ty.name(), e.to_string(), false),
        };
        let got = self.b.to_host(&self.b.matmul(&bx, &bw));
        // A backend that multiplies long steps on tensor cores (f16 or TF32 operands, no 8-bit
        // activations) is held to that arithmetic's bound.
        if tensor_core_rows(&self.name).is_some_and(|r| n >= r) {
            let exp = self.r.matmul(&rx, &rw);
            let bound = tf32_matmul_bound(&column_squares(&rw.data, k), &rx, &exp);
            return self.record("matmul", shape, ty.name(), &exp, &got, bound);
        }
        let xq = if quantizes(self.arith, ty) {
            quantize_q8_f32(&rx)
        } else {
            rx
        };
        let exp = self.r.matmul(&xq, &rw);
        let bound = matmul_bound(self.arith, &column_squares(&rw.data, k), &xq, &exp);
        self.record("matmul", shape, ty.name(), &exp, &got, bound);
    }

    fn gate_up_case(&mut self, ty: GgmlType, n: usize, k: usize, m: usize, act: Activation) {
        let op = "gate_up_act";
        if !self.wants(op, ty.name()) {
            return;
        }
        let shape = format!("x [{n}, {k}], gate/up [{m}, {k}], {act:?}");
        let g: Vec<f32> = (0..m * k).map(|_| self.rng.normal(0.05)).collect();
        let u: Vec<f32> = (0..m * k).map(|_| self.rng.normal(0.05)).collect();
        let xdata = self.rng.activations(n, k);
        let (Ok((bg, rg)), Ok((bu, ru))) = (self.weight(ty, m, k, &g), self.weight(ty, m, k, &u))
        else {
            return self.error(op, shape, ty.name(), "weight type not loaded".into(), true);
        };
        let (bx, rx) = match self.upload(n, k, &xdata) {
            Ok(x) => x,
            Err(e) => return self.error(op, shape, ty.name(), e.to_string(), false),
        };
        let (og, ou, oa) = self.b.gate_up_act(&bx, &bg, &bu, act);
        let (og, ou, oa) = (
            self.b.to_host(&og),
            self.b.to_host(&ou),
            self.b.to_host(&oa),
        );
        let xq = if quantizes(self.arith, ty) {
            quantize_q8_f32(&rx)
        } else {
            rx
        };
        let eg = self.r.matmul(&xq, &rg);
        let eu = self.r.matmul(&xq, &ru);
        let bg_ = matmul_bound(self.arith, &column_squares(&rg.data, k), &xq, &eg);
        let bu_ = matmul_bound(self.arith, &column_squares(&ru.data, k), &xq, &eu);
        self.record(op, format!("{shape}: gate"), ty.name(), &eg, &og, bg_);
        self.record(op, format!("{shape}: up"), ty.name(), &eu, &ou, bu_);
        // The activation on B's own products: the fused kernel must apply exactly act_mul.
        if og.shape == ou.shape {
            let ea = self.r.act_mul(&og, &ou, act);
            let ba = act_bound(self.arith, act, &og.data, &ea);
            self.record(op, format!("{shape}: act"), ty.name(), &ea, &oa, ba);
        }
    }

    /// `gate_up_act` then `matmul(act, down)`: the down projection against the reference on
    /// B's own activation, quantized as B's arithmetic declares.
    fn ffn_case(&mut self, ty: GgmlType, n: usize, k: usize, m: usize) {
        let op = "ffn_down";
        if !self.wants(op, ty.name()) {
            return;
        }
        let shape = format!("x [{n}, {k}], gate/up [{m}, {k}], down [{k}, {m}]");
        let g: Vec<f32> = (0..m * k).map(|_| self.rng.normal(0.05)).collect();
        let u: Vec<f32> = (0..m * k).map(|_| self.rng.normal(0.05)).collect();
        let d: Vec<f32> = (0..k * m).map(|_| self.rng.normal(0.05)).collect();
        let xdata = self.rng.activations(n, k);
        // The down weight's rows (m values) must be whole blocks: Q8_0 or F16 otherwise.
        let dty = if m.is_multiple_of(ty.block_size()) {
            ty
        } else if m.is_multiple_of(32) {
            GgmlType::Q8_0
        } else {
            GgmlType::F16
        };
        let (Ok((bg, _)), Ok((bu, _)), Ok((bd, rd))) = (
            self.weight(ty, m, k, &g),
            self.weight(ty, m, k, &u),
            self.weight(dty, k, m, &d),
        ) else {
            return self.error(op, shape, ty.name(), "weight type not loaded".into(), true);
        };
        let (bx, _) = match self.upload(n, k, &xdata) {
            Ok(x) => x,
            Err(e) => return self.error(op, shape, ty.name(), e.to_string(), false),
        };
        let (_, _, oa) = self.b.gate_up_act(&bx, &bg, &bu, Activation::Silu);
        let got = self.b.to_host(&self.b.matmul(&oa, &bd));
        let a = self.b.to_host(&oa);
        let aq = if quantizes(self.arith, dty) {
            quantize_q8_f32(&a)
        } else {
            a
        };
        let exp = self.r.matmul(&aq, &rd);
        let bound = matmul_bound(self.arith, &column_squares(&rd.data, m), &aq, &exp);
        self.record(op, shape, dty.name(), &exp, &got, bound);
    }

    fn elementwise_cases(&mut self) {
        let arith = self.arith;
        for (n, c) in [(1usize, 67usize), (3, 576), (9, 1001), (33, 64), (1, 4096)] {
            let a = self.rng.activations(n, c);
            let bdata = self.rng.activations(n, c);
            let (Ok((ba, ra)), Ok((bb, rb))) = (self.upload(n, c, &a), self.upload(n, c, &bdata))
            else {
                continue;
            };
            let shape = format!("[{n}, {c}]");
            if self.wants("add", "-") {
                let got = self.b.to_host(&self.b.add(&ba, &bb));
                let exp = self.r.add(&ra, &rb);
                self.record("add", shape.clone(), "-", &exp, &got, rounding_bound(arith));
            }
            if self.wants("scale", "-") {
                let got = self.b.to_host(&self.b.scale(&ba, 0.3125));
                let exp = self.r.scale(&ra, 0.3125);
                self.record(
                    "scale",
                    shape.clone(),
                    "-",
                    &exp,
                    &got,
                    rounding_bound(arith),
                );
            }
            if self.wants("add_bias", "-") {
                let bias = self.rng.activations(1, c);
                if let Ok((bw, rw)) = self.weight(GgmlType::F32, 1, c, &bias) {
                    let got = self.b.to_host(&self.b.add_bias(&ba, &bw));
                    let exp = self.r.add_bias(&ra, &rw);
                    self.record(
                        "add_bias",
                        shape.clone(),
                        "F32",
                        &exp,
                        &got,
                        rounding_bound(arith),
                    );
                }
            }
            for act in [Activation::Silu, Activation::GeluTanh] {
                if !self.wants("act_mul", "-") {
                    break;
                }
                let got = self.b.to_host(&self.b.act_mul(&ba, &bb, act));
                let exp = self.r.act_mul(&ra, &rb, act);
                let bound = act_bound(arith, act, &ra.data, &exp);
                self.record(
                    "act_mul",
                    format!("{shape} {act:?}"),
                    "-",
                    &exp,
                    &got,
                    bound,
                );
            }
            if self.wants("select_rows", "-") {
                let rows: Vec<usize> = (0..n).rev().chain([0]).collect();
                let got = self.b.to_host(&self.b.select_rows(&ba, &rows));
                let exp = self.r.select_rows(&ra, &rows);
                self.record(
                    "select_rows",
                    format!("{shape} rows {rows:?}"),
                    "-",
                    &exp,
                    &got,
                    0.0,
                );
            }
            // RMS norm of whole rows, and per head (groups of 64 / of an odd 67-wide row).
            for g in [c, 64] {
                if !self.wants("rms_norm", "-") || c % g != 0 {
                    continue;
                }
                let w: Vec<f32> = (0..g).map(|_| 1.0 + self.rng.normal(0.3)).collect();
                if let Ok((bw, rw)) = self.weight(GgmlType::F32, 1, g, &w) {
                    let got = self.b.to_host(&self.b.rms_norm(&ba, &bw, 1e-6));
                    let exp = self.r.rms_norm(&ra, &rw, 1e-6);
                    self.record(
                        "rms_norm",
                        format!("{shape} groups of {g}"),
                        "F32",
                        &exp,
                        &got,
                        norm_bound(arith, g),
                    );
                }
            }
            // The end of a block in one op: the optional post norm of b, the residual add,
            // the optional norm of the sum; each stage against the reference on B's own input.
            if self.wants("residual_norm", "-") {
                let mut ws = Vec::new();
                for _ in 0..2 {
                    let w: Vec<f32> = (0..c).map(|_| 1.0 + self.rng.normal(0.3)).collect();
                    if let Ok(w) = self.weight(GgmlType::F32, 1, c, &w) {
                        ws.push(w);
                    }
                }
                if ws.len() == 2 {
                    for (post, next) in [(false, true), (true, true), (true, false)] {
                        let label = format!(
                            "{shape}{}{}",
                            if post { ", post norm" } else { "" },
                            if next { ", norm" } else { "" }
                        );
                        let r = self.b.residual_norm(
                            &ba,
                            &bb,
                            post.then_some(&ws[0].0),
                            next.then_some(&ws[1].0),
                            1e-6,
                        );
                        let op = "residual_norm";
                        let addend = match (&r.post, post) {
                            (Some(p), true) => {
                                let got = self.b.to_host(p);
                                let exp = self.r.rms_norm(&rb, &ws[0].1, 1e-6);
                                let bound = norm_bound(arith, c);
                                self.record(op, format!("{label}: post"), "F32", &exp, &got, bound);
                                got
                            }
                            (None, false) => rb.clone(),
                            _ => {
                                self.error(
                                    op,
                                    label,
                                    "F32",
                                    "post norm output wrong".into(),
                                    false,
                                );
                                continue;
                            }
                        };
                        let gs = self.b.to_host(&r.sum);
                        let es = self.r.add(&ra, &addend);
                        self.record(
                            op,
                            format!("{label}: sum"),
                            "F32",
                            &es,
                            &gs,
                            rounding_bound(arith),
                        );
                        match (&r.normed, next) {
                            (Some(t), true) => {
                                let got = self.b.to_host(t);
                                let exp = self.r.rms_norm(&gs, &ws[1].1, 1e-6);
                                let bound = norm_bound(arith, c);
                                self.record(op, format!("{label}: norm"), "F32", &exp, &got, bound);
                            }
                            (None, false) => {}
                            _ => self.error(op, label, "F32", "norm output wrong".into(), false),
                        }
                    }
                }
            }
        }
    }

    /// q, k and v projections of one input in one op (`matmul_qkv`): each product checked as
    /// `matmul` checks it; v also of another type than q and k (as in Q4_K_M files).
    fn qkv_case(&mut self, tys: [GgmlType; 3], n: usize, k: usize, ms: [usize; 3]) {
        let op = "matmul_qkv";
        let names = format!("{}/{}/{}", tys[0].name(), tys[1].name(), tys[2].name());
        if !self.wants(op, tys[0].name()) {
            return;
        }
        let shape = format!("x [{n}, {k}], q/k/v [{}|{}|{}, {k}]", ms[0], ms[1], ms[2]);
        let mut ws = Vec::new();
        for (&ty, &m) in tys.iter().zip(&ms) {
            let data: Vec<f32> = (0..m * k).map(|_| self.rng.normal(0.05)).collect();
            match self.weight(ty, m, k, &data) {
                Ok(w) => ws.push(w),
                Err(e) => return self.error(op, shape, &names, e, true),
            }
        }
        let xdata = self.rng.activations(n, k);
        let (bx, rx) = match self.upload(n, k, &xdata) {
            Ok(x) => x,
            Err(e) => return self.error(op, shape, &names, e.to_string(), false),
        };
        let (q, kk, v) = self.b.matmul_qkv(&bx, &ws[0].0, &ws[1].0, &ws[2].0);
        let got = [self.b.to_host(&q), self.b.to_host(&kk), self.b.to_host(&v)];
        for (i, ((_, rw), got)) in ws.iter().zip(&got).enumerate() {
            let xq = if quantizes(self.arith, tys[i]) {
                quantize_q8_f32(&rx)
            } else {
                rx.clone()
            };
            let exp = self.r.matmul(&xq, rw);
            let bound = matmul_bound(self.arith, &column_squares(&rw.data, k), &xq, &exp);
            let which = ["q", "k", "v"][i];
            self.record(op, format!("{shape}: {which}"), &names, &exp, got, bound);
        }
    }

    /// The end of a block and the op that consumes its norm, in one op (`residual_norm_then`;
    /// cuda: for one row, the norm inside the consumer's kernel). Each stage against the
    /// reference on B's own input to it: the post norm, the sum, the norm, then the consumer's
    /// products on B's normed row (quantized as B's arithmetic declares), the activation on
    /// B's own products, and (gate/up) the down projection on B's activation, which reads the
    /// quantization the fused kernel may have left. `v_ty`: q/k/v with v of that type, rows
    /// m, m / 4, m / 4; none: gate/up of m rows.
    fn norm_then_case(
        &mut self,
        ty: GgmlType,
        v_ty: Option<GgmlType>,
        n: usize,
        g: usize,
        m: usize,
        post: bool,
    ) {
        let op = "residual_norm_then";
        if !self.wants(op, ty.name()) {
            return;
        }
        let act = if post {
            Activation::GeluTanh
        } else {
            Activation::Silu
        };
        let consumer = match v_ty {
            Some(v) => format!(
                "q/k/v {}/{}/{} [{m}|{}|{}]",
                ty.name(),
                ty.name(),
                v.name(),
                m / 4,
                m / 4
            ),
            None => format!("gate/up {} [{m}] {act:?}", ty.name()),
        };
        let shape = format!(
            "[{n}, {g}]{}, then {consumer}",
            if post { ", post norm" } else { "" }
        );
        let adata = self.rng.activations(n, g);
        let bdata = self.rng.activations(n, g);
        let (Ok((ba, ra)), Ok((bb, rb))) = (self.upload(n, g, &adata), self.upload(n, g, &bdata))
        else {
            return self.error(op, shape, ty.name(), "upload failed".into(), false);
        };
        let pw: Vec<f32> = (0..g).map(|_| 1.0 + self.rng.normal(0.3)).collect();
        let nw: Vec<f32> = (0..g).map(|_| 1.0 + self.rng.normal(0.3)).collect();
        let (Ok(pw), Ok(nw)) = (
            self.weight(GgmlType::F32, 1, g, &pw),
            self.weight(GgmlType::F32, 1, g, &nw),
        ) else {
            return self.error(op, shape, "F32", "norm weight not loaded".into(), true);
        };
        let specs: Vec<(GgmlType, usize)> = match v_ty {
            Some(v) => vec![(ty, m), (ty, m / 4), (v, m / 4)],
            None => vec![(ty, m), (ty, m)],
        };
        let mut ws = Vec::new();
        for &(t, rows) in &specs {
            let data: Vec<f32> = (0..rows * g).map(|_| self.rng.normal(0.05)).collect();
            match self.weight(t, rows, g, &data) {
                Ok(w) => ws.push(w),
                Err(e) => return self.error(op, shape, t.name(), e, true),
            }
        }
        let then = match v_ty {
            Some(_) => NormThen::Qkv {
                wq: &ws[0].0,
                wk: &ws[1].0,
                wv: &ws[2].0,
            },
            None => NormThen::GateUp {
                gate: &ws[0].0,
                up: &ws[1].0,
                act,
            },
        };
        let r = self
            .b
            .residual_norm_then(&ba, &bb, post.then_some(&pw.0), &nw.0, 1e-6, then);
        let arith = self.arith;
        let addend = match (&r.post, post) {
            (Some(p), true) => {
                let got = self.b.to_host(p);
                let exp = self.r.rms_norm(&rb, &pw.1, 1e-6);
                let bound = norm_bound(arith, g);
                self.record(op, format!("{shape}: post"), "F32", &exp, &got, bound);
                got
            }
            (None, false) => rb,
            _ => return self.error(op, shape, "F32", "post norm output wrong".into(), false),
        };
        let gs = self.b.to_host(&r.sum);
        let es = self.r.add(&ra, &addend);
        let bound = rounding_bound(arith);
        self.record(op, format!("{shape}: sum"), "F32", &es, &gs, bound);
        let gn = self.b.to_host(&r.normed);
        let en = self.r.rms_norm(&gs, &nw.1, 1e-6);
        self.record(
            op,
            format!("{shape}: norm"),
            "F32",
            &en,
            &gn,
            norm_bound(arith, g),
        );
        let (o0, o1, o2) = r.outs;
        let got = [
            self.b.to_host(&o0),
            self.b.to_host(&o1),
            self.b.to_host(&o2),
        ];
        let names: &[&str] = match v_ty {
            Some(_) => &["q", "k", "v"],
            None => &["gate", "up"],
        };
        for (i, which) in names.iter().enumerate() {
            self.record_on_norm(op, &shape, which, specs[i].0, &ws[i].1, &gn, &got[i]);
        }
        if v_ty.is_some() {
            return;
        }
        let ea = self.r.act_mul(&got[0], &got[1], act);
        let ba_ = act_bound(arith, act, &got[0].data, &ea);
        self.record(op, format!("{shape}: act"), ty.name(), &ea, &got[2], ba_);
        // The down projection on B's activation (the quantization a fused kernel left).
        let dty = if m.is_multiple_of(ty.block_size()) {
            ty
        } else {
            GgmlType::Q8_0
        };
        let d: Vec<f32> = (0..g * m).map(|_| self.rng.normal(0.05)).collect();
        let (bd, rd) = match self.weight(dty, g, m, &d) {
            Ok(w) => w,
            Err(e) => return self.error(op, shape, dty.name(), e, true),
        };
        let gd = self.b.to_host(&self.b.matmul(&o2, &bd));
        let aq = if quantizes(arith, dty) {
            quantize_q8_f32(&got[2])
        } else {
            got[2].clone()
        };
        let exp = self.r.matmul(&aq, &rd);
        let bound = matmul_bound(arith, &column_squares(&rd.data, m), &aq, &exp);
        self.record(op, format!("{shape}: down"), dty.name(), &exp, &gd, bound);
    }

    /// Layer 0's input in one op (`scale_norm_then`; cuda: for one row, the scale and the norm
    /// inside the q/k/v kernel). Each stage against the reference on B's own input to it: the
    /// scaled row, its norm, then q, k and v on B's normed row (quantized as B's arithmetic
    /// declares). q/k/v of `ty` with v of `v_ty`, rows m, m / 4, m / 4.
    fn scale_norm_then_case(
        &mut self,
        ty: GgmlType,
        v_ty: GgmlType,
        g: usize,
        m: usize,
        scale: Option<f32>,
    ) {
        let op = "scale_norm_then";
        if !self.wants(op, ty.name()) {
            return;
        }
        let shape = format!(
            "[1, {g}]{}, then q/k/v {}/{}/{} [{m}|{}|{}]",
            scale.map_or(String::new(), |s| format!(" x {s}")),
            ty.name(),
            ty.name(),
            v_ty.name(),
            m / 4,
            m / 4
        );
        let xdata = self.rng.activations(1, g);
        let Ok((bx, rx)) = self.upload(1, g, &xdata) else {
            return self.error(op, shape, ty.name(), "upload failed".into(), false);
        };
        let nw: Vec<f32> = (0..g).map(|_| 1.0 + self.rng.normal(0.3)).collect();
        let Ok(nw) = self.weight(GgmlType::F32, 1, g, &nw) else {
            return self.error(op, shape, "F32", "norm weight not loaded".into(), true);
        };
        let specs = [(ty, m), (ty, m / 4), (v_ty, m / 4)];
        let mut ws = Vec::new();
        for &(t, rows) in &specs {
            let data: Vec<f32> = (0..rows * g).map(|_| self.rng.normal(0.05)).collect();
            match self.weight(t, rows, g, &data) {
                Ok(w) => ws.push(w),
                Err(e) => return self.error(op, shape, t.name(), e, true),
            }
        }
        let then = NormThen::Qkv {
            wq: &ws[0].0,
            wk: &ws[1].0,
            wv: &ws[2].0,
        };
        let r = self.b.scale_norm_then(&bx, scale, &nw.0, 1e-6, then);
        let arith = self.arith;
        let input = match (&r.scaled, scale) {
            (Some(t), Some(s)) => {
                let got = self.b.to_host(t);
                let exp = self.r.scale(&rx, s);
                self.record(
                    op,
                    format!("{shape}: scaled"),
                    "F32",
                    &exp,
                    &got,
                    rounding_bound(arith),
                );
                got
            }
            (None, None) => rx,
            _ => return self.error(op, shape, "F32", "scaled output wrong".into(), false),
        };
        let gn = self.b.to_host(&r.normed);
        let en = self.r.rms_norm(&input, &nw.1, 1e-6);
        self.record(
            op,
            format!("{shape}: norm"),
            "F32",
            &en,
            &gn,
            norm_bound(arith, g),
        );
        let (o0, o1, o2) = r.outs;
        for (i, (which, o)) in ["q", "k", "v"].iter().zip([o0, o1, o2]).enumerate() {
            let got = self.b.to_host(&o);
            self.record_on_norm(op, &shape, which, specs[i].0, &ws[i].1, &gn, &got);
        }
    }

    /// One product of a fused norm's consumer (`which`, weight `rw` of type `ty`) against the
    /// reference matmul of B's own normed row `gn`, quantized as B's arithmetic declares.
    #[allow(clippy::too_many_arguments)]
    fn record_on_norm(
        &mut self,
        op: &str,
        shape: &str,
        which: &str,
        ty: GgmlType,
        rw: &RefWeight,
        gn: &HostTensor,
        got: &HostTensor,
    ) {
        let xq = if quantizes(self.arith, ty) {
            quantize_q8_f32(gn)
        } else {
            gn.clone()
        };
        let exp = self.r.matmul(&xq, rw);
        let bound = matmul_bound(self.arith, &column_squares(&rw.data, gn.cols()), &xq, &exp);
        self.record(op, format!("{shape}: {which}"), ty.name(), &exp, got, bound);
    }

    /// Per-head norms, rotation and the K/V store in one op (`rope_store`): the normed and
    /// rotated q and k as `rms_norm` and `rope` (each on B's own input to it), and the cache
    /// read back through attention's `k_read` / `v_read` taps: exactly the rotated k B
    /// returned and v.
    fn rope_store_cases(&mut self) {
        let op = "rope_store";
        if !self.wants(op, "-") {
            return;
        }
        let kv_f16 = kv_cache_f16(self.arith, &self.name);
        for (style, hd, n_rot, nh, nkv, norms, rows) in [
            (
                RopeStyle::Norm,
                64usize,
                64usize,
                4usize,
                2usize,
                false,
                1usize,
            ),
            (RopeStyle::Neox, 64, 64, 3, 1, false, 5),
            (RopeStyle::Neox, 128, 64, 4, 4, false, 3),
            (RopeStyle::Neox, 256, 256, 4, 1, true, 1),
            (RopeStyle::Neox, 64, 64, 2, 1, true, 6),
        ] {
            let (q_dim, kv_dim) = (nh * hd, nkv * hd);
            let shape = format!(
                "{rows} rows, {nh}q/{nkv}kv heads x {hd} {style:?} n_rot {n_rot}{}",
                if norms { ", q/k norms" } else { "" }
            );
            let qd = self.rng.activations(rows, q_dim);
            let kd = self.rng.activations(rows, kv_dim);
            let vd = self.rng.activations(rows, kv_dim);
            let (Ok((bq, rq)), Ok((bk, rk)), Ok((bv, rv))) = (
                self.upload(rows, q_dim, &qd),
                self.upload(rows, kv_dim, &kd),
                self.upload(rows, kv_dim, &vd),
            ) else {
                self.error(op, shape, "-", "inputs not uploaded".into(), false);
                continue;
            };
            let mut nw = Vec::new();
            for _ in 0..2 {
                let w: Vec<f32> = (0..hd).map(|_| 1.0 + self.rng.normal(0.3)).collect();
                match self.weight(GgmlType::F32, 1, hd, &w) {
                    Ok(w) => nw.push(w),
                    Err(e) => return self.error(op, shape, "-", e, true),
                }
            }
            // One sequence at positions 3.. (after a 3-token history), slots permuted.
            let first_pos = 3u32;
            let n_kv = first_pos as usize + rows;
            let block = 4usize;
            let layout = KvLayout {
                n_layers: 2,
                n_blocks: n_kv.div_ceil(block) + 2,
                block_size: block,
                kv_dim,
            };
            let mut perm: Vec<u32> = (0..(layout.n_slots()) as u32).collect();
            for i in (1..perm.len()).rev() {
                let j = self.rng.below(i + 1);
                perm.swap(i, j);
            }
            let slots: Vec<u32> = perm[..n_kv].to_vec();
            let positions: Vec<u32> = (0..rows as u32).map(|i| first_pos + i).collect();
            let mut batch = Batch::default();
            batch.seqs.push(BatchSeq {
                first_row: 0,
                n_rows: rows,
                first_pos,
                kv_slots: slots.clone(),
                mask: None,
            });
            for (i, &p) in positions.iter().enumerate() {
                batch.tokens.push(0);
                batch.positions.push(p);
                batch.slots.push(slots[first_pos as usize + i]);
            }
            let p = RopeParams {
                style,
                head_dim: hd,
                n_rot,
                base: 10_000.0,
            };
            let run = || -> Result<_, BackendError> {
                let mut cache = self.b.alloc_kv(layout)?;
                let qkv = QkvIn {
                    q: &bq,
                    k: &bk,
                    v: &bv,
                    q_norm: norms.then_some(&nw[0].0),
                    k_norm: norms.then_some(&nw[1].0),
                    eps: 1e-6,
                };
                let out = self
                    .b
                    .rope_store(&mut cache, 1, qkv, &positions, p, &batch)?;
                let attn = AttentionParams {
                    n_heads: nh,
                    n_kv_heads: nkv,
                    head_dim: hd,
                    scale: 1.0 / (hd as f32).sqrt(),
                    window: None,
                };
                let mut rec = Recorder::new();
                self.b
                    .attention(&cache, 1, &out.q, &batch, attn, &mut Taps::new(&mut rec))?;
                Ok((out, rec))
            };
            let (out, rec) = match run() {
                Ok(x) => x,
                Err(e) => {
                    self.error(op, shape, "-", e.to_string(), false);
                    continue;
                }
            };
            // Each stage against the reference on B's own input to that stage.
            let mut rope_in = [rq.clone(), rk.clone()];
            for (i, (normed, rin)) in [&out.q_norm, &out.k_norm]
                .into_iter()
                .zip([&rq, &rk])
                .enumerate()
            {
                let which = ["q", "k"][i];
                match (normed, norms) {
                    (Some(t), true) => {
                        let got = self.b.to_host(t);
                        let exp = self.r.rms_norm(rin, &nw[i].1, 1e-6);
                        let b = norm_bound(self.arith, hd);
                        self.record(op, format!("{shape}: {which}_norm"), "-", &exp, &got, b);
                        rope_in[i] = got;
                    }
                    (None, false) => {}
                    _ => self.error(
                        op,
                        shape.clone(),
                        "-",
                        format!("{which}_norm missing or unasked"),
                        false,
                    ),
                }
            }
            let got_q = self.b.to_host(&out.q);
            let got_k = self.b.to_host(&out.k);
            let eq = self.r.rope(&rope_in[0], &positions, p);
            let ek = self.r.rope(&rope_in[1], &positions, p);
            self.record(
                op,
                format!("{shape}: q_rope"),
                "-",
                &eq,
                &got_q,
                rope_bound(self.arith),
            );
            self.record(
                op,
                format!("{shape}: k_rope"),
                "-",
                &ek,
                &got_k,
                rope_bound(self.arith),
            );
            // The cache rows of the new tokens: the last `rows` keys of the sequence.
            let round = |v: &[f32]| -> Vec<f32> {
                if kv_f16 {
                    v.iter()
                        .map(|&x| lockstep_quant::fp16_to_f32(lockstep_quant::f32_to_fp16(x)))
                        .collect()
                } else {
                    v.to_vec()
                }
            };
            for (tap, stored) in [("k_read", &got_k), ("v_read", &rv)] {
                let Some(t) = rec.get(&format!("blk.1.{tap}")) else {
                    self.error(op, shape.clone(), "-", format!("no {tap} tap"), false);
                    continue;
                };
                let got = HostTensor::matrix(
                    rows,
                    kv_dim,
                    t.data[first_pos as usize * kv_dim..].to_vec(),
                );
                let exp = HostTensor::matrix(rows, kv_dim, round(&stored.data));
                let b = if kv_f16 {
                    kv_f16_bound(&stored.data)
                } else {
                    0.0
                };
                self.record(op, format!("{shape}: cache {tap}"), "-", &exp, &got, b);
            }
        }
    }

    /// `rope_store_attention` on decode steps (one row a sequence over its history; cuda:
    /// rope_store's work inside the short decode attention kernel): the output and every tap
    /// bitwise what `rope_store`, the taps between, then `attention` give on the same backend
    /// (each of those checked against the reference by the cases above), with listeners and
    /// without; the taps in the same order.
    fn rope_attention_cases(&mut self) {
        let op = "rope_store_attention";
        if !self.wants(op, "-") {
            return;
        }
        type Case = (
            RopeStyle,
            usize,
            usize,
            usize,
            usize,
            bool,
            &'static [usize],
            Option<u32>,
            bool,
        );
        let cases: [Case; 6] = [
            // SmolLM2's heads; Llama's, three sequences, one at position 0; Gemma-3's with its
            // per-head norms and a window; a partial rotation; an explicit mask; MQA.
            (RopeStyle::Norm, 64, 64, 9, 3, false, &[5], None, false),
            (
                RopeStyle::Neox,
                128,
                128,
                8,
                2,
                false,
                &[0, 17, 90],
                None,
                false,
            ),
            (RopeStyle::Neox, 256, 256, 4, 1, true, &[30], Some(8), false),
            (RopeStyle::Neox, 64, 32, 4, 4, true, &[3, 120], None, false),
            (RopeStyle::Norm, 64, 64, 4, 2, false, &[9, 40], None, true),
            (
                RopeStyle::Neox,
                128,
                128,
                6,
                1,
                true,
                &[64],
                Some(100),
                true,
            ),
        ];
        for (style, hd, n_rot, nh, nkv, norms, hist, window, masked) in cases {
            let (q_dim, kv_dim) = (nh * hd, nkv * hd);
            let shape = format!(
                "{nh}q/{nkv}kv x {hd} {style:?} n_rot {n_rot}{}, history {hist:?}{}{}",
                if norms { ", q/k norms" } else { "" },
                window.map(|w| format!(", window {w}")).unwrap_or_default(),
                if masked { ", mask" } else { "" }
            );
            let n_seq = hist.len();
            let n_hist: usize = hist.iter().sum();
            let block = 4usize;
            let layout = KvLayout {
                n_layers: 2,
                n_blocks: (n_hist + n_seq).div_ceil(block) + 2,
                block_size: block,
                kv_dim,
            };
            let mut perm: Vec<u32> = (0..layout.n_slots() as u32).collect();
            for i in (1..perm.len()).rev() {
                let j = self.rng.below(i + 1);
                perm.swap(i, j);
            }
            // Each sequence's slots (history, then the new row), and the two batches: the
            // history's rows stored by rope_store, then one decode row a sequence.
            let mut next = 0usize;
            let (mut past, mut step) = (Batch::default(), Batch::default());
            for (si, &h) in hist.iter().enumerate() {
                let slots: Vec<u32> = perm[next..next + h + 1].to_vec();
                next += h + 1;
                for (p, &slot) in slots[..h].iter().enumerate() {
                    past.tokens.push(0);
                    past.positions.push(p as u32);
                    past.slots.push(slot);
                }
                let mask = masked.then(|| {
                    (0..=h)
                        .map(|j| j == h || self.rng.below(3) != 0)
                        .collect::<Vec<bool>>()
                });
                step.seqs.push(BatchSeq {
                    first_row: si,
                    n_rows: 1,
                    first_pos: h as u32,
                    kv_slots: slots.clone(),
                    mask,
                });
                step.tokens.push(0);
                step.positions.push(h as u32);
                step.slots.push(slots[h]);
            }
            let mut ups = Vec::new();
            for (rows, cols) in [
                (n_hist, q_dim),
                (n_hist, kv_dim),
                (n_hist, kv_dim),
                (n_seq, q_dim),
                (n_seq, kv_dim),
                (n_seq, kv_dim),
            ] {
                let d = self.rng.activations(rows, cols);
                match self.upload(rows.max(1), cols, &d) {
                    Ok((b, _)) => ups.push(b),
                    Err(e) => return self.error(op, shape, "-", e.to_string(), false),
                }
            }
            let mut nw = Vec::new();
            for _ in 0..2 {
                let w: Vec<f32> = (0..hd).map(|_| 1.0 + self.rng.normal(0.3)).collect();
                match self.weight(GgmlType::F32, 1, hd, &w) {
                    Ok((w, _)) => nw.push(w),
                    Err(e) => return self.error(op, shape, "-", e, true),
                }
            }
            let rope = RopeParams {
                style,
                head_dim: hd,
                n_rot,
                base: 10_000.0,
            };
            let attn = AttentionParams {
                n_heads: nh,
                n_kv_heads: nkv,
                head_dim: hd,
                scale: 1.0 / (hd as f32).sqrt(),
                window,
            };
            let qkv = |i: usize| QkvIn {
                q: &ups[i],
                k: &ups[i + 1],
                v: &ups[i + 2],
                q_norm: norms.then_some(&nw[0]),
                k_norm: norms.then_some(&nw[1]),
                eps: 1e-6,
            };
            let run = |fused: bool, listen: bool| -> Result<(HostTensor, Recorder), BackendError> {
                let mut cache = self.b.alloc_kv(layout)?;
                if n_hist > 0 {
                    self.b
                        .rope_store(&mut cache, 1, qkv(0), &past.positions, rope, &past)?;
                }
                let mut rec = Recorder::new();
                let pos = &step.positions;
                let mut call = |taps: &mut Taps<'_>| {
                    if fused {
                        self.b.rope_store_attention(
                            &mut cache,
                            1,
                            qkv(3),
                            pos,
                            rope,
                            &step,
                            attn,
                            taps,
                        )
                    } else {
                        rope_store_attention_unfused(
                            self.b,
                            &mut cache,
                            1,
                            qkv(3),
                            pos,
                            rope,
                            &step,
                            attn,
                            taps,
                        )
                    }
                };
                let out = if listen {
                    call(&mut Taps::new(&mut rec))?
                } else {
                    call(&mut Taps::none())?
                };
                Ok((self.b.to_host(&out), rec))
            };
            let runs = (run(false, true), run(true, false), run(true, true));
            let ((want, wrec), (quiet, _), (got, grec)) = match runs {
                (Ok(a), Ok(b), Ok(c)) => (a, b, c),
                (Err(e), _, _) | (_, Err(e), _) | (_, _, Err(e)) => {
                    self.error(op, shape, "-", e.to_string(), false);
                    continue;
                }
            };
            self.record(op, format!("{shape}: output"), "-", &want, &quiet, 0.0);
            self.record(
                op,
                format!("{shape}: output, taps on"),
                "-",
                &want,
                &got,
                0.0,
            );
            let names = |r: &Recorder| r.taps.iter().map(|t| t.0.clone()).collect::<Vec<_>>();
            if names(&wrec) != names(&grec) {
                self.error(
                    op,
                    format!("{shape}: taps"),
                    "-",
                    format!(
                        "taps {:?}, the two ops emit {:?}",
                        names(&grec),
                        names(&wrec)
                    ),
                    false,
                );
            }
            for (name, w) in &wrec.taps {
                match grec.get(name) {
                    Some(g) => {
                        let g = g.clone();
                        self.record(op, format!("{shape}: {name}"), "-", w, &g, 0.0)
                    }
                    None => self.error(op, format!("{shape}: {name}"), "-", "no tap".into(), false),
                }
            }
        }
    }

    fn rope_cases(&mut self) {
        if !self.wants("rope", "-") {
            return;
        }
        for (style, hd, n_rot, base) in [
            (RopeStyle::Norm, 64usize, 64usize, 10_000f32),
            (RopeStyle::Neox, 64, 64, 1_000_000.0),
            (RopeStyle::Neox, 128, 64, 10_000.0),
            (RopeStyle::Norm, 96, 32, 100_000.0),
        ] {
            for (rows, heads) in [(1usize, 3usize), (5, 2)] {
                let c = hd * heads;
                let x = self.rng.activations(rows, c);
                let positions: Vec<u32> = (0..rows)
                    .map(|i| [0u32, 1, 7, 511, 4095][i % 5] + i as u32)
                    .collect();
                let Ok((bx, rx)) = self.upload(rows, c, &x) else {
                    continue;
                };
                let p = RopeParams {
                    style,
                    head_dim: hd,
                    n_rot,
                    base,
                };
                let got = self.b.to_host(&self.b.rope(&bx, &positions, p));
                let exp = self.r.rope(&rx, &positions, p);
                let shape =
                    format!("[{rows}, {heads}x{hd}] {style:?} n_rot {n_rot} pos {positions:?}");
                self.record("rope", shape, "-", &exp, &got, rope_bound(self.arith));
            }
        }
    }

    /// K/V store and attention: sequences with history (prefill after a prefix, decode), GQA
    /// and MQA layouts, a sliding window, explicit masks, fragmented (permuted) cache slots.
    fn attention_case(&mut self, c: AttnCase<'_>, kv_f16: bool) {
        let AttnCase {
            label,
            n_heads: nh,
            n_kv_heads: nkv,
            head_dim: hd,
            window,
            seqs,
            masked,
        } = c;
        let op = "attention";
        if !self.wants(op, "-") && !self.wants("kv_store", "-") {
            return;
        }
        let kv_dim = nkv * hd;
        let q_dim = nh * hd;
        let shape = format!(
            "{label}: {nh}q/{nkv}kv heads x {hd}, seqs (first_pos, rows) {seqs:?}{}{}",
            window.map(|w| format!(", window {w}")).unwrap_or_default(),
            if masked { ", mask" } else { "" }
        );
        // Cache: 2 layers (attention on layer 1), block size 4, slots handed out permuted.
        let total: usize = seqs.iter().map(|&(p, n)| p as usize + n).sum();
        let block = 4usize;
        let n_blocks = total.div_ceil(block) + 3;
        let layout = KvLayout {
            n_layers: 2,
            n_blocks,
            block_size: block,
            kv_dim,
        };
        let mut perm: Vec<u32> = (0..(n_blocks * block) as u32).collect();
        for i in (1..perm.len()).rev() {
            let j = self.rng.below(i + 1);
            perm.swap(i, j);
        }
        // Every position of every sequence gets a slot; store all K/V (history and new rows).
        let mut next = 0usize;
        let mut store = Batch::default();
        let mut seq_slots = Vec::new();
        for &(first_pos, n_rows) in seqs {
            let slots: Vec<u32> = (0..first_pos as usize + n_rows)
                .map(|_| {
                    let s = perm[next];
                    next += 1;
                    s
                })
                .collect();
            for (p, &s) in slots.iter().enumerate() {
                store.tokens.push(0);
                store.positions.push(p as u32);
                store.slots.push(s);
            }
            seq_slots.push(slots);
        }
        let kdata: Vec<f32> = (0..total * kv_dim).map(|_| self.rng.normal(1.0)).collect();
        let vdata: Vec<f32> = (0..total * kv_dim).map(|_| self.rng.normal(1.0)).collect();
        let n_q: usize = seqs.iter().map(|s| s.1).sum();
        let qdata: Vec<f32> = (0..n_q * q_dim).map(|_| self.rng.normal(1.0)).collect();
        let (Ok((bk, _)), Ok((bv, _)), Ok((bq, rq))) = (
            self.upload(total, kv_dim, &kdata),
            self.upload(total, kv_dim, &vdata),
            self.upload(n_q, q_dim, &qdata),
        ) else {
            return self.error(op, shape, "-", "inputs not uploaded".into(), false);
        };
        // What B's cache holds, per its declared arithmetic.
        let round = |v: &[f32]| -> Vec<f32> {
            if kv_f16 {
                v.iter()
                    .map(|&x| lockstep_quant::fp16_to_f32(lockstep_quant::f32_to_fp16(x)))
                    .collect()
            } else {
                v.to_vec()
            }
        };
        let (rk, rv) = (
            HostTensor::matrix(total, kv_dim, round(&kdata)),
            HostTensor::matrix(total, kv_dim, round(&vdata)),
        );
        let mut batch = Batch::default();
        let mut row = 0usize;
        for (&(first_pos, n_rows), slots) in seqs.iter().zip(&seq_slots) {
            let n_kv = slots.len();
            let mask = masked.then(|| {
                (0..n_rows * n_kv)
                    .map(|e| {
                        let (i, j) = (e / n_kv, e % n_kv);
                        // Keep each query's own key, so no row is empty.
                        j == first_pos as usize + i || self.rng.below(3) != 0
                    })
                    .collect::<Vec<bool>>()
            });
            batch.seqs.push(BatchSeq {
                first_row: row,
                n_rows,
                first_pos,
                kv_slots: slots.clone(),
                mask,
            });
            for i in 0..n_rows {
                batch.tokens.push(0);
                batch.positions.push(first_pos + i as u32);
                batch.slots.push(slots[first_pos as usize + i]);
            }
            row += n_rows;
        }
        let p = AttentionParams {
            n_heads: nh,
            n_kv_heads: nkv,
            head_dim: hd,
            scale: 1.0 / (hd as f32).sqrt(),
            window,
        };
        let run_b = || -> Result<(HostTensor, Recorder), BackendError> {
            let mut cache = self.b.alloc_kv(layout)?;
            self.b.kv_store(&mut cache, 1, &bk, &bv, &store)?;
            let mut rec = Recorder::new();
            let out = self
                .b
                .attention(&cache, 1, &bq, &batch, p, &mut Taps::new(&mut rec))?;
            Ok((self.b.to_host(&out), rec))
        };
        let run_r = || -> Result<(HostTensor, Recorder), BackendError> {
            let mut cache = self.r.alloc_kv(layout)?;
            self.r.kv_store(&mut cache, 1, &rk, &rv, &store)?;
            let mut rec = Recorder::new();
            let out = self
                .r
                .attention(&cache, 1, &rq, &batch, p, &mut Taps::new(&mut rec))?;
            Ok((out, rec))
        };
        let (got, brec) = match run_b() {
            Ok(x) => x,
            Err(e) => return self.error(op, shape, "-", e.to_string(), false),
        };
        let (exp, rrec) = match run_r() {
            Ok(x) => x,
            Err(e) => return self.error(op, shape, "-", format!("reference: {e}"), false),
        };
        // K/V read back: exactly the (f16-rounded) rows stored, per sequence in slot order.
        for tap in ["k_read", "v_read"] {
            let name = format!("blk.1.{tap}");
            if let (Some(g), Some(e)) = (brec.get(&name), rrec.get(&name)) {
                let src: Vec<f32> = if tap == "k_read" {
                    kdata.clone()
                } else {
                    vdata.clone()
                };
                let bound = if kv_f16 {
                    kv_f16_bound(&src)
                } else {
                    rounding_bound(self.arith)
                };
                let g = g.clone();
                self.record("kv_store", format!("{shape}: {tap}"), "-", e, &g, bound);
            }
        }
        // Output, with the bound summed over sequences.
        let (mut num, mut score_num) = (0f64, 0f64);
        let mut p_err_sq = 0f64;
        let (rkq, rp) = (rrec.get("blk.1.kq"), rrec.get("blk.1.kq_softmax"));
        let (Some(rkq), Some(rp)) = (rkq, rp) else {
            return self.error(
                op,
                shape,
                "-",
                "the reference emitted no scores".into(),
                false,
            );
        };
        let (mut so, mut qo) = (0usize, 0usize);
        for (seq, slots) in batch.seqs.iter().zip(&seq_slots) {
            let n_kv = slots.len();
            let ks: Vec<f32> = slots
                .iter()
                .flat_map(|&s| {
                    let i = store.slots.iter().position(|&x| x == s).unwrap_or(0);
                    rk.row(i).to_vec()
                })
                .collect();
            let vs: Vec<f32> = slots
                .iter()
                .flat_map(|&s| {
                    let i = store.slots.iter().position(|&x| x == s).unwrap_or(0);
                    rv.row(i).to_vec()
                })
                .collect();
            let g = AttnGeom {
                n_q: seq.n_rows,
                n_kv,
                n_heads: nh,
                n_kv_heads: nkv,
                head_dim: hd,
                scale: p.scale,
            };
            let n_sc = seq.n_rows * nh * n_kv;
            let visible = |i: usize, j: usize| -> bool {
                let pos = seq.first_pos + i as u32;
                let j32 = j as u32;
                j32 <= pos
                    && window.is_none_or(|w| pos - j32 < w)
                    && seq.mask.as_ref().is_none_or(|m| m[i * n_kv + j])
            };
            let (s_err, o_err, p_eps) = attention_error_bounds(
                self.arith,
                &g,
                &rq.data[qo * q_dim..(qo + seq.n_rows) * q_dim],
                &ks,
                &vs,
                &rkq.data[so..so + n_sc],
                &rp.data[so..so + n_sc],
                &visible,
            );
            score_num += s_err;
            for (r, e) in p_eps.iter().enumerate() {
                for &pj in &rp.data[so + r * n_kv..so + (r + 1) * n_kv] {
                    p_err_sq += (e * f64::from(pj)).powi(2);
                }
            }
            num += o_err.iter().map(|e| e * e).sum::<f64>();
            so += n_sc;
            qo += seq.n_rows;
        }
        let den: f64 = exp.data.iter().map(|&v| f64::from(v) * f64::from(v)).sum();
        let bound = if den == 0.0 { 0.0 } else { num / den };
        if self.wants(op, "-") {
            self.record(op, shape.clone(), "-", &exp, &got, bound);
            if let Some(g) = brec.get("blk.1.kq") {
                let den: f64 = rkq
                    .data
                    .iter()
                    .filter(|v| v.is_finite())
                    .map(|&v| f64::from(v) * f64::from(v))
                    .sum();
                let b = if den == 0.0 { 0.0 } else { score_num / den };
                let g = g.clone();
                self.record(op, format!("{shape}: kq tap"), "-", rkq, &g, b);
            }
            if let Some(g) = brec.get("blk.1.kq_softmax") {
                let g = g.clone();
                let den: f64 = rp.data.iter().map(|&v| f64::from(v) * f64::from(v)).sum();
                let b2 = if den == 0.0 { 0.0 } else { p_err_sq / den };
                self.record(op, format!("{shape}: kq_softmax tap"), "-", rp, &g, b2);
            }
        }
    }
}

/// Runs every case on backend `b` (named `name`, declaring `arith`) against the reference.
/// `filter`: comma-separated globs over op names (`matmul`, `attention`, ...) or
/// `op.TYPE` (`matmul.Q4_K`); empty = everything.
pub fn check_ops<B: Backend>(b: &B, name: &str, arith: Arithmetic, filter: &str) -> OpsReport {
    let t0 = Instant::now();
    let mut h = Harness {
        b,
        r: RefBackend::new(),
        arith,
        name: name.to_string(),
        filter: TapFilter::parse(filter),
        cases: Vec::new(),
        rng: Rng(0x5eed_0b5e),
    };
    let types: Vec<GgmlType> = ALL_TYPES
        .iter()
        .copied()
        .filter(|t| t.is_supported() && *t != GgmlType::Q8K)
        .collect();
    for &ty in &types {
        h.embed_cases(ty);
    }
    for &ty in &types {
        let float = matches!(ty, GgmlType::F32 | GgmlType::F16 | GgmlType::Bf16);
        // Rows of whole blocks; float weights also take odd row lengths.
        let ks: &[usize] = if ty.block_size() == 256 {
            &[256, 768]
        } else {
            &[64, 96, 1024]
        };
        for &k in ks {
            for (n, m) in [(1usize, 2usize), (1, 67), (2, 33), (7, 16), (33, 9)] {
                h.matmul_case(ty, n, k, m);
            }
        }
        if float {
            for k in [67usize, 300] {
                h.matmul_case(ty, 3, k, 5);
            }
        }
        // A long row; and one long row alone (a decode step's mat-vec: the one-row kernels),
        // several passes of a warp over the row, the last one partial.
        h.matmul_case(ty, 2, 4096, 8);
        let long = if ty.block_size() == 256 { 4864 } else { 4192 };
        h.matmul_case(ty, 1, long, 8);
        // One row against many weight rows (the cuda backend runs two weight rows a warp from
        // 2048 rows of at most 32 units, from 4096 of more: the LM heads, Llama-1B's o, the
        // 8B's o and down), the last warp with one row.
        let (short, longer) = if ty.block_size() == 256 {
            (2048, 2304)
        } else {
            (640, 1088)
        };
        h.matmul_case(ty, 1, short, 2051);
        h.matmul_case(ty, 1, longer, 4097);
        for (n, act) in [(1usize, Activation::Silu), (5, Activation::GeluTanh)] {
            h.gate_up_case(
                ty,
                n,
                if ty.block_size() == 256 { 256 } else { 128 },
                40,
                act,
            );
        }
        // One row against many gate/up rows.
        h.gate_up_case(ty, 1, short, 2051, Activation::Silu);
    }
    for tys in [
        [GgmlType::Q4_0; 3],
        [GgmlType::Q4_1; 3],
        [GgmlType::Q8_0; 3],
        [GgmlType::Q4K; 3],
        [GgmlType::Q4K, GgmlType::Q4K, GgmlType::Q6K],
        [GgmlType::Q5K, GgmlType::Q5K, GgmlType::Q6K],
        [GgmlType::Q5_0, GgmlType::Q5_0, GgmlType::Q8_0],
        [GgmlType::Q6K, GgmlType::Q5K, GgmlType::Q6K],
        [GgmlType::F32; 3],
    ] {
        for n in [1usize, 3] {
            h.qkv_case(tys, n, 256, [96, 32, 32]);
        }
        // One row against 2048 q rows (cuda: two rows a warp; an odd v, its last warp one row;
        // v of another type in the same launch, plan::qkv_mixed_one_launch).
        h.qkv_case(tys, 1, 256, [2048, 512, 513]);
    }
    // The norm inside its consumer (cuda: one row, up to 1024 values in the fused blocks, up to
    // 4096 in the long kernels): SmolLM2's row, v of
    // another type (Q4_K_M; cuda: the two-type kernels of plan::MIXED_QKV, Gemma-3's Q5_0 / Q8_0
    // with its post norm, Q5_K_M's), the longest fused row with a post norm, Gemma-3's feed-forward
    // (after two norms: cuda's 8-row blocks and the separate quantizer), SmolLM2's (one wave
    // of 32-row blocks: the activation quantized in the same launch), a feed-forward too large
    // for that, a K-quant one; then Llama's rows (cuda: the long kernels, a block an SM), among
    // them more rows than the grid has warps (each warp then takes several, grid-stride), a row
    // of 3072 after a post norm (its norm three values a thread), and three rows (the separate
    // ops on cuda).
    let q41 = GgmlType::Q4_1;
    for (ty, v_ty, n, g, m, post) in [
        (q41, Some(q41), 1usize, 576usize, 64usize, false),
        (GgmlType::Q4K, Some(GgmlType::Q6K), 1, 1024, 128, false),
        (GgmlType::Q5_0, Some(GgmlType::Q8_0), 1, 640, 1024, true),
        (GgmlType::Q5K, Some(GgmlType::Q6K), 1, 512, 64, false),
        (GgmlType::Q8_0, Some(GgmlType::Q8_0), 1, 1024, 64, true),
        (GgmlType::Q5_0, None, 1, 640, 2048, true),
        (GgmlType::Q4_1, None, 1, 576, 1536, false),
        (GgmlType::Q8_0, None, 1, 256, 4352, false),
        (GgmlType::Q6K, None, 1, 768, 64, false),
        (GgmlType::Q4K, Some(GgmlType::Q6K), 1, 4096, 64, false),
        (GgmlType::Q4K, None, 1, 2048, 64, false),
        (GgmlType::Q4K, Some(GgmlType::Q6K), 1, 4096, 4096, false),
        (GgmlType::Q4K, None, 1, 2048, 8448, false),
        (GgmlType::Q8_0, Some(GgmlType::Q8_0), 1, 3072, 256, true),
        (GgmlType::Q4_0, Some(GgmlType::Q4_0), 3, 256, 64, false),
    ] {
        h.norm_then_case(ty, v_ty, n, g, m, post);
    }
    // Layer 0's input (cuda: one launch, rows up to 1024 in the fused blocks, up to 4096 in the
    // long kernels): Gemma-3's scaled row with v of another type, SmolLM2's unscaled row, a
    // K-quant one; Llama's rows (a pair, then a scaled row of one type); then a row too long
    // for either (the separate ops).
    for (ty, v_ty, g, m, scale) in [
        (
            GgmlType::Q5_0,
            GgmlType::Q8_0,
            640usize,
            1024usize,
            Some(25.3f32),
        ),
        (q41, q41, 576, 576, None),
        (GgmlType::Q4K, GgmlType::Q6K, 1024, 256, Some(0.5)),
        (GgmlType::Q8_0, GgmlType::Q8_0, 256, 128, Some(3.0)),
        (GgmlType::Q4K, GgmlType::Q6K, 2048, 256, None),
        (GgmlType::Q4K, GgmlType::Q4K, 4096, 64, Some(2.0)),
        (GgmlType::Q4K, GgmlType::Q4K, 8192, 32, None),
    ] {
        h.scale_norm_then_case(ty, v_ty, g, m, scale);
    }
    h.elementwise_cases();
    h.rope_cases();
    h.rope_store_cases();
    {
        let kv_f16 = kv_cache_f16(arith, name);
        let cases: [AttnCase<'static>; 6] = [
            AttnCase {
                label: "MHA prefill",
                n_heads: 4,
                n_kv_heads: 4,
                head_dim: 64,
                window: None,
                seqs: &[(0, 7)],
                masked: false,
            },
            AttnCase {
                label: "GQA decode, 3 seqs",
                n_heads: 8,
                n_kv_heads: 2,
                head_dim: 64,
                window: None,
                seqs: &[(5, 1), (0, 1), (12, 1)],
                masked: false,
            },
            AttnCase {
                label: "MQA mixed batch",
                n_heads: 6,
                n_kv_heads: 1,
                head_dim: 32,
                window: None,
                seqs: &[(3, 4), (9, 1)],
                masked: false,
            },
            AttnCase {
                label: "GQA sliding window",
                n_heads: 4,
                n_kv_heads: 2,
                head_dim: 64,
                window: Some(5),
                seqs: &[(6, 6), (2, 1)],
                masked: false,
            },
            AttnCase {
                label: "GQA mask",
                n_heads: 4,
                n_kv_heads: 2,
                head_dim: 64,
                window: None,
                seqs: &[(4, 5), (0, 3)],
                masked: true,
            },
            AttnCase {
                label: "long context",
                n_heads: 2,
                n_kv_heads: 1,
                head_dim: 256,
                window: Some(64),
                seqs: &[(150, 2)],
                masked: true,
            },
        ];
        for c in cases {
            h.attention_case(c, kv_f16);
        }
    }
    // Prefill-sized steps (cuda: the tensor-core path), last, so the cases above keep the
    // random data they always had.
    for &ty in &types {
        let k = if ty.block_size() == 256 { 256 } else { 1024 };
        h.matmul_case(ty, 80, k, 24);
    }
    // Decode steps over long contexts (cuda: the split-key attention, keys cut into spans):
    // Gemma-3's and Llama's head layouts, a window, a mask, several sequences. Last too.
    {
        let kv_f16 = kv_cache_f16(arith, name);
        let cases: [AttnCase<'static>; 3] = [
            AttnCase {
                label: "MQA long decode",
                n_heads: 4,
                n_kv_heads: 1,
                head_dim: 256,
                window: None,
                seqs: &[(700, 1)],
                masked: false,
            },
            AttnCase {
                label: "GQA decode, 2 seqs, window",
                n_heads: 8,
                n_kv_heads: 2,
                head_dim: 128,
                window: Some(300),
                seqs: &[(420, 1), (37, 1)],
                masked: false,
            },
            AttnCase {
                label: "GQA decode, 3 seqs, mask",
                n_heads: 9,
                n_kv_heads: 3,
                head_dim: 64,
                window: None,
                seqs: &[(250, 1), (3, 1), (64, 1)],
                masked: true,
            },
        ];
        for c in cases {
            h.attention_case(c, kv_f16);
        }
    }
    // Logits reduced to their largest entries (cuda: on the device). Last too.
    // With whole-row picks too (cuda: on the device): vocabularies of one to four levels of
    // the sum tree, one token, and lengths that leave partial segments; top-p nuclei within
    // and past the k largest.
    for (rows, vocab, k, kind, pick) in [
        (1usize, 49152usize, 1usize, TopRows::Spread, false),
        (1, 49152, 40, TopRows::Spread, false),
        (3, 262144, 64, TopRows::Spread, false),
        (2, 32000, 7, TopRows::Ties, false),
        (2, 1000, 64, TopRows::Ties, false),
        (1, 100, 64, TopRows::Spread, false),
        (2, 5000, 3, TopRows::Flat, false),
        (3, 20000, 40, TopRows::NonFinite, false),
        (4, 49152, 64, TopRows::Spread, true),
        (8, 262144, 64, TopRows::Spread, true),
        (4, 151936, 5, TopRows::Ties, true),
        (4, 1000, 64, TopRows::Peaked, true),
        (8, 49152, 64, TopRows::Peaked, true),
        (3, 33, 1, TopRows::Spread, true),
        (3, 1, 1, TopRows::Spread, true),
        (3, 5000, 1, TopRows::Flat, true),
        (3, 20000, 64, TopRows::NonFinite, true),
    ] {
        h.logits_top_case(rows, vocab, k, kind, pick);
    }
    // The feed-forward pair as the model runs it: the down projection right after the fused
    // gate/up, on whatever quantization of the activation that left (cuda: its own, made in
    // the same launch, for up to 8 rows and whole 32-row groups). Last too.
    for ty in [
        GgmlType::Q4_0,
        GgmlType::Q4_1,
        GgmlType::Q8_0,
        GgmlType::Q4K,
        GgmlType::Q6K,
    ] {
        let k = 256;
        for (n, m) in [(1usize, 512usize), (3, 96), (8, 256), (9, 64), (2, 40)] {
            h.ffn_case(ty, n, k, m);
        }
    }
    // Prefills over contexts of several 64-key chunks (cuda: the flash attention, whose running
    // max and sum are rescaled from chunk to chunk): Llama-8B's and SmolLM2's head layouts, two
    // sequences sharing a tile, a window, a mask. Last too.
    {
        let kv_f16 = kv_cache_f16(arith, name);
        let cases: [AttnCase<'static>; 3] = [
            AttnCase {
                label: "GQA long prefill",
                n_heads: 8,
                n_kv_heads: 2,
                head_dim: 128,
                window: None,
                seqs: &[(90, 70)],
                masked: false,
            },
            AttnCase {
                label: "GQA long prefill, 2 seqs, mask",
                n_heads: 9,
                n_kv_heads: 3,
                head_dim: 64,
                window: None,
                seqs: &[(0, 140), (30, 5)],
                masked: true,
            },
            AttnCase {
                label: "GQA long prefill, window",
                n_heads: 4,
                n_kv_heads: 1,
                head_dim: 64,
                window: Some(80),
                seqs: &[(100, 50)],
                masked: false,
            },
        ];
        for c in cases {
            h.attention_case(c, kv_f16);
        }
    }
    // Decode steps over short contexts, up to the longest short one (127 keys; cuda: the short
    // decode attention, one block per row and KV head): Llama-8B's head layout with a window and
    // a mask over three sequences, a group of 8 query heads, Gemma-3's layout, and Gemma-3's
    // layout over 34 sequences (a server's batched decode step: cuda's one-head blocks, 136 of
    // them, more than an H100 or H200 has SMs, with every context length up to 127). Last too.
    {
        let kv_f16 = kv_cache_f16(arith, name);
        const MANY: [(u32, usize); 34] = {
            let mut s = [(0u32, 1usize); 34];
            let mut i = 0;
            while i < 34 {
                s[i].0 = (i as u32 * 37) % 127;
                i += 1;
            }
            s
        };
        let cases: [AttnCase<'static>; 4] = [
            AttnCase {
                label: "GQA short decode, 3 seqs, window, mask",
                n_heads: 32,
                n_kv_heads: 8,
                head_dim: 128,
                window: Some(50),
                seqs: &[(126, 1), (40, 1), (0, 1)],
                masked: true,
            },
            AttnCase {
                label: "GQA short decode, group of 8",
                n_heads: 16,
                n_kv_heads: 2,
                head_dim: 64,
                window: None,
                seqs: &[(90, 1), (5, 1)],
                masked: false,
            },
            AttnCase {
                label: "MQA short decode, window",
                n_heads: 4,
                n_kv_heads: 1,
                head_dim: 256,
                window: Some(64),
                seqs: &[(100, 1), (20, 1)],
                masked: false,
            },
            AttnCase {
                label: "MQA short decode, 34 seqs",
                n_heads: 4,
                n_kv_heads: 1,
                head_dim: 256,
                window: None,
                seqs: &MANY,
                masked: false,
            },
        ];
        for c in cases {
            h.attention_case(c, kv_f16);
        }
    }
    // rope_store and attention in one op (cuda: one kernel for short decode steps). Last too.
    h.rope_attention_cases();
    OpsReport {
        backend: name.to_string(),
        arithmetic: arith,
        cases: h.cases,
        seconds: t0.elapsed().as_secs_f64(),
    }
}
