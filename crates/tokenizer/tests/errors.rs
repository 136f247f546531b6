//! Bad input and bad metadata give errors that say what is wrong.

mod common;

use lockstep_gguf::{Metadata, MetadataError, Value, ValueType};
use lockstep_tokenizer::{ChatMessage, ChatTemplate, Tokenizer, TokenizerError};

fn strs(v: &[&str]) -> Value {
    Value::Array(
        ValueType::String,
        v.iter().map(|s| Value::String(s.to_string())).collect(),
    )
}

fn tiny(model: &str, pre: Option<&str>) -> Metadata {
    let mut md = Metadata::new();
    md.insert("general.architecture", Value::String("llama".into()));
    md.insert("tokenizer.ggml.model", Value::String(model.into()));
    if let Some(p) = pre {
        md.insert("tokenizer.ggml.pre", Value::String(p.into()));
    }
    md.insert(
        "tokenizer.ggml.tokens",
        strs(&["<unk>", "<s>", "</s>", "a", "b", "ab"]),
    );
    md.insert("tokenizer.ggml.merges", strs(&["a b"]));
    md
}

#[test]
fn invalid_utf8_names_the_offset() {
    let t = Tokenizer::from_metadata(&tiny("llama", None)).unwrap();
    let err = t.encode_bytes(b"ab\xffcd", false, false).unwrap_err();
    assert_eq!(err, TokenizerError::InvalidUtf8 { offset: 2 });
    assert!(err.to_string().contains("byte offset 2"), "{err}");
    // A truncated multi-byte sequence at the end is invalid too.
    let err = t
        .encode_bytes("xé".as_bytes()[..2].as_ref(), false, false)
        .unwrap_err();
    assert_eq!(err, TokenizerError::InvalidUtf8 { offset: 1 });
    assert_eq!(
        t.encode_bytes(b"ab", false, false).unwrap(),
        t.encode("ab", false, false)
    );
}

#[test]
fn ids_out_of_range() {
    let t = Tokenizer::from_metadata(&tiny("llama", None)).unwrap();
    let err = t.token_to_piece(6, true).unwrap_err();
    assert_eq!(
        err,
        TokenizerError::TokenOutOfRange {
            id: 6,
            vocab_size: 6
        }
    );
    let msg = err.to_string();
    assert!(
        msg.contains("token id 6") && msg.contains("vocabulary size 6"),
        "{msg}"
    );
    assert!(t.detokenize(&[3, 4_000_000_000], false, false).is_err());
    assert!(t.decode(&[99], false).is_err());
    assert!(t.token_text(u32::MAX).is_err());
    assert!(t.token_attrs(6).is_err());
    assert!(!t.is_eog(u32::MAX) && !t.is_control(u32::MAX));
}

#[test]
fn template_that_raises() {
    let mut md = tiny("llama", None);
    md.insert(
        "tokenizer.chat_template",
        Value::String(
            "{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}\
             {% endif %}{% for m in messages %}{{ m.content }}{% endfor %}"
                .into(),
        ),
    );
    let t = Tokenizer::from_metadata(&md).unwrap();
    let tmpl = ChatTemplate::from_metadata(&md, &t).unwrap();
    assert_eq!(
        tmpl.render(&[ChatMessage::new("user", "hi")], true)
            .unwrap()
            .text,
        "hi"
    );
    let err = tmpl
        .render(&[ChatMessage::new("system", "x")], true)
        .unwrap_err();
    assert_eq!(
        err,
        TokenizerError::TemplateRaised("System role not supported".into())
    );
    assert!(err.to_string().contains("System role not supported"));
}

#[test]
fn broken_templates() {
    let t = Tokenizer::from_metadata(&tiny("llama", None)).unwrap();
    let err = ChatTemplate::from_jinja("{% for m in messages %}", &t).unwrap_err();
    assert!(matches!(err, TokenizerError::Template(_)), "{err:?}");
    // A runtime error that is not raise_exception.
    let tmpl = ChatTemplate::from_jinja("{{ messages[5].content.foo() }}", &t).unwrap();
    let err = tmpl.render(&[], false).unwrap_err();
    assert!(matches!(err, TokenizerError::Template(_)), "{err:?}");
}

