//! Tokenization throughput on ~1 MB of mixed text (the fixture strings and prompts, repeated
//! and interleaved deterministically), for both reference models.
//!
//! `cargo bench -p lockstep-tokenizer --bench tokenize`
//! Models: `$LOCKSTEP_MODELS_DIR` or `$HOME/.cache/lockstep/models` (`lockstep fetch`).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use lockstep_gguf::GgufFile;
use lockstep_tokenizer::Tokenizer;

fn models_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("LOCKSTEP_MODELS_DIR") {
        return PathBuf::from(d);
    }
    PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/lockstep/models")
}

fn fixture_texts() -> Vec<String> {
    let dir = PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../shared/fixtures/reference"
    ));
    let mut out = Vec::new();
    for (file, list, field) in [
        ("tokenizer_strings.json", "strings", "text"),
        ("prompts.json", "prompts", "prompt"),
    ] {
        let path = dir.join(file);
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
        let v: serde_json::Value = serde_json::from_str(&text).expect("fixture JSON");
        for item in v[list].as_array().expect("list") {
            if let Some(s) = item[field].as_str() {
                out.push(s.to_string());
            }
            if let Some(msgs) = item["messages"].as_array() {
                for m in msgs {
                    out.push(m["content"].as_str().unwrap_or_default().to_string());
                }
            }
        }
    }
    out
}

/// ~1 MB: the fixture texts in a fixed pseudo-random order, joined by spaces and newlines.
fn corpus(target: usize) -> String {
    let texts = fixture_texts();
    let mut s = String::with_capacity(target + 4096);
    let mut state: u64 = 0x2545_f491_4f6c_dd1d;
    while s.len() < target {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let t = &texts[(state % texts.len() as u64) as usize];
        s.push_str(t);
        s.push_str(if state.is_multiple_of(5) { "\n\n" } else { " " });
    }
    s
}

fn bench(name: &str, file: &str, text: &str) {
    let path = models_dir().join(file);
    let Ok(f) = GgufFile::open(&path) else {
        eprintln!(
            "{name}: model {} missing (run `lockstep fetch`), skipped",
            path.display()
        );
        return;
    };
    let t0 = Instant::now();
    let tok = Tokenizer::from_metadata(f.metadata()).expect("tokenizer");
    let load = t0.elapsed();
    let mb = text.len() as f64 / 1e6;
    let mut best = Duration::MAX;
    let mut n_tokens = 0;
    for _ in 0..5 {
        let t = Instant::now();
        let ids = tok.encode(text, false, true);
        best = best.min(t.elapsed());
        n_tokens = ids.len();
    }
    let ids = tok.encode(text, false, true);
    let t = Instant::now();
    let back = tok.detokenize(&ids, false, true).expect("detokenize");
    let detok = t.elapsed();
    assert_eq!(back.len(), text.len());
    println!(
        "{name:8} load {:6.1} ms | encode {:.2} MB in {:7.1} ms = {:6.2} MB/s ({n_tokens} tokens) | detokenize {:6.1} ms = {:6.1} MB/s",
        load.as_secs_f64() * 1e3,
        mb,
        best.as_secs_f64() * 1e3,
        mb / best.as_secs_f64(),
        detok.as_secs_f64() * 1e3,
        mb / detok.as_secs_f64(),
    );
}

fn main() {
    let text = corpus(1 << 20);
    println!(
        "corpus: {} bytes, {} chars",
        text.len(),
        text.chars().count()
    );
    bench("smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf", &text);
    bench("gemma3", "gemma-3-270m-q4_k_m.gguf", &text);
}
