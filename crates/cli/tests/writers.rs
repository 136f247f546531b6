//! The drop-in trace writers (tools/writers: Python with numpy, a C header) round-trip through
//! `lockstep diff -m MODEL --ref ref TRACE`: fed lockstep's own reference values they agree;
//! with one tensor of one step scaled, the verdict names that tap and step.
//!
//! Python: `$LOCKSTEP_PYTHON` (default `python3`) with numpy; a C compiler: `$CC` (default `cc`).

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use lockstep_verify::Trace;

fn lockstep() -> Command {
    Command::new(env!("CARGO_BIN_EXE_lockstep"))
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn python() -> String {
    std::env::var("LOCKSTEP_PYTHON").unwrap_or_else(|_| "python3".into())
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("lockstep-writers-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&d).expect("tmp dir");
    d
}

fn reference_trace(dir: &Path) -> PathBuf {
    let out = dir.join("ref.safetensors");
    let r = lockstep()
        .args([
            "trace",
            "-m",
            "smollm2",
            "--ids",
            "1,504,3458,282,5",
            "--decode",
            "2",
        ])
        .arg("-o")
        .arg(&out)
        .output()
        .expect("run lockstep trace");
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    out
}

/// Runs the foreign diff; returns (exit code, stdout).
fn diff(trace: &Path) -> (Option<i32>, String) {
    let r = lockstep()
        .args(["diff", "-m", "smollm2", "--ref", "ref"])
        .arg(trace)
        .output()
        .expect("run lockstep diff");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&r.stdout),
        String::from_utf8_lossy(&r.stderr)
    );
    (r.status.code(), text)
}

fn assert_agree(trace: &Path) {
    let (code, text) = diff(trace);
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains("verdict: AGREE"), "{text}");
    assert!(
        text.contains("the foreign trace lacked no tap"),
        "a full replay lacks nothing: {text}"
    );
}

fn assert_diverges_at(trace: &Path, step_and_tap: &str) {
    let (code, text) = diff(trace);
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.contains(&format!("verdict: DIVERGE. {step_and_tap} diverges")),
        "expected the verdict at `{step_and_tap}`: {text}"
    );
}

#[test]
fn python_writer_round_trips() {
    let dir = tmp("py");
    let reference = reference_trace(&dir);
    let example = root().join("tools/writers/example.py");
    let run = |out: &Path, perturb: Option<&str>| {
        let mut c = Command::new(python());
        c.arg(&example)
            .arg("--from")
            .arg(&reference)
            .arg("-o")
            .arg(out);
        if let Some(p) = perturb {
            c.args(["--perturb", p]);
        }
        let r = c.output().unwrap_or_else(|e| {
            panic!(
                "cannot run {} ({e}): the writer tests need Python 3 with numpy \
                 (set LOCKSTEP_PYTHON; .ci/run installs one)",
                python()
            )
        });
        assert!(
            r.status.success(),
            "{} tools/writers/example.py failed (needs numpy): {}",
            python(),
            String::from_utf8_lossy(&r.stderr)
        );
    };
    let good = dir.join("good.safetensors");
    run(&good, None);
    assert_agree(&good);
    let bad = dir.join("bad.safetensors");
    run(&bad, Some("1:blk.2.ffn_up:1.01"));
    assert_diverges_at(&bad, "decode step 1: blk.2.ffn_up");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The plain dump tools/writers/example.c replays (its comment has the format).
fn write_dump(trace: &Trace, path: &Path) {
    let mut b: Vec<u8> = Vec::new();
    b.extend_from_slice(b"LSTAPS1\0");
    b.extend_from_slice(&(trace.steps.len() as u32).to_le_bytes());
    for s in &trace.steps {
        b.extend_from_slice(&(s.tokens.len() as u32).to_le_bytes());
        for t in &s.tokens {
            b.extend_from_slice(&(*t as i32).to_le_bytes());
        }
        for p in &s.positions {
            b.extend_from_slice(&(*p as i32).to_le_bytes());
        }
        b.extend_from_slice(&(s.taps.len() as u32).to_le_bytes());
        for (name, t) in &s.taps {
            b.extend_from_slice(&(name.len() as u32).to_le_bytes());
            b.extend_from_slice(name.as_bytes());
            b.extend_from_slice(&(t.shape.len() as u32).to_le_bytes());
            for d in &t.shape {
                b.extend_from_slice(&(*d as u64).to_le_bytes());
            }
            for v in &t.data {
                b.extend_from_slice(&v.to_le_bytes());
            }
        }
    }
    let mut f = std::fs::File::create(path).expect("dump");
    f.write_all(&b).expect("write dump");
}

#[test]
fn c_writer_round_trips() {
    let dir = tmp("c");
    let reference = reference_trace(&dir);
    let dump = dir.join("taps.bin");
    write_dump(&Trace::load(&reference).expect("load"), &dump);
    let exe = dir.join("example");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let r = Command::new(&cc)
        .args([
            "-O2",
            "-std=c99",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-pedantic",
            "-o",
        ])
        .arg(&exe)
        .arg(root().join("tools/writers/example.c"))
        .output()
        .unwrap_or_else(|e| panic!("cannot run the C compiler `{cc}` ({e}); set CC"));
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let run = |out: &Path, perturb: Option<&str>| {
        let mut c = Command::new(&exe);
        c.arg(&dump).arg(out);
        if let Some(p) = perturb {
            c.arg(p);
        }
        let r = c.output().expect("run the C example");
        assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    };
    let good = dir.join("good.safetensors");
    run(&good, None);
    assert_agree(&good);
    let bad = dir.join("bad.safetensors");
    run(&bad, Some("0:blk.5.kq_softmax:0.5"));
    assert_diverges_at(&bad, "prefill (step 0): blk.5.kq_softmax");
    let _ = std::fs::remove_dir_all(&dir);
}
