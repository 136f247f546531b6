//! Token sampling and stop conditions for generation.
//!
//! This crate is pure logic: the engine hands it one logits row (`&[f32]`,
//! length = vocabulary size) per generated token of one sequence, together
//! with that sequence's token history, and gets back the chosen token id.
//!
//! * [`SamplingParams`] — the user-facing knobs (serde-friendly, validated).
//! * [`Sampler`] — one per sequence; owns the seeded RNG and scratch buffers.
//!   The chain follows llama.cpp's default order: penalties → top-k → top-p →
//!   min-p → temperature → draw.
//! * [`apply_penalties`] — the penalty step on its own.
//! * [`StopChecker`] — incremental stop-string detection for streamed text.
//! * [`FinishReason`] — why generation ended, with OpenAI names.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod error;
mod finish;
mod params;
mod penalties;
pub mod row_draw;
mod sampler;
mod stop;

pub use error::{ParamError, SamplingError};
pub use finish::FinishReason;
pub use params::{SamplingParams, DEFAULT_REPEAT_LAST_N, DEFAULT_SEED};
pub use penalties::apply_penalties;
pub use row_draw::{draw_row, nucleus_len, row_total, RowDraw};
pub use sampler::{nucleus_prefix, AdjustedNeed, Sampler, MAX_ADJUSTED_TOKENS, MAX_TOP_CANDIDATES};
pub use stop::{StopChecker, StopResult};
