//! Continuous batching: many requests share each forward step of one [`Engine`].
//!
//! Every [`Scheduler::step`] builds one batch from scratch (as vLLM's v1 scheduler does):
//!
//! 1. cancelled requests are dropped and their blocks freed;
//! 2. every running request that is decoding gets its one token (decode streams are never
//!    stalled by a long prompt);
//! 3. running requests still prefilling get chunks of their prompt from what is left of the
//!    token budget (chunked prefill);
//! 4. waiting requests are admitted, first come first served, while there are seats, budget
//!    and free blocks; a prompt whose leading whole blocks are in the prefix cache starts
//!    after them.
//!
//! When a running request needs a block and none is free, the most recently admitted running
//! request is preempted: its blocks are freed and it goes back to the front of the queue, to be
//! recomputed later (its prompt and generated tokens are prefilled again; its sampler, stop
//! and stream state are kept, so it continues exactly where it stopped).
//!
//! Batch invariance is by construction: a request's rows never depend on the rest of the batch
//! (every backend guarantees it bit for bit: see ARCHITECTURE.md), nothing here depends on
//! batch composition except *when* a request's tokens are computed, never *how*, and a chunked
//! or recomputed prefill gives the same bits as one prefill. So a request's tokens and
//! logprobs are those it gets alone.

use std::collections::VecDeque;
use std::sync::Arc;

use lockstep_graph::{row_total, Backend, HostTensor, LogitsSummary, RowPick, Taps};
use lockstep_sampling::{
    AdjustedNeed, FinishReason, ParamError, Sampler, SamplingParams, StopChecker,
    MAX_TOP_CANDIDATES,
};
use lockstep_tokenizer::{StreamDecoder, Tokenizer};

use crate::generate::sample_summary;
use crate::monitor::{Monitor, MonitorConfig, MonitorWarning};
use crate::{Engine, Logits, SeqId, SeqInput};

/// Identifies a request for its whole life in the scheduler.
pub type RequestId = u64;

/// Most `top_logprobs` a request may ask for (OpenAI's limit).
pub const MAX_TOP_LOGPROBS: usize = 20;

#[derive(Clone, Debug)]
pub struct SchedulerConfig {
    /// Requests running at once (sequences in the batch).
    pub max_seqs: usize,
    /// Tokens per forward step, across all sequences (decode tokens and prefill chunks).
    pub max_batch_tokens: usize,
    /// Requests waiting for a seat; past it, [`Scheduler::submit`] refuses.
    pub max_queue: usize,
}

impl Default for SchedulerConfig {
    fn default() -> SchedulerConfig {
        SchedulerConfig {
            max_seqs: 16,
            max_batch_tokens: 512,
            max_queue: 256,
        }
    }
}

/// What a client asks for.
#[derive(Clone, Debug)]
pub struct Request {
    pub prompt: Vec<u32>,
    pub params: SamplingParams,
    /// `Some(k)`: report the chosen token's log-probability and the `k` most likely tokens'
    /// (`k <= MAX_TOP_LOGPROBS`). Log-probabilities are of the model's distribution (log
    /// softmax of the raw logits), before penalties, bias and filters, as vLLM reports them.
    pub logprobs: Option<usize>,
    /// Added to the logits of these tokens before sampling.
    pub logit_bias: Vec<(u32, f32)>,
    pub monitor: MonitorConfig,
    /// Hand back the raw logits each token was sampled from (audits; costs a copy of a
    /// vocabulary-sized row per token).
    pub capture_logits: bool,
}

/// Why a request was refused. Each names the problem; the server maps them to statuses.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum SubmitError {
    #[error("the queue is full ({0} requests waiting); retry later")]
    QueueFull(usize),
    #[error("the prompt is empty")]
    EmptyPrompt,
    #[error("the prompt has {n_prompt} tokens; at most {limit} fit (context {n_ctx}, cache {cache_tokens} tokens), and at least one must be generated")]
    PromptTooLong {
        n_prompt: usize,
        limit: usize,
        n_ctx: usize,
        cache_tokens: usize,
    },
    #[error("prompt token {index} is {id}, outside the vocabulary of {vocab}")]
    TokenOutOfRange { index: usize, id: u32, vocab: usize },
    #[error("logit_bias names token {id}, outside the vocabulary of {vocab}")]
    BiasOutOfRange { id: u32, vocab: usize },
    #[error("logit_bias for token {id} is {value}: must be a finite number")]
    BiasNotFinite { id: u32, value: f32 },
    #[error("top_logprobs is {0}: at most {MAX_TOP_LOGPROBS}")]
    TooManyLogprobs(usize),
    #[error(transparent)]
    Params(#[from] ParamError),
}

