//! `--backend cuda` end to end: on a machine without a CUDA driver (CI) every command that
//! takes a backend fails with a clear message; with a driver and a GPU, `cuda-exact` agrees
//! with the reference bit for bit on a tiny model and `cuda` (fast numerics) passes the
//! isolated per-op check.

use std::path::PathBuf;
use std::process::Command;

fn lockstep() -> Command {
    Command::new(env!("CARGO_BIN_EXE_lockstep"))
}

fn tiny(ty: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/fixtures/tiny-llama")
        .join(format!("tiny-llama-{ty}.gguf"))
}

#[test]
fn cuda_backend_fails_clearly_without_a_driver_and_agrees_with_it() {
    let model = tiny("Q4_K");
    assert!(model.exists(), "fixture {} missing", model.display());
    let m = model.to_str().expect("utf-8 path");
    let commands: Vec<Vec<&str>> = vec![
        vec![
            "diff",
            "-m",
            m,
            "--a",
            "ref",
            "--b",
            "cuda-exact",
            "--ids",
            "1,2,3",
            "--decode",
            "2",
            "--profile",
            "exact",
        ],
        // Fast numerics (quant8): every op inside its isolated bound.
        vec![
            "diff",
            "-m",
            m,
            "--a",
            "ref",
            "--b",
            "cuda",
            "--ids",
            "1,2,3",
            "--decode",
            "2",
            "--isolate",
        ],
        vec![
            "trace",
            "-m",
            m,
            "--backend",
            "cuda",
            "--ids",
            "1,2,3",
            "-o",
            "/dev/null",
        ],
        vec!["check", "-m", m, "--backend", "cuda", "--ids", "1,2,3"],
        vec![
            "bench",
            "-m",
            m,
            "--backend",
            "cuda",
            "-p",
            "8",
            "-n",
            "2",
            "-r",
            "1",
        ],
        vec!["run", "-m", m, "--backend", "cuda", "-p", "hi", "-n", "2"],
    ];
    let driver = lockstep_backend_cuda::driver_present();
    for args in commands {
        let out = lockstep().args(&args).output().expect("run lockstep");
        let stderr = String::from_utf8_lossy(&out.stderr);
        if driver {
            // `run` needs a tokenizer the tiny model may lack; the rest must succeed.
            if args[0] != "run" {
                assert!(out.status.success(), "{args:?}: {stderr}");
            }
        } else {
            assert!(
                !out.status.success(),
                "{args:?} succeeded without a CUDA driver"
            );
            assert!(
                stderr.contains("cuda backend: no CUDA driver: libcuda.so could not be loaded"),
                "{args:?}: unclear error: {stderr}"
            );
            assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        }
    }
}
