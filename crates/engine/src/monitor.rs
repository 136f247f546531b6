//! Generation monitors: cheap checks on every generated token that warn when a run looks
//! broken (a backend bug, a damaged model), on by default.
//!
//! Always on (O(vocab) per token): the same token repeated, a short cycle repeating, unknown /
//! unused / control tokens generated, NaN/Inf logits, flat logits (entropy near log V).
//! With `watch` (taps of every step, costlier): near-uniform attention in a layer, dead layers
//! (all-zero attention or FFN output) and hidden states identical across positions.
//! Each kind warns once per run.

use lockstep_graph::taps::Recorder;
use lockstep_graph::{HostTensor, LogitsSummary};
use lockstep_tokenizer::Tokenizer;

#[derive(Clone, Debug, PartialEq)]
pub struct MonitorConfig {
    pub enabled: bool,
    /// Warn when one token is generated this many times in a row.
    pub repeat_k: usize,
    /// Longest cycle period looked for (2..=this).
    pub cycle_max_period: usize,
    /// Warn when a cycle (of at least 3 repetitions) has run for this many tokens.
    pub cycle_min_span: usize,
    /// Warn when the entropy of the next-token distribution exceeds this fraction of log V.
    pub flat_entropy_frac: f64,
    /// Enable the tap-based monitors (attention entropy, dead layers, frozen hidden states).
    pub watch: bool,
    /// Warn when a layer's mean normalized attention entropy exceeds this.
    pub uniform_attention_frac: f64,
    /// Rows with fewer visible keys are ignored by the attention monitor.
    pub uniform_attention_min_keys: usize,
}