/// Log-probabilities at one generated position.
#[derive(Clone, Debug, PartialEq)]
pub struct TokenLogprob {
    pub token: u32,
    pub logprob: f32,
    /// The most likely tokens, most likely first (ties: lowest id first).
    pub top: Vec<(u32, f32)>,
}

/// How a request ended.
#[derive(Clone, Debug)]
pub struct Finished {
    pub finish: FinishReason,
    /// Text released at the end (held back by the stream decoder or the stop checker).
    pub tail: String,
    pub n_prompt: usize,
    /// Prompt tokens found in the prefix cache at (first) admission.
    pub n_cached_prompt: usize,
    pub n_generated: usize,
    /// How many times it was preempted and recomputed.
    pub preemptions: u32,
    pub warnings: Vec<MonitorWarning>,
}

#[derive(Clone, Debug)]
pub enum Event {
    /// One generated token; `text` is what became safe to stream (may be empty). An
    /// end-of-generation token that ends the request is reported with empty text.
    Token {
        token: u32,
        text: String,
        logprob: Option<TokenLogprob>,
        /// The raw logits it was sampled from, with [`Request::capture_logits`].
        logits: Option<Vec<f32>>,
    },
    Finished(Finished),
    /// The request could not continue (the step failed, or the logits were garbage).
    Failed(String),
    /// A generation monitor fired for this request (reported when it fires; the request goes
    /// on, and [`Finished::warnings`] lists every alarm again at the end).
    Alarm(MonitorWarning),
}

/// Counters and gauges for metrics.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SchedulerStats {
    pub waiting: usize,
    pub running: usize,
    pub kv_blocks_used: usize,
    pub kv_blocks_total: usize,
    pub steps: u64,
    pub preemptions: u64,
    pub prompt_tokens_computed: u64,
    pub generated_tokens: u64,
    pub prefix_blocks_queried: u64,
    pub prefix_blocks_hit: u64,
    /// Sampled rows by how their logits reached the sampler: whole (every row of a step with
    /// `set_full_logits`, else the rows that need all of themselves), reduced to their largest
    /// logits, or reduced with what the sampler needed of the rest made where the row was
    /// computed (`RowPick`: a drawn token, the total weight for top-p, adjusted tokens' logits).
    pub rows_full: u64,
    pub rows_reduced: u64,
    pub rows_picked: u64,
    /// Of the picked top-p rows, those whose nucleus reached past the largest logits, so the
    /// row itself crossed.
    pub nucleus_rows_copied: u64,
    /// Rows with penalties or a logit bias whose largest logits held too few tokens outside
    /// the adjusted ones (`RowPick::needs_row`), so the row itself crossed.
    pub adjusted_rows_copied: u64,
    /// Seconds spent in forward passes, and in whole steps (scheduling, sampling, logprobs,
    /// monitors and stream decoding included).
    pub forward_seconds: f64,
    pub step_seconds: f64,
}

struct Active {
    id: RequestId,
    req: Request,
    seq: Option<SeqId>,
    sampler: Sampler,
    /// Prompt then generated tokens: the penalty history and what recomputation feeds.
    history: Vec<u32>,
    /// Tokens of `history` whose K/V are in the cache.
    computed: usize,
    n_generated: usize,
    decoder: StreamDecoder,
    stops: StopChecker,
    monitor: Monitor,
    n_cached_prompt: Option<usize>,
    preemptions: u32,
    /// Monitor warnings already reported as [`Event::Alarm`].
    alarms_reported: usize,
}

impl Active {
    fn pending(&self) -> usize {
        self.history.len() - self.computed
    }
}

