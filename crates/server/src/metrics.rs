//! The server's metrics, rendered in the Prometheus text format by `GET /metrics`.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;

use lockstep_engine::scheduler::SchedulerStats;

/// A cumulative histogram with fixed upper bounds (seconds).
#[derive(Clone, Debug)]
pub struct Histogram {
    bounds: &'static [f64],
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

/// Latency buckets from 1 ms to 2 minutes.
pub const LATENCY_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0,
];

/// KL-divergence buckets (nats) for the audit.
pub const KL_BUCKETS: &[f64] = &[1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1.0];

impl Histogram {
    pub fn new(bounds: &'static [f64]) -> Histogram {
        Histogram {
            bounds,
            counts: vec![0; bounds.len()],
            sum: 0.0,
            count: 0,
        }
    }

    pub fn observe(&mut self, v: f64) {
        for (b, c) in self.bounds.iter().zip(&mut self.counts) {
            if v <= *b {
                *c += 1;
            }
        }
        self.sum += v;
        self.count += 1;
    }

    pub fn count(&self) -> u64 {
        self.count
    }

    fn render(&self, out: &mut String, name: &str, help: &str) {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} histogram");
        for (b, c) in self.bounds.iter().zip(&self.counts) {
            let _ = writeln!(out, "{name}_bucket{{le=\"{b}\"}} {c}");
        }
        let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {}", self.count);
        let _ = writeln!(out, "{name}_sum {}", self.sum);
        let _ = writeln!(out, "{name}_count {}", self.count);
    }
}

/// Everything counted, behind one lock (updates are a few additions per token).
#[derive(Debug)]
pub struct Metrics {
    inner: Mutex<Inner>,
}

#[derive(Debug)]
struct Inner {
    /// Finished requests by outcome (`stop`, `length`, `error`, `cancelled`, `rejected`).
    requests: BTreeMap<String, u64>,
    /// HTTP errors by status code.
    http_errors: BTreeMap<u16, u64>,
    prompt_tokens: u64,
    generation_tokens: u64,
    ttft: Histogram,
    itl: Histogram,
    e2e: Histogram,
    alarms: BTreeMap<String, u64>,
    sched: SchedulerStats,
    audit_requests: u64,
    audit_positions: u64,
    audit_top1_mismatches: u64,
    audit_max_kl: f64,
    audit_kl: Histogram,
    audit_errors: u64,
}

impl Default for Metrics {
    fn default() -> Metrics {
        Metrics {
            inner: Mutex::new(Inner {
                requests: BTreeMap::new(),
                http_errors: BTreeMap::new(),
                prompt_tokens: 0,
                generation_tokens: 0,
                ttft: Histogram::new(LATENCY_BUCKETS),
                itl: Histogram::new(LATENCY_BUCKETS),
                e2e: Histogram::new(LATENCY_BUCKETS),
                alarms: BTreeMap::new(),
                sched: SchedulerStats::default(),
                audit_requests: 0,
                audit_positions: 0,
                audit_top1_mismatches: 0,
                audit_max_kl: 0.0,
                audit_kl: Histogram::new(KL_BUCKETS),
                audit_errors: 0,
            }),
        }
    }
}

impl Metrics {
    fn with<R>(&self, f: impl FnOnce(&mut Inner) -> R) -> R {
        // A panic while holding the lock cannot leave the counters inconsistent in a way that
        // matters more than losing them, so a poisoned lock is used as is.
        let mut g = match self.inner.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        f(&mut g)
    }

    pub fn request_done(&self, outcome: &str, n_prompt: usize, n_generated: usize) {
        self.with(|m| {
            *m.requests.entry(outcome.to_string()).or_default() += 1;
            m.prompt_tokens += n_prompt as u64;
            m.generation_tokens += n_generated as u64;
        });
    }

    pub fn http_error(&self, status: u16) {
        self.with(|m| *m.http_errors.entry(status).or_default() += 1);
    }

    pub fn ttft(&self, s: f64) {
        self.with(|m| m.ttft.observe(s));
    }

    pub fn itl(&self, s: f64) {
        self.with(|m| m.itl.observe(s));
    }

    pub fn e2e(&self, s: f64) {
        self.with(|m| m.e2e.observe(s));
    }

    pub fn alarm(&self, kind: &str) {
        self.with(|m| *m.alarms.entry(kind.to_string()).or_default() += 1);
    }

    pub fn scheduler(&self, s: SchedulerStats) {
        self.with(|m| m.sched = s);
    }

    pub fn scheduler_stats(&self) -> SchedulerStats {
        self.with(|m| m.sched.clone())
    }

    pub fn audit(&self, positions: usize, top1_mismatches: usize, kls: &[f64]) {
        self.with(|m| {
            m.audit_requests += 1;
            m.audit_positions += positions as u64;
            m.audit_top1_mismatches += top1_mismatches as u64;
            for &kl in kls {
                m.audit_kl.observe(kl);
                m.audit_max_kl = m.audit_max_kl.max(kl);
            }
        });
    }

    pub fn audit_error(&self) {
        self.with(|m| m.audit_errors += 1);
    }

    /// (audited requests, positions, top-1 mismatches, largest KL).
    pub fn audit_summary(&self) -> (u64, u64, u64, f64) {
        self.with(|m| {
            (
                m.audit_requests,
                m.audit_positions,
                m.audit_top1_mismatches,
                m.audit_max_kl,
            )
        })
    }

