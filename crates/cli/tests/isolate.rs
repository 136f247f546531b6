//! `lockstep diff --isolate` and `lockstep check --ops` end to end, through the binary.

use std::process::Command;

fn lockstep() -> Command {
    Command::new(env!("CARGO_BIN_EXE_lockstep"))
}

#[test]
fn diff_isolate_agrees_on_a_clean_cpu_run() {
    let out = lockstep()
        .args([
            "diff",
            "-m",
            "smollm2",
            "--a",
            "ref",
            "--b",
            "cpu",
            "--ids",
            "1,504,3458,282,5",
            "--decode",
            "2",
            "--isolate",
        ])
        .output()
        .expect("diff");
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(text.contains("verdict: AGREE"), "{text}");
    assert!(
        text.contains("isolated verdict: every op agrees in isolation"),
        "{text}"
    );
    assert!(text.contains("matmul (quantized weight)"), "{text}");
    assert!(
        text.contains("isolated vs whole-run: the whole-run diff and every isolated op agree"),
        "{text}"
    );
}

#[test]
fn check_ops_prints_its_table_and_passes_on_cpu() {
    let out = lockstep()
        .args([
            "check",
            "--ops",
            "--backend",
            "cpu",
            "--filter",
            "matmul.Q4_0,rope",
        ])
        .output()
        .expect("check --ops");
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(text.contains("Q4_0"), "{text}");
    assert!(
        text.lines().any(|l| l.trim_start().starts_with("rope ")),
        "{text}"
    );
    assert!(text.contains("0 failed") && text.contains("PASS"), "{text}");
    // A filter that matches nothing is an error, not a silent pass.
    let out = lockstep()
        .args(["check", "--ops", "--filter", "no_such_op"])
        .output()
        .expect("check --ops");
    assert_eq!(out.status.code(), Some(1));
}