pub struct Scheduler<B: Backend> {
    engine: Engine<B>,
    tokenizer: Arc<Tokenizer>,
    cfg: SchedulerConfig,
    waiting: VecDeque<Active>,
    /// In admission order (the last is preempted first).
    running: Vec<Active>,
    cancelled: Vec<RequestId>,
    next_id: RequestId,
    /// Longest sequence (prompt + generated) a request may reach.
    max_len: usize,
    /// Always take whole logits rows to the host ([`Scheduler::set_full_logits`]).
    full_logits: bool,
    stats: SchedulerStats,
}

impl<B: Backend> Scheduler<B> {
    /// Take every output row's whole logits to the host, even when the requests' samplers
    /// need only the largest ones (by default those rows are reduced where they were
    /// computed; the tokens are the same either way).
    pub fn set_full_logits(&mut self, on: bool) {
        self.full_logits = on;
    }

    pub fn new(
        engine: Engine<B>,
        tokenizer: Arc<Tokenizer>,
        cfg: SchedulerConfig,
    ) -> Result<Scheduler<B>, crate::EngineError> {
        if cfg.max_seqs == 0 || cfg.max_batch_tokens == 0 {
            return Err(crate::EngineError::Config(
                "max_seqs and max_batch_tokens must be positive".into(),
            ));
        }
        let (_, total_blocks) = engine.kv_blocks();
        let max_len = engine.n_ctx().min(total_blocks * engine.block_size());
        Ok(Scheduler {
            engine,
            tokenizer,
            cfg,
            waiting: VecDeque::new(),
            running: Vec::new(),
            cancelled: Vec::new(),
            next_id: 0,
            max_len,
            full_logits: false,
            stats: SchedulerStats::default(),
        })
    }

    pub fn engine(&self) -> &Engine<B> {
        &self.engine
    }

    pub fn tokenizer(&self) -> &Arc<Tokenizer> {
        &self.tokenizer
    }

    pub fn config(&self) -> &SchedulerConfig {
        &self.cfg
    }

    /// Longest sequence (prompt + generated tokens) a request may reach.
    pub fn max_len(&self) -> usize {
        self.max_len
    }

    /// Whether anything is waiting or running.
    pub fn has_work(&self) -> bool {
        !self.waiting.is_empty() || !self.running.is_empty()
    }

    pub fn stats(&self) -> SchedulerStats {
        let (used, total) = self.engine.kv_blocks();
        let (queried, hit, _) = self.engine.prefix_cache_stats();
        SchedulerStats {
            waiting: self.waiting.len(),
            running: self.running.len(),
            kv_blocks_used: used,
            kv_blocks_total: total,
            prefix_blocks_queried: queried,
            prefix_blocks_hit: hit,
            ..self.stats.clone()
        }
    }

    /// The block table of a running request (tests: where its blocks lie).
    pub fn block_table(&self, id: RequestId) -> Option<&[u32]> {
        let a = self.running.iter().find(|a| a.id == id)?;
        self.engine.block_table(a.seq?).ok()
    }

    /// Queues a request after validating it; nothing changes when it is refused.
    pub fn submit(&mut self, req: Request) -> Result<RequestId, SubmitError> {
        self.validate(&req)?;
        if self.waiting.len() >= self.cfg.max_queue {
            return Err(SubmitError::QueueFull(self.waiting.len()));
        }
        let sampler = Sampler::new(req.params.clone())?;
        let id = self.next_id;
        self.next_id += 1;
        self.waiting.push_back(Active {
            id,
            history: req.prompt.clone(),
            computed: 0,
            n_generated: 0,
            decoder: StreamDecoder::new(false),
            stops: StopChecker::new(req.params.stop.iter().cloned()),
            monitor: Monitor::new(req.monitor.clone()),
            sampler,
            seq: None,
            n_cached_prompt: None,
            preemptions: 0,
            alarms_reported: 0,
            req,
        });
        Ok(id)
    }

