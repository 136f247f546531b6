//! The contract between model graphs and backends.
//!
//! A model graph (crate `lockstep-models`) is written once against [`Backend`]; a backend
//! implements ops and never contains model logic. The engine (crate `lockstep-engine`) builds a
//! [`Batch`] — tokens, positions, and where each token's K/V lives in the paged cache — so every
//! backend reads and writes K/V through the same slot arithmetic. Every op output the graph
//! produces is offered to a [`Taps`] observer under a canonical name (see `docs/taps.md`).

mod backend;
mod batch;
mod host;
mod logits;
pub mod marks;
pub mod taps;

pub use backend::{
    emit_roped, residual_norm_then_unfused, residual_norm_unfused, rope_store_attention_unfused,
    rope_store_unfused, scale_norm_then_unfused, Activation, AttentionParams, Backend,
    BackendError, KvLayout, NormThen, QkRoped, QkvIn, Residual, ResidualThen, RopeParams,
    RopeStyle, ScaleNormThen, StepKey, WeightView,
};
pub use batch::{Batch, BatchSeq};
pub use host::HostTensor;
pub use logits::{
    draw_row, nucleus_len, nucleus_prefix, row_total, top_key, LendRows, LogitsOut, LogitsSummary,
    RowDraw, RowPick, StepOut, DRAW_FANOUT,
};
pub use taps::{TapObserver, Taps};
