//! Invariances every backend must hold, checked on the logits of every position: one prefill
//! vs prefix + incremental decode, a batch of sequences vs each alone, an explicit all-true
//! mask vs none, other KV block sizes, fragmented (scrambled) block tables.

use lockstep_engine::{EngineConfig, Logits, SeqId, SeqInput};
use lockstep_graph::taps::Recorder;
use lockstep_graph::{HostTensor, Taps};
use serde::Serialize;

use crate::metrics::{compare, Metrics};
use crate::run::AnyEngine;
use crate::VerifyError;

#[derive(Clone, Debug, Serialize)]
pub struct CheckResult {
    pub name: String,
    pub detail: String,
    /// Worst over prompts and positions (NMSE and max|d| of the logits).
    pub metrics: Metrics,
    pub pass: bool,
}

/// Opens a fresh engine with the given configuration.
pub type EngineFactory<'a> =
    dyn FnMut(EngineConfig) -> Result<Box<dyn AnyEngine>, VerifyError> + 'a;

fn all_logits(
    e: &mut dyn AnyEngine,
    tokens: &[u32],
    mask: bool,
) -> Result<HostTensor, VerifyError> {
    let s = e.new_sequence();
    let r = e.forward(
        &[SeqInput {
            seq: s,
            tokens,
            logits: Logits::All,
            mask: mask.then(|| vec![true; tokens.len() * tokens.len()]),
        }],
        &mut Taps::none(),
    );
    e.free_sequence(s);
    let mut out = r?;
    out.pop()
        .ok_or_else(|| VerifyError::Input("no logits returned".into()))
}

/// Worst of two metrics (by NMSE, then max|d|).
fn worst(a: Metrics, b: Metrics) -> Metrics {
    let key = |m: &Metrics| (m.nmse, m.max_abs);
    if key(&b).0 > key(&a).0 || (key(&b).0 == key(&a).0 && key(&b).1 > key(&a).1) {
        Metrics {
            n: a.n + b.n,
            n_diff: a.n_diff + b.n_diff,
            ..b
        }
    } else {
        Metrics {
            n: a.n + b.n,
            n_diff: a.n_diff + b.n_diff,
            ..a
        }
    }
}

fn cmp(a: &HostTensor, b: &HostTensor) -> Metrics {
    if a.shape != b.shape {
        return Metrics::broken(a.data.len());
    }
    compare(&a.data, &b.data)
}

