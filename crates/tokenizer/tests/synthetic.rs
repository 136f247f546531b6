//! Tokenizers built from hand-made vocabularies: the algorithms on cases small enough to check
//! by hand (merge order, byte fallback, special-token partitioning, BOS/EOS, detokenization).

use lockstep_gguf::{Metadata, Value, ValueType};
use lockstep_tokenizer::{
    ChatMessage, ChatTemplate, StreamDecoder, TemplateSource, Tokenizer, TokenizerModel,
};

fn strs(v: &[&str]) -> Value {
    Value::Array(
        ValueType::String,
        v.iter().map(|s| Value::String(s.to_string())).collect(),
    )
}

fn i32s(v: &[i32]) -> Value {
    Value::Array(ValueType::I32, v.iter().map(|&x| Value::I32(x)).collect())
}

fn f32s(v: &[f32]) -> Value {
    Value::Array(ValueType::F32, v.iter().map(|&x| Value::F32(x)).collect())
}

/// SentencePiece vocabulary: <unk> <s> </s>, 256 byte tokens, then pieces.
fn spm_metadata() -> (Metadata, Vec<String>) {
    let mut texts: Vec<String> = vec!["<unk>".into(), "<s>".into(), "</s>".into()];
    let mut types = vec![2, 3, 3];
    let mut scores = vec![0.0f32; 3];
    for b in 0..256 {
        texts.push(format!("<0x{b:02X}>"));
        types.push(6);
        scores.push(0.0);
    }
    let pieces: &[(&str, f32, i32)] = &[
        ("▁", -1.0, 1),
        ("a", -2.0, 1),
        ("b", -2.0, 1),
        ("c", -2.0, 1),
        ("▁a", -1.5, 1),
        ("ab", -1.0, 1),
        ("bc", -0.7, 1),
        ("abc", -0.8, 1),
        ("▁abc", -0.2, 1),
        ("x", -3.0, 1),
        ("xy", 0.0, 4),
        ("yzw", 0.0, 4),
        ("<ctl>", 0.0, 3),
        ("<end_of_turn>", 0.0, 3),
    ];
    for &(t, s, ty) in pieces {
        texts.push(t.into());
        scores.push(s);
        types.push(ty);
    }
    let refs: Vec<&str> = texts.iter().map(|s| s.as_str()).collect();
    let mut md = Metadata::new();
    md.insert("general.architecture", Value::String("gemma3".into()));
    md.insert("tokenizer.ggml.model", Value::String("llama".into()));
    md.insert("tokenizer.ggml.tokens", strs(&refs));
    md.insert("tokenizer.ggml.scores", f32s(&scores));
    md.insert("tokenizer.ggml.token_type", i32s(&types));
    (md, texts)
}

fn id_of(t: &Tokenizer, s: &str) -> u32 {
    t.token_id(s).unwrap_or_else(|| panic!("no token {s:?}"))
}

#[test]
fn spm_merges_by_score_with_space_prefix() {
    let (md, _) = spm_metadata();
    let t = Tokenizer::from_metadata(&md).unwrap();
    assert_eq!(t.model(), TokenizerModel::SentencePiece);
    // llama.cpp defaults for SPM: BOS 1, EOS 2, add_bos, add_space_prefix.
    assert_eq!(
        (t.bos(), t.eos(), t.add_bos(), t.add_eos()),
        (Some(1), Some(2), true, false)
    );
    assert!(t.add_space_prefix());
    // "▁abc": bc (-0.7) first, then abc (-0.8), then ▁abc (-0.2).
    assert_eq!(t.encode("abc", true, false), vec![1, id_of(&t, "▁abc")]);
    assert_eq!(t.encode("abc", false, false), vec![id_of(&t, "▁abc")]);
    // "ab c" -> "▁ab▁c": ab (-1.0) beats ▁a (-1.5); then no pair of "▁ab".
    assert_eq!(
        t.encode("ab c", false, false),
        vec![
            id_of(&t, "▁"),
            id_of(&t, "ab"),
            id_of(&t, "▁"),
            id_of(&t, "c")
        ]
    );
}

