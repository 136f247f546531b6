//! SentencePiece-style BPE by score (llama.cpp `llm_tokenizer_spm_session`).
//!
//! The text (spaces already escaped to U+2581) starts as one symbol per UTF-8 character. Every
//! adjacent pair whose concatenation is a vocabulary token is queued by that token's score; the
//! best pair (highest score, ties: leftmost) is merged and its new neighbour pairs queued, until
//! the queue is empty. Symbols that are not tokens fall back to `<0xXX>` byte tokens. A binary
//! heap keeps this O(n log n) in the text length.
//!
//! llama.cpp also keeps a `rev_merge` map to re-split symbols that are not tokens; for valid
//! UTF-8 input such a symbol is always a single character (every merged symbol is a token), and
//! no two-character bigram text can equal it, so that path only ever reaches byte fallback.

use crate::hash::FxMap;
use crate::heap::QuadHeap;

#[derive(Clone, Copy)]
struct Sym {
    start: u32,
    len: u32,
    prev: i32,
    next: i32,
    /// The token this symbol's text is, or `NOT_TOKEN | code point` for a lone character
    /// that is no token (so that equal texts always have equal keys).
    key: u32,
}

const NOT_TOKEN: u32 = 0x8000_0000;
const NONE: u32 = u32::MAX;

/// Per-call memo of vocabulary lookups: (left key, right key) -> merged token, and
/// character -> key. The vocabulary table is large (hundreds of thousands of strings) and each
/// probe is a cache miss; real text repeats the same pairs over and over.
#[derive(Default)]
pub(crate) struct SpmCache {
    pairs: FxMap<(u32, u32), u32>,
    chars: FxMap<char, u32>,
}

/// A queued pair. `key` orders the heap: highest score first, then leftmost.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Bigram {
    key: u64,
    /// Byte length of left + right when queued; the right symbol is `left.next`.
    size: u32,
    merged: u32,
}

impl Bigram {
    fn new(score: f32, left: u32, size: u32, merged: u32) -> Bigram {
        // Order-preserving map of the float to an integer (equal scores, including -0 and +0,
        // map equal, as llama.cpp's `<` comparison sees them).
        let bits = if score == 0.0 { 0 } else { score.to_bits() };
        let ord = if bits & 0x8000_0000 != 0 {
            !bits
        } else {
            bits | 0x8000_0000
        };
        Bigram {
            key: (u64::from(ord) << 32) | u64::from(!left),
            size,
            merged,
        }
    }

    fn left(&self) -> usize {
        !(self.key as u32) as usize
    }
}

/// What the SPM algorithm needs from the vocabulary.
pub(crate) trait SpmVocab {
    fn lookup(&self, text: &str) -> Option<u32>;
    fn score(&self, id: u32) -> f32;
    fn byte_token(&self, b: u8) -> Option<u32>;
}

/// Tokenizes `text` (already space-escaped) and appends the ids.
pub(crate) fn tokenize(
    vocab: &impl SpmVocab,
    text: &str,
    cache: &mut SpmCache,
    out: &mut Vec<u32>,
) {
    if text.is_empty() {
        return;
    }
    let mut syms: Vec<Sym> = Vec::with_capacity(text.len());
    let n_chars = text.chars().count();
    for (i, (off, c)) in text.char_indices().enumerate() {
        let len = c.len_utf8();
        let key = *cache.chars.entry(c).or_insert_with(|| {
            vocab
                .lookup(&text[off..off + len])
                .unwrap_or(NOT_TOKEN | c as u32)
        });
        syms.push(Sym {
            start: off as u32,
            len: len as u32,
            prev: i as i32 - 1,
            next: if i + 1 == n_chars { -1 } else { i as i32 + 1 },
            key,
        });
    }
    let mut heap = QuadHeap::with_capacity(syms.len());
    for i in 1..syms.len() {
        push_bigram(vocab, text, &syms, cache, &mut heap, i as i32 - 1, i as i32);
    }

    while let Some(bg) = heap.pop() {
        // Stale unless both symbols are as they were when queued: the left one alive and
        // unchanged, its right neighbour unchanged (any merge since changes a length).
        let l = bg.left();
        let next = syms[l].next;
        if syms[l].len == 0 || next < 0 || syms[l].len + syms[next as usize].len != bg.size {
            continue;
        }
        let r = next as usize;
        syms[l].len += syms[r].len;
        syms[l].key = bg.merged;
        syms[r].len = 0;
        let next = syms[r].next;
        syms[l].next = next;
        if next >= 0 {
            syms[next as usize].prev = l as i32;
        }
        let prev = syms[l].prev;
        push_bigram(vocab, text, &syms, cache, &mut heap, prev, l as i32);
        push_bigram(vocab, text, &syms, cache, &mut heap, l as i32, next);
    }

    let mut i = 0i32;
    while i >= 0 {
        let s = syms[i as usize];
        if s.key & NOT_TOKEN == 0 {
            out.push(s.key);
        } else {
            let piece = &text[s.start as usize..(s.start + s.len) as usize];
            for &b in piece.as_bytes() {
                // A vocabulary without byte tokens has no way to say this byte; llama.cpp
                // throws here, we drop it.
                if let Some(id) = vocab.byte_token(b) {
                    out.push(id);
                }
            }
        }
        i = s.next;
    }
}

#[inline]
fn push_bigram(
    vocab: &impl SpmVocab,
    text: &str,
    syms: &[Sym],
    cache: &mut SpmCache,
    heap: &mut QuadHeap<Bigram>,
    left: i32,
    right: i32,
) {
    if left < 0 || right < 0 {
        return;
    }
    let (l, r) = (&syms[left as usize], &syms[right as usize]);
    let merged = *cache.pairs.entry((l.key, r.key)).or_insert_with(|| {
        let start = l.start as usize;
        let end = start + (l.len + r.len) as usize;
        vocab.lookup(&text[start..end]).unwrap_or(NONE)
    });
    if merged != NONE {
        heap.push(Bigram::new(
            vocab.score(merged),
            left as u32,
            l.len + r.len,
            merged,
        ));
    }
}
