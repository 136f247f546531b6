//! The vocabulary and [`Tokenizer`]: loading from GGUF metadata, tokenizing, detokenizing.

use aho_corasick::AhoCorasick;
use lockstep_gguf::Metadata;

use crate::bpe::{BpeModel, BpeScratch};
use crate::error::TokenizerError;
use crate::hash::FxMap;
use crate::pretok::{pre_spec, PreScratch, PreTokenizer};
use crate::spm::{self, SpmVocab};
use crate::unicode::{c_isspace, ByteMap};

/// Which tokenization algorithm the model uses (`tokenizer.ggml.model`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokenizerModel {
    /// `llama`: SentencePiece-style BPE by token score with `<0xXX>` byte fallback.
    SentencePiece,
    /// `gpt2`: byte-level BPE with merge ranks, after the given pre-tokenizer.
    BytePairEncoding(PreTokenizer),
}

/// A token's type as declared in `tokenizer.ggml.token_type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokenType {
    Undefined,
    Normal,
    Unknown,
    Control,
    UserDefined,
    Unused,
    Byte,
}

impl TokenType {
    fn from_gguf(v: i64) -> TokenType {
        match v {
            1 => TokenType::Normal,
            2 => TokenType::Unknown,
            3 => TokenType::Control,
            4 => TokenType::UserDefined,
            5 => TokenType::Unused,
            6 => TokenType::Byte,
            _ => TokenType::Undefined,
        }
    }
}

/// A token's effective attributes (llama.cpp `llama_token_attr`): the declared type, adjusted
/// the way llama.cpp adjusts it (end-of-generation tokens forced to control, control tokens
/// named "unused" marked unused, ...), plus strip flags.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct TokenAttrs(u16);

impl TokenAttrs {
    pub const UNDEFINED: TokenAttrs = TokenAttrs(0);
    pub const UNKNOWN: TokenAttrs = TokenAttrs(1 << 0);
    pub const UNUSED: TokenAttrs = TokenAttrs(1 << 1);
    pub const NORMAL: TokenAttrs = TokenAttrs(1 << 2);
    pub const CONTROL: TokenAttrs = TokenAttrs(1 << 3);
    pub const USER_DEFINED: TokenAttrs = TokenAttrs(1 << 4);
    pub const BYTE: TokenAttrs = TokenAttrs(1 << 5);
    pub const NORMALIZED: TokenAttrs = TokenAttrs(1 << 6);
    pub const LSTRIP: TokenAttrs = TokenAttrs(1 << 7);
    pub const RSTRIP: TokenAttrs = TokenAttrs(1 << 8);
    pub const SINGLE_WORD: TokenAttrs = TokenAttrs(1 << 9);

    /// True if any flag of `other` is set.
    #[inline]
    pub fn intersects(self, other: TokenAttrs) -> bool {
        self.0 & other.0 != 0
    }

    #[inline]
    pub fn bits(self) -> u16 {
        self.0
    }

    pub fn is_control(self) -> bool {
        self.intersects(Self::CONTROL)
    }

    pub fn is_user_defined(self) -> bool {
        self.intersects(Self::USER_DEFINED)
    }

    pub fn is_unknown(self) -> bool {
        self.intersects(Self::UNKNOWN)
    }

    pub fn is_unused(self) -> bool {
        self.intersects(Self::UNUSED)
    }

    pub fn is_byte(self) -> bool {
        self.intersects(Self::BYTE)
    }

    pub fn is_normal(self) -> bool {
        self.intersects(Self::NORMAL)
    }

    fn with(self, other: TokenAttrs, on: bool) -> TokenAttrs {
        if on {
            TokenAttrs(self.0 | other.0)
        } else {
            TokenAttrs(self.0 & !other.0)
        }
    }

    fn of_type(t: TokenType) -> TokenAttrs {
        match t {
            TokenType::Undefined => Self::UNDEFINED,
            TokenType::Normal => Self::NORMAL,
            TokenType::Unknown => Self::UNKNOWN,
            TokenType::Control => Self::CONTROL,
            TokenType::UserDefined => Self::USER_DEFINED,
            TokenType::Unused => Self::UNUSED,
            TokenType::Byte => Self::BYTE,
        }
    }
}

/// Ids of the model's special tokens; `None` where the model has none.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SpecialTokens {
    pub bos: Option<u32>,
    pub eos: Option<u32>,
    pub eot: Option<u32>,
    pub eom: Option<u32>,
    pub unk: Option<u32>,
    pub sep: Option<u32>,
    pub pad: Option<u32>,
    pub mask: Option<u32>,
    pub fim_pre: Option<u32>,
    pub fim_suf: Option<u32>,
    pub fim_mid: Option<u32>,
    pub fim_pad: Option<u32>,
    pub fim_rep: Option<u32>,
    pub fim_sep: Option<u32>,
}

