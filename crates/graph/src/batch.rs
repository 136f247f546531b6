//! One forward step's input, as the engine lays it out for the graph and the backend.

/// A batch: the new tokens of one or more sequences, flattened in sequence order.
///
/// Slot arithmetic (which cache cell holds which position of which sequence) is done once, by
/// the engine, and travels here as plain indices. Backends write token `i`'s K/V to
/// `slots[i]` and read a sequence's keys from `BatchSeq::kv_slots`, so prefill and decode on any
/// backend share one definition of where K and V live.
#[derive(Clone, Debug, Default)]
pub struct Batch {
    /// Token ids of every new token, sequences one after another.
    pub tokens: Vec<u32>,
    /// Position of each token in its sequence.
    pub positions: Vec<u32>,
    /// Cache slot (block * block_size + offset) each token's K/V is written to.
    pub slots: Vec<u32>,
    pub seqs: Vec<BatchSeq>,
    /// Rows (indices into `tokens`) whose logits are wanted, in the order they are returned.
    pub output_rows: Vec<usize>,
}

/// One sequence's part of a batch.
#[derive(Clone, Debug)]
pub struct BatchSeq {
    /// Its new tokens are `tokens[first_row..first_row + n_rows]`.
    pub first_row: usize,
    pub n_rows: usize,
    /// Position of its first new token; earlier positions are already in the cache.
    pub first_pos: u32,
    /// Cache slot of every position `0..first_pos + n_rows`: key `j` lives at `kv_slots[j]`.
    pub kv_slots: Vec<u32>,
    /// An explicit attention mask, `n_rows x kv_slots.len()`, true = may attend, applied on top
    /// of the causal (and sliding-window) rule. `None` means "no extra mask"; an all-true mask
    /// must give bitwise the same result, which `lockstep check` verifies.
    pub mask: Option<Vec<bool>>,
}

impl Batch {
    pub fn n_tokens(&self) -> usize {
        self.tokens.len()
    }
}