/// Runs every check. `tolerance` is the NMSE allowed (0 = bitwise equality, the default:
/// these are determinism properties, not numerics).
pub fn run_checks(
    open: &mut EngineFactory<'_>,
    base: EngineConfig,
    prompts: &[Vec<u32>],
    tolerance: f64,
) -> Result<Vec<CheckResult>, VerifyError> {
    if prompts.is_empty() || prompts.iter().any(|p| p.len() < 2) {
        return Err(VerifyError::Input(
            "checks need prompts of at least 2 tokens".into(),
        ));
    }
    let pass = |m: &Metrics| {
        if tolerance == 0.0 {
            m.bitwise_equal()
        } else {
            m.nmse.is_finite() && m.nmse <= tolerance
        }
    };
    let mut e = open(base.clone())?;
    let reference: Vec<HostTensor> = prompts
        .iter()
        .map(|p| all_logits(e.as_mut(), p, false))
        .collect::<Result<_, _>>()?;
    let mut results = Vec::new();

    // 1. Prefill vs prefix + incremental decode.
    let mut m = Metrics::default();
    for (p, r) in prompts.iter().zip(&reference) {
        let split = p.len() / 2;
        let s = e.new_sequence();
        let mut rows: Vec<f32> = Vec::new();
        let first = e.forward(
            &[SeqInput {
                seq: s,
                tokens: &p[..split.max(1)],
                logits: Logits::All,
                mask: None,
            }],
            &mut Taps::none(),
        );
        let res = (|| -> Result<(), VerifyError> {
            rows.extend(first?.pop().map(|t| t.data).unwrap_or_default());
            for t in &p[split.max(1)..] {
                let out = e.forward(
                    &[SeqInput {
                        seq: s,
                        tokens: std::slice::from_ref(t),
                        logits: Logits::Last,
                        mask: None,
                    }],
                    &mut Taps::none(),
                )?;
                rows.extend(out.into_iter().next().map(|t| t.data).unwrap_or_default());
            }
            Ok(())
        })();
        e.free_sequence(s);
        res?;
        m = worst(m, compare(&r.data, &rows));
    }
    results.push(CheckResult {
        name: "prefill vs incremental decode".into(),
        detail: "first half of each prompt as one prefill, the rest one token per step".into(),
        pass: pass(&m),
        metrics: m,
    });

    // 2. Batch vs alone.
    let seqs: Vec<u64> = prompts.iter().map(|_| e.new_sequence()).collect();
    let inputs: Vec<SeqInput<'_>> = prompts
        .iter()
        .zip(&seqs)
        .map(|(p, &seq)| SeqInput {
            seq,
            tokens: p,
            logits: Logits::All,
            mask: None,
        })
        .collect();
    let out = e.forward(&inputs, &mut Taps::none());
    for s in seqs {
        e.free_sequence(s);
    }
    let out = out?;
    let mut m = Metrics::default();
    for (o, r) in out.iter().zip(&reference) {
        m = worst(m, cmp(r, o));
    }
    results.push(CheckResult {
        name: "batch vs alone".into(),
        detail: format!("{} prompts in one forward vs each alone", prompts.len()),
        pass: pass(&m),
        metrics: m,
    });

    // 3. Explicit all-true mask vs none.
    let mut m = Metrics::default();
    for (p, r) in prompts.iter().zip(&reference) {
        m = worst(m, cmp(r, &all_logits(e.as_mut(), p, true)?));
    }
    results.push(CheckResult {
        name: "all-true mask vs no mask".into(),
        detail: "an explicit mask that allows everything must change nothing".into(),
        pass: pass(&m),
        metrics: m,
    });
    drop(e);

    // 4. Other block sizes; 5. fragmented block tables.
    let variants = [
        (
            "KV block size 1",
            EngineConfig {
                block_size: 1,
                ..base.clone()
            },
        ),
        (
            "KV block size 7",
            EngineConfig {
                block_size: 7,
                ..base.clone()
            },
        ),
        (
            "fragmented block tables",
            EngineConfig {
                block_size: 4,
                scramble_blocks: Some(0x5eed),
                ..base.clone()
            },
        ),
    ];
    for (name, cfg) in variants {
        let mut e = open(cfg.clone())?;
        // A short unrelated sequence first, so the tables of the checked prompts interleave
        // with another sequence's blocks.
        let other = e.new_sequence();
        let filler: Vec<u32> = prompts[0].iter().rev().copied().collect();
        e.forward(
            &[SeqInput {
                seq: other,
                tokens: &filler,
                logits: Logits::Last,
                mask: None,
            }],
            &mut Taps::none(),
        )?;
        let mut m = Metrics::default();
        for (p, r) in prompts.iter().zip(&reference) {
            m = worst(m, cmp(r, &all_logits(e.as_mut(), p, false)?));
        }
        e.free_sequence(other);
        results.push(CheckResult {
            name: name.into(),
            detail: format!(
                "block size {}{}, vs block size {}",
                cfg.block_size,
                if cfg.scramble_blocks.is_some() {
                    ", blocks handed out in scrambled order"
                } else {
                    ""
                },
                base.block_size
            ),
            pass: pass(&m),
            metrics: m,
        });
    }
    Ok(results)
}

// ---------------------------------------------------------------------------------------------
// Invariances on every tap: the first tap (in execution order) where a variant run of a prompt
// parts from the same prompt run alone, in one prefill, on a fresh default engine.

/// The batch sizes of the batch invariance, and the longest filler sequence run before each.
const BATCH_SIZES: [usize; 3] = [2, 8, 32];
const FILLER_MAX: usize = 9;

/// `base` with a cache that holds the largest batch the checks run (every sequence in whole
/// blocks, and the filler), whatever the prompts' lengths. A cache sized by the context alone
/// ran out on a long prompt, or on a byte-level vocabulary's (32 copies of a 90-token prompt
/// do not fit 2048 tokens).
fn with_room_for_batches(base: EngineConfig, prompts: &[Vec<u32>]) -> EngineConfig {
    let bs = base.block_size.max(1);
    let longest = prompts.iter().map(Vec::len).max().unwrap_or(0);
    let largest = BATCH_SIZES.iter().copied().max().unwrap_or(1);
    let need = bs * (FILLER_MAX.div_ceil(bs) + largest * longest.div_ceil(bs));
    EngineConfig {
        cache_tokens: base.cache_tokens.max(need),
        ..base
    }
}

