//! Repeat / presence / frequency penalties.

use crate::error::SamplingError;
use crate::params::SamplingParams;

/// Apply the repeat, frequency and presence penalties of `params` to `logits`
/// in place, exactly as llama.cpp's penalties sampler does.
///
/// Only the last `params.repeat_last_n` tokens of `history` count (all of it
/// if `None`). For every distinct token `t` occurring `count` times there:
///
/// 1. repeat penalty: `logit /= repeat_penalty` if `logit > 0`, else
///    `logit *= repeat_penalty` (so the token always becomes less likely for
///    a penalty above 1);
/// 2. `logit -= count * frequency_penalty + presence_penalty`.
///
/// Tokens outside the window are untouched. Each distinct token is penalized
/// once, regardless of how often it repeats (only the frequency term scales).
///
/// Errors: [`SamplingError::TokenOutOfRange`] if a window token does not index
/// `logits` (checked before anything is modified), and
/// [`SamplingError::NonFinitePenalizedLogit`] if a penalty overflows a logit
/// (the row may then be partially penalized).
pub fn apply_penalties(
    logits: &mut [f32],
    history: &[u32],
    params: &SamplingParams,
) -> Result<(), SamplingError> {
    apply_penalties_with(logits, history, params, &mut Vec::new())
}

/// [`apply_penalties`] with a caller-owned buffer, so that the sampler does
/// not allocate per token.
pub(crate) fn apply_penalties_with(
    logits: &mut [f32],
    history: &[u32],
    params: &SamplingParams,
    window_buf: &mut Vec<u32>,
) -> Result<(), SamplingError> {
    if !params.penalties_active() {
        return Ok(());
    }
    let window = penalty_window(history, params);
    if window.is_empty() {
        return Ok(());
    }
    // Counting by sorting a copy of the window: deterministic, no hashing, and
    // the window is small in the default configuration (64 tokens).
    window_buf.clear();
    window_buf.extend_from_slice(window);
    window_buf.sort_unstable();
    if let Some(&max_token) = window_buf.last() {
        let in_range = usize::try_from(max_token).is_ok_and(|t| t < logits.len());
        if !in_range {
            return Err(SamplingError::TokenOutOfRange {
                token: max_token,
                vocab_size: logits.len(),
            });
        }
    }
    for run in window_buf.chunk_by(|a, b| a == b) {
        let (Some(&token), count) = (run.first(), run.len()) else {
            continue;
        };
        // In range: checked against the largest window token above.
        let index = token as usize;
        let Some(logit) = logits.get_mut(index) else {
            continue;
        };
        *logit = penalize(*logit, index, count, params)?;
    }
    Ok(())
}

/// One window token's logit `l` (token `index`, `count` times in the window) penalized: the
/// repeat penalty, then the frequency and presence terms, in f32 as llama.cpp does. Shared by
/// the whole-row path and the sampler's path from a row's summary, so both give the same bits.
pub(crate) fn penalize(
    l: f32,
    index: usize,
    count: usize,
    params: &SamplingParams,
) -> Result<f32, SamplingError> {
    let rp = params.repeat_penalty;
    let mut l = l;
    if rp != 1.0 {
        l = if l <= 0.0 { l * rp } else { l / rp };
    }
    // `count > 0` always holds here, so the presence term is unconditional.
    l -= count as f32 * params.frequency_penalty + params.presence_penalty;
    if !l.is_finite() {
        return Err(SamplingError::NonFinitePenalizedLogit { index, value: l });
    }
    Ok(l)
}

/// The last `repeat_last_n` tokens of `history` (all of it if `None`): the penalty window.
pub(crate) fn penalty_window<'h>(history: &'h [u32], params: &SamplingParams) -> &'h [u32] {
    match params.repeat_last_n {
        None => history,
        Some(n) => &history[history.len().saturating_sub(n)..],
    }
}
