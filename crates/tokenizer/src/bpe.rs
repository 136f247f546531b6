//! Byte-level BPE merging (llama.cpp `llm_tokenizer_bpe_session`).
//!
//! A word (one piece from the pre-tokenizer) starts as one symbol per byte. The adjacent pair
//! with the lowest merge rank (ties: leftmost) is merged, its neighbours' pairs are queued, and
//! so on until no queued pair is still current. Each pair is queued with a binary heap, so a
//! word of n bytes costs O(n log n) whatever its shape.
//!
//! Strings are handled as raw bytes: merges and token texts in the GGUF are written in GPT-2's
//! byte-to-char mapping, and they are decoded once at load. Every string that can ever be a
//! symbol (single bytes and merge results) is interned to a small integer, so merging is
//! integer work with no string building.

use crate::hash::FxMap;
use crate::heap::QuadHeap;
use crate::unicode::ByteMap;

const NONE: u32 = u32::MAX;

pub(crate) struct BpeModel {
    /// Interned symbol of each single byte.
    byte_sym: [u32; 256],
    /// (left symbol, right symbol) -> (rank, merged symbol); first occurrence wins.
    merges: FxMap<(u32, u32), (u32, u32)>,
    /// Token id of each interned symbol (NONE when its bytes are no token).
    sym_token: Vec<u32>,
    /// Raw bytes -> token id, for every token whose text is in the byte-level alphabet.
    raw_token: FxMap<Box<[u8]>, u32>,
    /// Token whose text is the single printable ASCII char (llama.cpp's last-resort lookup of
    /// one byte of the encoded word), NONE if none.
    ascii_token: [u32; 128],
}

#[derive(Clone, Copy)]
struct Sym {
    sym: u32,
    start: u32,
    len: u32,
    prev: i32,
    next: i32,
}

/// A queued pair. `key` orders the heap: lowest rank first, then leftmost.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Bigram {
    key: u64,
    merged: u32,
    /// Byte length of left + right when queued; the right symbol is `left.next`.
    size: u32,
}

impl Bigram {
    fn new(rank: u32, left: u32, merged: u32, size: u32) -> Bigram {
        Bigram {
            key: (u64::from(!rank) << 32) | u64::from(!left),
            merged,
            size,
        }
    }

    fn left(&self) -> usize {
        !(self.key as u32) as usize
    }
}

/// Reusable buffers for tokenizing many words.
#[derive(Default)]
pub(crate) struct BpeScratch {
    syms: Vec<Sym>,
    heap: QuadHeap<Bigram>,
}

struct Interner {
    map: FxMap<Box<[u8]>, u32>,
    strings: Vec<Box<[u8]>>,
}

impl Interner {
    fn intern(&mut self, s: &[u8]) -> u32 {
        if let Some(&id) = self.map.get(s) {
            return id;
        }
        let id = self.strings.len() as u32;
        self.strings.push(s.into());
        self.map.insert(s.into(), id);
        id
    }
}

impl BpeModel {
    /// `tokens` are the vocabulary texts (byte-level encoded), `merges` the
    /// `tokenizer.ggml.merges` entries in rank order ("left right").
    pub(crate) fn new(tokens: &[&str], merges: &[&str], bytes: &ByteMap) -> BpeModel {
        let mut raw_token: FxMap<Box<[u8]>, u32> = FxMap::default();
        let mut ascii_token = [NONE; 128];
        for (id, text) in tokens.iter().enumerate() {
            if let Some(raw) = bytes.decode(text) {
                raw_token.entry(raw.into_boxed_slice()).or_insert(id as u32);
            }
            let tb = text.as_bytes();
            if tb.len() == 1 && tb[0] < 128 && ascii_token[tb[0] as usize] == NONE {
                ascii_token[tb[0] as usize] = id as u32;
            }
        }

        let mut interner = Interner {
            map: FxMap::default(),
            strings: Vec::new(),
        };
        let mut byte_sym = [0u32; 256];
        for (b, slot) in byte_sym.iter_mut().enumerate() {
            *slot = interner.intern(&[b as u8]);
        }

        let mut merge_map: FxMap<(u32, u32), (u32, u32)> = FxMap::default();
        merge_map.reserve(merges.len());
        let mut joined = Vec::new();
        for (rank, m) in merges.iter().enumerate() {
            // llama.cpp splits at the first space at or after byte 1.
            let mb = m.as_bytes();
            let Some(pos) = mb.iter().skip(1).position(|&b| b == b' ').map(|p| p + 1) else {
                continue;
            };
            let (Some(l), Some(r)) = (bytes.decode(&m[..pos]), bytes.decode(&m[pos + 1..])) else {
                // A part outside the byte-level alphabet can never equal a symbol.
                continue;
            };
            if l.is_empty() || r.is_empty() {
                continue;
            }
            let li = interner.intern(&l);
            let ri = interner.intern(&r);
            joined.clear();
            joined.extend_from_slice(&l);
            joined.extend_from_slice(&r);
            let mi = interner.intern(&joined);
            merge_map.entry((li, ri)).or_insert((rank as u32, mi));
        }

        let sym_token = interner
            .strings
            .iter()
            .map(|s| raw_token.get(s).copied().unwrap_or(NONE))
            .collect();

        BpeModel {
            byte_sym,
            merges: merge_map,
            sym_token,
            raw_token,
            ascii_token,
        }
    }

