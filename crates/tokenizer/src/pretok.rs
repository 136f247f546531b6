//! Pre-tokenizers for byte-level BPE: how text is cut into words before merges run.
//!
//! llama.cpp describes each pre-tokenizer as a list of regexes applied one after the other,
//! each one cutting every piece produced so far into "matches" and "text between matches".
//! Two of those regexes (the GPT-2 one and the llama3 one) have hand-written splitters in
//! llama.cpp's `unicode.cpp`; the others run through `std::regex` on a "collapsed" text in
//! which every non-ASCII code point is replaced by a byte standing for its class. Everything
//! here is written as linear scans over code points with the same results:
//!
//! * `\p{N}` (the first regex of the `smollm`/starcoder family): every number code point
//!   becomes its own piece.
//! * GPT-2: `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`
//! * llama3: `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
//! * qwen2: the llama3 regex with `\p{N}` instead of `\p{N}{1,3}`. llama.cpp runs it through
//!   `std::regex` (ECMAScript, leftmost-first alternation with backtracking); for this regex
//!   every position matches some alternative and backtracking gives exactly what the llama3
//!   scan does (`\s*[\r\n]+` ends at the last CR/LF of a whitespace run, `\s+(?!\S)` leaves
//!   the last whitespace character for the next word), so the same scan with single digits
//!   reproduces it.
//! * `default` (a BPE model with `tokenizer.ggml.pre = default` or no pre-tokenizer):
//!   `[\p{P}\$\+<=>\^~\|]+`, then GPT-2, then `\p{N}+`, then `[0-9][0-9][0-9]`.

use std::ops::Range;

use crate::error::TokenizerError;
use crate::unicode::{classify, CharClass};

/// A BPE pre-tokenizer (the regex family selected by `tokenizer.ggml.pre`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PreTokenizer {
    /// llama.cpp's `LLAMA_VOCAB_PRE_TYPE_DEFAULT`: `tokenizer.ggml.pre = "default"` or missing.
    Default,
    /// The GPT-2 regex alone (`gpt-2`, `phi-2`, `mpt`, `olmo`, `jais`, ...).
    Gpt2,
    /// Digits split singly, then the GPT-2 regex (`smollm`, `starcoder`, `refact`,
    /// `command-r`, `codeshell`, `exaone`, `minerva-7b`, `mellum2`).
    Smollm,
    /// The llama3 regex: numbers in groups of one to three digits (`llama-bpe`, `llama3`,
    /// `llama-v3`, `falcon3`, `pixtral`, `dbrx`, `smaug-bpe`, `chatglm-bpe`, ...).
    Llama3,
    /// The llama3 regex with single digits (`qwen2`, `deepseek-r1-qwen`, `stablelm2`,
    /// `megrez`, `hunyuan`, ...).
    Qwen2,
}

/// What a `tokenizer.ggml.pre` name implies besides the regex (llama.cpp `llama_vocab::load`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct PreSpec {
    pub pre: PreTokenizer,
    /// `clean_up_tokenization_spaces` at detokenization.
    pub clean_spaces: bool,
    /// A word that is a whole token is taken as-is without merging.
    pub ignore_merges: bool,
    /// Default for `add_bos` (before `tokenizer.ggml.add_bos_token` overrides it).
    pub add_bos: bool,
    /// The model has no BOS token by default (chatglm).
    pub no_bos: bool,
}

/// Every pre-tokenizer name this crate accepts.
pub const SUPPORTED_PRE_TOKENIZERS: &[&str] = &[
    "default",
    "gpt-2",
    "phi-2",
    "jina-es",
    "jina-de",
    "gigachat",
    "jina-v2-es",
    "jina-v2-de",
    "a.x-4.0",
    "mellum",
    "modern-bert",
    "exaone4",
    "mpt",
    "olmo",
    "jais",
    "trillion",
    "granite-docling",
    "jina-v1-en",
    "jina-v2-code",
    "roberta-bpe",
    "smollm",
    "starcoder",
    "refact",
    "command-r",
    "codeshell",
    "exaone",
    "minerva-7b",
    "mellum2",
    "llama3",
    "llama-v3",
    "llama-bpe",
    "falcon3",
    "falcon-h1",
    "pixtral",
    "midm-2.0",
    "lfm2",
    "jina-v5-nano",
    "dbrx",
    "smaug-bpe",
    "glm4",
    "chatglm-bpe",
    "qwen2",
    "deepseek-r1-qwen",
    "kormo",
    "f2llmv2",
    "megrez",
    "stablelm2",
    "hunyuan",
    "solar-open",
];