/// A tokenizer built from GGUF `tokenizer.ggml.*` metadata that reproduces llama.cpp's
/// `llama_tokenize`, `llama_token_to_piece` and `llama_detokenize`.
pub struct Tokenizer {
    model: TokenizerModel,
    pre_name: Option<String>,
    texts: Vec<Box<str>>,
    scores: Vec<f32>,
    types: Vec<TokenType>,
    attrs: Vec<TokenAttrs>,
    text_to_id: FxMap<Box<str>, u32>,
    special: SpecialTokens,
    eog: Vec<u32>,
    add_bos: bool,
    add_eos: bool,
    add_space_prefix: bool,
    clean_spaces: bool,
    ignore_merges: bool,
    /// Control, user-defined and unknown tokens, longest text first: the order in which
    /// llama.cpp's `tokenizer_st_partition` cuts them out of the text.
    special_cache: Vec<u32>,
    /// Finds which of `special_cache` occur in a text (pattern i = special_cache[i]).
    special_matcher: Option<AhoCorasick>,
    bpe: Option<BpeModel>,
    byte_tokens: [Option<u32>; 256],
    /// `llama_token_to_piece(id, special = true)` for every token.
    pieces: Vec<Box<[u8]>>,
}

/// A piece of input during special-token partitioning.
#[derive(Clone, Copy, Debug)]
enum Fragment {
    Text(usize, usize),
    Token(u32),
}

const KEY_MODEL: &str = "tokenizer.ggml.model";
const KEY_PRE: &str = "tokenizer.ggml.pre";
const KEY_TOKENS: &str = "tokenizer.ggml.tokens";
const KEY_SCORES: &str = "tokenizer.ggml.scores";
const KEY_TOKEN_TYPE: &str = "tokenizer.ggml.token_type";
const KEY_MERGES: &str = "tokenizer.ggml.merges";
const KEY_ADD_BOS: &str = "tokenizer.ggml.add_bos_token";
const KEY_ADD_EOS: &str = "tokenizer.ggml.add_eos_token";
const KEY_ADD_SPACE_PREFIX: &str = "tokenizer.ggml.add_space_prefix";

/// Texts llama.cpp recognizes as end-of-turn tokens when `eot_token_id` is absent, in the
/// order this crate prefers them (llama.cpp takes whichever its hash map yields first).
const EOT_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<|end_of_text|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "<｜end▁of▁sentence｜>",
    "<end_of_utterance>",
];
const EOM_TEXTS: &[&str] = &["<|eom_id|>"];
const FIM_PRE_TEXTS: &[&str] = &[
    "<|fim_prefix|>",
    "<fim-prefix>",
    "<fim_prefix>",
    "<｜fim▁begin｜>",
    "<PRE>",
    "▁<PRE>",
    "<|code_prefix|>",
    "<|prefix|>",
];
const FIM_SUF_TEXTS: &[&str] = &[
    "<|fim_suffix|>",
    "<fim-suffix>",
    "<fim_suffix>",
    "<｜fim▁hole｜>",
    "<SUF>",
    "▁<SUF>",
    "<|code_suffix|>",
    "<|suffix|>",
];
const FIM_MID_TEXTS: &[&str] = &[
    "<|fim_middle|>",
    "<fim-middle>",
    "<fim_middle>",
    "<｜fim▁end｜>",
    "<MID>",
    "▁<MID>",
    "<|code_middle|>",
    "<|middle|>",
];
const FIM_PAD_TEXTS: &[&str] = &["<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"];
const FIM_REP_TEXTS: &[&str] = &[
    "<|fim_repo|>",
    "<|repo_name|>",
    "<fim-repo>",
    "<REPO>",
    "<reponame>",
];
const FIM_SEP_TEXTS: &[&str] = &["<|file_sep|>"];
/// Texts that end generation (llama.cpp's EOG list).
const EOG_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<|return|>",
    "<|call|>",
    "<|flush|>",
    "<|calls|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "</s>",
    "<|eom_id|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "[EOS]",
    "<|end_of_text|>",
    "<end_of_utterance>",
    "<eos>",
    "<turn|>",
    "<|tool_response>",
    "<｜end▁of▁sentence｜>",
    "[e~[",
];

fn invalid(key: &str, reason: impl Into<String>) -> TokenizerError {
    TokenizerError::InvalidMetadata {
        key: key.to_string(),
        reason: reason.into(),
    }
}

/// An optional token id key. Values outside the vocabulary keep the default (llama.cpp warns
/// "bad special token" and does the same); a non-integer value is an error naming the key.
fn read_token_id(
    md: &Metadata,
    key: &str,
    default: Option<u32>,
    n_tokens: usize,
) -> Result<Option<u32>, TokenizerError> {
    let default = default.filter(|&d| (d as usize) < n_tokens);
    match md.get(key) {
        None => Ok(default),
        Some(v) => {
            let Some(i) = v.as_i64() else {
                return Err(lockstep_gguf::MetadataError::WrongType {
                    key: key.to_string(),
                    expected: "integer",
                    found: v.value_type().to_string(),
                }
                .into());
            };
            Ok(if i >= 0 && (i as u64) < n_tokens as u64 {
                Some(i as u32)
            } else {
                default
            })
        }
    }
}

