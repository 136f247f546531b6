//! The engine: sequences, positions, batching and the paged KV cache, shared by all backends.
//!
//! A forward step takes any number of sequences, each with its new tokens; the engine assigns
//! positions (continuing each sequence), allocates cache blocks, computes every slot, and hands
//! the graph one [`Batch`]. A single prompt is a batch of one; decode is a batch of one token
//! per sequence. There is no separate prefill path anywhere.

mod generate;
mod kv;
pub mod monitor;
pub mod scheduler;

use std::collections::BTreeMap;

use lockstep_graph::{
    Backend, Batch, BatchSeq, HostTensor, KvLayout, LendRows, LogitsOut, RowPick, StepOut, Taps,
};
use lockstep_models::{forward, Model, ModelError};

pub use generate::{generate, generate_with, GenerateError, GenerateOptions, GenerateOutput};
pub use kv::BlockAllocator;
pub use lockstep_graph::LogitsSummary;
pub use lockstep_sampling::{FinishReason, SamplingParams};
pub use monitor::{MonitorConfig, MonitorWarning, WarningKind};

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("context overflow: sequence {seq} would hold {needed} tokens, the context is {n_ctx}")]
    ContextOverflow {
        seq: u64,
        needed: usize,
        n_ctx: usize,
    },
    #[error("KV cache full: need {needed_blocks} more blocks of {block_size} tokens, {free_blocks} free")]
    CacheFull {
        needed_blocks: usize,
        free_blocks: usize,
        block_size: usize,
    },
    #[error("sequence {0} has no new tokens (an empty prompt cannot be evaluated)")]
    EmptyInput(u64),
    #[error("no sequence with id {0}")]
    NoSuchSequence(u64),
    #[error("sequence {0} appears twice in one batch")]
    DuplicateSequence(u64),
    #[error(
        "token id {id} (sequence {seq}, new token {index}) is outside the vocabulary of {vocab}"
    )]
    TokenOutOfRange {
        seq: u64,
        index: usize,
        id: u32,
        vocab: usize,
    },
    #[error("invalid engine configuration: {0}")]
    Config(String),
    #[error(transparent)]
    Model(#[from] ModelError),
}

pub type SeqId = u64;

#[derive(Clone, Debug)]
pub struct EngineConfig {
    /// Longest sequence the engine accepts (capped at the model's training context).
    pub n_ctx: usize,
    /// Total cache capacity in tokens across all sequences (rounded up to whole blocks).
    pub cache_tokens: usize,
    pub block_size: usize,
    /// Hand out cache blocks in a scrambled order (invariance checks).
    pub scramble_blocks: Option<u64>,
    /// Share whole cached blocks between sequences with a common prompt prefix
    /// ([`Engine::new_sequence_cached`]); off by default.
    pub prefix_cache: bool,
}

impl Default for EngineConfig {
    fn default() -> EngineConfig {
        EngineConfig {
            n_ctx: 4096,
            cache_tokens: 4096,
            block_size: 16,
            scramble_blocks: None,
            prefix_cache: false,
        }
    }
}

/// Which logits a sequence wants back from a step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Logits {
    None,
    Last,
    /// The last `n` tokens (teacher forcing a known continuation).
    LastN(usize),
    All,
}

/// One sequence's part of a step.
#[derive(Clone, Debug)]
pub struct SeqInput<'a> {
    pub seq: SeqId,
    pub tokens: &'a [u32],
    pub logits: Logits,
    /// Optional explicit attention mask over `[tokens, all positions so far]`.
    pub mask: Option<Vec<bool>>,
}

struct SeqState {
    n_past: usize,
    blocks: Vec<u32>,
    /// The tokens in the cache, kept only with prefix caching (block keys are their contents).
    tokens: Vec<u32>,
}

pub struct Engine<B: Backend> {
    pub backend: B,
    pub model: Model<B>,
    cache: B::KvCache,
    alloc: BlockAllocator,
    seqs: BTreeMap<SeqId, SeqState>,
    next_id: SeqId,
    n_ctx: usize,
    prefix_cache: bool,
}

