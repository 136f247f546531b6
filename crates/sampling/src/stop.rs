//! Incremental stop-string detection for streamed output.

/// What one [`StopChecker::push`] releases.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StopResult {
    /// Text safe to send to the client now. Never contains a stop string or
    /// any part of one.
    pub emit: String,
    /// A stop string matched: `emit` ends right before it and nothing more
    /// will ever be emitted.
    pub stopped: bool,
}

/// Watches generated text for stop strings, chunk by chunk.
///
/// Text that might be the beginning of a stop string (a suffix of what was
/// seen so far that is a prefix of some stop string) is held back until the
/// next chunk decides it, so a stop string split over several chunks is still
/// found and none of it leaks to the stream. Held-back text is at most
/// `longest stop string − 1` bytes. All slicing is on `char` boundaries, so
/// multi-byte UTF-8 is never split.
#[derive(Debug, Clone, Default)]
pub struct StopChecker {
    stops: Vec<String>,
    /// Longest stop string, in bytes: bounds how much can be held back.
    max_len: usize,
    /// Held-back text (a proper prefix of some stop string).
    pending: String,
    /// Index into `stops` of the string that matched, once stopped.
    matched: Option<usize>,
}

impl StopChecker {
    /// A checker for the given stop strings. Empty strings are ignored
    /// ([`SamplingParams::validate`](crate::SamplingParams::validate) rejects
    /// them; here they would otherwise match before any text).
    pub fn new<I, S>(stops: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let stops: Vec<String> = stops
            .into_iter()
            .map(Into::into)
            .filter(|s| !s.is_empty())
            .collect();
        let max_len = stops.iter().map(String::len).max().unwrap_or(0);
        StopChecker {
            stops,
            max_len,
            pending: String::new(),
            matched: None,
        }
    }

    /// Whether a stop string has matched.
    pub fn is_stopped(&self) -> bool {
        self.matched.is_some()
    }

    /// The stop string that matched, if any.
    pub fn matched_stop(&self) -> Option<&str> {
        self.matched
            .and_then(|i| self.stops.get(i))
            .map(String::as_str)
    }

    /// Feed the next chunk of generated text.
    ///
    /// Returns the text that can be streamed now. Once `stopped` has been
    /// returned, later calls return nothing and `stopped: true`.
    pub fn push(&mut self, text: &str) -> StopResult {
        if self.is_stopped() {
            return StopResult {
                emit: String::new(),
                stopped: true,
            };
        }
        self.pending.push_str(text);

        // Earliest match wins (ties: first listed). Emitted text never
        // contains the start of a match (see `held_back_start`), so every
        // match lies entirely within `pending`.
        let mut earliest: Option<(usize, usize)> = None;
        for (i, stop) in self.stops.iter().enumerate() {
            if let Some(pos) = self.pending.find(stop.as_str()) {
                let earlier = match earliest {
                    Some((best, _)) => pos < best,
                    None => true,
                };
                if earlier {
                    earliest = Some((pos, i));
                }
            }
        }
        if let Some((pos, i)) = earliest {
            // `find` on valid UTF-8 only matches at char boundaries.
            self.pending.truncate(pos);
            self.matched = Some(i);
            return StopResult {
                emit: std::mem::take(&mut self.pending),
                stopped: true,
            };
        }

        let hold_from = self.held_back_start();
        let held = self.pending.split_off(hold_from);
        StopResult {
            emit: std::mem::replace(&mut self.pending, held),
            stopped: false,
        }
    }

    /// End of generation: release the held-back text (empty if stopped).
    pub fn finish(&mut self) -> String {
        std::mem::take(&mut self.pending)
    }

    /// Start of the longest suffix of `pending` that is a proper prefix of a
    /// stop string (`pending.len()` if none). Only suffixes shorter than the
    /// longest stop string can qualify, so at most `max_len` starts are tried.
    fn held_back_start(&self) -> usize {
        let len = self.pending.len();
        let lowest = len.saturating_sub(self.max_len.saturating_sub(1));
        (lowest..len)
            .find(|&start| {
                // `get` is None off char boundaries: those are skipped.
                self.pending.get(start..).is_some_and(|suffix| {
                    self.stops
                        .iter()
                        .any(|stop| stop.len() > suffix.len() && stop.starts_with(suffix))
                })
            })
            .unwrap_or(len)
    }
}
