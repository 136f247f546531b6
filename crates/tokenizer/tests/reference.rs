//! Tokenization, pieces, detokenization and prompts against llama.cpp's recorded output
//! (`shared/fixtures/reference/{smollm2,gemma3}`).

mod common;

use common::*;
use lockstep_tokenizer::{ChatMessage, ChatTemplate, TemplateSource, Tokenizer};

fn check_strings(model: &str, file: &str) {
    let (_f, tok) = load(file);
    let j = read_json(&format!("reference/{model}/tokenizer.json"));
    let meta = &j["meta"];
    assert_eq!(tok.vocab_size() as u64, meta["n_vocab"].as_u64().unwrap());
    assert_eq!(tok.bos().map(u64::from), meta["bos_id"].as_u64());
    assert_eq!(tok.eos().map(u64::from), meta["eos_id"].as_u64());
    assert_eq!(tok.add_bos(), meta["add_bos"].as_bool().unwrap());
    assert_eq!(tok.add_eos(), meta["add_eos"].as_bool().unwrap());

    let strings = j["strings"].as_array().unwrap();
    assert!(strings.len() >= 40, "fixture has {} strings", strings.len());
    let mut failures = Vec::new();
    let mut fail = |i: &serde_json::Value, what: &str, detail: String| {
        failures.push(format!("string #{i} {what}: {detail}"));
    };
    for s in strings {
        let i = &s["i"];
        let text = s["text"].as_str().unwrap();
        let want_hex = s["utf8_hex"].as_str().unwrap();
        assert_eq!(hex(text.as_bytes()), want_hex, "fixture text encoding");

        let cases = [
            ("ids_parse_special_false", false, false),
            ("ids_parse_special_true", false, true),
            ("ids_add_special_true_parse_special_true", true, true),
        ];
        for (field, add_special, parse_special) in cases {
            let want = ids(&s[field]);
            let got = tok.encode(text, add_special, parse_special);
            if got != want {
                fail(
                    i,
                    field,
                    format!("text {text:?}\n   want {want:?}\n    got {got:?}"),
                );
            }
        }

        let ids_true = ids(&s["ids_parse_special_true"]);
        let want_pieces: Vec<&str> = s["pieces_parse_special_true_hex"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p.as_str().unwrap())
            .collect();
        let got_pieces: Vec<String> = ids_true
            .iter()
            .map(|&id| hex(tok.token_to_piece(id, true).unwrap()))
            .collect();
        if got_pieces != want_pieces {
            fail(
                i,
                "pieces",
                format!("want {want_pieces:?}\n    got {got_pieces:?}"),
            );
        }

        for (field, idf, unparse) in [
            (
                "detok_of_parse_special_false",
                "ids_parse_special_false",
                false,
            ),
            (
                "detok_of_parse_special_true",
                "ids_parse_special_true",
                true,
            ),
        ] {
            let want = s[field].as_str().unwrap();
            let got = tok.detokenize(&ids(&s[idf]), false, unparse).unwrap();
            if got != want.as_bytes() {
                fail(
                    i,
                    field,
                    format!("want {want:?}\n    got {:?}", String::from_utf8_lossy(&got)),
                );
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{model}: {} mismatches:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

fn check_cases(model: &str, file: &str, want_source: TemplateSource) {
    let (f, tok) = load(file);
    let j = read_json(&format!("reference/{model}/cases.json"));
    let cases = j["cases"].as_array().unwrap();
    let mut n_chat = 0;
    for c in cases {
        let name = c["name"].as_str().unwrap();
        let want_prompt = c["prompt"].as_str().unwrap();
        assert_eq!(
            c["add_bos"].as_bool(),
            Some(tok.add_bos()),
            "{name}: add_bos"
        );
        let parse_special = c["parse_special"].as_bool().unwrap();
        if c["kind"] == "chat" {
            n_chat += 1;
            let messages: Vec<ChatMessage> = c["messages"]
                .as_array()
                .unwrap()
                .iter()
                .map(|m| {
                    ChatMessage::new(m["role"].as_str().unwrap(), m["content"].as_str().unwrap())
                })
                .collect();
            let tmpl = ChatTemplate::from_metadata(f.metadata(), &tok).unwrap();
            let rendered = tmpl.render(&messages, true).unwrap();
            assert_eq!(rendered.source, want_source, "{name}: template source");
            assert_eq!(rendered.text, want_prompt, "{name}: rendered prompt");
        }
        let got = tok.encode(want_prompt, true, parse_special);
        let want = ids(&c["prompt_ids"]);
        assert_eq!(got, want, "{name}: prompt ids for {want_prompt:?}");
        assert_eq!(
            got.len() as u64,
            c["n_prompt_tokens"].as_u64().unwrap(),
            "{name}"
        );
    }
    assert_eq!(n_chat, 1, "{model}: expected one chat case");
}

#[test]
fn smollm2_strings_match_llama_cpp() {
    check_strings("smollm2", SMOLLM2);
}

#[test]
fn gemma3_strings_match_llama_cpp() {
    check_strings("gemma3", GEMMA3);
}

#[test]
fn smollm2_prompts_match_llama_cpp() {
    check_cases("smollm2", SMOLLM2, TemplateSource::Gguf);
}

#[test]
fn gemma3_prompts_match_llama_cpp() {
    check_cases("gemma3", GEMMA3, TemplateSource::Builtin("gemma"));
}

#[test]
fn special_ids_and_eog() {
    let (_f, smol) = load(SMOLLM2);
    // <|endoftext|> 0, <|im_end|> 2 (also EOS); plus the FIM pad/repo tokens llama.cpp
    // recognizes by text.
    assert!(smol.is_eog(0) && smol.is_eog(2));
    assert!(!smol.is_eog(1));
    assert_eq!(smol.eot(), smol.token_id("<|im_end|>"));
    assert!(smol.is_control(1));

    let (_f, gemma) = load(GEMMA3);
    let eot = gemma.token_id("<end_of_turn>").unwrap();
    assert_eq!(eot, 106);
    assert!(gemma.is_eog(eot) && gemma.is_eog(1));
    assert!(!gemma.is_eog(105));
    assert_eq!(gemma.eot(), Some(106));
    assert!(gemma.token_attrs(6).unwrap().is_unused()); // <unused0>
    assert_eq!(
        gemma.token_type(107).unwrap(),
        lockstep_tokenizer::TokenType::UserDefined
    );
    let _ = Tokenizer::token_text(&gemma, 0).unwrap();
}