impl Tokenizer {
    /// Builds the tokenizer from `tokenizer.ggml.*` metadata (`model`, `pre`, `tokens`,
    /// `scores`, `token_type`, `merges`, special token ids and `add_*` flags), with the same
    /// defaults and adjustments llama.cpp's vocabulary loader applies.
    pub fn from_metadata(md: &Metadata) -> Result<Tokenizer, TokenizerError> {
        let model_name = md.get_str(KEY_MODEL)?;
        let pre_name = md.opt_str(KEY_PRE)?;
        let texts_in = md.get_str_array(KEY_TOKENS)?;
        let n = texts_in.len();
        if n == 0 {
            return Err(invalid(KEY_TOKENS, "the vocabulary is empty"));
        }
        if n > i32::MAX as usize {
            return Err(invalid(KEY_TOKENS, format!("{n} tokens is too many")));
        }

        let bytes = ByteMap::new();
        let (
            model,
            mut add_bos,
            mut add_space_prefix,
            clean_spaces,
            ignore_merges,
            bos_default,
            eos_default,
            unk_default,
        ) = match model_name {
            "llama" => (
                TokenizerModel::SentencePiece,
                true,
                true,
                false,
                false,
                Some(1),
                Some(2),
                Some(0),
            ),
            "gpt2" => {
                let spec = pre_spec(pre_name)?;
                let bos = if spec.no_bos { None } else { Some(11) };
                (
                    TokenizerModel::BytePairEncoding(spec.pre),
                    spec.add_bos,
                    false,
                    spec.clean_spaces,
                    spec.ignore_merges,
                    bos,
                    Some(11),
                    None,
                )
            }
            other => return Err(TokenizerError::UnknownModel(other.to_string())),
        };
        if let Some(v) = md.opt_bool(KEY_ADD_SPACE_PREFIX)? {
            add_space_prefix = v;
        }

        // Token texts, scores and types.
        let texts: Vec<Box<str>> = texts_in
            .iter()
            .enumerate()
            .map(|(i, t)| {
                if t.is_empty() {
                    format!("[EMPTY_{i}]").into_boxed_str()
                } else {
                    (*t).into()
                }
            })
            .collect();
        let scores = match md.get(KEY_SCORES) {
            None => vec![0.0; n],
            Some(_) => {
                let s = md.get_f32_array(KEY_SCORES)?;
                if s.len() < n {
                    return Err(invalid(
                        KEY_SCORES,
                        format!("has {} entries for {n} tokens", s.len()),
                    ));
                }
                s
            }
        };
        let types: Vec<TokenType> = match md.get(KEY_TOKEN_TYPE) {
            None => vec![TokenType::Normal; n],
            Some(_) => {
                let t = md.get_i64_array(KEY_TOKEN_TYPE)?;
                if t.len() < n {
                    return Err(invalid(
                        KEY_TOKEN_TYPE,
                        format!("has {} entries for {n} tokens", t.len()),
                    ));
                }
                t[..n].iter().map(|&v| TokenType::from_gguf(v)).collect()
            }
        };
        let mut attrs: Vec<TokenAttrs> = types.iter().map(|&t| TokenAttrs::of_type(t)).collect();

        let mut text_to_id: FxMap<Box<str>, u32> = FxMap::default();
        text_to_id.reserve(n);
        for (i, t) in texts.iter().enumerate() {
            // llama.cpp rejects duplicate texts; keeping the first is the lenient equivalent.
            text_to_id.entry(t.clone()).or_insert(i as u32);
        }

        let bpe = match model {
            TokenizerModel::BytePairEncoding(_) => {
                let merges = md.get_str_array(KEY_MERGES)?;
                let tok_refs: Vec<&str> = texts.iter().map(|t| &**t).collect();
                Some(BpeModel::new(&tok_refs, &merges, &bytes))
            }
            TokenizerModel::SentencePiece => None,
        };

        // Special token ids.
        let rd = |key: &str, default: Option<u32>| read_token_id(md, key, default, n);
        let mut sp = SpecialTokens {
            bos: rd("tokenizer.ggml.bos_token_id", bos_default)?,
            eos: rd("tokenizer.ggml.eos_token_id", eos_default)?,
            eot: rd("tokenizer.ggml.eot_token_id", None)?,
            eom: rd("tokenizer.ggml.eom_token_id", None)?,
            unk: rd("tokenizer.ggml.unknown_token_id", unk_default)?,
            sep: rd("tokenizer.ggml.seperator_token_id", None)?,
            pad: rd("tokenizer.ggml.padding_token_id", None)?,
            mask: rd("tokenizer.ggml.mask_token_id", None)?,
            fim_pre: None,
            fim_suf: None,
            fim_mid: None,
            fim_pad: rd("tokenizer.ggml.fim_pad_token_id", None)?,
            fim_rep: rd("tokenizer.ggml.fim_rep_token_id", None)?,
            fim_sep: rd("tokenizer.ggml.fim_sep_token_id", None)?,
        };
        let fim_pre = rd("tokenizer.ggml.fim_pre_token_id", None)?;
        sp.fim_pre = rd("tokenizer.ggml.prefix_token_id", fim_pre)?;
        let fim_suf = rd("tokenizer.ggml.fim_suf_token_id", None)?;
        sp.fim_suf = rd("tokenizer.ggml.suffix_token_id", fim_suf)?;
        let fim_mid = rd("tokenizer.ggml.fim_mid_token_id", None)?;
        sp.fim_mid = rd("tokenizer.ggml.middle_token_id", fim_mid)?;

        let mut add_eos = false;
        if let Some(v) = md.opt_bool(KEY_ADD_BOS)? {
            add_bos = v;
        }
        if let Some(v) = md.opt_bool(KEY_ADD_EOS)? {
            add_eos = v;
        }
        if add_bos && sp.bos.is_none() {
            return Err(invalid(
                KEY_ADD_BOS,
                "BOS is to be added but the model has no BOS token (tokenizer.ggml.bos_token_id)",
            ));
        }
        if add_eos && sp.eos.is_none() {
            return Err(invalid(
                KEY_ADD_EOS,
                "EOS is to be added but the model has no EOS token (tokenizer.ggml.eos_token_id)",
            ));
        }

        // Tokens recognized by their text (llama.cpp's auto-detection); each found one is
        // forced to be a control token.
        let find = |list: &[&str]| list.iter().find_map(|t| text_to_id.get(*t).copied());
        fn force_control(id: u32, attrs: &mut [TokenAttrs]) {
            let a = &mut attrs[id as usize];
            *a = a.with(TokenAttrs::CONTROL, true);
        }
        for (slot, list) in [
            (&mut sp.eot, EOT_TEXTS),
            (&mut sp.eom, EOM_TEXTS),
            (&mut sp.fim_pre, FIM_PRE_TEXTS),
            (&mut sp.fim_suf, FIM_SUF_TEXTS),
            (&mut sp.fim_mid, FIM_MID_TEXTS),
            (&mut sp.fim_pad, FIM_PAD_TEXTS),
            (&mut sp.fim_rep, FIM_REP_TEXTS),
            (&mut sp.fim_sep, FIM_SEP_TEXTS),
        ] {
            if slot.is_none() {
                if let Some(id) = find(list) {
                    *slot = Some(id);
                    force_control(id, &mut attrs);
                }
            }
        }

        // Control tokens named "unused" are unused.
        for (t, a) in texts.iter().zip(attrs.iter_mut()) {
            if a.is_control() && t.contains("unused") {
                *a = a.with(TokenAttrs::UNUSED, true);
            }
        }

        // End-of-generation set.
        let mut eog: Vec<u32> = Vec::new();
        eog.extend(sp.fim_pad);
        eog.extend(sp.fim_rep);
        eog.extend(sp.fim_sep);
        for t in EOG_TEXTS {
            if let Some(&id) = text_to_id.get(*t) {
                eog.push(id);
                force_control(id, &mut attrs);
            }
        }
        // gpt-oss: these are always rendered.
        for t in ["<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"] {
            if let Some(&id) = text_to_id.get(t) {
                attrs[id as usize] = TokenAttrs::USER_DEFINED;
            }
        }
        eog.extend(sp.eos);
        eog.extend(sp.eot);
        eog.extend(sp.eom);
        eog.sort_unstable();
        eog.dedup();
        let eog_has =
            |eog: &[u32], s: &str| eog.iter().copied().find(|&id| &*texts[id as usize] == s);
        // o200k_harmony / solar-open: "<|end|>" is not end-of-generation there.
        {
            let has = |s: &str| eog_has(&eog, s).is_some();
            let has_call = has("<|call|>") || has("<|calls|>");
            if let Some(end) = eog_has(&eog, "<|end|>") {
                if has_call && (has("<|return|>") || has("<|flush|>")) {
                    eog.retain(|&x| x != end);
                    attrs[end as usize] = TokenAttrs::USER_DEFINED;
                }
            }
        }
        // gemma4 / paddleocr: "</s>" is not end-of-generation when "<|tool_response>" is.
        if eog_has(&eog, "<|tool_response>").is_some() {
            if let Some(s) = eog_has(&eog, "</s>") {
                eog.retain(|&x| x != s);
                attrs[s as usize] = TokenAttrs::NORMAL;
            }
        }

        // Special tokens cut out before tokenizing, longest first (ties by id).
        let mut special_cache: Vec<u32> = (0..n as u32)
            .filter(|&id| {
                attrs[id as usize].intersects(TokenAttrs(
                    TokenAttrs::CONTROL.0 | TokenAttrs::USER_DEFINED.0 | TokenAttrs::UNKNOWN.0,
                ))
            })
            .collect();
        special_cache.sort_by(|&a, &b| {
            texts[b as usize]
                .len()
                .cmp(&texts[a as usize].len())
                .then(a.cmp(&b))
        });

        let byte_tokens: [Option<u32>; 256] = std::array::from_fn(|b| {
            let hex = format!("<0x{b:02X}>");
            text_to_id.get(hex.as_str()).copied().or_else(|| {
                if b < 0x80 {
                    let s = (b as u8 as char).to_string();
                    text_to_id.get(s.as_str()).copied()
                } else {
                    None
                }
            })
        });

        let mut tok = Tokenizer {
            model,
            pre_name: pre_name.map(str::to_string),
            texts,
            scores,
            types,
            attrs,
            text_to_id,
            special: sp,
            eog,
            add_bos,
            add_eos,
            add_space_prefix,
            clean_spaces,
            ignore_merges,
            special_cache,
            special_matcher: None,
            bpe,
            byte_tokens,
            pieces: Vec::new(),
        };
        tok.pieces = (0..n as u32)
            .map(|id| tok.compute_piece(id, &bytes).into_boxed_slice())
            .collect();
        tok.apply_model_specific_attrs(md)?;
        if !tok.special_cache.is_empty() {
            let pats: Vec<&[u8]> = tok
                .special_cache
                .iter()
                .map(|&id| tok.texts[id as usize].as_bytes())
                .collect();
            let ac = AhoCorasick::new(pats)
                .map_err(|e| invalid(KEY_TOKENS, format!("cannot index special tokens: {e}")))?;
            tok.special_matcher = Some(ac);
        }
        Ok(tok)
    }

