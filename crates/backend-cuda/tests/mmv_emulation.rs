//! The two-rows-a-warp mat-vecs (`mmv_fast2r_<type>`, `mmv3_fast2r_<type>`: `fast_rows_nr` in
//! kernels.cu) give every row bitwise what a warp a row gives (`fast_rows`, `mmv_fast1`'s):
//! proven here without a GPU. `bench/mmv_emu/run.sh` cuts kernels.cu's FAST NUMERICS section out
//! as it is, compiles it as C++ with the attention emulation's shim (one thread per CUDA thread,
//! the shuffles through per-warp barriers), and runs both on random weights of every type with
//! a fast kernel: rows of fewer than 32 units, exactly 32 and more; odd and even row counts
//! (the last warp with one row). The GPU runs (`check --ops`, the token hashes) then only confirm
//! that the device does what the source says.

mod common;

use common::gxx_or_skip;
use std::process::Command;

fn emulate(perturb: bool) -> (bool, String) {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../bench/mmv_emu/run.sh");
    let mut cmd = Command::new("bash");
    cmd.args([script, "3"]);
    if perturb {
        cmd.env("MMV_EMU_PERTURB", "1");
    }
    let out = cmd.output().expect("bash runs");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text)
}

#[test]
fn two_rows_a_warp_is_bitwise_a_warp_a_row() {
    if !gxx_or_skip() {
        return;
    }
    let (ok, text) = emulate(false);
    assert!(ok, "emulation failed:\n{text}");
    assert!(text.contains("PASS: 0 shapes differ"), "{text}");
    // Five types of 32-value blocks x 4 row lengths x 2 row counts, three K-quants x 3 x 2.
    assert_eq!(
        text.matches(": bitwise (0 rows differ)").count(),
        58,
        "{text}"
    );
    // One output one bit off in every shape is caught.
    let (ok, text) = emulate(true);
    assert!(!ok, "a perturbed output passed:\n{text}");
    assert_eq!(
        text.matches("MISMATCH (1 rows differ)").count(),
        58,
        "{text}"
    );
}