    pub fn render(&self) -> String {
        self.with(|m| {
            let mut o = String::new();
            let counter = |o: &mut String, name: &str, help: &str, v: u64| {
                let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} counter\n{name} {v}");
            };
            let gauge = |o: &mut String, name: &str, help: &str, v: f64| {
                let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {v}");
            };
            let _ = writeln!(
                o,
                "# HELP lockstep_requests_total Finished requests by outcome.\n# TYPE lockstep_requests_total counter"
            );
            for (k, v) in &m.requests {
                let _ = writeln!(o, "lockstep_requests_total{{outcome=\"{k}\"}} {v}");
            }
            let _ = writeln!(
                o,
                "# HELP lockstep_http_errors_total Error responses by status.\n# TYPE lockstep_http_errors_total counter"
            );
            for (k, v) in &m.http_errors {
                let _ = writeln!(o, "lockstep_http_errors_total{{status=\"{k}\"}} {v}");
            }
            counter(
                &mut o,
                "lockstep_prompt_tokens_total",
                "Prompt tokens of finished requests.",
                m.prompt_tokens,
            );
            counter(
                &mut o,
                "lockstep_generation_tokens_total",
                "Generated tokens of finished requests.",
                m.generation_tokens,
            );
            let s = &m.sched;
            gauge(&mut o, "lockstep_queue_depth", "Requests waiting for a seat.", s.waiting as f64);
            gauge(&mut o, "lockstep_running_requests", "Requests in the running batch.", s.running as f64);
            gauge(&mut o, "lockstep_kv_blocks_used", "KV cache blocks held by sequences.", s.kv_blocks_used as f64);
            gauge(&mut o, "lockstep_kv_blocks_total", "KV cache blocks in all.", s.kv_blocks_total as f64);
            counter(&mut o, "lockstep_steps_total", "Forward steps run.", s.steps);
            let _ = writeln!(o, "# HELP lockstep_forward_seconds_total Time in forward passes.\n# TYPE lockstep_forward_seconds_total counter\nlockstep_forward_seconds_total {}", s.forward_seconds);
            let _ = writeln!(o, "# HELP lockstep_step_seconds_total Time in scheduler steps (forward, sampling, logprobs, monitors, decoding).\n# TYPE lockstep_step_seconds_total counter\nlockstep_step_seconds_total {}", s.step_seconds);
            counter(&mut o, "lockstep_preemptions_total", "Requests preempted (recomputed later) for lack of KV blocks.", s.preemptions);
            counter(&mut o, "lockstep_prefix_cache_queries_total", "Whole prompt blocks looked up in the prefix cache.", s.prefix_blocks_queried);
            counter(&mut o, "lockstep_prefix_cache_hits_total", "Whole prompt blocks found in the prefix cache.", s.prefix_blocks_hit);
            let _ = writeln!(o, "# HELP lockstep_sampled_rows_total Sampled logits rows by how they reached the sampler: whole, reduced to their largest logits where computed, or reduced with what the sampler needs of the rest made where computed (a drawn token, the total weight for top-p, the logits of the tokens that penalties and a logit bias adjust).\n# TYPE lockstep_sampled_rows_total counter");
            for (how, n) in [("full", s.rows_full), ("reduced", s.rows_reduced), ("picked", s.rows_picked)] {
                let _ = writeln!(o, "lockstep_sampled_rows_total{{logits=\"{how}\"}} {n}");
            }
            counter(&mut o, "lockstep_nucleus_rows_copied_total", "Top-p rows without top-k whose nucleus reached past the largest logits, so the row itself crossed.", s.nucleus_rows_copied);
            counter(&mut o, "lockstep_adjusted_rows_copied_total", "Rows with penalties or a logit bias whose largest logits held too few tokens outside the adjusted ones, so the row itself crossed.", s.adjusted_rows_copied);
            m.ttft.render(&mut o, "lockstep_time_to_first_token_seconds", "Time from request arrival to its first token.");
            m.itl.render(&mut o, "lockstep_inter_token_latency_seconds", "Time between consecutive tokens of a request.");
            m.e2e.render(&mut o, "lockstep_request_latency_seconds", "Time from request arrival to its end.");
            let _ = writeln!(
                o,
                "# HELP lockstep_monitor_alarms_total Generation monitor alarms by kind.\n# TYPE lockstep_monitor_alarms_total counter"
            );
            for (k, v) in &m.alarms {
                let _ = writeln!(o, "lockstep_monitor_alarms_total{{kind=\"{k}\"}} {v}");
            }
            counter(&mut o, "lockstep_audit_requests_total", "Requests replayed on the reference backend.", m.audit_requests);
            counter(&mut o, "lockstep_audit_positions_total", "Token positions compared by the audit.", m.audit_positions);
            counter(&mut o, "lockstep_audit_top1_mismatches_total", "Audited positions where the served and the reference argmax differ.", m.audit_top1_mismatches);
            counter(&mut o, "lockstep_audit_errors_total", "Audits that could not run.", m.audit_errors);
            gauge(&mut o, "lockstep_audit_max_kl", "Largest KL(reference || served) seen by the audit, in nats.", m.audit_max_kl);
            m.audit_kl.render(&mut o, "lockstep_audit_kl", "KL(reference || served) per audited position, in nats.");
            o
        })
    }
}