    /// Per-model strip flags llama.cpp sets by model name (phi-3, jina v2, modern-bert).
    fn apply_model_specific_attrs(&mut self, md: &Metadata) -> Result<(), TokenizerError> {
        let name = md
            .opt_str("general.name")?
            .unwrap_or_default()
            .to_ascii_lowercase();
        let pre = self.pre_name.clone().unwrap_or_default();
        let arch = md.opt_str("general.architecture")?.unwrap_or_default();
        let set = |t: &mut Tokenizer, text: &str, attr: TokenAttrs, on: bool| {
            if let Some(&id) = t.text_to_id.get(text) {
                let a = &mut t.attrs[id as usize];
                *a = a.with(attr, on);
            }
        };
        let any = |s: &str, subs: &[&str]| subs.iter().any(|x| s.contains(x));
        if any(&pre, &["jina-v2-de", "jina-v2-es", "jina-v2-code"])
            || any(arch, &["nomic-bert-moe", "jina-bert-v3"])
        {
            set(self, "<mask>", TokenAttrs::LSTRIP, true);
        } else if any(&name, &["phi-3", "phi3"]) {
            for i in 0..self.special_cache.len() {
                let id = self.special_cache[i] as usize;
                self.attrs[id] = self.attrs[id].with(TokenAttrs::RSTRIP, true);
            }
            set(self, "</s>", TokenAttrs::RSTRIP, true);
            for t in ["<unk>", "<s>", "<|endoftext|>"] {
                set(self, t, TokenAttrs::RSTRIP, false);
            }
        } else if any(&name, &["modern-bert"]) {
            set(self, "[MASK]", TokenAttrs::LSTRIP, true);
        }
        Ok(())
    }