    /// Token id for raw bytes, if some token's (decoded) text equals them.
    pub(crate) fn raw_to_token(&self, raw: &[u8]) -> Option<u32> {
        self.raw_token.get(raw).copied()
    }

    /// Tokenizes one pre-tokenized word (raw bytes) and appends the ids.
    pub(crate) fn tokenize_word(
        &self,
        word: &[u8],
        ignore_merges: bool,
        scratch: &mut BpeScratch,
        out: &mut Vec<u32>,
    ) {
        if word.is_empty() {
            return;
        }
        if ignore_merges {
            if let Some(id) = self.raw_to_token(word) {
                out.push(id);
                return;
            }
        }
        let syms = &mut scratch.syms;
        let heap = &mut scratch.heap;
        syms.clear();
        heap.clear();
        let n = word.len();
        for (i, &b) in word.iter().enumerate() {
            syms.push(Sym {
                sym: self.byte_sym[b as usize],
                start: i as u32,
                len: 1,
                prev: i as i32 - 1,
                next: if i + 1 == n { -1 } else { i as i32 + 1 },
            });
        }
        for i in 1..n {
            self.push_bigram(syms, heap, i as i32 - 1, i as i32);
        }

        while let Some(bg) = heap.pop() {
            // Stale unless the left symbol is alive and unchanged and its right neighbour is
            // the one queued, unchanged: any merge since then changes one of the lengths.
            let l = bg.left();
            let next = syms[l].next;
            if syms[l].len == 0 || next < 0 || syms[l].len + syms[next as usize].len != bg.size {
                continue;
            }
            let r = next as usize;
            syms[l].sym = bg.merged;
            syms[l].len += syms[r].len;
            syms[r].len = 0;
            let next = syms[r].next;
            syms[l].next = next;
            if next >= 0 {
                syms[next as usize].prev = l as i32;
            }
            let prev = syms[l].prev;
            self.push_bigram(syms, heap, prev, l as i32);
            self.push_bigram(syms, heap, l as i32, next);
        }

        let mut i = 0i32;
        while i >= 0 {
            let s = syms[i as usize];
            let tok = self.sym_token[s.sym as usize];
            if tok != NONE {
                out.push(tok);
            } else {
                // llama.cpp looks each byte of the encoded text up as a one-byte token; only
                // printable ASCII encodes to a single byte, the rest finds nothing.
                let raw = &word[s.start as usize..(s.start + s.len) as usize];
                for &b in raw {
                    if (0x21..=0x7E).contains(&b) {
                        let t = self.ascii_token[b as usize];
                        if t != NONE {
                            out.push(t);
                        }
                    }
                }
            }
            i = s.next;
        }
    }

    #[inline]
    fn push_bigram(&self, syms: &[Sym], heap: &mut QuadHeap<Bigram>, left: i32, right: i32) {
        if left < 0 || right < 0 {
            return;
        }
        let (l, r) = (&syms[left as usize], &syms[right as usize]);
        if let Some(&(rank, merged)) = self.merges.get(&(l.sym, r.sym)) {
            heap.push(Bigram::new(rank, left as u32, merged, l.len + r.len));
        }
    }
}