impl Default for MonitorConfig {
    fn default() -> MonitorConfig {
        MonitorConfig {
            enabled: true,
            repeat_k: 8,
            cycle_max_period: 4,
            cycle_min_span: 12,
            flat_entropy_frac: 0.9,
            watch: false,
            uniform_attention_frac: 0.98,
            uniform_attention_min_keys: 4,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WarningKind {
    RepeatedToken,
    Cycle,
    SpecialToken,
    NonFinite,
    FlatLogits,
    UniformAttention,
    DeadLayer,
    FrozenHidden,
}

impl WarningKind {
    pub fn name(self) -> &'static str {
        match self {
            WarningKind::RepeatedToken => "repeated-token",
            WarningKind::Cycle => "cycle",
            WarningKind::SpecialToken => "special-token",
            WarningKind::NonFinite => "non-finite-logits",
            WarningKind::FlatLogits => "flat-logits",
            WarningKind::UniformAttention => "uniform-attention",
            WarningKind::DeadLayer => "dead-layer",
            WarningKind::FrozenHidden => "frozen-hidden-state",
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct MonitorWarning {
    pub kind: WarningKind,
    /// Generated-token index at which it fired (0 = the logits after the prompt).
    pub step: usize,
    pub message: String,
}

impl std::fmt::Display for MonitorWarning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "[{}] token {}: {}",
            self.kind.name(),
            self.step,
            self.message
        )
    }
}

/// The state of the monitors over one generation.
pub struct Monitor {
    cfg: MonitorConfig,
    ids: Vec<u32>,
    pub warnings: Vec<MonitorWarning>,
}

impl Monitor {
    pub fn new(cfg: MonitorConfig) -> Monitor {
        Monitor {
            cfg,
            ids: Vec::new(),
            warnings: Vec::new(),
        }
    }

    pub fn config(&self) -> &MonitorConfig {
        &self.cfg
    }

    fn warn(&mut self, kind: WarningKind, step: usize, message: String) {
        if !self.warnings.iter().any(|w| w.kind == kind) {
            self.warnings.push(MonitorWarning {
                kind,
                step,
                message,
            });
        }
    }

    /// The logits a token is about to be sampled from.
    pub fn observe_logits(&mut self, step: usize, logits: &[f32]) {
        if !self.cfg.enabled || logits.is_empty() {
            return;
        }
        self.observe_summary(step, &LogitsSummary::of_row(logits, 0));
    }

    /// [`observe_logits`](Self::observe_logits) from a row's summary (counts of non-finite
    /// values and the entropy), as a backend that reduces logits where it computed them
    /// returns it.
    pub fn observe_summary(&mut self, step: usize, s: &LogitsSummary) {
        if !self.cfg.enabled || s.n_vocab == 0 {
            return;
        }
        if s.non_finite > 0 {
            self.warn(
                WarningKind::NonFinite,
                step,
                format!(
                    "{} of {} logits are not finite ({} NaN, {} Inf): the forward pass produced garbage",
                    s.non_finite,
                    s.n_vocab,
                    s.nan,
                    s.non_finite - s.nan
                ),
            );
            return;
        }
        // H = log Z - E[d], computed by the summary.
        let h = s.entropy;
        let hmax = (s.n_vocab as f64).ln();
        if h >= self.cfg.flat_entropy_frac * hmax {
            self.warn(
                WarningKind::FlatLogits,
                step,
                format!(
                    "next-token distribution is nearly flat (entropy {h:.2} nats, {:.0}% of log V = {hmax:.2}): the logits carry no information",
                    100.0 * h / hmax
                ),
            );
        }
    }

    /// A generated token.
    pub fn observe_token(&mut self, step: usize, id: u32, tokenizer: &Tokenizer) {
        if !self.cfg.enabled {
            return;
        }
        self.ids.push(id);
        let piece = || {
            tokenizer
                .token_text(id)
                .map(|t| format!("{t:?}"))
                .unwrap_or_else(|_| "?".into())
        };
        if let Ok(a) = tokenizer.token_attrs(id) {
            if (a.is_control() || a.is_unknown() || a.is_unused()) && !tokenizer.is_eog(id) {
                let what = if a.is_unknown() {
                    "unknown"
                } else if a.is_unused() {
                    "unused"
                } else {
                    "control"
                };
                self.warn(
                    WarningKind::SpecialToken,
                    step,
                    format!(
                        "generated {what} token {id} {}: models do not emit these when healthy",
                        piece()
                    ),
                );
            }
        }
        let n = self.ids.len();
        let k = self.cfg.repeat_k;
        if k > 1 && n >= k && self.ids[n - k..].iter().all(|&t| t == id) {
            self.warn(
                WarningKind::RepeatedToken,
                step,
                format!("token {id} {} generated {k} times in a row", piece()),
            );
        }
        for p in 2..=self.cfg.cycle_max_period {
            let reps = self.cfg.cycle_min_span.div_ceil(p).max(3);
            let span = p * reps;
            if n < span {
                continue;
            }
            let tail = &self.ids[n - span..];
            let cyc = &tail[..p];
            // Formatting (newlines, `#`, `-`) legitimately repeats; a cycle must carry a word.
            let has_word = cyc.iter().any(|&t| {
                tokenizer
                    .token_to_piece(t, false)
                    .is_ok_and(|b| b.iter().any(|c| c.is_ascii_alphanumeric() || *c >= 0x80))
            });
            if has_word && cyc.iter().any(|&t| t != cyc[0]) && tail.chunks(p).all(|c| c == cyc) {
                let c: Vec<String> = cyc.iter().map(|t| t.to_string()).collect();
                self.warn(
                    WarningKind::Cycle,
                    step,
                    format!(
                        "the cycle [{}] (period {p}) repeated {reps} times",
                        c.join(", ")
                    ),
                );
                break;
            }
        }
    }

    /// The tap filter `watch` mode needs.
    pub fn watch_filter(name: &str) -> bool {
        name.ends_with(".kq_softmax")
            || name.ends_with(".attn_out")
            || name.ends_with(".ffn_out")
            || name.ends_with(".l_out")
    }

    /// Taps of one forward step of a single sequence: `n_new` tokens, `n_kv` keys after it.
    pub fn observe_taps(&mut self, step: usize, rec: &Recorder, n_new: usize, n_kv: usize) {
        if !self.cfg.enabled || !self.cfg.watch {
            return;
        }
        for (name, t) in &rec.taps {
            let Some(rest) = name.strip_prefix("blk.") else {
                continue;
            };
            let Some((layer, op)) = rest.split_once('.') else {
                continue;
            };
            match op {
                "kq_softmax" => {
                    if let Some(e) = mean_attention_entropy(
                        &t.data,
                        n_new,
                        n_kv,
                        self.cfg.uniform_attention_min_keys,
                    ) {
                        if e >= self.cfg.uniform_attention_frac {
                            self.warn(
                                WarningKind::UniformAttention,
                                step,
                                format!(
                                    "layer {layer}: attention is near-uniform (mean normalized entropy {e:.3}): queries do not select keys (softmax scale, Q/K or RoPE wrong?)"
                                ),
                            );
                        }
                    }
                }
                "attn_out" | "ffn_out" | "l_out" => {
                    if !t.data.is_empty() && t.data.iter().all(|&v| v == 0.0) {
                        self.warn(
                            WarningKind::DeadLayer,
                            step,
                            format!("layer {layer}: {op} is all zero (a dead layer: weights missing or an op skipped)"),
                        );
                    }
                    if op == "l_out" && frozen_rows(t) {
                        self.warn(
                            WarningKind::FrozenHidden,
                            step,
                            format!(
                                "layer {layer}: the hidden state is identical at all {} positions (inputs broadcast, positions ignored?)",
                                t.rows()
                            ),
                        );
                    }
                }
                _ => {}
            }
        }
    }
}

/// Rows of a `[n, d]` tensor (n >= 2) all bitwise equal.
/// Every row equal to the first, to 1e-4 of its norm: identical inputs at different positions
/// come out of an f32 attention differing only in the last bits (summed over different
/// numbers of keys); healthy hidden states differ at every position by O(1).
fn frozen_rows(t: &HostTensor) -> bool {
    let n = t.rows();
    let sq = |r: &[f32], o: &[f32]| -> f64 {
        r.iter()
            .zip(o)
            .map(|(&a, &b)| (f64::from(a) - f64::from(b)).powi(2))
            .sum()
    };
    let zero = vec![0f32; t.cols()];
    let norm2 = sq(t.row(0), &zero);
    n >= 2 && (1..n).all(|r| sq(t.row(r), t.row(0)) <= 1e-8 * norm2)
}

/// Mean over (query, head) rows with at least `min_keys` visible keys of H(p) / ln(visible),
/// for a `kq_softmax` tap laid out `[n_new, heads, n_kv]`.
fn mean_attention_entropy(p: &[f32], n_new: usize, n_kv: usize, min_keys: usize) -> Option<f64> {
    if n_new == 0 || n_kv == 0 || !p.len().is_multiple_of(n_new * n_kv) {
        return None;
    }
    let mut sum = 0f64;
    let mut n = 0usize;
    for row in p.chunks(n_kv) {
        let visible = row.iter().filter(|&&v| v > 0.0).count();
        if visible < min_keys.max(2) {
            continue;
        }
        let h: f64 = row
            .iter()
            .filter(|&&v| v > 0.0)
            .map(|&v| {
                let v = f64::from(v);
                -v * v.ln()
            })
            .sum();
        sum += h / (visible as f64).ln();
        n += 1;
    }
    (n > 0).then(|| sum / n as f64)
}
