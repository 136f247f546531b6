//! Error types.

use thiserror::Error;

/// A sampling parameter with a nonsensical value, as reported by
/// [`SamplingParams::validate`](crate::SamplingParams::validate).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("invalid sampling parameter `{field}` = {value}: {reason}")]
pub struct ParamError {
    /// Name of the offending field as spelled in [`SamplingParams`](crate::SamplingParams)
    /// (and in its serde form), e.g. `"top_p"` or `"stop[1]"`.
    pub field: String,
    /// The rejected value, formatted with `{:?}`.
    pub value: String,
    /// What the field accepts.
    pub reason: &'static str,
}

/// Why [`Sampler::sample`](crate::Sampler::sample) (or
/// [`apply_penalties`](crate::apply_penalties)) could not pick a token.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum SamplingError {
    /// The logits row has no entries.
    #[error("logits row is empty")]
    EmptyLogits,
    /// The logits row holds NaN or ±infinity; `index` is the first such entry.
    #[error("logit at index {index} is not finite ({value})")]
    NonFiniteLogit {
        /// Token id (position in the row) of the first non-finite logit.
        index: usize,
        /// The offending value.
        value: f32,
    },
    /// A token in the penalty window of the history is not a valid index
    /// into the logits row.
    #[error("history token {token} is out of range for a logits row of length {vocab_size}")]
    TokenOutOfRange {
        /// The out-of-range token id.
        token: u32,
        /// Length of the logits row.
        vocab_size: usize,
    },
    /// Applying the penalties pushed a logit out of the finite range (for
    /// example a tiny `repeat_penalty` dividing a large logit).
    #[error("penalized logit at index {index} is not finite ({value})")]
    NonFinitePenalizedLogit {
        /// Token id whose penalized logit overflowed.
        index: usize,
        /// The overflowed value.
        value: f32,
    },
    /// [`Sampler::sample_from_top`](crate::Sampler::sample_from_top) got fewer of the row's
    /// largest logits than it needs, or this sampler needs the whole row (`needed: None`).
    #[error("{given} top logits given, the sampler needs {}", match .needed { Some(k) => format!("{k}"), None => "the whole row".into() })]
    TooFewCandidates {
        /// Candidates given.
        given: usize,
        /// Candidates needed ([`Sampler::top_needed`](crate::Sampler::top_needed)).
        needed: Option<usize>,
    },
    /// The row is longer than token ids (`u32`) can address.
    #[error("logits row of length {len} exceeds the u32 token id range")]
    VocabTooLarge {
        /// Length of the logits row.
        len: usize,
    },
}
