//! Incremental detokenization for streaming generated text.

use crate::error::TokenizerError;
use crate::vocab::Tokenizer;

/// Turns generated token ids into text one id at a time, emitting only complete UTF-8: a
/// multi-byte character split across tokens (byte tokens, or byte-level BPE pieces) is held
/// back until its last byte arrives. Bytes that can never become valid UTF-8 are emitted as
/// U+FFFD. Call [`StreamDecoder::finish`] at the end for whatever is still held back.
///
/// Pieces are `Tokenizer::token_to_piece(id, special)`, as llama.cpp's streaming examples print
/// them (no leading-space removal and no clean-up pass, which only make sense for whole texts).
#[derive(Clone, Debug, Default)]
pub struct StreamDecoder {
    pending: Vec<u8>,
    special: bool,
}

impl StreamDecoder {
    /// `special`: render control tokens (e.g. `<end_of_turn>`) as their text.
    pub fn new(special: bool) -> StreamDecoder {
        StreamDecoder {
            pending: Vec::new(),
            special,
        }
    }

    /// Adds one token; returns the text that became complete (possibly empty).
    pub fn push(&mut self, tokenizer: &Tokenizer, id: u32) -> Result<String, TokenizerError> {
        let piece = tokenizer.token_to_piece(id, self.special)?;
        self.pending.extend_from_slice(piece);
        Ok(self.take_complete())
    }

    /// Bytes received but not yet emitted (an incomplete UTF-8 sequence).
    pub fn pending(&self) -> &[u8] {
        &self.pending
    }

    /// Emits whatever is held back (an incomplete sequence becomes U+FFFD) and resets.
    pub fn finish(&mut self) -> String {
        let out = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending.clear();
        out
    }

    fn take_complete(&mut self) -> String {
        let mut out = String::new();
        let mut rest: &[u8] = &self.pending;
        loop {
            match std::str::from_utf8(rest) {
                Ok(s) => {
                    out.push_str(s);
                    rest = &[];
                    break;
                }
                Err(e) => {
                    let (valid, after) = rest.split_at(e.valid_up_to());
                    // `valid` is valid UTF-8 by construction.
                    out.push_str(&String::from_utf8_lossy(valid));
                    match e.error_len() {
                        // Incomplete sequence at the end: keep it for the next token.
                        None => {
                            rest = after;
                            break;
                        }
                        Some(bad) => {
                            out.push('\u{FFFD}');
                            rest = &after[bad..];
                        }
                    }
                }
            }
        }
        let keep = rest.to_vec();
        self.pending = keep;
        out
    }
}