    /// `llama_token_to_piece(id, lstrip = 0, special = true)`.
    fn compute_piece(&self, id: u32, bytes: &ByteMap) -> Vec<u8> {
        let a = self.attrs[id as usize];
        let text = &*self.texts[id as usize];
        if a.intersects(TokenAttrs(
            TokenAttrs::UNKNOWN.0 | TokenAttrs::CONTROL.0 | TokenAttrs::USER_DEFINED.0,
        )) {
            return text.as_bytes().to_vec();
        }
        if a.is_normal() {
            return match self.model {
                TokenizerModel::SentencePiece => text.replace('\u{2581}', " ").into_bytes(),
                TokenizerModel::BytePairEncoding(_) => {
                    let mut out = Vec::with_capacity(text.len());
                    for c in text.chars() {
                        match bytes.byte_of(c) {
                            Some(b) => out.push(b),
                            None => {
                                // llama.cpp's marker for a char outside the byte alphabet.
                                out.extend_from_slice(b"[UNK_BYTE_0x");
                                let mut buf = [0u8; 4];
                                for b in c.encode_utf8(&mut buf).bytes() {
                                    out.extend_from_slice(format!("{b:02x}").as_bytes());
                                }
                                out.extend_from_slice(text.as_bytes());
                                out.push(b']');
                            }
                        }
                    }
                    out
                }
            };
        }
        if a.is_byte() {
            return vec![byte_token_value(text)];
        }
        Vec::new()
    }

    // ---------------------------------------------------------------- queries

    /// The tokenization algorithm (and for BPE, the pre-tokenizer).
    pub fn model(&self) -> TokenizerModel {
        self.model
    }

    /// Number of tokens in the vocabulary.
    pub fn vocab_size(&self) -> usize {
        self.texts.len()
    }

    /// All special token ids.
    pub fn special_tokens(&self) -> &SpecialTokens {
        &self.special
    }

    pub fn bos(&self) -> Option<u32> {
        self.special.bos
    }

    pub fn eos(&self) -> Option<u32> {
        self.special.eos
    }

    pub fn eot(&self) -> Option<u32> {
        self.special.eot
    }

    /// Whether `encode(.., add_special = true, ..)` prepends BOS.
    pub fn add_bos(&self) -> bool {
        self.add_bos
    }

    /// Whether `encode(.., add_special = true, ..)` appends EOS.
    pub fn add_eos(&self) -> bool {
        self.add_eos
    }

    /// SentencePiece: whether a space is prepended to the text (and stripped again when
    /// detokenizing).
    pub fn add_space_prefix(&self) -> bool {
        self.add_space_prefix
    }

    /// True if `id` ends generation (EOS, EOT, `<end_of_turn>`, `<|im_end|>`, ...).
    pub fn is_eog(&self, id: u32) -> bool {
        self.eog.binary_search(&id).is_ok()
    }

    /// The end-of-generation ids, ascending.
    pub fn eog_ids(&self) -> &[u32] {
        &self.eog
    }

    fn check(&self, id: u32) -> Result<usize, TokenizerError> {
        let i = id as usize;
        if i < self.texts.len() {
            Ok(i)
        } else {
            Err(TokenizerError::TokenOutOfRange {
                id,
                vocab_size: self.texts.len(),
            })
        }
    }