    fn validate(&self, req: &Request) -> Result<(), SubmitError> {
        req.params.validate()?;
        if req.prompt.is_empty() {
            return Err(SubmitError::EmptyPrompt);
        }
        let vocab = self.engine.n_vocab();
        if let Some((index, &id)) = req
            .prompt
            .iter()
            .enumerate()
            .find(|(_, &t)| t as usize >= vocab)
        {
            return Err(SubmitError::TokenOutOfRange { index, id, vocab });
        }
        if req.prompt.len() >= self.max_len {
            let (_, total) = self.engine.kv_blocks();
            return Err(SubmitError::PromptTooLong {
                n_prompt: req.prompt.len(),
                limit: self.max_len.saturating_sub(1),
                n_ctx: self.engine.n_ctx(),
                cache_tokens: total * self.engine.block_size(),
            });
        }
        for &(id, value) in &req.logit_bias {
            if id as usize >= vocab {
                return Err(SubmitError::BiasOutOfRange { id, vocab });
            }
            if !value.is_finite() {
                return Err(SubmitError::BiasNotFinite { id, value });
            }
        }
        if let Some(k) = req.logprobs {
            if k > MAX_TOP_LOGPROBS {
                return Err(SubmitError::TooManyLogprobs(k));
            }
        }
        Ok(())
    }

    /// Cancels a request: a waiting one leaves the queue now, a running one frees its blocks
    /// at the start of the next step. No further event is produced for it.
    pub fn cancel(&mut self, id: RequestId) {
        if let Some(i) = self.waiting.iter().position(|a| a.id == id) {
            self.waiting.remove(i);
        } else if self.running.iter().any(|a| a.id == id) {
            self.cancelled.push(id);
        }
    }

    fn release(&mut self, a: &mut Active) {
        if let Some(seq) = a.seq.take() {
            self.engine.free_sequence(seq);
        }
        a.computed = 0;
    }

    /// Blocks `a` needs beyond its table to hold `n_new` more tokens.
    fn blocks_needed(&self, a: &Active, n_new: usize) -> usize {
        let bs = self.engine.block_size();
        let have = a
            .seq
            .and_then(|s| self.engine.block_table(s).ok())
            .map_or(0, <[u32]>::len);
        (a.computed + n_new).div_ceil(bs).saturating_sub(have)
    }

    /// Runs one forward step over everything scheduled; returns the events it produced, in
    /// batch order. Does nothing (and returns nothing) when there is no work.
    pub fn step(&mut self) -> Vec<(RequestId, Event)> {
        let t0 = std::time::Instant::now();
        let events = self.step_inner();
        self.stats.step_seconds += t0.elapsed().as_secs_f64();
        events
    }

    fn step_inner(&mut self) -> Vec<(RequestId, Event)> {
        let mut events = Vec::new();
        // 1. Cancellations.
        for id in std::mem::take(&mut self.cancelled) {
            if let Some(i) = self.running.iter().position(|a| a.id == id) {
                let mut a = self.running.remove(i);
                self.release(&mut a);
            }
        }

        // 2.-3. Running requests: decodes first, then prefill chunks. `plan[i]` is the number
        // of tokens running request `i` feeds this step.
        let mut budget = self.cfg.max_batch_tokens;
        let mut free = self.engine.free_blocks();
        let mut plan: Vec<usize> = vec![0; self.running.len()];
        for pass_decode in [true, false] {
            let mut i = 0;
            while i < self.running.len() {
                let pending = self.running[i].pending();
                if (pending == 1) != pass_decode || plan[i] > 0 || budget == 0 {
                    i += 1;
                    continue;
                }
                let n = pending.min(budget);
                let need = self.blocks_needed(&self.running[i], n);
                if need <= free {
                    free -= need;
                    budget -= n;
                    plan[i] = n;
                    i += 1;
                    continue;
                }
                // Out of blocks: preempt the newest running request (perhaps this one).
                let victim = self.running.len() - 1;
                let mut a = self.running.remove(victim);
                let victim_plan = plan.remove(victim);
                self.release(&mut a);
                a.preemptions += 1;
                self.stats.preemptions += 1;
                budget += victim_plan;
                // Its blocks are free now (those it shared stay held by the others: the
                // engine's count is the truth), and what it reserved this step is returned.
                free = self
                    .engine
                    .free_blocks()
                    .saturating_sub(self.reserved_blocks(&plan));
                self.waiting.push_front(a);
                // Retry request `i` (if it was not the victim itself).
            }
        }

        // 4. Admissions.
        while self.running.len() < self.cfg.max_seqs && budget > 0 {
            let Some(mut a) = self.waiting.pop_front() else {
                break;
            };
            let (seq, cached) = self.engine.new_sequence_cached(&a.history);
            a.seq = Some(seq);
            a.computed = cached;
            if a.n_cached_prompt.is_none() {
                a.n_cached_prompt = Some(cached.min(a.req.prompt.len()));
            }
            // The prefix lookup may have taken cached blocks off the free count.
            free = self
                .engine
                .free_blocks()
                .saturating_sub(self.reserved_blocks(&plan));
            let n = a.pending().min(budget);
            let need = self.blocks_needed(&a, n);
            if need > free {
                // Not now; it keeps its place at the head of the queue.
                self.release(&mut a);
                self.waiting.push_front(a);
                break;
            }
            budget -= n;
            plan.push(n);
            self.running.push(a);
        }

        if plan.iter().all(|&n| n == 0) {
            return events;
        }
        self.run_step(&plan, &mut events);
        events
    }