impl<B: Backend> Engine<B> {
    pub fn new(backend: B, model: Model<B>, cfg: EngineConfig) -> Result<Engine<B>, EngineError> {
        if cfg.block_size == 0 || cfg.n_ctx == 0 {
            return Err(EngineError::Config(
                "block size and context must be positive".into(),
            ));
        }
        let n_ctx = cfg.n_ctx.min(model.config.n_ctx_train.max(1));
        let n_blocks = cfg.cache_tokens.max(1).div_ceil(cfg.block_size);
        let layout = KvLayout {
            n_layers: model.config.n_layers,
            n_blocks,
            block_size: cfg.block_size,
            kv_dim: model.config.kv_dim(),
        };
        let cache = backend
            .alloc_kv(layout)
            .map_err(|e| EngineError::Model(e.into()))?;
        let alloc = match cfg.scramble_blocks {
            Some(seed) => BlockAllocator::new_scrambled(n_blocks, cfg.block_size, seed),
            None => BlockAllocator::new(n_blocks, cfg.block_size),
        };
        Ok(Engine {
            backend,
            model,
            cache,
            alloc,
            seqs: BTreeMap::new(),
            next_id: 0,
            n_ctx,
            prefix_cache: cfg.prefix_cache,
        })
    }

    pub fn n_ctx(&self) -> usize {
        self.n_ctx
    }

    pub fn n_vocab(&self) -> usize {
        self.model.config.n_vocab
    }

    pub fn new_sequence(&mut self) -> SeqId {
        let id = self.next_id;
        self.next_id += 1;
        self.seqs.insert(
            id,
            SeqState {
                n_past: 0,
                blocks: Vec::new(),
                tokens: Vec::new(),
            },
        );
        id
    }

    /// A new sequence that will be fed `prompt`, starting from the longest run of whole
    /// blocks of it already in the prefix cache. Returns the sequence and how many prompt
    /// tokens are already cached: feed it `prompt[cached..]`. At least one token is always
    /// left to evaluate, so the caller gets logits. Without prefix caching, `cached` is 0.
    pub fn new_sequence_cached(&mut self, prompt: &[u32]) -> (SeqId, usize) {
        let id = self.new_sequence();
        if !self.prefix_cache || prompt.is_empty() {
            return (id, 0);
        }
        let max_blocks = (prompt.len() - 1) / self.alloc.block_size();
        let blocks = self.alloc.lookup_prefix(prompt, max_blocks);
        let cached = blocks.len() * self.alloc.block_size();
        if let Some(s) = self.seqs.get_mut(&id) {
            s.n_past = cached;
            s.tokens = prompt[..cached].to_vec();
            s.blocks = blocks;
        }
        (id, cached)
    }

    /// Cache blocks held by at least one sequence, and the total.
    pub fn kv_blocks(&self) -> (usize, usize) {
        (self.alloc.n_used(), self.alloc.n_blocks())
    }

    /// Blocks that could be handed out now (free or cached and unheld).
    pub fn free_blocks(&self) -> usize {
        self.alloc.n_free()
    }

    pub fn block_size(&self) -> usize {
        self.alloc.block_size()
    }

    /// Prefix-cache counters: (blocks looked up, blocks found, blocks registered now).
    pub fn prefix_cache_stats(&self) -> (u64, u64, usize) {
        (
            self.alloc.prefix_queries,
            self.alloc.prefix_hits,
            self.alloc.n_cached(),
        )
    }

    /// Forgets a sequence and returns its blocks to the pool.
    pub fn free_sequence(&mut self, id: SeqId) {
        if let Some(mut s) = self.seqs.remove(&id) {
            self.alloc.release(&mut s.blocks);
        }
    }

    /// Tokens of `id` already in the cache.
    pub fn seq_len(&self, id: SeqId) -> Result<usize, EngineError> {
        self.seqs
            .get(&id)
            .map(|s| s.n_past)
            .ok_or(EngineError::NoSuchSequence(id))
    }

    /// The block table of a sequence (for checks and traces).
    pub fn block_table(&self, id: SeqId) -> Result<&[u32], EngineError> {
        self.seqs
            .get(&id)
            .map(|s| s.blocks.as_slice())
            .ok_or(EngineError::NoSuchSequence(id))
    }