impl PreTokenizer {
    /// Resolves a `tokenizer.ggml.pre` value; unknown names are an error (never a silent
    /// fallback, since a wrong split silently changes every token id).
    pub fn from_name(name: &str) -> Result<PreTokenizer, TokenizerError> {
        Ok(pre_spec(Some(name))?.pre)
    }

    /// Splits `text` into the words the BPE merges then run on.
    pub fn split<'a>(&self, text: &'a str) -> Vec<&'a str> {
        self.split_ranges(text)
            .into_iter()
            .map(|r| &text[r])
            .collect()
    }

    /// Like [`PreTokenizer::split`], as byte ranges of `text`.
    pub fn split_ranges(&self, text: &str) -> Vec<Range<usize>> {
        let mut out = Vec::new();
        self.split_into(text, &mut PreScratch::default(), &mut out);
        out
    }

    /// Appends the byte ranges of the words of `text` to `out`, reusing `scratch` buffers.
    pub(crate) fn split_into(
        &self,
        text: &str,
        scratch: &mut PreScratch,
        out: &mut Vec<Range<usize>>,
    ) {
        if text.is_empty() {
            return;
        }
        let PreScratch {
            cpts,
            cls,
            byte_pos,
            a,
            b,
        } = scratch;
        cpts.clear();
        cls.clear();
        byte_pos.clear();
        for (i, c) in text.char_indices() {
            byte_pos.push(i);
            cpts.push(c);
            cls.push(classify(c));
        }
        byte_pos.push(text.len());
        let (cpts, cls) = (&cpts[..], &cls[..]);
        let s = Scan { cpts, cls };

        a.clear();
        a.push(cpts.len());
        match self {
            PreTokenizer::Gpt2 => s.gpt2(a, b),
            PreTokenizer::Smollm => {
                s.isolate(a, b, |i| cls[i] == CharClass::Number);
                s.gpt2(b, a);
                std::mem::swap(a, b);
            }
            PreTokenizer::Llama3 => s.llama3(a, b, 3),
            PreTokenizer::Qwen2 => s.llama3(a, b, 1),
            PreTokenizer::Default => {
                let is_punct = |i: usize| {
                    cls[i] == CharClass::Punct
                        || matches!(cpts[i], '$' | '+' | '<' | '=' | '>' | '^' | '~' | '|')
                };
                s.runs(a, b, is_punct);
                s.gpt2(b, a);
                s.runs(a, b, |i| cls[i] == CharClass::Number);
                s.ascii_digit_triples(b, a);
                std::mem::swap(a, b);
            }
        }
        // The result is in `b`.
        out.reserve(b.len());
        let mut at = 0;
        for &len in b.iter() {
            out.push(byte_pos[at]..byte_pos[at + len]);
            at += len;
        }
    }
}

/// Buffers reused across calls to [`PreTokenizer::split_into`].
#[derive(Default)]
pub(crate) struct PreScratch {
    cpts: Vec<char>,
    cls: Vec<CharClass>,
    byte_pos: Vec<usize>,
    a: Vec<usize>,
    b: Vec<usize>,
}

/// Maps a pre-tokenizer name to its regex family and flags, as llama.cpp's vocab loader does.
pub(crate) fn pre_spec(name: Option<&str>) -> Result<PreSpec, TokenizerError> {
    let spec = |pre, clean_spaces| PreSpec {
        pre,
        clean_spaces,
        ignore_merges: false,
        add_bos: false,
        no_bos: false,
    };
    let Some(name) = name else {
        // llama.cpp warns loudly ("GENERATION QUALITY WILL BE DEGRADED") and uses 'default'.
        return Ok(spec(PreTokenizer::Default, true));
    };
    use PreTokenizer::*;
    Ok(match name {
        "default" => spec(Default, true),
        "llama3" | "llama-v3" | "llama-bpe" | "falcon3" | "falcon-h1" | "pixtral" | "midm-2.0"
        | "lfm2" | "jina-v5-nano" => PreSpec {
            ignore_merges: true,
            add_bos: true,
            ..spec(Llama3, true)
        },
        "dbrx" | "smaug-bpe" => spec(Llama3, true),
        "glm4" | "chatglm-bpe" => PreSpec {
            no_bos: true,
            ..spec(Llama3, true)
        },
        "gpt-2" | "phi-2" | "jina-es" | "jina-de" | "gigachat" | "jina-v2-es" | "jina-v2-de"
        | "a.x-4.0" | "mellum" | "modern-bert" | "exaone4" | "mpt" | "olmo" | "jais"
        | "jina-v1-en" | "jina-v2-code" | "roberta-bpe" => spec(Gpt2, true),
        "trillion" | "granite-docling" => spec(Gpt2, false),
        "starcoder" | "refact" | "codeshell" | "exaone" | "minerva-7b" | "mellum2" => {
            spec(Smollm, true)
        }
        "smollm" | "command-r" => spec(Smollm, false),
        "qwen2" | "deepseek-r1-qwen" | "kormo" | "f2llmv2" | "hunyuan" | "solar-open" => {
            spec(Qwen2, false)
        }
        "megrez" | "stablelm2" => spec(Qwen2, true),
        other => return Err(TokenizerError::UnknownPreTokenizer(other.to_string())),
    })
}