    /// Blocks the requests already planned will take this step.
    fn reserved_blocks(&self, plan: &[usize]) -> usize {
        plan.iter()
            .zip(&self.running)
            .map(|(&n, a)| if n > 0 { self.blocks_needed(a, n) } else { 0 })
            .sum()
    }

    fn run_step(&mut self, plan: &[usize], events: &mut Vec<(RequestId, Event)>) {
        // Each row goes to the host reduced to its largest logits when its request needs no
        // more (`Sampler::top_needed`: greedy or top-k without penalties), or needs of the
        // rest of the row only what the backend can make where it computed it (`RowPick`: a
        // token drawn from the whole row for temperature sampling without top-k or top-p; the
        // row's total weight and a prefix holding the nucleus for top-p without top-k; the
        // total for logprobs, whose top alternatives are among the largest logits; the logits
        // of the tokens penalties and a logit bias adjust); on a GPU that is a few hundred
        // bytes a row instead of the vocabulary. A row that needs all of itself (captured
        // logits, or penalties with temperature sampling without top-k) crosses whole, alone.
        // The rows that sample are those that end their prompt.
        let vocab = self.engine.n_vocab();
        let full_logits = self.full_logits;
        let samples =
            |n: usize, a: &Active| a.seq.is_some() && n > 0 && a.computed + n == a.history.len();
        // Per sampling row, the largest logits it needs, what it asks of the rest of the row,
        // and the tokens whose logits it needs beside them (penalties and a logit bias
        // adjust those: `Sampler::top_needed_adjusted`); a row that needs all of itself (or
        // keeps it: captured logits) asks for it alone, so the others still cross reduced.
        // `None` for the step: whole rows for everyone (`set_full_logits`).
        let wants: Option<Vec<RowWant>> = (!full_logits).then(|| {
            plan.iter()
                .zip(&self.running)
                .filter(|&(&n, a)| samples(n, a))
                .map(|(_, a)| row_want(a, vocab))
                .collect()
        });
        // Per running request, whether its row crosses whole.
        let mut whole_rows = vec![false; self.running.len()];
        if let Some(w) = &wants {
            let sampling = plan
                .iter()
                .zip(&self.running)
                .enumerate()
                .filter(|(_, (&n, a))| samples(n, a));
            for ((i, _), (_, p, _)) in sampling.zip(w) {
                whole_rows[i] = p.is_some_and(|p| matches!(p.kind, PickKind::Whole));
            }
        }
        // The draws take their random values now (given back if the row turns out bad).
        let picks: Vec<Option<RowPick<'_>>> = match &wants {
            Some(w) if w.iter().any(|(_, p, _)| p.is_some()) => plan
                .iter()
                .zip(self.running.iter_mut())
                .filter(|(&n, a)| samples(n, a))
                .zip(w)
                .map(|((_, a), (_, want, need))| {
                    want.map(|p| RowPick {
                        gather: need.as_ref().map_or(&[][..], |n| &n.ids),
                        untouched: need.as_ref().map_or(0, |n| n.untouched),
                        ..p.make(&mut a.sampler)
                    })
                })
                .collect(),
            _ => Vec::new(),
        };
        let mut inputs = Vec::new();
        let mut who = Vec::new();
        for (i, (&n, a)) in plan.iter().zip(&self.running).enumerate() {
            let Some(seq) = a.seq else { continue };
            if n == 0 {
                continue;
            }
            let ends_prompt = a.computed + n == a.history.len();
            inputs.push(SeqInput {
                seq,
                tokens: &a.history[a.computed..a.computed + n],
                logits: if ends_prompt {
                    Logits::Last
                } else {
                    Logits::None
                },
                mask: None,
            });
            who.push(i);
        }
        let n_rows = plan
            .iter()
            .zip(&self.running)
            .filter(|&(&n, a)| samples(n, a))
            .count() as u64;
        let n_picked = picks.iter().flatten().count() as u64;
        let n_whole = whole_rows.iter().filter(|&&w| w).count() as u64;
        match wants {
            Some(_) => {
                self.stats.rows_picked += n_picked - n_whole;
                self.stats.rows_reduced += n_rows - n_picked;
                self.stats.rows_full += n_whole;
            }
            None => self.stats.rows_full += n_rows,
        }
        let top = wants
            .as_ref()
            .map(|w| w.iter().map(|(k, _, _)| *k).fold(1, usize::max));
        self.stats.steps += 1;
        let t0 = std::time::Instant::now();
        let result = match top {
            Some(k) => self
                .engine
                .forward_top_pick(&inputs, &mut Taps::none(), k, &picks)
                .map(|rows| rows.into_iter().map(StepRows::Top).collect::<Vec<_>>()),
            None => self
                .engine
                .forward(&inputs, &mut Taps::none())
                .map(|rows| rows.into_iter().map(StepRows::Full).collect()),
        };
        self.stats.forward_seconds += t0.elapsed().as_secs_f64();
        drop(inputs);
        let logits = match result {
            Ok(l) => l,
            Err(e) => {
                // Nothing of this step happened (the engine validates before changing state),
                // but the batch cannot be retried blindly: fail the requests in it.
                let msg = format!("forward step failed: {e}");
                let mut failed: Vec<usize> = who.clone();
                failed.sort_unstable();
                for &i in failed.iter().rev() {
                    let mut a = self.running.remove(i);
                    self.release(&mut a);
                    events.push((a.id, Event::Failed(msg.clone())));
                }
                return;
            }
        };
        let mut done: Vec<usize> = Vec::new();
        for (&i, row) in who.iter().zip(logits) {
            let n = plan[i];
            let a = &mut self.running[i];
            if a.n_generated == 0 {
                self.stats.prompt_tokens_computed += n as u64;
            }
            a.computed += n;
            let row = match &row {
                StepRows::Full(t) if !t.data.is_empty() => RowLogits::Full(&t.data),
                // Asked for whole: the row (a backend that kept it back fails the request:
                // an empty row is a sampling error).
                StepRows::Top(rows) if !rows.is_empty() && whole_rows[i] => {
                    RowLogits::Full(rows[0].row.as_deref().unwrap_or(&[]))
                }
                StepRows::Top(rows) if !rows.is_empty() => {
                    if rows[0].row.is_some() {
                        if a.req.logit_bias.is_empty() && !a.sampler.params().penalties_active() {
                            self.stats.nucleus_rows_copied += 1;
                        } else {
                            self.stats.adjusted_rows_copied += 1;
                        }
                    }
                    RowLogits::Top(&rows[0])
                }
                _ => continue,
            };
            let sampled = sample_one(a, row, &self.tokenizer, self.max_len);
            let (token_event, end) = match sampled {
                Ok((ev, finished)) => {
                    self.stats.generated_tokens += 1;
                    (Some(ev), finished.map(Event::Finished))
                }
                Err(msg) => (None, Some(Event::Failed(msg))),
            };
            // Order: the token, the alarms it raised (reported as they fire; `Finished` lists
            // them all again), then the end if it is one.
            if let Some(ev) = token_event {
                events.push((a.id, ev));
            }
            for w in &a.monitor.warnings[a.alarms_reported..] {
                events.push((a.id, Event::Alarm(w.clone())));
            }
            a.alarms_reported = a.monitor.warnings.len();
            if let Some(ev) = end {
                events.push((a.id, ev));
                done.push(i);
            }
        }
        done.sort_unstable();
        for &i in done.iter().rev() {
            let mut a = self.running.remove(i);
            self.release(&mut a);
        }
    }
}