/// The invariances `run_tap_checks` tests.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Invariance {
    /// One prefill vs the first half as a prefill and the rest one token per step.
    PrefillVsDecode,
    /// Batches of 2, 8 and 32 sequences (prompts in random placements, after a filler sequence
    /// that shifts every slot, blocks handed out in scrambled order) vs each prompt alone.
    BatchVsAlone,
    /// An explicit all-true mask vs none.
    MaskAllTrue,
    /// KV block sizes 1 and 7, and block size 4 with scrambled, interleaved tables, vs 16.
    KvBlocks,
    /// One thread vs the default count.
    Threads,
    /// Steps run without a tap observer (where a backend may replay recorded step graphs, and
    /// fused kernels keep no intermediates) vs the baseline run with every tap: the logits.
    Untapped,
    /// The same run twice on fresh engines.
    Repeat,
}

pub const ALL_INVARIANCES: &[Invariance] = &[
    Invariance::PrefillVsDecode,
    Invariance::BatchVsAlone,
    Invariance::MaskAllTrue,
    Invariance::KvBlocks,
    Invariance::Threads,
    Invariance::Repeat,
    Invariance::Untapped,
];

impl Invariance {
    pub fn name(self) -> &'static str {
        match self {
            Invariance::PrefillVsDecode => "prefill vs decode",
            Invariance::BatchVsAlone => "batch vs alone",
            Invariance::MaskAllTrue => "all-true mask vs none",
            Invariance::KvBlocks => "KV block sizes, fragmented tables",
            Invariance::Threads => "1 thread vs default",
            Invariance::Repeat => "repeated run",
            Invariance::Untapped => "untapped (replayed) steps vs tapped",
        }
    }
}

/// The invariances a backend declares to hold bit for bit on every tap. The reference holds
/// them by construction, the cpu and cuda backends by a fixed per-element reduction order
/// (ARCHITECTURE.md). A backend not listed declares none: its checks are measured against
/// `--tolerance`.
///
/// `cuda` without `--deterministic` multiplies steps of more than 64 rows on the tensor cores,
/// whose results depend on the batch's shape: it declares neither prefill vs decode nor batch
/// vs alone (`cuda-det`, its deterministic mode, declares everything).
pub fn bitwise_invariances(backend: &str) -> &'static [Invariance] {
    match backend.split('[').next().unwrap_or(backend) {
        "ref" | "cpu" | "cuda-det" | "cuda-exact" => ALL_INVARIANCES,
        "cuda" => &[
            Invariance::MaskAllTrue,
            Invariance::KvBlocks,
            Invariance::Threads,
            Invariance::Repeat,
            Invariance::Untapped,
        ],
        _ => &[],
    }
}

/// How a fresh engine is asked for: a configuration and, optionally, a thread count.
#[derive(Clone, Debug)]
pub struct EngineVariant {
    pub config: EngineConfig,
    pub threads: Option<usize>,
}

/// Opens a fresh engine for a variant (`Send`, so the thread check can run it inside a
/// one-thread pool).
pub type VariantFactory<'a> =
    dyn FnMut(&EngineVariant) -> Result<Box<dyn AnyEngine + Send>, VerifyError> + 'a;

/// Where an invariance first breaks.
#[derive(Clone, Debug, Serialize)]
pub struct TapBreak {
    pub tap: String,
    /// Index of the prompt and the position within it.
    pub prompt: usize,
    pub position: u32,
    pub metrics: Metrics,
    /// Which run of the invariance (`batch of 8`, `block size 7`).
    pub variant: String,
}

#[derive(Clone, Debug, Serialize)]
pub struct TapCheckResult {
    pub invariance: Invariance,
    pub name: String,
    pub detail: String,
    /// Taps compared (tap x position x prompt x variant).
    pub compared: usize,
    /// Whether this backend declares the invariance bitwise (then only bitwise passes).
    pub bitwise: bool,
    /// Worst over every compared tap.
    pub worst: Metrics,
    pub first_break: Option<TapBreak>,
    pub pass: bool,
}