/// Splitting passes over a code point array. Each pass takes the piece lengths produced so far
/// (in code points) and returns finer ones; no pass ever crosses a piece boundary.
struct Scan<'a> {
    cpts: &'a [char],
    cls: &'a [CharClass],
}

/// Collects piece lengths for one input piece.
struct Emit<'o> {
    out: &'o mut Vec<usize>,
    prev: usize,
}

impl Emit<'_> {
    #[inline]
    fn to(&mut self, end: usize) {
        if end > self.prev {
            self.out.push(end - self.prev);
        }
        self.prev = end;
    }
}

impl Scan<'_> {
    /// Calls `f(ini, end, emit)` for every current piece; the new lengths go to `out`.
    fn each_piece(
        &self,
        lens: &[usize],
        out: &mut Vec<usize>,
        mut f: impl FnMut(usize, usize, &mut Emit),
    ) {
        out.clear();
        let mut start = 0;
        for &len in lens {
            let (ini, end) = (start, start + len);
            start = end;
            let mut e = Emit {
                out: &mut *out,
                prev: ini,
            };
            f(ini, end, &mut e);
            e.to(end);
        }
    }

    /// A regex matching exactly one code point: each matching code point is its own piece.
    fn isolate(&self, lens: &[usize], out: &mut Vec<usize>, pred: impl Fn(usize) -> bool) {
        self.each_piece(lens, out, |ini, end, e| {
            for i in ini..end {
                if pred(i) {
                    e.to(i);
                    e.to(i + 1);
                }
            }
        })
    }

    /// A regex `[class]+`: maximal runs of matching code points become pieces.
    fn runs(&self, lens: &[usize], out: &mut Vec<usize>, pred: impl Fn(usize) -> bool) {
        self.each_piece(lens, out, |ini, end, e| {
            let mut i = ini;
            while i < end {
                if pred(i) {
                    e.to(i);
                    while i < end && pred(i) {
                        i += 1;
                    }
                    e.to(i);
                } else {
                    i += 1;
                }
            }
        })
    }

    /// `[0-9][0-9][0-9]`, found leftmost-first and without overlap.
    fn ascii_digit_triples(&self, lens: &[usize], out: &mut Vec<usize>) {
        let d = |i: usize| self.cpts[i].is_ascii_digit();
        self.each_piece(lens, out, |ini, end, e| {
            let mut i = ini;
            while i + 3 <= end {
                if d(i) && d(i + 1) && d(i + 2) {
                    e.to(i);
                    e.to(i + 3);
                    i += 3;
                } else {
                    i += 1;
                }
            }
        })
    }

    /// The GPT-2 regex (llama.cpp `unicode_regex_split_custom_gpt2`).
    fn gpt2(&self, lens: &[usize], out: &mut Vec<usize>) {
        let cpts = self.cpts;
        self.each_piece(lens, out, |ini, end, e| {
            let class_at = |p: usize| if p < end { Some(self.cls[p]) } else { None };
            let is_other = |p: usize| class_at(p).is_some_and(CharClass::is_other_or_punct);
            let mut pos = ini;
            while pos < end {
                let c = cpts[pos];
                // 's|'t|'re|'ve|'m|'ll|'d
                if c == '\'' && pos + 1 < end {
                    let n = cpts[pos + 1];
                    if matches!(n, 's' | 't' | 'm' | 'd') {
                        pos += 2;
                        e.to(pos);
                        continue;
                    }
                    if pos + 2 < end {
                        let nn = cpts[pos + 2];
                        if matches!((n, nn), ('r', 'e') | ('v', 'e') | ('l', 'l')) {
                            pos += 3;
                            e.to(pos);
                            continue;
                        }
                    }
                }
                // ` ?\p{L}+`, ` ?\p{N}+`, ` ?[^\s\p{L}\p{N}]+`
                let k2 = if c == ' ' {
                    class_at(pos + 1)
                } else {
                    class_at(pos)
                };
                match k2 {
                    Some(k @ (CharClass::Letter | CharClass::Number)) => {
                        pos += usize::from(c == ' ');
                        while class_at(pos) == Some(k) {
                            pos += 1;
                        }
                        e.to(pos);
                        continue;
                    }
                    Some(k) if k.is_other_or_punct() => {
                        pos += usize::from(c == ' ');
                        while is_other(pos) {
                            pos += 1;
                        }
                        e.to(pos);
                        continue;
                    }
                    _ => {}
                }
                let mut n_ws = 0;
                while class_at(pos + n_ws) == Some(CharClass::Space) {
                    n_ws += 1;
                }
                if n_ws > 1 && pos + n_ws < end {
                    // \s+(?!\S): leave the last whitespace for the next word
                    pos += n_ws - 1;
                } else if n_ws > 0 {
                    pos += n_ws;
                } else {
                    pos += 1;
                }
                e.to(pos);
            }
        })
    }

    /// The llama3 regex (llama.cpp `unicode_regex_split_custom_llama3`); `max_digits` is 3
    /// for `\p{N}{1,3}` and 1 for qwen2's `\p{N}`.
    fn llama3(&self, lens: &[usize], out: &mut Vec<usize>, max_digits: usize) {
        let cpts = self.cpts;
        self.each_piece(lens, out, |ini, end, e| {
            let class_at = |p: usize| if p < end { Some(self.cls[p]) } else { None };
            let cpt_at = |p: usize| if p < end { Some(cpts[p]) } else { None };
            let is_other = |p: usize| class_at(p).is_some_and(CharClass::is_other_or_punct);
            let mut pos = ini;
            while pos < end {
                let c = cpts[pos];
                let k = self.cls[pos];
                // (?i:'s|'t|'re|'ve|'m|'ll|'d)
                if c == '\'' && pos + 1 < end {
                    let n = cpts[pos + 1].to_ascii_lowercase();
                    if matches!(n, 's' | 't' | 'm' | 'd') {
                        pos += 2;
                        e.to(pos);
                        continue;
                    }
                    if pos + 2 < end {
                        let nn = cpts[pos + 2].to_ascii_lowercase();
                        if matches!((n, nn), ('r', 'e') | ('v', 'e') | ('l', 'l')) {
                            pos += 3;
                            e.to(pos);
                            continue;
                        }
                    }
                }
                // [^\r\n\p{L}\p{N}]?\p{L}+
                if !(c == '\r' || c == '\n' || k == CharClass::Number)
                    && (k == CharClass::Letter || class_at(pos + 1) == Some(CharClass::Letter))
                {
                    pos += 1;
                    while class_at(pos) == Some(CharClass::Letter) {
                        pos += 1;
                    }
                    e.to(pos);
                    continue;
                }
                // \p{N}{1,max_digits}
                if k == CharClass::Number {
                    let mut ini_d = pos;
                    while class_at(pos) == Some(CharClass::Number) {
                        pos += 1;
                        if pos - ini_d >= max_digits {
                            e.to(pos);
                            ini_d = pos;
                        }
                    }
                    e.to(pos);
                    continue;
                }
                // ` ?[^\s\p{L}\p{N}]+[\r\n]*`. (llama.cpp also takes this branch for a lone
                // trailing space, producing the same single-space piece as `\s+` would.)
                let k2 = if c == ' ' { class_at(pos + 1) } else { Some(k) };
                if k2.is_none_or(CharClass::is_other_or_punct) {
                    pos += usize::from(c == ' ');
                    while is_other(pos) {
                        pos += 1;
                    }
                    while matches!(cpt_at(pos), Some('\r' | '\n')) {
                        pos += 1;
                    }
                    e.to(pos);
                    continue;
                }
                let mut n_ws = 0;
                let mut last_crlf_end = None;
                while class_at(pos + n_ws) == Some(CharClass::Space) {
                    if matches!(cpts[pos + n_ws], '\r' | '\n') {
                        last_crlf_end = Some(pos + n_ws + 1);
                    }
                    n_ws += 1;
                }
                if let Some(p) = last_crlf_end {
                    // \s*[\r\n]+
                    pos = p;
                } else if n_ws > 1 && pos + n_ws < end {
                    // \s+(?!\S)
                    pos += n_ws - 1;
                } else if n_ws > 0 {
                    pos += n_ws;
                } else {
                    pos += 1;
                }
                e.to(pos);
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpt2_basic() {
        let p = PreTokenizer::Gpt2;
        assert_eq!(p.split("Hello world"), ["Hello", " world"]);
        assert_eq!(p.split("a   b"), ["a", "  ", " b"]);
        assert_eq!(p.split("a  "), ["a", "  "]);
        assert_eq!(p.split("don't"), ["don", "'t"]);
        assert_eq!(p.split("x123 45"), ["x", "123", " 45"]);
    }
}