    /// The token's text as stored in the vocabulary (byte-level or `▁`-escaped form).
    pub fn token_text(&self, id: u32) -> Result<&str, TokenizerError> {
        Ok(&self.texts[self.check(id)?])
    }

    /// The id of the token whose stored text is exactly `text`.
    pub fn token_id(&self, text: &str) -> Option<u32> {
        self.text_to_id.get(text).copied()
    }

    /// The token's score (`tokenizer.ggml.scores`, 0 when absent).
    pub fn token_score(&self, id: u32) -> Result<f32, TokenizerError> {
        Ok(self.scores[self.check(id)?])
    }

    /// The token's declared type (`tokenizer.ggml.token_type`).
    pub fn token_type(&self, id: u32) -> Result<TokenType, TokenizerError> {
        Ok(self.types[self.check(id)?])
    }

    /// The token's effective attributes (see [`TokenAttrs`]).
    pub fn token_attrs(&self, id: u32) -> Result<TokenAttrs, TokenizerError> {
        Ok(self.attrs[self.check(id)?])
    }

    /// True for control tokens (BOS, EOS, `<start_of_turn>`, ...).
    pub fn is_control(&self, id: u32) -> bool {
        self.attrs.get(id as usize).is_some_and(|a| a.is_control())
    }

    // ---------------------------------------------------------------- encoding

    /// Tokenizes `text` like llama.cpp's `llama_tokenize`.
    ///
    /// `add_special` adds BOS/EOS as the model's `add_bos`/`add_eos` flags say;
    /// `parse_special` lets control tokens written in the text (e.g. `<|im_start|>`) become
    /// those tokens. User-defined tokens are always matched.
    pub fn encode(&self, text: &str, add_special: bool, parse_special: bool) -> Vec<u32> {
        let mut out = Vec::with_capacity(text.len() / 3 + 2);
        if add_special && self.add_bos {
            out.extend(self.special.bos);
        }
        let frags = self.partition(text, parse_special);
        match self.model {
            TokenizerModel::SentencePiece => {
                let mut prev_special = true;
                let mut buf = String::new();
                let mut cache = spm::SpmCache::default();
                for f in frags {
                    match f {
                        Fragment::Token(id) => {
                            out.push(id);
                            prev_special = true;
                        }
                        Fragment::Text(s, e) => {
                            buf.clear();
                            if self.add_space_prefix && prev_special {
                                buf.push('\u{2581}');
                            }
                            for c in text[s..e].chars() {
                                buf.push(if c == ' ' { '\u{2581}' } else { c });
                            }
                            for chunk in chunks(&buf, MAX_CHUNK) {
                                spm::tokenize(self, chunk, &mut cache, &mut out);
                            }
                            prev_special = false;
                        }
                    }
                }
            }
            TokenizerModel::BytePairEncoding(pre) => {
                let Some(bpe) = &self.bpe else {
                    return out;
                };
                let mut scratch = BpeScratch::default();
                let mut pre_scratch = PreScratch::default();
                let mut words = Vec::new();
                let mut word_cache: FxMap<&[u8], (usize, usize)> = FxMap::default();
                let mut cached: Vec<u32> = Vec::new();
                for f in frags {
                    match f {
                        Fragment::Token(id) => out.push(id),
                        Fragment::Text(s, e) => {
                            let frag = &text[s..e];
                            words.clear();
                            pre.split_into(frag, &mut pre_scratch, &mut words);
                            for r in words.drain(..) {
                                let word = &frag.as_bytes()[r.clone()];
                                // Words repeat; merging is a pure function of the word.
                                if word.len() <= WORD_CACHE_MAX_LEN {
                                    if let Some(&(at, n)) = word_cache.get(word) {
                                        out.extend_from_slice(&cached[at..at + n]);
                                        continue;
                                    }
                                }
                                let before = out.len();
                                for chunk in chunks(&frag[r], MAX_CHUNK) {
                                    bpe.tokenize_word(
                                        chunk.as_bytes(),
                                        self.ignore_merges,
                                        &mut scratch,
                                        &mut out,
                                    );
                                }
                                if word.len() <= WORD_CACHE_MAX_LEN {
                                    word_cache.insert(word, (cached.len(), out.len() - before));
                                    cached.extend_from_slice(&out[before..]);
                                }
                            }
                        }
                    }
                }
            }
        }
        if add_special && self.add_eos {
            out.extend(self.special.eos);
        }
        out
    }

    /// Like [`Tokenizer::encode`] for raw bytes: invalid UTF-8 is an error naming the offset
    /// of the first bad byte.
    pub fn encode_bytes(
        &self,
        bytes: &[u8],
        add_special: bool,
        parse_special: bool,
    ) -> Result<Vec<u32>, TokenizerError> {
        let text = std::str::from_utf8(bytes).map_err(|e| TokenizerError::InvalidUtf8 {
            offset: e.valid_up_to(),
        })?;
        Ok(self.encode(text, add_special, parse_special))
    }