/// A sampling row's want of a step: how many of its largest logits, what it asks of the rest
/// of the row, and the tokens whose logits it needs beside them.
type RowWant = (usize, Option<Pick>, Option<AdjustedNeed>);

/// What a sampling row asks of the rest of its row (`RowPick` before its random value):
/// nothing more than the largest logits, a draw, or a nucleus; and whether also the row's
/// total (logprobs; a nucleus brings it anyway).
#[derive(Clone, Copy)]
struct Pick {
    kind: PickKind,
    total: bool,
}

#[derive(Clone, Copy)]
enum PickKind {
    Top,
    Draw,
    Nucleus(f32),
    /// The row itself.
    Whole,
}

/// What `a`'s sampling row wants of a step (see `run_step`).
fn row_want(a: &Active, vocab: usize) -> RowWant {
    let whole = (1, Some(Pick::of(PickKind::Whole)), None);
    if a.req.capture_logits {
        return whole;
    }
    let s = &a.sampler;
    let biased = !a.req.logit_bias.is_empty();
    let (k, pick, gather) = if let Some(k) = s.top_needed(vocab).filter(|_| !biased) {
        (k, None, None)
    } else if biased || s.params().penalties_active() {
        let overridden: Vec<u32> = a.req.logit_bias.iter().map(|b| b.0).collect();
        match s.top_needed_adjusted(vocab, &a.history, &overridden) {
            Some(need) => (need.k, Some(Pick::of(PickKind::Top)), Some(need)),
            None => return whole,
        }
    } else if s.row_draw_needed(vocab) {
        (1, Some(Pick::of(PickKind::Draw)), None)
    } else if s.nucleus_needed(vocab) {
        let p = s.params().top_p;
        (1, Some(Pick::of(PickKind::Nucleus(p))), None)
    } else {
        return whole;
    };
    match a.req.logprobs {
        // The alternatives among the largest logits, the normalizer the total.
        Some(n) if n <= MAX_TOP_CANDIDATES => (
            k.max(n),
            Some(pick.unwrap_or(Pick::of(PickKind::Top)).with_total()),
            gather,
        ),
        Some(_) => whole,
        None => (k, pick, gather),
    }
}

