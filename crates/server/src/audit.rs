//! `--audit RATE`: a sampled fraction of requests is replayed in the background on the
//! reference backend (the definition of truth), teacher-forced with the tokens that were
//! served, and the logits each served token was drawn from are compared with the reference's:
//! KL(reference || served) and whether the argmax agrees. The result is a metric, so a
//! deployment learns that a kernel went wrong before its users do.

use std::path::PathBuf;
use std::sync::mpsc::Receiver;
use std::sync::Arc;

use lockstep_backend_ref::RefBackend;
use lockstep_engine::{Engine, EngineConfig, Logits, SeqInput};
use lockstep_gguf::GgufFile;
use lockstep_graph::Taps;
use lockstep_models::Model;

use crate::metrics::Metrics;

/// One served request to replay.
#[derive(Clone, Debug)]
pub struct AuditJob {
    pub prompt: Vec<u32>,
    pub generated: Vec<u32>,
    /// Row `i`: the raw logits generated token `i` was sampled from.
    pub served_logits: Vec<Vec<f32>>,
}

/// What one replay found.
#[derive(Clone, Debug, PartialEq)]
pub struct AuditResult {
    pub kl: Vec<f64>,
    pub top1_mismatches: usize,
}

/// KL(p || q) of the softmaxes of two logit rows, in f64.
pub fn kl_divergence(p_logits: &[f32], q_logits: &[f32]) -> f64 {
    let log_softmax = |x: &[f32]| -> Vec<f64> {
        let max = x.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
        let lz = max
            + x.iter()
                .map(|&v| (f64::from(v) - max).exp())
                .sum::<f64>()
                .ln();
        x.iter().map(|&v| f64::from(v) - lz).collect()
    };
    let lp = log_softmax(p_logits);
    let lq = log_softmax(q_logits);
    lp.iter()
        .zip(&lq)
        .map(|(&a, &b)| a.exp() * (a - b))
        .sum::<f64>()
        .max(0.0)
}

fn argmax(x: &[f32]) -> usize {
    let mut best = 0;
    for (i, &v) in x.iter().enumerate() {
        if v > x[best] {
            best = i;
        }
    }
    best
}

/// Replays `job` on `engine` and compares.
pub fn audit_one(engine: &mut Engine<RefBackend>, job: &AuditJob) -> anyhow::Result<AuditResult> {
    let n = job.served_logits.len();
    anyhow::ensure!(n > 0 && n == job.generated.len(), "nothing to audit");
    // The logits of generated token i come after prompt + generated[..i].
    let mut tokens = job.prompt.clone();
    tokens.extend_from_slice(&job.generated[..n - 1]);
    let seq = engine.new_sequence();
    let out = engine.forward(
        &[SeqInput {
            seq,
            tokens: &tokens,
            logits: Logits::LastN(n),
            mask: None,
        }],
        &mut Taps::none(),
    );
    engine.free_sequence(seq);
    let out = out?;
    let reference = out
        .first()
        .ok_or_else(|| anyhow::anyhow!("no logits from the reference"))?;
    let mut kl = Vec::with_capacity(n);
    let mut top1_mismatches = 0;
    for (i, served) in job.served_logits.iter().enumerate() {
        let r = reference.row(i);
        kl.push(kl_divergence(r, served));
        if argmax(r) != argmax(served) {
            top1_mismatches += 1;
        }
    }
    Ok(AuditResult {
        kl,
        top1_mismatches,
    })
}

/// The audit thread: loads the model on the reference backend, then replays jobs until the
/// channel closes.
pub fn run(model: PathBuf, n_ctx: usize, jobs: Receiver<AuditJob>, metrics: Arc<Metrics>) {
    let engine = (|| -> anyhow::Result<Engine<RefBackend>> {
        let file = GgufFile::open(&model)?;
        let backend = RefBackend::new();
        let m = Model::load(&file, &backend)?;
        Ok(Engine::new(
            backend,
            m,
            EngineConfig {
                n_ctx,
                cache_tokens: n_ctx,
                ..EngineConfig::default()
            },
        )?)
    })();
    let mut engine = match engine {
        Ok(e) => e,
        Err(e) => {
            eprintln!(
                "audit disabled: cannot load {} on the reference backend: {e:#}",
                model.display()
            );
            for _ in jobs {
                metrics.audit_error();
            }
            return;
        }
    };
    for job in jobs {
        match audit_one(&mut engine, &job) {
            Ok(r) => {
                let worst = r.kl.iter().copied().fold(0.0, f64::max);
                if r.top1_mismatches > 0 {
                    eprintln!(
                        "audit: {} of {} served tokens disagree with the reference argmax (max KL {worst:.3e})",
                        r.top1_mismatches,
                        r.kl.len()
                    );
                }
                metrics.audit(r.kl.len(), r.top1_mismatches, &r.kl);
            }
            Err(e) => {
                eprintln!("audit failed: {e:#}");
                metrics.audit_error();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kl_is_zero_for_equal_rows_and_positive_otherwise() {
        let a = [1.0f32, 2.0, 3.0];
        assert_eq!(kl_divergence(&a, &a), 0.0);
        // Shifting all logits changes nothing.
        assert!(kl_divergence(&a, &[11.0, 12.0, 13.0]) < 1e-12);
        let k = kl_divergence(&a, &[3.0, 2.0, 1.0]);
        // p = softmax(1,2,3); KL(p || reversed p) = sum p_i (x_i - x_{2-i}) = 2 (p2 - p0).
        let z: f64 = [1.0f64, 2.0, 3.0].iter().map(|x| x.exp()).sum();
        let expected = 2.0 * (3f64.exp() - 1f64.exp()) / z;
        assert!((k - expected).abs() < 1e-12, "{k} vs {expected}");
    }
}
