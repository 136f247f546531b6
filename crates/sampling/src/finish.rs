//! Why a generation ended.

use std::fmt;

/// Why generation of a sequence ended.
///
/// `Display` gives the OpenAI `finish_reason` string: both stop variants map
/// to `"stop"`, since the OpenAI API does not distinguish them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FinishReason {
    /// The model produced an end-of-generation token (and `ignore_eos` was off).
    Stop,
    /// A stop string from [`SamplingParams::stop`](crate::SamplingParams::stop) matched.
    StopString,
    /// `max_tokens` (or the context limit) was reached.
    Length,
}

impl FinishReason {
    /// The OpenAI API name: `"stop"` or `"length"`.
    pub fn as_openai_str(self) -> &'static str {
        match self {
            FinishReason::Stop | FinishReason::StopString => "stop",
            FinishReason::Length => "length",
        }
    }
}

impl fmt::Display for FinishReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_openai_str())
    }
}