    /// Evaluates one step for several sequences at once. Returns, per input, its logits
    /// (`[0|1|n_tokens, n_vocab]`).
    pub fn forward(
        &mut self,
        inputs: &[SeqInput<'_>],
        taps: &mut Taps<'_>,
    ) -> Result<Vec<HostTensor>, EngineError> {
        let (out, ranges) = self.step(inputs, taps, LogitsOut::Full)?;
        let StepOut::Full(logits) = out else {
            unreachable!("full logits were asked for")
        };
        let v = logits.cols();
        if let [r] = ranges.as_slice() {
            if r.start == 0 && r.len() == logits.rows() {
                // One sequence wants every output row: hand the tensor over (a vocabulary-wide
                // copy per step is measurable in decode).
                return Ok(vec![logits]);
            }
        }
        Ok(ranges
            .into_iter()
            .map(|r| HostTensor::matrix(r.len(), v, logits.data[r.start * v..r.end * v].to_vec()))
            .collect())
    }

    /// [`forward`](Self::forward), with the output rows lent to `to` where they landed on the
    /// host instead of handed over ([`LogitsOut::Lend`]: on a GPU, the page-locked buffer the
    /// device copied them into, as llama.cpp's logits buffer; no further copy). `to` is called
    /// once with every output row, each input's rows consecutive and in input order,
    /// `n_vocab` values a row. Returns, per input, its range of output rows.
    pub fn forward_lend(
        &mut self,
        inputs: &[SeqInput<'_>],
        taps: &mut Taps<'_>,
        to: &dyn Fn(&[f32]),
    ) -> Result<Vec<std::ops::Range<usize>>, EngineError> {
        let lend = LendRows(to);
        let (out, ranges) = self.step(inputs, taps, LogitsOut::Lend(&lend))?;
        let StepOut::Lent { .. } = out else {
            unreachable!("lent rows were asked for")
        };
        Ok(ranges)
    }

    /// [`forward`](Self::forward), with every output row reduced where the backend computed
    /// it to its `k` largest logits and the monitors' statistics ([`LogitsSummary`]): on a GPU
    /// only those cross to the host. Returns, per input, the summaries of its output rows.
    pub fn forward_top(
        &mut self,
        inputs: &[SeqInput<'_>],
        taps: &mut Taps<'_>,
        k: usize,
    ) -> Result<Vec<Vec<LogitsSummary>>, EngineError> {
        self.forward_top_pick(inputs, taps, k, &[])
    }

    /// [`forward_top`](Self::forward_top), and for each output row whose entry of `picks` is
    /// `Some` (one entry per output row, the inputs' rows in order, or none at all) what it
    /// asks of the whole row ([`RowPick`]: a token drawn from it, or its total weight for
    /// top-p), made where the row was computed, so on a GPU the row need not cross.
    pub fn forward_top_pick(
        &mut self,
        inputs: &[SeqInput<'_>],
        taps: &mut Taps<'_>,
        k: usize,
        picks: &[Option<RowPick>],
    ) -> Result<Vec<Vec<LogitsSummary>>, EngineError> {
        let out = if picks.iter().any(Option::is_some) {
            LogitsOut::TopPick(k.max(1), picks)
        } else {
            LogitsOut::Top(k.max(1))
        };
        let (out, ranges) = self.step(inputs, taps, out)?;
        let StepOut::Top(rows) = out else {
            unreachable!("summaries were asked for")
        };
        Ok(ranges
            .into_iter()
            .map(|r| rows.get(r).map(<[_]>::to_vec).unwrap_or_default())
            .collect())
    }

    /// One step: the batch built from `inputs`, run; the output as `out` asks and, per input,
    /// its range of output rows.
    fn step(
        &mut self,
        inputs: &[SeqInput<'_>],
        taps: &mut Taps<'_>,
        out: LogitsOut<'_>,
    ) -> Result<(StepOut, Vec<std::ops::Range<usize>>), EngineError> {
        lockstep_graph::marks::mark(lockstep_graph::marks::Mark::EngineEntry);
        let vocab = self.n_vocab();
        // Validate everything before touching state, so a bad request leaves no trace.
        for (i, inp) in inputs.iter().enumerate() {
            let s = self
                .seqs
                .get(&inp.seq)
                .ok_or(EngineError::NoSuchSequence(inp.seq))?;
            if inputs[..i].iter().any(|o| o.seq == inp.seq) {
                return Err(EngineError::DuplicateSequence(inp.seq));
            }
            if inp.tokens.is_empty() {
                return Err(EngineError::EmptyInput(inp.seq));
            }
            let needed = s.n_past + inp.tokens.len();
            if needed > self.n_ctx {
                return Err(EngineError::ContextOverflow {
                    seq: inp.seq,
                    needed,
                    n_ctx: self.n_ctx,
                });
            }
            if let Some((index, &id)) = inp
                .tokens
                .iter()
                .enumerate()
                .find(|(_, &t)| t as usize >= vocab)
            {
                return Err(EngineError::TokenOutOfRange {
                    seq: inp.seq,
                    index,
                    id,
                    vocab,
                });
            }
        }
        let new_blocks: usize = inputs
            .iter()
            .map(|inp| {
                let s = &self.seqs[&inp.seq];
                (s.n_past + inp.tokens.len())
                    .div_ceil(self.alloc.block_size())
                    .saturating_sub(s.blocks.len())
            })
            .sum();
        if new_blocks > self.alloc.n_free() {
            return Err(EngineError::CacheFull {
                needed_blocks: new_blocks,
                free_blocks: self.alloc.n_free(),
                block_size: self.alloc.block_size(),
            });
        }

        let mut batch = Batch::default();
        let mut out_ranges = Vec::with_capacity(inputs.len());
        for inp in inputs {
            let s = self
                .seqs
                .get_mut(&inp.seq)
                .ok_or(EngineError::NoSuchSequence(inp.seq))?;
            let total = s.n_past + inp.tokens.len();
            self.alloc.ensure(&mut s.blocks, total)?;
            let first_row = batch.tokens.len();
            for (i, &t) in inp.tokens.iter().enumerate() {
                let pos = s.n_past + i;
                batch.tokens.push(t);
                batch.positions.push(pos as u32);
                batch.slots.push(self.alloc.slot(&s.blocks, pos));
            }
            let out_start = batch.output_rows.len();
            match inp.logits {
                Logits::None => {}
                Logits::Last => batch.output_rows.push(first_row + inp.tokens.len() - 1),
                Logits::LastN(n) => {
                    let n = n.min(inp.tokens.len());
                    let end = first_row + inp.tokens.len();
                    batch.output_rows.extend(end - n..end)
                }
                Logits::All => batch
                    .output_rows
                    .extend(first_row..first_row + inp.tokens.len()),
            }
            out_ranges.push(out_start..batch.output_rows.len());
            batch.seqs.push(BatchSeq {
                first_row,
                n_rows: inp.tokens.len(),
                first_pos: s.n_past as u32,
                kv_slots: (0..total).map(|p| self.alloc.slot(&s.blocks, p)).collect(),
                mask: inp.mask.clone(),
            });
        }

        lockstep_graph::marks::mark(lockstep_graph::marks::Mark::BatchBuilt);
        let result = forward(
            &self.backend,
            &self.model,
            &mut self.cache,
            &batch,
            taps,
            out,
        )?;
        lockstep_graph::marks::mark(lockstep_graph::marks::Mark::ForwardReturned);
        for inp in inputs {
            if let Some(s) = self.seqs.get_mut(&inp.seq) {
                s.n_past += inp.tokens.len();
                // A masked step's K/V is not a function of the tokens alone: never share it.
                if self.prefix_cache
                    && inp.mask.is_none()
                    && s.tokens.len() + inp.tokens.len() == s.n_past
                {
                    s.tokens.extend_from_slice(inp.tokens);
                    let bs = self.alloc.block_size();
                    // Register only when this step filled a block.
                    if s.n_past / bs > (s.n_past - inp.tokens.len()) / bs {
                        self.alloc.register_prefix(&s.blocks, &s.tokens);
                    }
                }
            }
        }
        lockstep_graph::marks::mark(lockstep_graph::marks::Mark::EngineExit);
        Ok((result, out_ranges))
    }

    /// Convenience: one sequence, logits of the last token.
    pub fn forward_one(
        &mut self,
        seq: SeqId,
        tokens: &[u32],
        taps: &mut Taps<'_>,
    ) -> Result<Vec<f32>, EngineError> {
        let mut out = self.forward(
            &[SeqInput {
                seq,
                tokens,
                logits: Logits::Last,
                mask: None,
            }],
            taps,
        )?;
        Ok(out.pop().map(|t| t.data).unwrap_or_default())
    }

    /// Convenience: one sequence, its last token's logits reduced to the `k` largest and the
    /// monitors' statistics (see [`forward_top`](Self::forward_top)).
    pub fn forward_one_top(
        &mut self,
        seq: SeqId,
        tokens: &[u32],
        taps: &mut Taps<'_>,
        k: usize,
    ) -> Result<LogitsSummary, EngineError> {
        self.forward_one_top_pick(seq, tokens, taps, k, None)
    }

    /// [`forward_one_top`](Self::forward_one_top), with what `pick` asks of the whole row
    /// (see [`forward_top_pick`](Self::forward_top_pick)).
    pub fn forward_one_top_pick(
        &mut self,
        seq: SeqId,
        tokens: &[u32],
        taps: &mut Taps<'_>,
        k: usize,
        pick: Option<RowPick>,
    ) -> Result<LogitsSummary, EngineError> {
        let mut out = self.forward_top_pick(
            &[SeqInput {
                seq,
                tokens,
                logits: Logits::Last,
                mask: None,
            }],
            taps,
            k,
            &[pick],
        )?;
        let Some(row) = out.pop().and_then(|mut rows| rows.pop()) else {
            unreachable!("a step with one output row returns one summary")
        };
        Ok(row)
    }
}