#[test]
fn spm_byte_fallback_and_pieces() {
    let (md, _) = spm_metadata();
    let t = Tokenizer::from_metadata(&md).unwrap();
    let ids = t.encode("é", false, false);
    assert_eq!(ids, vec![id_of(&t, "▁"), 3 + 0xC3, 3 + 0xA9]);
    assert_eq!(t.token_to_piece(3 + 0xC3, false).unwrap(), &[0xC3]);
    assert_eq!(t.token_to_piece(id_of(&t, "▁abc"), false).unwrap(), b" abc");
    // The leading space from add_space_prefix is removed again...
    assert_eq!(t.detokenize(&ids, false, false).unwrap(), "é".as_bytes());
    // ...unless a BOS is removed first (llama.cpp keeps the space then).
    let with_bos = t.encode("abc", true, false);
    assert_eq!(t.detokenize(&with_bos, true, false).unwrap(), b" abc");
    assert_eq!(t.detokenize(&with_bos, false, true).unwrap(), b"<s> abc");
    // Control tokens render only with special = true.
    assert_eq!(t.token_to_piece(1, false).unwrap(), b"");
    assert_eq!(t.token_to_piece(1, true).unwrap(), b"<s>");
}

#[test]
fn special_tokens_longest_first_user_defined_always_control_only_when_parsing() {
    let (md, _) = spm_metadata();
    let t = Tokenizer::from_metadata(&md).unwrap();
    let (xy, yzw, ctl) = (id_of(&t, "xy"), id_of(&t, "yzw"), id_of(&t, "<ctl>"));
    // "yzw" (longer) is cut out first, so "xy" never matches in "xyzw".
    let ids = t.encode("xyzw", false, false);
    assert_eq!(ids.last(), Some(&yzw));
    assert!(!ids.contains(&xy));
    // User-defined tokens are cut out even with parse_special = false.
    assert_eq!(t.encode("xy", false, false), vec![xy]);
    // Control tokens only with parse_special = true.
    assert!(!t.encode("a<ctl>", false, false).contains(&ctl));
    let ids = t.encode("a<ctl>b", false, true);
    assert_eq!(
        ids,
        vec![id_of(&t, "▁a"), ctl, id_of(&t, "▁"), id_of(&t, "b")]
    );
    // <end_of_turn> is recognized as end-of-turn and end-of-generation.
    let eot = id_of(&t, "<end_of_turn>");
    assert_eq!(t.eot(), Some(eot));
    assert!(t.is_eog(eot) && t.is_eog(2) && !t.is_eog(1));
}

#[test]
fn spm_metadata_overrides() {
    let (mut md, _) = spm_metadata();
    md.insert("tokenizer.ggml.add_space_prefix", Value::Bool(false));
    md.insert("tokenizer.ggml.add_bos_token", Value::Bool(false));
    md.insert("tokenizer.ggml.add_eos_token", Value::Bool(true));
    let t = Tokenizer::from_metadata(&md).unwrap();
    assert_eq!(t.encode("abc", true, false), vec![id_of(&t, "abc"), 2]);
    assert_eq!(
        t.detokenize(&t.encode("abc", true, false), true, false)
            .unwrap(),
        b"abc"
    );
}

