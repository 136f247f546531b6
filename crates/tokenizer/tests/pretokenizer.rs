//! Pre-tokenizer splits on hand-checked cases (the regexes are quoted in src/pretok.rs).

use lockstep_tokenizer::PreTokenizer;

fn split(p: PreTokenizer, s: &str) -> Vec<&str> {
    let parts = p.split(s);
    assert_eq!(parts.concat(), s, "pieces must cover the text");
    parts
}

#[test]
fn names_resolve() {
    assert_eq!(
        PreTokenizer::from_name("qwen2").unwrap(),
        PreTokenizer::Qwen2
    );
    assert_eq!(
        PreTokenizer::from_name("deepseek-r1-qwen").unwrap(),
        PreTokenizer::Qwen2
    );
    assert_eq!(
        PreTokenizer::from_name("llama-bpe").unwrap(),
        PreTokenizer::Llama3
    );
    assert_eq!(
        PreTokenizer::from_name("llama3").unwrap(),
        PreTokenizer::Llama3
    );
    assert_eq!(
        PreTokenizer::from_name("smollm").unwrap(),
        PreTokenizer::Smollm
    );
    assert_eq!(
        PreTokenizer::from_name("starcoder").unwrap(),
        PreTokenizer::Smollm
    );
    assert_eq!(
        PreTokenizer::from_name("gpt-2").unwrap(),
        PreTokenizer::Gpt2
    );
    assert_eq!(
        PreTokenizer::from_name("default").unwrap(),
        PreTokenizer::Default
    );
    let err = PreTokenizer::from_name("no-such-pre")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("no-such-pre") && err.contains("qwen2"),
        "{err}"
    );
}

#[test]
fn qwen2_digits_split_singly() {
    let q = PreTokenizer::Qwen2;
    assert_eq!(split(q, "12345"), ["1", "2", "3", "4", "5"]);
    assert_eq!(split(q, "abc123def"), ["abc", "1", "2", "3", "def"]);
    assert_eq!(split(q, "$100"), ["$", "1", "0", "0"]);
    assert_eq!(split(q, "x 42"), ["x", " ", "4", "2"]);
    // Non-ASCII numbers are numbers too.
    assert_eq!(split(q, "x²٣"), ["x", "²", "٣"]);
}

#[test]
fn qwen2_words_contractions_and_punctuation() {
    let q = PreTokenizer::Qwen2;
    assert_eq!(split(q, "Hello world"), ["Hello", " world"]);
    assert_eq!(split(q, "I'm"), ["I", "'m"]);
    assert_eq!(split(q, "DON'T"), ["DON", "'T"]);
    assert_eq!(split(q, "they'RE we'Ll"), ["they", "'RE", " we", "'Ll"]);
    assert_eq!(split(q, "'s"), ["'s"]);
    // A non-letter, non-digit, non-newline character joins the following word.
    assert_eq!(split(q, "(hello)"), ["(hello", ")"]);
    assert_eq!(split(q, "\thello"), ["\thello"]);
    assert_eq!(split(q, "hello!!!\n\nworld"), ["hello", "!!!\n\n", "world"]);
    assert_eq!(split(q, "a ... b"), ["a", " ...", " b"]);
    // Combining marks are not letters: one ends a word and, like punctuation, may lead the next.
    assert_eq!(split(q, "e\u{301}t\u{e9}"), ["e", "\u{301}t\u{e9}"]);
    assert_eq!(split(q, "e\u{301}\u{302} x"), ["e", "\u{301}\u{302}", " x"]);
}

#[test]
fn qwen2_cjk() {
    let q = PreTokenizer::Qwen2;
    assert_eq!(
        split(q, "北京欢迎你！我爱自然语言处理。"),
        ["北京欢迎你", "！我爱自然语言处理", "。"]
    );
    assert_eq!(split(q, "hi 北京"), ["hi", " 北京"]);
    assert_eq!(
        split(q, "안녕하세요, 세계!"),
        ["안녕하세요", ",", " 세계", "!"]
    );
}

