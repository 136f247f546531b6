//! Tokenizing must scale (near-)linearly. Merging uses a heap (O(n log n) in the length of a
//! word, and there is no pre-tokenizer for SentencePiece, so a whole text can be one "word"),
//! pre-tokenizers are linear scans and special tokens are found with Aho-Corasick. These tests
//! time pathological shapes at two sizes; a quadratic step would show 4x per doubling.
//!
//! Timings on a shared machine are noisy, so each size is the best of several interleaved
//! runs, and a ratio above the limit is measured again (up to three times) before failing.

mod common;

use std::time::{Duration, Instant};

use common::*;
use lockstep_tokenizer::Tokenizer;

fn time(tok: &Tokenizer, text: &str) -> Duration {
    let t = Instant::now();
    let ids = tok.encode(text, false, true);
    let d = t.elapsed();
    assert!(!ids.is_empty());
    d
}

/// Ratio of the best large-input time to the best small-input time.
fn ratio(tok: &Tokenizer, small: &str, large: &str) -> (f64, Duration, Duration) {
    let _ = tok.encode(small, false, true); // warm up
    let (mut a, mut b) = (Duration::MAX, Duration::MAX);
    for _ in 0..7 {
        a = a.min(time(tok, small));
        b = b.min(time(tok, large));
    }
    (b.as_secs_f64() / a.as_secs_f64().max(1e-6), a, b)
}

fn assert_ratio(
    tok: &Tokenizer,
    what: &str,
    unit: &str,
    small_len: usize,
    large_len: usize,
    limit: f64,
) {
    let small = unit.repeat(small_len / unit.len());
    let large = unit.repeat(large_len / unit.len());
    let mut seen = Vec::new();
    for _ in 0..3 {
        let (r, a, b) = ratio(tok, &small, &large);
        eprintln!("{what}: {small_len} B {a:?}, {large_len} B {b:?}, ratio {r:.2} (limit {limit})");
        if r < limit {
            return;
        }
        seen.push(r);
    }
    panic!("{what}: {large_len} B took {seen:.2?} times the {small_len} B time (limit {limit})");
}

fn check_scaling(file: &str) {
    let (_f, tok) = load(file);
    // One long word: doubling the length must not take 3x the time.
    assert_ratio(
        &tok,
        &format!("{file} word"),
        "abcdefghij",
        50_000,
        100_000,
        3.0,
    );
    // Other pathological shapes: 4x the length must stay well below the 16x of a quadratic
    // step (an O(n log n) heap whose queue outgrows the CPU caches shows up to ~8x).
    for (name, unit) in [
        ("spaces", " "),
        ("newlines", "\n"),
        ("punctuation", "!?"),
        ("digits", "0123456789"),
        ("special tokens", "<|im_start|><start_of_turn>x"),
        ("emoji", "👨\u{200d}👩\u{200d}👧"),
    ] {
        assert_ratio(&tok, &format!("{file} {name}"), unit, 25_000, 100_000, 12.0);
    }

    // A 1 MB word completes and round-trips.
    let word = "abcdefghij".repeat(100_000);
    let t = Instant::now();
    let ids = tok.encode(&word, false, false);
    eprintln!(
        "{file}: 1 MB word -> {} tokens in {:?}",
        ids.len(),
        t.elapsed()
    );
    assert_eq!(tok.detokenize(&ids, false, false).unwrap(), word.as_bytes());
}

/// One test for both models, so that the two never run (and compete for the CPU) at once.
#[test]
fn tokenizing_scales_linearly() {
    check_scaling(SMOLLM2);
    check_scaling(GEMMA3);
}