/// One step of one sequence: its taps cut to its own rows, by position.
type PosTaps = Vec<(String, Vec<f32>)>;

/// Per (prompt, position): every tap value of that position, in execution order.
#[derive(Default)]
struct TapBook {
    rows: std::collections::BTreeMap<(usize, u32), PosTaps>,
}

struct SeqGeom {
    prompt: usize,
    first_row: usize,
    n_rows: usize,
    first_pos: u32,
}

/// Cuts every tap of one forward step into per-(sequence, position) pieces. Row-wise taps give
/// their row; `k_read`/`v_read` the key rows `0..=pos`; `kq`/`kq_softmax` the row's scores over
/// keys `0..=pos` for every head. Every sequence must have asked for all its logits.
fn cut_step(rec: &Recorder, seqs: &[SeqGeom], book: &mut TapBook) {
    let n_kv = |s: &SeqGeom| s.first_pos as usize + s.n_rows;
    let sum_qkv: usize = seqs.iter().map(|s| s.n_rows * n_kv(s)).sum();
    for (name, t) in &rec.taps {
        let op = crate::taps::parse_tap(name).op;
        let mut kv_off = 0usize;
        let mut sc_off = 0usize;
        for s in seqs {
            let nk = n_kv(s);
            for i in 0..s.n_rows {
                let pos = s.first_pos + i as u32;
                let visible = pos as usize + 1;
                let piece: Vec<f32> = match op {
                    "k_read" | "v_read" => {
                        let w = t.cols();
                        t.data[kv_off * w..(kv_off + visible) * w].to_vec()
                    }
                    "kq" | "kq_softmax" => {
                        let heads = t.data.len() / sum_qkv.max(1);
                        let base = sc_off + i * heads * nk;
                        (0..heads)
                            .flat_map(|h| {
                                t.data[base + h * nk..base + h * nk + visible]
                                    .iter()
                                    .copied()
                            })
                            .collect()
                    }
                    _ => t.row(s.first_row + i).to_vec(),
                };
                book.rows
                    .entry((s.prompt, pos))
                    .or_default()
                    .push((name.clone(), piece));
            }
            kv_off += nk;
            sc_off += s.n_rows * t.data.len().checked_div(sum_qkv).unwrap_or(0) * nk;
        }
    }
}

/// One forward step of several sequences with all taps, cut into the book.
fn step_into(
    e: &mut dyn AnyEngine,
    inputs: &[(SeqId, usize, &[u32], bool)],
    book: &mut TapBook,
) -> Result<(), VerifyError> {
    let mut geoms = Vec::with_capacity(inputs.len());
    let mut row = 0usize;
    let mut seq_inputs = Vec::with_capacity(inputs.len());
    for &(seq, prompt, tokens, mask) in inputs {
        let first_pos = e.seq_len(seq)? as u32;
        let n_kv = first_pos as usize + tokens.len();
        geoms.push(SeqGeom {
            prompt,
            first_row: row,
            n_rows: tokens.len(),
            first_pos,
        });
        row += tokens.len();
        seq_inputs.push(SeqInput {
            seq,
            tokens,
            logits: Logits::All,
            mask: mask.then(|| vec![true; tokens.len() * n_kv]),
        });
    }
    let mut rec = Recorder::new();
    e.forward(&seq_inputs, &mut Taps::new(&mut rec))?;
    cut_step(&rec, &geoms, book);
    Ok(())
}

/// Every prompt alone, one prefill each, on `e`.
fn alone(e: &mut dyn AnyEngine, prompts: &[Vec<u32>], mask: bool) -> Result<TapBook, VerifyError> {
    let mut book = TapBook::default();
    for (i, p) in prompts.iter().enumerate() {
        let s = e.new_sequence();
        let r = step_into(e, &[(s, i, p, mask)], &mut book);
        e.free_sequence(s);
        r?;
    }
    Ok(book)
}

