//! Invariances every backend must hold, checked on the logits of every position: one prefill
//! vs prefix + incremental decode, a batch of sequences vs each alone, an explicit all-true
//! mask vs none, other KV block sizes, fragmented (scrambled) block tables.

use lockstep_engine::{EngineConfig, Logits, SeqInput};
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
