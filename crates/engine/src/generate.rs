//! Text generation for one sequence: sample, stream complete UTF-8, stop on end-of-generation
//! tokens, stop strings, the token budget or a full context.

use std::time::{Duration, Instant};

use lockstep_graph::{Backend, Taps};
use lockstep_sampling::{
    FinishReason, ParamError, Sampler, SamplingError, SamplingParams, StopChecker,
};
use lockstep_tokenizer::{StreamDecoder, Tokenizer, TokenizerError};

use crate::{Engine, EngineError};

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
}

/// Generates a continuation of `prompt`, calling `on_text` with each newly complete piece of
/// text. The sequence is freed afterwards.
pub fn generate<B: Backend>(
    engine: &mut Engine<B>,
    tokenizer: &Tokenizer,
    prompt: &[u32],
    params: &SamplingParams,
    mut on_text: impl FnMut(&str),
) -> Result<GenerateOutput, GenerateError> {
    params.validate()?;
    let mut sampler = Sampler::new(params.clone())?;
    let seq = engine.new_sequence();
    let result = (|| {
        let t0 = Instant::now();
        let mut logits = engine.forward_one(seq, prompt, &mut Taps::none())?;
        let prompt_time = t0.elapsed();
        let t1 = Instant::now();
        let mut history: Vec<u32> = prompt.to_vec();
        let mut ids = Vec::new();
        let mut text = String::new();
        let mut decoder = StreamDecoder::new(false);
        let mut stops = StopChecker::new(params.stop.iter().cloned());
        let finish = loop {
            let id = sampler.sample(&logits, &history)?;
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
            logits = engine.forward_one(seq, &[id], &mut Taps::none())?;
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
        })
    })();
    engine.free_sequence(seq);
    result
}