#[test]
fn qwen2_whitespace_and_newline_runs() {
    let q = PreTokenizer::Qwen2;
    assert_eq!(split(q, "a\n\n\nb"), ["a", "\n\n\n", "b"]);
    // \s*[\r\n]+ ends at the last newline of the run; the rest follows the word rules.
    assert_eq!(split(q, "a  \n  b"), ["a", "  \n", " ", " b"]);
    assert_eq!(split(q, "a\r\n\r\nb"), ["a", "\r\n\r\n", "b"]);
    // \s+(?!\S) leaves the last space to the next word; at the end it takes all.
    assert_eq!(split(q, "a    b"), ["a", "   ", " b"]);
    assert_eq!(split(q, "x   "), ["x", "   "]);
    assert_eq!(split(q, "  hi"), [" ", " hi"]);
    assert_eq!(split(q, "\t\tfoo"), ["\t", "\tfoo"]);
    assert_eq!(split(q, " "), [" "]);
    assert_eq!(
        split(q, "a\u{3000}\u{3000}b"),
        ["a", "\u{3000}", "\u{3000}b"]
    );
}

#[test]
fn llama3_numbers_in_groups_of_three() {
    let l = PreTokenizer::Llama3;
    assert_eq!(split(l, "1234567"), ["123", "456", "7"]);
    assert_eq!(split(l, "abc12345"), ["abc", "123", "45"]);
    assert_eq!(
        split(l, "In 2024, revenue"),
        ["In", " ", "202", "4", ",", " revenue"]
    );
    assert_eq!(split(l, "I'M here"), ["I", "'M", " here"]);
    assert_eq!(split(l, "a\n\n\nb"), ["a", "\n\n\n", "b"]);
    assert_eq!(split(l, "北京 123"), ["北京", " ", "123"]);
}

#[test]
fn gpt2_rules() {
    let g = PreTokenizer::Gpt2;
    assert_eq!(
        split(g, "Hello world 123 don't  x"),
        ["Hello", " world", " 123", " don", "'t", " ", " x"]
    );
    // Contractions are lowercase-only in the GPT-2 regex.
    assert_eq!(split(g, "I'M"), ["I", "'", "M"]);
    assert_eq!(split(g, "a\r\nb"), ["a", "\r", "\n", "b"]);
    assert_eq!(split(g, "end\r\n"), ["end", "\r\n"]);
    assert_eq!(split(g, "x  !!"), ["x", " ", " !!"]);
}

#[test]
fn smollm_digits_then_gpt2() {
    let s = PreTokenizer::Smollm;
    assert_eq!(split(s, "abc123"), ["abc", "1", "2", "3"]);
    assert_eq!(split(s, "In 2024"), ["In", " ", "2", "0", "2", "4"]);
    assert_eq!(split(s, "x1y"), ["x", "1", "y"]);
}

#[test]
fn default_pipeline() {
    let d = PreTokenizer::Default;
    assert_eq!(
        split(d, "Hello, world! 1234567"),
        ["Hello", ",", " world", "!", " ", "123", "456", "7"]
    );
    assert_eq!(split(d, "x+=1"), ["x", "+=", "1"]);
    assert_eq!(split(d, "`code`"), ["`", "code", "`"]);
    assert_eq!(split(d, "a...b"), ["a", "...", "b"]);
}

#[test]
fn empty_text() {
    for p in [
        PreTokenizer::Default,
        PreTokenizer::Gpt2,
        PreTokenizer::Smollm,
        PreTokenizer::Llama3,
        PreTokenizer::Qwen2,
    ] {
        assert!(p.split("").is_empty());
    }
}

/// Differential check against a backtracking regex engine on random strings
/// (tests/data/pretok_regex_cases.json, made by tests/data/gen_pretok_cases.py).
#[test]
fn matches_backtracking_regex_engine() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/pretok_regex_cases.json"
    );
    let data: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).expect("read cases")).expect("json");
    let mut n = 0;
    let mut bad = Vec::new();
    for (set, names) in [
        ("regex", &["qwen2", "llama3", "gpt2"][..]),
        ("pipelines", &["smollm", "default"][..]),
    ] {
        for case in data[set].as_array().expect("cases") {
            let text = case["text"].as_str().expect("text");
            for &name in names {
                let pre = match name {
                    "qwen2" => PreTokenizer::Qwen2,
                    "llama3" => PreTokenizer::Llama3,
                    "gpt2" => PreTokenizer::Gpt2,
                    "smollm" => PreTokenizer::Smollm,
                    _ => PreTokenizer::Default,
                };
                let want: Vec<&str> = case[name]
                    .as_array()
                    .expect("pieces")
                    .iter()
                    .map(|p| p.as_str().expect("piece"))
                    .collect();
                let got = pre.split(text);
                n += 1;
                if got != want {
                    bad.push(format!("{name} {text:?}: want {want:?} got {got:?}"));
                }
            }
        }
    }
    assert!(n >= 2000, "only {n} comparisons");
    assert!(
        bad.is_empty(),
        "{} mismatches:\n{}",
        bad.len(),
        bad.join("\n")
    );
}