/// Byte-level BPE vocabulary: the 256 byte chars, a few merged tokens, specials.
fn bpe_metadata(pre: &str) -> Metadata {
    let printable = |b: u32| {
        (0x21..=0x7E).contains(&b) || (0xA1..=0xAC).contains(&b) || (0xAE..=0xFF).contains(&b)
    };
    let mut texts = Vec::new();
    let mut n = 0;
    for b in 0u32..256 {
        let cp = if printable(b) {
            b
        } else {
            n += 1;
            255 + n
        };
        texts.push(char::from_u32(cp).unwrap().to_string());
    }
    let mut types = vec![1; 256];
    for (t, ty) in [
        ("ab", 1),
        ("abc", 1),
        ("Ġa", 1),
        ("Ġab", 1),
        ("xyz", 1),
        ("<|ctl|>", 3),
        ("<|im_end|>", 3),
        ("<ud>", 4),
    ] {
        texts.push(t.to_string());
        types.push(ty);
    }
    let refs: Vec<&str> = texts.iter().map(|s| s.as_str()).collect();
    let mut md = Metadata::new();
    md.insert("general.architecture", Value::String("llama".into()));
    md.insert("tokenizer.ggml.model", Value::String("gpt2".into()));
    md.insert("tokenizer.ggml.pre", Value::String(pre.into()));
    md.insert("tokenizer.ggml.tokens", strs(&refs));
    md.insert("tokenizer.ggml.token_type", i32s(&types));
    md.insert(
        "tokenizer.ggml.merges",
        strs(&["a b", "ab c", "Ġ a", "Ġ ab"]),
    );
    md.insert("tokenizer.ggml.bos_token_id", Value::U32(256 + 5));
    md.insert("tokenizer.ggml.eos_token_id", Value::U32(256 + 6));
    md
}

#[test]
fn bpe_merges_by_rank() {
    let t = Tokenizer::from_metadata(&bpe_metadata("gpt-2")).unwrap();
    let (ab, abc, g) = (id_of(&t, "ab"), id_of(&t, "abc"), id_of(&t, "Ġ"));
    // "abc" -> a b (rank 0), ab c (rank 1).
    assert_eq!(t.encode("abc", false, false), vec![abc]);
    // " abc" -> Ġ a b c: a b (0) first, then ab c (1); Ġ abc has no merge.
    assert_eq!(t.encode(" abc", false, false), vec![g, abc]);
    // " ab" -> a b (0), then Ġ ab (3).
    assert_eq!(t.encode(" ab", false, false), vec![id_of(&t, "Ġab")]);
    assert_eq!(t.encode("ab ab", false, false), vec![ab, id_of(&t, "Ġab")]);
    // gpt-2 adds no BOS by default.
    assert!(!t.add_bos());
    assert_eq!(t.encode("ab", true, false), vec![ab]);
    // Pieces decode the byte-level alphabet.
    assert_eq!(t.token_to_piece(id_of(&t, "Ġab"), false).unwrap(), b" ab");
    assert_eq!(t.token_to_piece(id_of(&t, "Ċ"), false).unwrap(), b"\n");
}

#[test]
fn bpe_special_tokens_and_eog() {
    let t = Tokenizer::from_metadata(&bpe_metadata("gpt-2")).unwrap();
    let (ctl, ud, end) = (
        id_of(&t, "<|ctl|>"),
        id_of(&t, "<ud>"),
        id_of(&t, "<|im_end|>"),
    );
    assert_eq!(t.encode("<ud>", false, false), vec![ud]);
    assert_eq!(
        t.encode("ab<|ctl|>", false, true),
        vec![id_of(&t, "ab"), ctl]
    );
    assert_eq!(t.encode("<|ctl|>", false, false).len(), 7);
    assert!(t.is_eog(end) && t.is_eog(256 + 6));
    assert_eq!(t.eot(), Some(end));
}

#[test]
fn llama_bpe_ignores_merges_for_whole_word_tokens_and_adds_bos() {
    let gpt2 = Tokenizer::from_metadata(&bpe_metadata("gpt-2")).unwrap();
    assert_eq!(gpt2.encode("xyz", false, false).len(), 3);
    let l3 = Tokenizer::from_metadata(&bpe_metadata("llama-bpe")).unwrap();
    assert!(l3.add_bos());
    assert_eq!(
        l3.encode("xyz", true, false),
        vec![256 + 5, id_of(&l3, "xyz")]
    );
}

#[test]
fn bpe_clean_spaces_depends_on_pre_tokenizer() {
    // gpt-2 cleans " ," -> ","; smollm does not.
    let t = Tokenizer::from_metadata(&bpe_metadata("gpt-2")).unwrap();
    let ids = t.encode("ab , it 's", false, false);
    assert_eq!(t.detokenize(&ids, false, false).unwrap(), b"ab, it's");
    let t = Tokenizer::from_metadata(&bpe_metadata("smollm")).unwrap();
    let ids = t.encode("ab , it 's", false, false);
    assert_eq!(t.detokenize(&ids, false, false).unwrap(), b"ab , it 's");
}