impl Pick {
    fn of(kind: PickKind) -> Pick {
        Pick { kind, total: false }
    }

    fn with_total(self) -> Pick {
        Pick {
            total: true,
            ..self
        }
    }

    /// The pick for `sampler`'s row, taking its draw's random value now.
    fn make(self, sampler: &mut Sampler) -> RowPick<'static> {
        let pick = match self.kind {
            PickKind::Top => RowPick::default(),
            PickKind::Draw => RowPick::draw(sampler.begin_row_draw()),
            PickKind::Nucleus(p) => RowPick::nucleus(p),
            PickKind::Whole => RowPick::whole_row(),
        };
        if self.total {
            pick.with_total()
        } else {
            pick
        }
    }
}

/// One step's output rows of one request.
enum StepRows {
    Full(HostTensor),
    Top(Vec<LogitsSummary>),
}

/// A request's next-token logits: the row, or its summary (when its sampler needs no more).
#[derive(Clone, Copy)]
enum RowLogits<'a> {
    Full(&'a [f32]),
    Top(&'a LogitsSummary),
}

/// Samples `a`'s next token from its logits row; returns the token event and, when this token
/// ends the request, how it ended.
fn sample_one(
    a: &mut Active,
    logits: RowLogits<'_>,
    tokenizer: &Tokenizer,
    max_len: usize,
) -> Result<(Event, Option<Finished>), String> {
    let step = a.n_generated;
    let chosen = match logits {
        RowLogits::Top(s) => {
            a.monitor.observe_summary(step, s);
            sample_summary(&mut a.sampler, s, &a.history, &a.req.logit_bias)
        }
        RowLogits::Full(logits) => {
            a.monitor.observe_logits(step, logits);
            if a.req.logit_bias.is_empty() {
                a.sampler.sample(logits, &a.history)
            } else {
                let mut r = logits.to_vec();
                for &(id, b) in &a.req.logit_bias {
                    if let Some(v) = r.get_mut(id as usize) {
                        *v += b;
                    }
                }
                a.sampler.sample(&r, &a.history)
            }
        }
    };
    let token = match chosen {
        Ok(t) => t,
        Err(e) => {
            let w = a
                .monitor
                .warnings
                .iter()
                .find(|w| w.step == step)
                .map(|w| format!(" ({w})"))
                .unwrap_or_default();
            return Err(format!("sampling failed: {e}{w}"));
        }
    };
    let full = match logits {
        RowLogits::Full(l) => Some(l),
        RowLogits::Top(_) => None,
    };
    let logprob = match (a.req.logprobs, logits) {
        (None, _) => None,
        (Some(k), RowLogits::Full(l)) => Some(logprobs_of(l, token, k)),
        (Some(k), RowLogits::Top(s)) => Some(
            logprobs_of_summary(s, token, k)
                .ok_or_else(|| format!("the logprob of token {token} did not reach the host"))?,
        ),
    };
    a.monitor.observe_token(step, token, tokenizer);
    a.history.push(token);
    a.n_generated += 1;
    let params = &a.req.params;
    let mut text = String::new();
    let mut finish = None;
    if tokenizer.is_eog(token) && !params.ignore_eos {
        finish = Some(FinishReason::Stop);
    } else {
        let piece = a
            .decoder
            .push(tokenizer, token)
            .map_err(|e| e.to_string())?;
        let r = a.stops.push(&piece);
        text = r.emit;
        if r.stopped {
            finish = Some(FinishReason::StopString);
        } else if params.length_reached(a.n_generated) || a.history.len() >= max_len {
            finish = Some(FinishReason::Length);
        }
    }
    let finished = finish.map(|finish| {
        let mut tail = String::new();
        if finish != FinishReason::StopString {
            let rest = a.decoder.finish();
            let r = a.stops.push(&rest);
            tail = r.emit;
            if !r.stopped {
                tail.push_str(&a.stops.finish());
            }
        }
        Finished {
            finish,
            tail,
            n_prompt: a.req.prompt.len(),
            n_cached_prompt: a.n_cached_prompt.unwrap_or(0),
            n_generated: a.n_generated,
            preemptions: a.preemptions,
            warnings: a.monitor.warnings.clone(),
        }
    });
    // A stop string found only in the tail still ends as a stop.
    let finished = finished.map(|mut f| {
        if f.finish != FinishReason::StopString && a.stops.is_stopped() {
            f.finish = FinishReason::StopString;
        }
        f
    });
    Ok((
        Event::Token {
            token,
            text,
            logprob,
            logits: full.filter(|_| a.req.capture_logits).map(<[f32]>::to_vec),
        },
        finished,
    ))
}

/// Log-softmax of the raw logits (in f64) at `token`, and the `k` most likely tokens.
pub fn logprobs_of(logits: &[f32], token: u32, k: usize) -> TokenLogprob {
    let s = LogitsSummary::of_row(logits, k);
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let total = row_total(logits).unwrap_or(f64::NAN);
    let logit = logits.get(token as usize).copied().unwrap_or(f32::NAN);
    logprobs_from(max, total, token, logit, &s.top, k)
}

/// [`logprobs_of`] from a row's summary (its `k` largest logits, and its total weight,
/// `RowPick::total`), bitwise the same; `None` when the summary lacks the chosen token's logit
/// (it is among the largest, in the nucleus prefix, or the backend's draw) or the total.
fn logprobs_of_summary(s: &LogitsSummary, token: u32, k: usize) -> Option<TokenLogprob> {
    let max = s.top.first()?.1;
    let total = s.total?;
    let logit = s
        .top
        .iter()
        .chain(s.nucleus.iter().flatten())
        .chain(&s.gathered)
        .find(|&&(id, _)| id == token)
        .map(|&(_, l)| l)
        .or(s.drawn_logit.filter(|_| s.drawn == Some(token)))
        .or_else(|| s.row.as_ref()?.get(token as usize).copied())?;
    Some(logprobs_from(max, total, token, logit, &s.top, k))
}

/// Log-softmax of the raw logits, in f64: `logit - (max + ln total)` with the row's total
/// weight in the sampler's tree (`row_total`, which a backend can make where the row is), the
/// `k` most likely tokens from `top` (the row's largest, in the sampler's order).
fn logprobs_from(
    max: f32,
    total: f64,
    token: u32,
    logit: f32,
    top: &[(u32, f32)],
    k: usize,
) -> TokenLogprob {
    let log_z = f64::from(max) + total.ln();
    let lp = |l: f32| (f64::from(l) - log_z) as f32;
    TokenLogprob {
        token,
        logprob: lp(logit),
        top: top.iter().take(k).map(|&(id, l)| (id, lp(l))).collect(),
    }
}