    /// Cuts special tokens out of the text (llama.cpp `tokenizer_st_partition`): each special
    /// token in turn, longest first, is found left to right in every remaining text fragment.
    fn partition(&self, text: &str, parse_special: bool) -> Vec<Fragment> {
        if text.is_empty() {
            return Vec::new();
        }
        let mut frags = vec![Fragment::Text(0, text.len())];
        let Some(matcher) = &self.special_matcher else {
            return frags;
        };
        // Only tokens that occur somewhere in the text can cut it.
        let mut present = vec![false; self.special_cache.len()];
        let mut any = false;
        for m in matcher.find_overlapping_iter(text.as_bytes()) {
            present[m.pattern().as_usize()] = true;
            any = true;
        }
        if !any {
            return frags;
        }
        let bytes = text.as_bytes();
        let skip_unless_parse = TokenAttrs(TokenAttrs::CONTROL.0 | TokenAttrs::UNKNOWN.0);
        for (ci, &id) in self.special_cache.iter().enumerate() {
            if !present[ci] {
                continue;
            }
            let attr = self.attrs[id as usize];
            if !parse_special && attr.intersects(skip_unless_parse) {
                continue;
            }
            let pat = self.texts[id as usize].as_bytes();
            let finder = memchr::memmem::Finder::new(pat);
            let lstrip = attr.intersects(TokenAttrs::LSTRIP);
            let rstrip = attr.intersects(TokenAttrs::RSTRIP);
            let mut next = Vec::with_capacity(frags.len() + 2);
            for f in frags {
                let Fragment::Text(mut s, e) = f else {
                    next.push(f);
                    continue;
                };
                loop {
                    let Some(rel) = finder.find(&bytes[s..e]) else {
                        next.push(Fragment::Text(s, e));
                        break;
                    };
                    let m = s + rel;
                    let mut left_end = m;
                    if lstrip {
                        while left_end > s && c_isspace(bytes[left_end - 1]) {
                            left_end -= 1;
                        }
                    }
                    if left_end > s {
                        next.push(Fragment::Text(s, left_end));
                    }
                    next.push(Fragment::Token(id));
                    let mut r = m + pat.len();
                    if r >= e {
                        break;
                    }
                    if rstrip {
                        while r < e && c_isspace(bytes[r]) {
                            r += 1;
                        }
                    }
                    if r >= e {
                        break;
                    }
                    s = r;
                }
            }
            frags = next;
        }
        frags
    }

    // ---------------------------------------------------------------- decoding

    /// `llama_token_to_piece(id, lstrip = 0, special)`: the bytes a token stands for. Control
    /// and unknown tokens are empty unless `special`; byte tokens are their raw byte;
    /// SentencePiece `▁` is a space; byte-level BPE text is decoded to raw bytes.
    pub fn token_to_piece(&self, id: u32, special: bool) -> Result<&[u8], TokenizerError> {
        let i = self.check(id)?;
        let a = self.attrs[i];
        if !special && a.intersects(TokenAttrs(TokenAttrs::UNKNOWN.0 | TokenAttrs::CONTROL.0)) {
            return Ok(&[]);
        }
        Ok(&self.pieces[i])
    }

    /// `llama_detokenize(ids, remove_special, unparse_special)`: the exact bytes.
    ///
    /// `remove_special` drops a leading BOS / trailing EOS that the model adds by itself;
    /// `unparse_special` renders control tokens as their text. With SentencePiece's
    /// `add_space_prefix` the first token's leading space is removed; BPE models whose
    /// pre-tokenizer asks for it get llama.cpp's `clean_up_tokenization_spaces` pass.
    pub fn detokenize(
        &self,
        ids: &[u32],
        remove_special: bool,
        unparse_special: bool,
    ) -> Result<Vec<u8>, TokenizerError> {
        for &id in ids {
            self.check(id)?;
        }
        let mut ids = ids;
        let mut remove_space = self.add_space_prefix;
        if remove_special && self.add_bos {
            if let (Some(&first), Some(bos)) = (ids.first(), self.special.bos) {
                if first == bos {
                    remove_space = false;
                    ids = &ids[1..];
                }
            }
        }
        if remove_special && self.add_eos {
            if let (Some(&last), Some(eos)) = (ids.last(), self.special.eos) {
                if last == eos {
                    ids = &ids[..ids.len() - 1];
                }
            }
        }
        let mut text = Vec::with_capacity(ids.len() * 4);
        for &id in ids {
            let mut piece = self.token_to_piece(id, unparse_special)?;
            if remove_space && piece.first() == Some(&b' ') {
                piece = &piece[1..];
            }
            remove_space = false;
            text.extend_from_slice(piece);
        }
        if self.clean_spaces {
            clean_up_spaces(&mut text);
        }
        Ok(text)
    }

    /// [`Tokenizer::detokenize`] without removing BOS/EOS, as a `String` (invalid UTF-8, e.g.
    /// a cut multi-byte sequence, becomes U+FFFD).
    pub fn decode(&self, ids: &[u32], special: bool) -> Result<String, TokenizerError> {
        let bytes = self.detokenize(ids, false, special)?;
        Ok(match String::from_utf8(bytes) {
            Ok(s) => s,
            Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
        })
    }
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokenizer")
            .field("model", &self.model)
            .field("pre", &self.pre_name)
            .field("vocab_size", &self.texts.len())
            .field("special", &self.special)
            .field("eog", &self.eog)
            .field("add_bos", &self.add_bos)
            .field("add_eos", &self.add_eos)
            .field("add_space_prefix", &self.add_space_prefix)
            .field("clean_spaces", &self.clean_spaces)
            .field("ignore_merges", &self.ignore_merges)
            .field("special_tokens_cut", &self.special_cache.len())
            .finish()
    }
}

