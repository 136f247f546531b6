//! Stop-string checker: streamed output never shows any part of a stop string.

use lockstep_sampling::{StopChecker, StopResult};

fn res(emit: &str, stopped: bool) -> StopResult {
    StopResult {
        emit: emit.to_string(),
        stopped,
    }
}

/// Feed all chunks, returning everything emitted (plus the final flush) and
/// whether a stop string matched.
fn run(stops: &[&str], chunks: &[&str]) -> (String, bool) {
    let mut c = StopChecker::new(stops.iter().copied());
    let mut out = String::new();
    for chunk in chunks {
        let r = c.push(chunk);
        out.push_str(&r.emit);
        if r.stopped {
            assert_eq!(c.finish(), "");
            return (out, true);
        }
    }
    out.push_str(&c.finish());
    (out, false)
}

#[test]
fn stop_string_split_across_three_chunks() {
    let mut c = StopChecker::new(["</end>"]);
    assert_eq!(c.push("Hello <"), res("Hello ", false));
    assert_eq!(c.push("/en"), res("", false));
    assert_eq!(c.push("d> and more"), res("", true));
    assert!(c.is_stopped());
    assert_eq!(c.matched_stop(), Some("</end>"));
    // After the stop nothing more comes out.
    assert_eq!(c.push("later"), res("", true));
    assert_eq!(c.finish(), "");
}

#[test]
fn text_before_stop_in_final_chunk_is_emitted() {
    let mut c = StopChecker::new(["STOP"]);
    assert_eq!(c.push("one S"), res("one ", false));
    assert_eq!(c.push("T"), res("", false));
    assert_eq!(c.push("OP two"), res("", true));

    let mut c = StopChecker::new(["STOP"]);
    assert_eq!(c.push("one "), res("one ", false));
    assert_eq!(c.push("two STOP three"), res("two ", true));
}

#[test]
fn false_prefix_is_released_later() {
    let mut c = StopChecker::new(["STOP"]);
    assert_eq!(c.push("abc ST"), res("abc ", false));
    // "STa" cannot begin "STOP": all of it is released.
    assert_eq!(c.push("ay"), res("STay", false));
    assert_eq!(c.push(" S"), res(" ", false));
    assert_eq!(c.push("TO"), res("", false));
    // "STOQ" is not "STOP" and no suffix of it starts one: all released.
    assert_eq!(c.push("Q"), res("STOQ", false));
    assert!(!c.is_stopped());
    assert_eq!(c.finish(), "");
}

#[test]
fn finish_flushes_held_back_text() {
    let mut c = StopChecker::new(["STOP"]);
    assert_eq!(c.push("x ST"), res("x ", false));
    assert_eq!(c.finish(), "ST");
    assert_eq!(c.finish(), "");
}

#[test]
fn overlapping_false_start_inside_the_stop_string() {
    // "aab" contains the stop "ab" starting at its second char; the first
    // "a" must be released, the second held.
    let mut c = StopChecker::new(["ab"]);
    assert_eq!(c.push("aa"), res("a", false));
    assert_eq!(c.push("b"), res("", true));
    assert_eq!(run(&["abab"], &["ab", "a", "c"]), ("abac".into(), false));
    assert_eq!(run(&["abab"], &["ab", "a", "bab"]), ("".into(), true));
}

#[test]
fn multi_byte_utf8() {
    let mut c = StopChecker::new(["终止"]);
    assert_eq!(c.push("你好终"), res("你好", false));
    assert_eq!(c.push("点"), res("终点", false));
    assert_eq!(c.push("。终"), res("。", false));
    assert_eq!(c.push("止后面"), res("", true));

    // 😀 (F0 9F 98 80) and 😁 (F0 9F 98 81) share three leading bytes, but
    // holding back is decided per char, so 😁 is released at once.
    let mut c = StopChecker::new(["😀x"]);
    assert_eq!(c.push("a😁"), res("a😁", false));
    assert_eq!(c.push("b😀"), res("b", false));
    assert_eq!(c.push("x"), res("", true));

    // Accents spanning chunks.
    assert_eq!(run(&["café"], &["un caf", "é noir"]), ("un ".into(), true));
    assert_eq!(
        run(&["café"], &["un caf", "e noir"]),
        ("un cafe noir".into(), false)
    );
}

#[test]
fn stop_at_the_very_start() {
    let mut c = StopChecker::new(["###"]);
    assert_eq!(c.push("###abc"), res("", true));
    assert_eq!(c.finish(), "");

    let mut c = StopChecker::new(["###"]);
    assert_eq!(c.push("#"), res("", false));
    assert_eq!(c.push("##"), res("", true));
}

#[test]
fn earliest_of_several_stops_wins() {
    let mut c = StopChecker::new(["world", "lo w"]);
    assert_eq!(c.push("hello world"), res("hel", true));
    assert_eq!(c.matched_stop(), Some("lo w"));
    // Held-back text is the longest suffix that could still become a stop.
    let mut c = StopChecker::new(["xyz", "yzw"]);
    assert_eq!(c.push("axy"), res("a", false));
    assert_eq!(c.push("zq"), res("", true));
    assert_eq!(c.matched_stop(), Some("xyz"));
}

#[test]
fn no_stop_strings_passes_everything_through() {
    let mut c = StopChecker::new(Vec::<String>::new());
    assert_eq!(c.push("anything </s>"), res("anything </s>", false));
    assert_eq!(c.finish(), "");
    // Empty stop strings are ignored rather than matching immediately.
    let mut c = StopChecker::new([""]);
    assert_eq!(c.push("abc"), res("abc", false));
}

#[test]
fn chunking_never_changes_the_output() {
    // Every way of cutting the text into chunks at char boundaries gives the
    // same total output, and no emitted piece ever contains a stop prefix at
    // its end that later turned into a stop.
    let text = "ab<|e<|end|>x";
    let stops = ["<|end|>", "<|im_end|>"];
    let boundaries: Vec<usize> = (1..text.len())
        .filter(|&i| text.is_char_boundary(i))
        .collect();
    for mask in 0u32..(1 << boundaries.len()) {
        let mut chunks = Vec::new();
        let mut start = 0;
        for (bit, &b) in boundaries.iter().enumerate() {
            if mask & (1 << bit) != 0 {
                chunks.push(&text[start..b]);
                start = b;
            }
        }
        chunks.push(&text[start..]);
        assert_eq!(run(&stops, &chunks), ("ab<|e".into(), true), "{chunks:?}");
    }
}