/// Every prompt as a prefill of its first half and then one token per step, with no tap
/// observer: only the logits, booked as `result_output`.
fn untapped(e: &mut dyn AnyEngine, prompts: &[Vec<u32>]) -> Result<TapBook, VerifyError> {
    let mut book = TapBook::default();
    for (i, p) in prompts.iter().enumerate() {
        let s = e.new_sequence();
        let split = (p.len() / 2).max(1);
        let r = (|| -> Result<(), VerifyError> {
            let first = e.forward(
                &[SeqInput {
                    seq: s,
                    tokens: &p[..split],
                    logits: Logits::All,
                    mask: None,
                }],
                &mut Taps::none(),
            )?;
            let t = first
                .into_iter()
                .next()
                .ok_or_else(|| VerifyError::Input("no logits returned".into()))?;
            for pos in 0..split {
                book.rows
                    .entry((i, pos as u32))
                    .or_default()
                    .push(("result_output".into(), t.row(pos).to_vec()));
            }
            for pos in split..p.len() {
                let out = e.forward(
                    &[SeqInput {
                        seq: s,
                        tokens: &p[pos..pos + 1],
                        logits: Logits::Last,
                        mask: None,
                    }],
                    &mut Taps::none(),
                )?;
                let t = out
                    .into_iter()
                    .next()
                    .ok_or_else(|| VerifyError::Input("no logits returned".into()))?;
                book.rows
                    .entry((i, pos as u32))
                    .or_default()
                    .push(("result_output".into(), t.row(0).to_vec()));
            }
            Ok(())
        })();
        e.free_sequence(s);
        r?;
    }
    Ok(book)
}

/// Compares a variant's book with the baseline: the first differing tap in execution order
/// (then the earliest position), the worst metrics, and how many were compared.
fn compare_books(
    base: &TapBook,
    var: &TapBook,
    pass: &dyn Fn(&Metrics) -> bool,
    variant: &str,
) -> (usize, Metrics, Option<TapBreak>) {
    let mut n = 0usize;
    let mut worst_m = Metrics::default();
    let mut first: Option<TapBreak> = None;
    for (key, taps) in &var.rows {
        let Some(btaps) = base.rows.get(key) else {
            continue;
        };
        for (idx, (name, v)) in taps.iter().enumerate() {
            // Same execution order on both sides: try the same index first.
            let b = match btaps.get(idx) {
                Some((bn, b)) if bn == name => b,
                _ => match btaps.iter().find(|(bn, _)| bn == name) {
                    Some((_, b)) => b,
                    None => continue,
                },
            };
            let m = if b.len() == v.len() {
                compare(b, v)
            } else {
                Metrics::broken(b.len())
            };
            n += 1;
            worst_m = worst(worst_m, m);
            if !pass(&m) {
                let earlier = match &first {
                    None => true,
                    Some(f) => {
                        let (a, c) = (crate::taps::order_key(name), crate::taps::order_key(&f.tap));
                        a < c || (a == c && key.1 < f.position)
                    }
                };
                if earlier {
                    first = Some(TapBreak {
                        tap: name.clone(),
                        prompt: key.0,
                        position: key.1,
                        metrics: m,
                        variant: variant.to_string(),
                    });
                }
            }
        }
    }
    (n, worst_m, first)
}

/// Every prompt as its first half in one prefill, then one token per step, tapped.
fn halves_tapped(e: &mut dyn AnyEngine, prompts: &[Vec<u32>]) -> Result<TapBook, VerifyError> {
    let mut book = TapBook::default();
    for (i, p) in prompts.iter().enumerate() {
        let s = e.new_sequence();
        let split = (p.len() / 2).max(1);
        let mut r = step_into(e, &[(s, i, &p[..split], false)], &mut book);
        for t in split..p.len() {
            if r.is_ok() {
                r = step_into(e, &[(s, i, &p[t..t + 1], false)], &mut book);
            }
        }
        e.free_sequence(s);
        r?;
    }
    Ok(book)
}

