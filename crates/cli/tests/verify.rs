//! The verification commands end to end: trace files diffed, a live diff, check, doctor.

use std::process::Command;

fn lockstep() -> Command {
    Command::new(env!("CARGO_BIN_EXE_lockstep"))
}

#[test]
fn trace_files_diff_and_live_diff_agree() {
    let dir = std::env::temp_dir().join(format!("lockstep-verify-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("tmp");
    let a = dir.join("a.safetensors");
    let b = dir.join("b.safetensors");
    for f in [&a, &b] {
        let out = lockstep()
            .args([
                "trace",
                "-m",
                "smollm2",
                "--ids",
                "1,504,3458,282",
                "--decode",
                "2",
            ])
            .args(["--force-ids", "5,6", "-o"])
            .arg(f)
            .output()
            .expect("run trace");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let out = lockstep()
        .arg("diff")
        .arg(&a)
        .arg(&b)
        .output()
        .expect("diff");
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(text.contains("verdict: AGREE"), "{text}");

    let out = lockstep()
        .args([
            "diff", "-m", "smollm2", "--a", "ref", "--b", "ref", "-p", "Hello", "--decode", "1",
            "--json",
        ])
        .output()
        .expect("diff");
    assert_eq!(out.status.code(), Some(0));
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert!(j["verdict"].is_null());

    let out = lockstep()
        .args(["diff", "--list-faults"])
        .output()
        .expect("list");
    assert!(out.status.success());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn check_and_doctor_pass_on_smollm2() {
    let out = lockstep()
        .args(["check", "-m", "smollm2", "--ids", "1,504,3458,282,5"])
        .output()
        .expect("check");
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    // Seven invariances, the last the untapped (logits-only) run.
    assert_eq!(text.matches("  ok ").count(), 7, "{text}");
    assert!(
        text.contains("untapped (replayed) steps vs tapped"),
        "{text}"
    );
    let out = lockstep()
        .args(["doctor", "smollm2", "-n", "4"])
        .output()
        .expect("doctor");
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(text.contains("result: PASS"), "{text}");
}

/// The shipped CLI has no fault injection: `--inject` is a clear error, never a silent no-op.
#[test]
fn inject_needs_a_faults_build_and_the_cpu_side() {
    let diff = |b: &str| {
        lockstep()
            .args([
                "diff", "-m", "smollm2", "--a", "ref", "--b", b, "--ids", "1,2",
            ])
            .args(["--inject", "softmax-flat"])
            .output()
            .expect("diff")
    };
    let out = diff("cpu");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("built without fault injection"), "{err}");
    let out = diff("ref");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("use `--b cpu`"), "{err}");
}
