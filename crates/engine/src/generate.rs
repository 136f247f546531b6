//! Text generation for one sequence: sample, stream complete UTF-8, stop on end-of-generation
//! tokens, stop strings, the token budget or a full context.

use std::time::{Duration, Instant};

use lockstep_graph::taps::Recorder;
use lockstep_graph::{Backend, LogitsSummary, RowPick, Taps};
use lockstep_sampling::{
    FinishReason, ParamError, Sampler, SamplingError, SamplingParams, StopChecker,
};
use lockstep_tokenizer::{StreamDecoder, Tokenizer, TokenizerError};

use crate::monitor::{Monitor, MonitorConfig, MonitorWarning, WarningKind};
use crate::{Engine, EngineError, SeqId};

#[derive(Debug, thiserror::Error)]
pub enum GenerateError {
    #[error(transparent)]
    Engine(#[from] EngineError),
    #[error(transparent)]
    Params(#[from] ParamError),
    #[error(transparent)]
    Sampling(#[from] SamplingError),
    #[error(transparent)]
    Tokenizer(#[from] TokenizerError),
    /// A monitor found the run broken beyond continuing (non-finite logits).
    #[error("generation stopped: {0}")]
    Monitor(MonitorWarning),
}

#[derive(Clone, Debug)]
pub struct GenerateOutput {
    /// Generated ids, including a final end-of-generation token if one ended the run.
    pub ids: Vec<u32>,
    /// The text streamed to the caller (stop strings and what follows them excluded).
    pub text: String,
    pub finish: FinishReason,
    pub n_prompt: usize,
    pub prompt_time: Duration,
    pub gen_time: Duration,
    /// What the generation monitors noticed (empty for a healthy run).
    pub warnings: Vec<MonitorWarning>,
}

/// Options of [`generate_with`] beyond sampling.
#[derive(Clone, Debug, Default)]
pub struct GenerateOptions {
    pub monitor: MonitorConfig,
    /// Copy every step's whole logits row to the host and sample there. Off (the default),
    /// when the sampler needs only a row's largest logits ([`Sampler::top_needed`]: greedy,
    /// or top-k without penalties) the backend reduces the row where it computed it and only
    /// those cross to the host, and when it needs a draw from the whole row
    /// ([`Sampler::row_draw_needed`]: temperature sampling without top-k, top-p or penalties)
    /// the backend draws there; greedy or top-k with penalties get the largest logits and the
    /// penalty window's ([`Sampler::top_needed_adjusted`]). The token is the same either way.
    pub full_logits: bool,
}

/// A step's next-token logits: the whole row, or its summary (with what the step was asked
/// of the whole row: a drawn token, or its total weight and, if the nucleus needs it, the row).
enum NextLogits {
    Full(Vec<f32>),
    Top(LogitsSummary),
}

/// What a step hands back for the sampler: the whole row, or its `k` largest logits with
/// what the sampler needs of the rest ([`wanted`]).
#[derive(Clone, Copy)]
enum Want {
    Full,
    Top(usize),
    /// A whole-row draw (`Sampler::row_draw_needed`).
    Draw,
    /// Top-p without top-k (`Sampler::nucleus_needed`).
    Nucleus(f32),
    /// Greedy or top-k with penalties: the largest logits and the penalty window's
    /// (`Sampler::top_needed_adjusted`, each step), or the row when they do not fit.
    Adjusted,
}

/// What `sampler` needs from a step's row (`full_logits`: the whole row, always).
fn wanted(sampler: &Sampler, vocab: usize, full_logits: bool) -> Want {
    if full_logits {
        Want::Full
    } else if let Some(k) = sampler.top_needed(vocab) {
        Want::Top(k)
    } else if sampler.row_draw_needed(vocab) {
        Want::Draw
    } else if sampler.nucleus_needed(vocab) {
        Want::Nucleus(sampler.params().top_p)
    } else if sampler.adjusts_from_top(vocab) {
        Want::Adjusted
    } else {
        Want::Full
    }
}

/// The next token from a row's summary, as `sampler.sample` would give it on the row: from
/// the row when the summary carries it, the backend's draw, the nucleus within the summary's
/// largest logits, or those logits alone (the summary was made for what this sampler needs:
/// `top_needed`, `row_draw_needed` after `begin_row_draw`, or `nucleus_needed`).
pub(crate) fn sample_summary(
    sampler: &mut Sampler,
    s: &LogitsSummary,
    history: &[u32],
    bias: &[(u32, f32)],
) -> Result<u32, SamplingError> {
    let n = s.n_vocab;
    if let Some(row) = &s.row {
        if bias.is_empty() {
            return sampler.sample(row, history);
        }
        let mut r = row.clone();
        for &(id, b) in bias {
            if let Some(v) = r.get_mut(id as usize) {
                *v += b;
            }
        }
        return sampler.sample(&r, history);
    }
    if sampler.params().penalties_active() || !bias.is_empty() {
        // The penalty window's and the biased tokens' logits came with the summary.
        let ids: Vec<u32> = bias.iter().map(|b| b.0).collect();
        let Some(need) = sampler.top_needed_adjusted(n, history, &ids) else {
            return Err(SamplingError::TooFewCandidates {
                given: s.top.len(),
                needed: None,
            });
        };
        let mut values = Vec::with_capacity(need.ids.len());
        for id in need.ids {
            // The gathered logits come in the pick's order: `ids`' own, sorted.
            let found = s.gathered.binary_search_by_key(&id, |g| g.0);
            let Some(&(_, raw)) = found.ok().and_then(|j| s.gathered.get(j)) else {
                return Err(SamplingError::TooFewCandidates {
                    given: s.top.len(),
                    needed: None,
                });
            };
            // The bias as the row path adds it: each entry in the request's order.
            let v = bias.iter().filter(|b| b.0 == id).fold(raw, |v, b| v + b.1);
            values.push((id, v));
        }
        return sampler.sample_from_top_adjusted(&s.top, &values, history, n, s.first_non_finite);
    }
    if sampler.row_draw_needed(n) {
        return sampler.finish_row_draw(s.drawn, n, s.first_non_finite);
    }
    if sampler.nucleus_needed(n) {
        let total = s.total.unwrap_or(f64::NAN);
        let prefix = s.nucleus.as_deref().unwrap_or(&s.top);
        return sampler
            .sample_from_nucleus(prefix, total, n, s.first_non_finite)?
            .ok_or(SamplingError::TooFewCandidates {
                given: s.top.len(),
                needed: None,
            });
    }
    sampler.sample_from_top(&s.top, n, s.first_non_finite)
}

/// One forward step of `seq` over what `history` (the prompt's `n_prompt` tokens, then those
/// generated) holds beyond the cache: the prompt, then one token a step. The watch-mode taps
/// go to the monitor.
fn step<B: Backend>(
    engine: &mut Engine<B>,
    seq: SeqId,
    history: &[u32],
    n_prompt: usize,
    monitor: &mut Monitor,
    want: Want,
    sampler: &mut Sampler,
) -> Result<NextLogits, EngineError> {
    let index = history.len() - n_prompt;
    let tokens = if index == 0 {
        history
    } else {
        &history[history.len() - 1..]
    };
    let mut forward = |engine: &mut Engine<B>, taps: &mut Taps<'_>| -> Result<_, EngineError> {
        Ok(match want {
            Want::Top(k) => NextLogits::Top(engine.forward_one_top(seq, tokens, taps, k)?),
            Want::Full => NextLogits::Full(engine.forward_one(seq, tokens, taps)?),
            Want::Draw => {
                let d = sampler.begin_row_draw();
                NextLogits::Top(engine.forward_one_top_pick(
                    seq,
                    tokens,
                    taps,
                    1,
                    Some(RowPick::draw(d)),
                )?)
            }
            Want::Nucleus(p) => NextLogits::Top(engine.forward_one_top_pick(
                seq,
                tokens,
                taps,
                1,
                Some(RowPick::nucleus(p)),
            )?),
            Want::Adjusted => match sampler.top_needed_adjusted(engine.n_vocab(), history, &[]) {
                Some(need) => NextLogits::Top(engine.forward_one_top_pick(
                    seq,
                    tokens,
                    taps,
                    need.k,
                    Some(RowPick::gathering(&need.ids, need.untouched)),
                )?),
                None => NextLogits::Full(engine.forward_one(seq, tokens, taps)?),
            },
        })
    };
    if monitor.config().enabled && monitor.config().watch {
        let mut rec = Recorder::new();
        rec.filter = Some(Box::new(Monitor::watch_filter));
        let next = forward(engine, &mut Taps::new(&mut rec))?;
        let n_kv = engine.seq_len(seq)?;
        monitor.observe_taps(index, &rec, tokens.len(), n_kv);
        Ok(next)
    } else {
        forward(engine, &mut Taps::none())
    }
}

/// Generates a continuation of `prompt`, calling `on_text` with each newly complete piece of
/// text. The sequence is freed afterwards. The default monitors run (see [`generate_with`]).
pub fn generate<B: Backend>(
    engine: &mut Engine<B>,
    tokenizer: &Tokenizer,
    prompt: &[u32],
    params: &SamplingParams,
    on_text: impl FnMut(&str),
) -> Result<GenerateOutput, GenerateError> {
    generate_with(
        engine,
        tokenizer,
        prompt,
        params,
        &GenerateOptions::default(),
        on_text,
    )
}

/// [`generate`] with options: monitor settings (`watch` mode, thresholds, off).
pub fn generate_with<B: Backend>(
    engine: &mut Engine<B>,
    tokenizer: &Tokenizer,
    prompt: &[u32],
    params: &SamplingParams,
    opts: &GenerateOptions,
    mut on_text: impl FnMut(&str),
) -> Result<GenerateOutput, GenerateError> {
    let mut monitor = Monitor::new(opts.monitor.clone());
    params.validate()?;
    let mut sampler = Sampler::new(params.clone())?;
    let seq = engine.new_sequence();
    let result = (|| {
        let t0 = Instant::now();
        let want = wanted(&sampler, engine.n_vocab(), opts.full_logits);
        let mut logits = step(
            engine,
            seq,
            prompt,
            prompt.len(),
            &mut monitor,
            want,
            &mut sampler,
        )?;
        let prompt_time = t0.elapsed();
        let t1 = Instant::now();
        let mut history: Vec<u32> = prompt.to_vec();
        let mut ids = Vec::new();
        let mut text = String::new();
        let mut decoder = StreamDecoder::new(false);
        let mut stops = StopChecker::new(params.stop.iter().cloned());
        let finish = loop {
            let chosen = match &logits {
                NextLogits::Full(row) => {
                    monitor.observe_logits(ids.len(), row);
                    sampler.sample(row, &history)
                }
                NextLogits::Top(s) => {
                    monitor.observe_summary(ids.len(), s);
                    sample_summary(&mut sampler, s, &history, &[])
                }
            };
            let id = match chosen {
                Ok(id) => id,
                Err(e) => {
                    let step = ids.len();
                    return Err(
                        match monitor
                            .warnings
                            .iter()
                            .find(|w| w.kind == WarningKind::NonFinite && w.step == step)
                        {
                            Some(w) => GenerateError::Monitor(w.clone()),
                            None => e.into(),
                        },
                    );
                }
            };
            monitor.observe_token(ids.len(), id, tokenizer);
            ids.push(id);
            history.push(id);
            if tokenizer.is_eog(id) && !params.ignore_eos {
                break FinishReason::Stop;
            }
            let piece = decoder.push(tokenizer, id)?;
            let r = stops.push(&piece);
            if !r.emit.is_empty() {
                on_text(&r.emit);
                text.push_str(&r.emit);
            }
            if r.stopped {
                break FinishReason::StopString;
            }
            if params.length_reached(ids.len()) || engine.seq_len(seq)? + 1 > engine.n_ctx() {
                break FinishReason::Length;
            }
            logits = step(
                engine,
                seq,
                &history,
                prompt.len(),
                &mut monitor,
                want,
                &mut sampler,
            )?;
        };
        if finish != FinishReason::StopString {
            let rest = decoder.finish();
            let r = stops.push(&rest);
            let mut tail = r.emit;
            if !r.stopped {
                tail.push_str(&stops.finish());
            }
            if !tail.is_empty() {
                on_text(&tail);
                text.push_str(&tail);
            }
        }
        Ok(GenerateOutput {
            ids,
            text,
            finish,
            n_prompt: prompt.len(),
            prompt_time,
            gen_time: t1.elapsed(),
            warnings: std::mem::take(&mut monitor.warnings),
        })
    })();
    engine.free_sequence(seq);
    result
}