#[test]
fn no_template_and_no_builtin() {
    let md = tiny("llama", None);
    let t = Tokenizer::from_metadata(&md).unwrap();
    let err = ChatTemplate::from_metadata(&md, &t).unwrap_err();
    assert_eq!(
        err,
        TokenizerError::NoChatTemplate {
            arch: "llama".into()
        }
    );
    assert!(err.to_string().contains("tokenizer.chat_template"));
}

#[test]
fn unknown_pre_tokenizer_is_an_error() {
    let err = Tokenizer::from_metadata(&tiny("gpt2", Some("wizard-bpe")))
        .err()
        .unwrap();
    assert_eq!(
        err,
        TokenizerError::UnknownPreTokenizer("wizard-bpe".into())
    );
    let msg = err.to_string();
    assert!(
        msg.contains("wizard-bpe")
            && msg.contains("tokenizer.ggml.pre")
            && msg.contains("llama-bpe"),
        "{msg}"
    );
    // Known names work; a missing `pre` means llama.cpp's 'default'.
    assert!(Tokenizer::from_metadata(&tiny("gpt2", Some("qwen2"))).is_ok());
    assert!(Tokenizer::from_metadata(&tiny("gpt2", None)).is_ok());
}

#[test]
fn unknown_model_is_an_error() {
    let err = Tokenizer::from_metadata(&tiny("bert", None)).err().unwrap();
    assert_eq!(err, TokenizerError::UnknownModel("bert".into()));
    assert!(err.to_string().contains("tokenizer.ggml.model"));
}

#[test]
fn missing_and_mistyped_metadata_name_the_key() {
    let mut md = tiny("llama", None);
    md.insert("tokenizer.ggml.tokens", Value::U32(3));
    let err = Tokenizer::from_metadata(&md).err().unwrap();
    assert!(matches!(
        err,
        TokenizerError::Metadata(MetadataError::WrongType { .. })
    ));
    assert!(err.to_string().contains("tokenizer.ggml.tokens"), "{err}");

    let mut md = Metadata::new();
    md.insert("tokenizer.ggml.model", Value::String("llama".into()));
    let err = Tokenizer::from_metadata(&md).err().unwrap();
    assert_eq!(
        err,
        TokenizerError::Metadata(MetadataError::Missing("tokenizer.ggml.tokens".into()))
    );

    let mut md = tiny("gpt2", Some("gpt-2"));
    md.insert("tokenizer.ggml.merges", Value::Bool(true));
    let err = Tokenizer::from_metadata(&md).err().unwrap();
    assert!(err.to_string().contains("tokenizer.ggml.merges"), "{err}");

    let mut md = tiny("llama", None);
    md.insert("tokenizer.ggml.add_bos_token", Value::String("yes".into()));
    let err = Tokenizer::from_metadata(&md).err().unwrap();
    assert!(
        err.to_string().contains("tokenizer.ggml.add_bos_token"),
        "{err}"
    );

    let mut md = tiny("llama", None);
    md.insert(
        "tokenizer.ggml.scores",
        Value::Array(ValueType::F32, vec![Value::F32(0.0)]),
    );
    let err = Tokenizer::from_metadata(&md).err().unwrap();
    assert!(err.to_string().contains("tokenizer.ggml.scores"), "{err}");

    let mut md = tiny("llama", None);
    md.insert("tokenizer.ggml.bos_token_id", Value::String("1".into()));
    let err = Tokenizer::from_metadata(&md).err().unwrap();
    assert!(
        err.to_string().contains("tokenizer.ggml.bos_token_id"),
        "{err}"
    );

    // add_bos with no BOS token at all.
    let mut md = tiny("gpt2", Some("gpt-2"));
    md.insert("tokenizer.ggml.add_bos_token", Value::Bool(true));
    let err = Tokenizer::from_metadata(&md).err().unwrap();
    assert!(
        err.to_string().contains("tokenizer.ggml.add_bos_token"),
        "{err}"
    );

    let mut md = tiny("llama", None);
    md.insert("tokenizer.ggml.tokens", strs(&[]));
    assert!(Tokenizer::from_metadata(&md).is_err());
}

#[test]
fn real_model_rejects_bad_ids() {
    let (_f, t) = common::load(common::SMOLLM2);
    let err = t.token_to_piece(49152, false).unwrap_err();
    assert_eq!(
        err,
        TokenizerError::TokenOutOfRange {
            id: 49152,
            vocab_size: 49152
        }
    );
    assert!(t.token_to_piece(49151, false).is_ok());
}