#[test]
fn stream_decoder_holds_back_partial_utf8() {
    let (md, _) = spm_metadata();
    let t = Tokenizer::from_metadata(&md).unwrap();
    let ids = t.encode("éa", false, false); // ▁ <0xC3> <0xA9> a
    let mut d = StreamDecoder::new(false);
    let outs: Vec<String> = ids.iter().map(|&id| d.push(&t, id).unwrap()).collect();
    assert_eq!(outs, [" ", "", "é", "a"]);
    assert_eq!(d.finish(), "");
    // A dangling lead byte is flushed as U+FFFD at the end; an impossible byte at once.
    let mut d = StreamDecoder::new(false);
    assert_eq!(d.push(&t, 3 + 0xE2).unwrap(), "");
    assert_eq!(d.pending(), &[0xE2]);
    assert_eq!(d.finish(), "\u{FFFD}");
    assert_eq!(d.push(&t, 3 + 0xFF).unwrap(), "\u{FFFD}");
    assert!(d.push(&t, 1_000_000).is_err());
}

#[test]
fn gemma_builtin_template_without_gguf_template() {
    let (md, _) = spm_metadata();
    let t = Tokenizer::from_metadata(&md).unwrap();
    let tmpl = ChatTemplate::from_metadata(&md, &t).unwrap();
    assert_eq!(tmpl.source(), &TemplateSource::Builtin("gemma"));
    let p = tmpl
        .render(
            &[
                ChatMessage::new("system", "S"),
                ChatMessage::new("user", "U"),
            ],
            true,
        )
        .unwrap();
    assert_eq!(
        p.text,
        "<start_of_turn>user\nS\n\nU<end_of_turn>\n<start_of_turn>model\n"
    );
    assert_eq!(p.source, TemplateSource::Builtin("gemma"));
}

#[test]
fn jinja_template_variables_methods_and_bos_stripping() {
    let (mut md, _) = spm_metadata();
    let src = "{{ bos_token }}{% for m in messages %}{% if m.role.startswith('sys') %}[{{ m['content'].strip().upper() }}]\n\
               {% else %}<{{ m.role }}>{{ m.content }}{% endif %}{% endfor %}\
               {% if tools is none %}|notools{% endif %}\
               {% if add_generation_prompt %}<model>{% endif %}{{ eos_token }}";
    md.insert("tokenizer.chat_template", Value::String(src.into()));
    let t = Tokenizer::from_metadata(&md).unwrap();
    let tmpl = ChatTemplate::from_metadata(&md, &t).unwrap();
    assert_eq!(tmpl.source(), &TemplateSource::Gguf);
    let msgs = [
        ChatMessage::new("system", "  be kind "),
        ChatMessage::new("user", "hi"),
    ];
    let p = tmpl.render(&msgs, true).unwrap();
    // add_bos is true, so the leading "<s>" is dropped (the tokenizer adds BOS itself);
    // add_eos is false, so "</s>" stays.
    assert_eq!(p.text, "[BE KIND]\n<user>hi|notools<model></s>");
    let p = tmpl.render(&msgs, false).unwrap();
    assert_eq!(p.text, "[BE KIND]\n<user>hi|notools</s>");
    // Custom templates work the same.
    let custom = ChatTemplate::from_jinja(
        "{{ messages | length }}{{ strftime_now('%Y') | length }}",
        &t,
    )
    .unwrap();
    assert_eq!(custom.source(), &TemplateSource::Custom);
    assert_eq!(custom.render(&msgs, false).unwrap().text, "24");
}

#[test]
fn tokenizer_is_shareable_and_debuggable() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Tokenizer>();
    assert_send_sync::<ChatTemplate>();
    assert_send_sync::<StreamDecoder>();
    let (md, _) = spm_metadata();
    let t = Tokenizer::from_metadata(&md).unwrap();
    let d = format!("{t:?}");
    assert!(
        d.contains("SentencePiece") && d.contains("vocab_size"),
        "{d}"
    );
}
