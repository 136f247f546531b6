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

/// Half-precision data and the writers' refusals: an f16 tensor comes back exactly; a tap
/// before any step, a name with `/` and a step without tokens are errors, not files.
#[test]
fn writers_store_f16_and_refuse_bad_calls() {
    let dir = tmp("f16");
    let src = dir.join("f16.c");
    let header = root().join("tools/writers");
    std::fs::write(
        &src,
        r#"#define LOCKSTEP_TRACE_IMPLEMENTATION
#include "lockstep_trace.h"
#include <stdio.h>
int main(int argc, char **argv) {
    (void)argc;
    lst_writer *w = lst_open(argv[1], "f16-test", "00ff");
    const uint16_t half[4] = {0x3C00, 0xC000, 0x3555, 0x7BFF}; /* 1, -2, 0.33325, 65504 */
    const float one[1] = {1.0f};
    size_t shape[2] = {2, 2}, s1[1] = {1};
    int32_t tok[1] = {7}, pos[1] = {0};
    if (!w) return 10;
    if (lst_meta(w, "namemap", "") != 0) return 11;
    if (lst_step(w, tok, pos, 1) != 0) return 12;
    if (lst_tap_f16(w, "blk.0.k_read", half, shape, 2) != 0) return 13;
    if (lst_tap_f32(w, "a/b", one, s1, 1) != -1) return 14; /* refused, and the writer is spent */
    if (lst_close(w) != -1) return 15;
    lst_writer *v = lst_open(argv[2], "x", NULL);
    if (!v || lst_tap_f32(v, "x", one, s1, 1) != -1) return 16; /* tap before step */
    lst_close(v);
    lst_writer *u = lst_open(argv[3], "x", NULL);
    if (!u || lst_step(u, tok, pos, 0) != -1) return 17; /* no tokens */
    lst_close(u);
    puts(lst_error());
    /* a good file: */
    lst_writer *g = lst_open(argv[4], "f16-test", "00ff");
    if (!g || lst_step(g, tok, pos, 1) || lst_tap_f16(g, "blk.0.k_read", half, shape, 2) || lst_close(g)) return 18;
    return 0;
}
"#,
    )
    .expect("write C source");
    let exe = dir.join("f16");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let r = Command::new(&cc)
        .args(["-std=c99", "-Wall", "-Wextra", "-Werror", "-I"])
        .arg(&header)
        .arg("-o")
        .arg(&exe)
        .arg(&src)
        .output()
        .unwrap_or_else(|e| panic!("cannot run the C compiler `{cc}` ({e}); set CC"));
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let files: Vec<PathBuf> = (0..4)
        .map(|i| dir.join(format!("t{i}.safetensors")))
        .collect();
    let r = Command::new(&exe).args(&files).output().expect("run");
    assert_eq!(
        r.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&r.stdout)
    );
    assert!(String::from_utf8_lossy(&r.stdout).contains("no tokens"));
    for refused in &files[..3] {
        assert!(!refused.exists(), "{} was written", refused.display());
    }
    let want = [1.0f32, -2.0, 0.333_251_95, 65504.0];
    let t = Trace::load(&files[3]).expect("the f16 trace loads");
    assert_eq!(t.meta.backend, "f16-test");
    assert_eq!(t.meta.model_sha256, "00ff");
    assert_eq!(t.steps[0].tokens, vec![7]);
    let k = t.steps[0].get("blk.0.k_read").expect("tap");
    assert_eq!(
        (k.shape.clone(), k.data.clone()),
        (vec![2, 2], want.to_vec())
    );

    // The Python writer stores float16 as F16 too.
    let py = dir.join("py.safetensors");
    let code = format!(
        "import sys; sys.path.insert(0, {:?}); import numpy as np; from lockstep_trace import TraceWriter\n\
         w = TraceWriter({:?}, backend='f16-py', model_sha256='00ff')\n\
         w.step([7], [0]); w.tap('blk.0.k_read', np.array([[1, -2], [0.33325, 65504]], dtype=np.float16)); w.close()\n\
         for bad in (lambda: w.tap('a/b', np.zeros(1, np.float32)), lambda: w.step([1, 2], [0])):\n\
         \x20   try:\n\
         \x20       bad(); sys.exit('accepted')\n\
         \x20   except ValueError: pass\n",
        header.display().to_string(),
        py.display().to_string()
    );
    let r = Command::new(python())
        .args(["-c", &code])
        .output()
        .expect("run python");
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let t = Trace::load(&py).expect("load");
    let k = t.steps[0].get("blk.0.k_read").expect("tap");
    assert_eq!(k.data, want.to_vec());
    let _ = std::fs::remove_dir_all(&dir);
}