/// A small deterministic generator for placements.
fn next_rand(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Runs every invariance on every tap. `backend` names the backend (its declaration decides
/// bitwise or `tolerance`); `seed` picks placements and block scrambles.
pub fn run_tap_checks(
    open: &mut VariantFactory<'_>,
    backend: &str,
    base: EngineConfig,
    prompts: &[Vec<u32>],
    tolerance: f64,
    seed: u64,
) -> Result<Vec<TapCheckResult>, VerifyError> {
    if prompts.is_empty() || prompts.iter().any(|p| p.len() < 2) {
        return Err(VerifyError::Input(
            "checks need prompts of at least 2 tokens".into(),
        ));
    }
    let base = with_room_for_batches(base, prompts);
    let declared = bitwise_invariances(backend);
    let default = EngineVariant {
        config: base.clone(),
        threads: None,
    };
    // One engine of the default configuration serves the baseline and the variants that need
    // no other configuration (the repeated run then also reuses freed, dirty cache blocks).
    let mut def = open(&default)?;
    let baseline = alone(def.as_mut(), prompts, false)?;
    let mut rng = seed;
    // Batches of every size on one engine whose blocks are handed out scrambled.
    let mut batch_engine = open(&EngineVariant {
        config: EngineConfig {
            scramble_blocks: Some(next_rand(&mut rng)),
            ..base.clone()
        },
        threads: None,
    })?;
    let mut results = Vec::new();
    // The prefill-vs-decode run, kept for the untapped invariance's baseline (the same steps
    // run tapped) instead of running it twice.
    let mut halves: Option<TapBook> = None;
    for &inv in ALL_INVARIANCES {
        let bitwise = declared.contains(&inv);
        let pass_fn = |m: &Metrics| {
            if bitwise || tolerance == 0.0 {
                m.bitwise_equal()
            } else {
                m.nmse.is_finite() && m.nmse <= tolerance
            }
        };
        let mut runs: Vec<(String, TapBook)> = Vec::new();
        // The book the runs are compared with, when not the one-prefill baseline.
        let mut own_base: Option<TapBook> = None;
        let detail: String;
        match inv {
            Invariance::PrefillVsDecode => {
                let book = halves_tapped(def.as_mut(), prompts)?;
                runs.push(("first half prefilled, then one token per step".into(), book));
                detail = "every prompt: half as one prefill, the rest one token per step".into();
            }
            Invariance::BatchVsAlone => {
                for size in BATCH_SIZES {
                    let e = &mut batch_engine;
                    // A filler sequence of random length first: every slot of the batch moves.
                    let filler = e.new_sequence();
                    let flen = 1 + (next_rand(&mut rng) % FILLER_MAX as u64) as usize;
                    let ftoks: Vec<u32> = prompts[0].iter().cycle().take(flen).copied().collect();
                    let mut book = TapBook::default();
                    let mut dummy = TapBook::default();
                    step_into(
                        e.as_mut(),
                        &[(filler, usize::MAX, &ftoks, false)],
                        &mut dummy,
                    )?;
                    // Placements: which prompt sits at each batch position (every prompt at
                    // least once when the batch is large enough), in random order.
                    let mut order: Vec<usize> = (0..size).map(|j| j % prompts.len()).collect();
                    for j in (1..order.len()).rev() {
                        let k = (next_rand(&mut rng) % (j as u64 + 1)) as usize;
                        order.swap(j, k);
                    }
                    let seqs: Vec<SeqId> = order.iter().map(|_| e.new_sequence()).collect();
                    // Each prompt's copies are compared with its alone run; the book keys a
                    // copy by (prompt, position), so copies are compared one batch slot at a
                    // time: slot j writes under prompt index j, mapped back below.
                    let inputs: Vec<(SeqId, usize, &[u32], bool)> = order
                        .iter()
                        .zip(&seqs)
                        .enumerate()
                        .map(|(j, (&pi, &s))| (s, j, prompts[pi].as_slice(), false))
                        .collect();
                    let r = step_into(e.as_mut(), &inputs, &mut book);
                    for s in seqs {
                        e.free_sequence(s);
                    }
                    e.free_sequence(filler);
                    r?;
                    // Re-key slot j's rows to its prompt, one book per slot.
                    for (j, &pi) in order.iter().enumerate() {
                        let mut one = TapBook::default();
                        for ((slot, pos), taps) in &book.rows {
                            if *slot == j {
                                one.rows.insert((pi, *pos), taps.clone());
                            }
                        }
                        runs.push((format!("batch of {size}, slot {j}"), one));
                    }
                }
                detail = "batches of 2, 8 and 32 (random placements, shifted and scrambled slots) vs alone".into();
            }
            Invariance::MaskAllTrue => {
                runs.push((
                    "explicit all-true mask".into(),
                    alone(def.as_mut(), prompts, true)?,
                ));
                detail = "an explicit mask that allows everything must change nothing".into();
            }
            Invariance::KvBlocks => {
                for (label, cfg) in [
                    (
                        "block size 1",
                        EngineConfig {
                            block_size: 1,
                            ..base.clone()
                        },
                    ),
                    (
                        "block size 7",
                        EngineConfig {
                            block_size: 7,
                            ..base.clone()
                        },
                    ),
                    (
                        "block size 4, scrambled, interleaved",
                        EngineConfig {
                            block_size: 4,
                            scramble_blocks: Some(next_rand(&mut rng)),
                            ..base.clone()
                        },
                    ),
                ] {
                    let mut e = open(&EngineVariant {
                        config: cfg,
                        threads: None,
                    })?;
                    let other = e.new_sequence();
                    let filler: Vec<u32> = prompts[0].iter().rev().copied().collect();
                    let mut dummy = TapBook::default();
                    step_into(
                        e.as_mut(),
                        &[(other, usize::MAX, &filler, false)],
                        &mut dummy,
                    )?;
                    let book = alone(e.as_mut(), prompts, false)?;
                    e.free_sequence(other);
                    runs.push((label.into(), book));
                }
                detail = format!("block sizes 1, 7 and 4 (scrambled, with another sequence's blocks between) vs {}", base.block_size);
            }
            Invariance::Threads => {
                let v = EngineVariant {
                    config: base.clone(),
                    threads: Some(1),
                };
                let mut e = open(&v)?;
                // A backend on rayon (the reference) takes its thread count from the pool it
                // runs in; one with its own pool gets `threads` from the factory.
                let pool = rayon::ThreadPoolBuilder::new()
                    .num_threads(1)
                    .build()
                    .map_err(|err| VerifyError::Input(format!("thread pool: {err}")))?;
                let engine: &mut (dyn AnyEngine + Send) = e.as_mut();
                let book = pool.install(|| alone(engine, prompts, false))?;
                runs.push(("1 thread".into(), book));
                detail = "one thread vs the default".into();
            }
            Invariance::Untapped => {
                // Against the same steps run tapped (eagerly): a decode step may compute
                // otherwise than a prefill (cuda's split-key attention), which is the prefill
                // vs decode invariance, not this one.
                own_base = Some(match halves.take() {
                    Some(book) => book,
                    None => halves_tapped(def.as_mut(), prompts)?,
                });
                // Twice: the first pass records and captures each step shape, the second
                // replays them all.
                for pass in ["first pass", "second pass"] {
                    runs.push((
                        format!("no observer, {pass}"),
                        untapped(def.as_mut(), prompts)?,
                    ));
                }
                detail = "half of each prompt as one prefill, the rest one token per step, without taps (logits), vs the same steps tapped".into();
            }
            Invariance::Repeat => {
                runs.push(("second run".into(), alone(def.as_mut(), prompts, false)?));
                detail = "the same prompts again (cache blocks reused after being freed)".into();
            }
        }
        let mut compared = 0usize;
        let mut worst_m = Metrics::default();
        let mut first: Option<TapBreak> = None;
        for (label, book) in &runs {
            let (n, w, f) = compare_books(
                own_base.as_ref().unwrap_or(&baseline),
                book,
                &pass_fn,
                label,
            );
            compared += n;
            worst_m = worst(worst_m, w);
            if let Some(f) = f {
                let earlier = first.as_ref().is_none_or(|g| {
                    crate::taps::order_key(&f.tap) < crate::taps::order_key(&g.tap)
                });
                if earlier {
                    first = Some(f);
                }
            }
        }
        results.push(TapCheckResult {
            invariance: inv,
            name: inv.name().into(),
            detail,
            compared,
            bitwise,
            worst: worst_m,
            pass: first.is_none() && compared > 0,
            first_break: first,
        });
        if inv == Invariance::PrefillVsDecode {
            halves = runs.pop().map(|(_, book)| book);
        }
    }
    Ok(results)
}
