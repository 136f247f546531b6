//! Tokenizers and chat templates built from GGUF metadata, identical to llama.cpp.
//!
//! * [`Tokenizer::from_metadata`] reads `tokenizer.ggml.*` and builds either a byte-level BPE
//!   tokenizer (`tokenizer.ggml.model = gpt2`, with the pre-tokenizer named by
//!   `tokenizer.ggml.pre`) or a SentencePiece-style one (`llama`: scores, `<0xXX>` byte
//!   fallback, `▁` for spaces). [`Tokenizer::encode`] reproduces `llama_tokenize` (special
//!   token partitioning included), [`Tokenizer::token_to_piece`] `llama_token_to_piece` and
//!   [`Tokenizer::detokenize`] `llama_detokenize`. [`StreamDecoder`] turns generated ids into
//!   text one at a time without splitting UTF-8 characters.
//! * [`ChatTemplate`] renders `tokenizer.chat_template` with minijinja, or llama.cpp's
//!   built-in `gemma` format for gemma models that have no template.
//!
//! Every algorithm runs in O(n log n) or better in the input length: pre-tokenizers are linear
//! scans, merges use a binary heap, and special tokens are located with Aho-Corasick before
//! llama.cpp's longest-first partitioning is applied to the ones present.
//!
//! # Where this differs from llama.cpp
//!
//! Only where llama.cpp's behaviour is unspecified, or it would crash or reject:
//! * Duplicate token texts: the lowest id wins (current llama.cpp refuses the file).
//! * When several texts could be the end-of-turn token and `tokenizer.ggml.eot_token_id` is
//!   absent, the first of llama.cpp's list is taken (`<|eot_id|>`, `<|im_end|>`, `<|end|>`,
//!   `<end_of_turn>`, `<|endoftext|>`, ...); llama.cpp takes whichever its hash map yields.
//!   End-of-generation membership does not depend on this.
//! * Special tokens of equal length are cut out in id order (llama.cpp's sort is unstable).
//! * A SentencePiece vocabulary without `<0xXX>` tokens drops bytes it cannot express
//!   (llama.cpp throws).
//! * Input must be valid UTF-8 ([`Tokenizer::encode_bytes`] reports the offset); llama.cpp
//!   substitutes U+FFFD in its BPE pre-tokenizer.
//! * Unicode general categories come from Unicode 16 tables; llama.cpp's generated table can
//!   differ on recently assigned code points.
//! * A single word or SentencePiece fragment over 1 GiB is merged in 1 GiB pieces.
//! * Supported: `tokenizer.ggml.model` `llama` and `gpt2`, and the pre-tokenizers in
//!   [`SUPPORTED_PRE_TOKENIZERS`]; anything else is an error.
//!
//! ```no_run
//! use lockstep_gguf::GgufFile;
//! use lockstep_tokenizer::{ChatMessage, ChatTemplate, Tokenizer};
//!
//! let file = GgufFile::open("model.gguf")?;
//! let tok = Tokenizer::from_metadata(file.metadata())?;
//! let ids = tok.encode("Hello world", true, false);
//! let text = tok.detokenize(&ids, false, false)?;
//!
//! let tmpl = ChatTemplate::from_metadata(file.metadata(), &tok)?;
//! let prompt = tmpl.render(&[ChatMessage::new("user", "Hi")], true)?;
//! let prompt_ids = tok.encode(&prompt.text, true, true);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod bpe;
mod chat;
mod error;
mod hash;
mod heap;
mod pretok;
mod spm;
mod stream;
mod unicode;
mod vocab;

pub use chat::{ChatMessage, ChatTemplate, RenderedPrompt, TemplateSource};
pub use error::TokenizerError;
pub use pretok::{PreTokenizer, SUPPORTED_PRE_TOKENIZERS};
pub use stream::StreamDecoder;
pub use vocab::{SpecialTokens, TokenAttrs, TokenType, Tokenizer, TokenizerModel};
