//! User-facing sampling parameters.

use serde::{Deserialize, Deserializer, Serialize};

use crate::error::ParamError;

/// Seed used when none is given. Fixed (rather than drawn from the OS) so that
/// a request without a seed is still reproducible run to run; callers wanting
/// fresh randomness per request must pass their own seed.
pub const DEFAULT_SEED: u64 = 0xDEAD_BEEF;

/// Default penalty window, as in llama.cpp (`--repeat-last-n 64`).
pub const DEFAULT_REPEAT_LAST_N: usize = 64;

/// How to pick the next token and when to stop.
///
/// Every filter has an "off" value; [`Default`] mirrors llama.cpp's CLI
/// defaults (temperature 0.8, top-k 40, top-p 0.95, min-p 0.05, penalties off).
/// With `#[serde(default)]`, any field missing from JSON takes its default.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SamplingParams {
    /// Softmax temperature applied after the filters. `0` (or any value
    /// `<= 0`, though `validate` rejects negatives) means greedy: argmax of the
    /// penalized logits, lowest id on ties, no randomness.
    pub temperature: f32,
    /// Keep only the `top_k` highest logits. `0` ⇒ off.
    pub top_k: usize,
    /// Nucleus sampling: keep the smallest set of most likely tokens whose
    /// probability (softmax over the candidates left after top-k) sums to at
    /// least `top_p`; at least one token is always kept. Range `(0, 1]`;
    /// `1.0` ⇒ off.
    pub top_p: f32,
    /// Drop tokens whose probability is below `min_p` times the probability of
    /// the most likely remaining token. Range `[0, 1]`; `0` ⇒ off.
    pub min_p: f32,
    /// llama.cpp repeat penalty for tokens in the penalty window: a positive
    /// logit is divided by it, a non-positive one multiplied. Must be `> 0`;
    /// `1.0` ⇒ off.
    pub repeat_penalty: f32,
    /// Size of the penalty window: the last `n` tokens of the history are
    /// considered by all three penalties. `None` (JSON `null` or `-1`, as in
    /// llama.cpp) ⇒ the whole history; `Some(0)` ⇒ penalties disabled.
    #[serde(deserialize_with = "deserialize_repeat_last_n")]
    pub repeat_last_n: Option<usize>,
    /// OpenAI presence penalty: subtracted once from the logit of every token
    /// that occurs in the window. `0` ⇒ off; negative values encourage repeats.
    pub presence_penalty: f32,
    /// OpenAI frequency penalty: `count * frequency_penalty` is subtracted
    /// from the logit of a token occurring `count` times in the window.
    /// `0` ⇒ off.
    pub frequency_penalty: f32,
    /// Seed of the per-sequence RNG (ChaCha8). Defaults to [`DEFAULT_SEED`], so
    /// the same request gives the same output unless a seed is supplied.
    pub seed: u64,
    /// Maximum number of tokens to generate; `None` ⇒ until the context is
    /// full. Enforced by the engine (see [`SamplingParams::length_reached`]).
    pub max_tokens: Option<usize>,
    /// Stop strings: generation ends when the output contains any of them, and
    /// neither the stop string nor anything after it is returned. See
    /// [`StopChecker`](crate::StopChecker).
    pub stop: Vec<String>,
    /// Keep generating past end-of-generation tokens (benchmarks, tests).
    pub ignore_eos: bool,
}

impl Default for SamplingParams {
    fn default() -> Self {
        SamplingParams {
            temperature: 0.8,
            top_k: 40,
            top_p: 0.95,
            min_p: 0.05,
            repeat_penalty: 1.0,
            repeat_last_n: Some(DEFAULT_REPEAT_LAST_N),
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
            seed: DEFAULT_SEED,
            max_tokens: None,
            stop: Vec::new(),
            ignore_eos: false,
        }
    }
}

impl SamplingParams {
    /// Defaults with `temperature = 0`: deterministic argmax decoding.
    pub fn greedy() -> Self {
        SamplingParams {
            temperature: 0.0,
            ..SamplingParams::default()
        }
    }

    /// Whether `n_generated` tokens exhaust `max_tokens` (never, if unset).
    pub fn length_reached(&self, n_generated: usize) -> bool {
        self.max_tokens.is_some_and(|max| n_generated >= max)
    }

    /// Whether any penalty would change a logit.
    pub fn penalties_active(&self) -> bool {
        self.repeat_last_n != Some(0)
            && (self.repeat_penalty != 1.0
                || self.presence_penalty != 0.0
                || self.frequency_penalty != 0.0)
    }

    /// Check every field for a nonsensical value; the error names the field.
    pub fn validate(&self) -> Result<(), ParamError> {
        fn bad(field: &str, value: impl std::fmt::Debug, reason: &'static str) -> ParamError {
            ParamError {
                field: field.to_string(),
                value: format!("{value:?}"),
                reason,
            }
        }
        // Comparisons are written so that NaN fails them (every comparison
        // with NaN is false), hence the negated "accepted range" forms.
        let t = self.temperature;
        if !(t.is_finite() && t >= 0.0) {
            return Err(bad(
                "temperature",
                t,
                "must be a finite number >= 0 (0 = greedy)",
            ));
        }
        let p = self.top_p;
        if !(p > 0.0 && p <= 1.0) {
            return Err(bad("top_p", p, "must be in (0, 1] (1 = off)"));
        }
        let m = self.min_p;
        if !(0.0..=1.0).contains(&m) {
            return Err(bad("min_p", m, "must be in [0, 1] (0 = off)"));
        }
        let r = self.repeat_penalty;
        if !(r.is_finite() && r > 0.0) {
            return Err(bad(
                "repeat_penalty",
                r,
                "must be a finite number > 0 (1 = off)",
            ));
        }
        if !self.presence_penalty.is_finite() {
            return Err(bad(
                "presence_penalty",
                self.presence_penalty,
                "must be a finite number (0 = off)",
            ));
        }
        if !self.frequency_penalty.is_finite() {
            return Err(bad(
                "frequency_penalty",
                self.frequency_penalty,
                "must be a finite number (0 = off)",
            ));
        }
        if self.max_tokens == Some(0) {
            return Err(bad(
                "max_tokens",
                0usize,
                "must be >= 1 when set (omit it for no limit)",
            ));
        }
        for (i, s) in self.stop.iter().enumerate() {
            // An empty stop string would match before the first character.
            if s.is_empty() {
                return Err(bad(&format!("stop[{i}]"), s, "must not be empty"));
            }
        }
        Ok(())
    }
}

/// Accepts `null`, `-1` (llama.cpp's "whole context") or a non-negative
/// integer for `repeat_last_n`.
fn deserialize_repeat_last_n<'de, D>(deserializer: D) -> Result<Option<usize>, D::Error>
where
    D: Deserializer<'de>,
{
    use serde::de::Error;
    match Option::<i64>::deserialize(deserializer)? {
        None | Some(-1) => Ok(None),
        Some(n) => usize::try_from(n).map(Some).map_err(|_| {
            D::Error::custom(format!(
                "invalid value for `repeat_last_n`: {n} (expected -1, null or an integer >= 0)"
            ))
        }),
    }
}
