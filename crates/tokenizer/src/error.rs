use lockstep_gguf::MetadataError;

/// Everything that can go wrong building a tokenizer, tokenizing, detokenizing or rendering a
/// chat template. Messages name the metadata key, byte offset or token id involved.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TokenizerError {
    /// A metadata key is missing or has the wrong type (the key is named).
    #[error(transparent)]
    Metadata(#[from] MetadataError),

    /// A metadata key is present and well-typed but its value cannot be used.
    #[error("metadata key `{key}`: {reason}")]
    InvalidMetadata { key: String, reason: String },

    /// `tokenizer.ggml.model` names a tokenizer this crate does not implement.
    #[error(
        "unsupported tokenizer model `{0}` (tokenizer.ggml.model); supported: `llama` \
         (SentencePiece) and `gpt2` (byte-level BPE)"
    )]
    UnknownModel(String),

    /// `tokenizer.ggml.pre` names a pre-tokenizer this crate does not implement.
    #[error(
        "unknown pre-tokenizer `{0}` (tokenizer.ggml.pre); supported: {list}",
        list = crate::pretok::SUPPORTED_PRE_TOKENIZERS.join(", ")
    )]
    UnknownPreTokenizer(String),

    /// Input bytes are not valid UTF-8.
    #[error("input is not valid UTF-8: invalid byte sequence at byte offset {offset}")]
    InvalidUtf8 { offset: usize },

    /// A token id is not in the vocabulary.
    #[error("token id {id} is out of range (vocabulary size {vocab_size})")]
    TokenOutOfRange { id: u32, vocab_size: usize },

    /// The chat template called `raise_exception(message)`.
    #[error("chat template raised an exception: {0}")]
    TemplateRaised(String),

    /// The chat template failed to parse or render.
    #[error("chat template error: {0}")]
    Template(String),

    /// The model has no `tokenizer.chat_template` and no built-in format applies.
    #[error(
        "the model has no chat template (tokenizer.chat_template) and architecture `{arch}` \
         has no built-in fallback; pass a template explicitly"
    )]
    NoChatTemplate { arch: String },
}