impl SpmVocab for Tokenizer {
    #[inline]
    fn lookup(&self, text: &str) -> Option<u32> {
        self.text_to_id.get(text).copied()
    }

    #[inline]
    fn score(&self, id: u32) -> f32 {
        self.scores[id as usize]
    }

    #[inline]
    fn byte_token(&self, b: u8) -> Option<u32> {
        self.byte_tokens[b as usize]
    }
}

/// Merging indexes symbols with 32-bit integers; a single word (or SentencePiece fragment)
/// longer than this is merged in pieces of at most this many bytes, cut at char boundaries.
/// (llama.cpp has the same 32-bit limit and does not check it.)
const MAX_CHUNK: usize = 1 << 30;

/// Words up to this many bytes have their ids memoized within one `encode` call.
const WORD_CACHE_MAX_LEN: usize = 64;

/// `s` in consecutive pieces of at most `max` bytes (at least one char each), cut at char
/// boundaries.
fn chunks(s: &str, max: usize) -> impl Iterator<Item = &str> {
    let mut rest = s;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let mut cut = rest.len().min(max);
        while !rest.is_char_boundary(cut) {
            cut -= 1;
        }
        if cut == 0 {
            cut = rest.chars().next().map_or(rest.len(), char::len_utf8);
        }
        let (head, tail) = rest.split_at(cut);
        rest = tail;
        Some(head)
    })
}

/// The byte of a `<0xXX>` token (llama.cpp: `strtol(text.substr(3, 2), 16)`).
fn byte_token_value(text: &str) -> u8 {
    let digits = text.get(3..).unwrap_or("");
    let mut v: u32 = 0;
    for c in digits.chars().take(2) {
        match c.to_digit(16) {
            Some(d) => v = v * 16 + d,
            None => break,
        }
    }
    v as u8
}

/// llama.cpp's `clean_spaces` pass over detokenized text, done in place with its exact
/// index arithmetic: " ?", " !", " .", " ," lose the space; " ' " becomes "'"; " 's", " 'm",
/// " 're", " 've" lose the space.
fn clean_up_spaces(text: &mut Vec<u8>) {
    // pass 1: space before ? ! . ,
    let n1 = text.len();
    let mut total = usize::from(n1 > 0);
    for i in 1..n1 {
        let x = text[i];
        if text[i - 1] == b' ' && matches!(x, b'?' | b'!' | b'.' | b',') {
            total -= 1;
        }
        text[total] = x;
        total += 1;
    }
    text.truncate(total);

    // pass 2: single apostrophe between spaces
    let n2 = text.len();
    let mut total = usize::from(n2 > 0);
    let mut i = 1;
    while i < n2 {
        let x = text[i];
        if x == b'\'' && i + 1 < n2 && text[i - 1] == b' ' && text[i + 1] == b' ' {
            total -= 1;
            i += 1;
            text[i] = 0;
        }
        text[total] = x;
        total += 1;
        i += 1;
    }
    text.truncate(total);

    // pass 3: apostrophe contractions
    let n3 = text.len();
    let mut total = usize::from(n3 > 0);
    for i in 1..n3 {
        let x = text[i];
        if text[i - 1] == b' ' && x == b'\'' && i + 1 < n3 {
            let x1 = text[i + 1];
            if x1 == b's' || x1 == b'm' {
                total -= 1;
            } else if x1 != b't' && x1 != b'd' && i + 2 < n3 {
                let x2 = text[i + 2];
                if x2 == b'e' && (x1 == b'r' || x1 == b'v') {
                    total -= 1;
                }
            }
        }
        text[total] = x;
        total += 1;
    }
    text.truncate(total);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn clean(s: &str) -> String {
        let mut v = s.as_bytes().to_vec();
        clean_up_spaces(&mut v);
        String::from_utf8(v).unwrap_or_default()
    }

    #[test]
    fn clean_spaces_passes() {
        assert_eq!(clean("Hello , world !"), "Hello, world!");
        assert_eq!(clean("a ' b"), "a'b");
        assert_eq!(
            clean("it 's we 're I 'm they 've"),
            "it's we're I'm they've"
        );
        assert_eq!(clean("don 't we 'll she 'd"), "don 't we 'll she 'd");
        assert_eq!(clean(""), "");
        assert_eq!(clean(" ."), ".");
        assert_eq!(clean("x ."), "x.");
    }

    #[test]
    fn chunking() {
        let v: Vec<&str> = chunks("abcdé", 2).collect();
        assert_eq!(v, ["ab", "cd", "é"]);
        let v: Vec<&str> = chunks("éé", 3).collect();
        assert_eq!(v, ["é", "é"]);
        let v: Vec<&str> = chunks("é", 1).collect();
        assert_eq!(v, ["é"]);
        assert_eq!(chunks("", 4).count(), 0);
    }

    #[test]
    fn byte_values() {
        assert_eq!(byte_token_value("<0x0A>"), 10);
        assert_eq!(byte_token_value("<0xFF>"), 255);
        assert_eq!(byte_token_value("<0xZZ>"), 0);
    }
}
