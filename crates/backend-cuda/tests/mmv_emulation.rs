//! The two-rows-a-warp mat-vecs (`mmv_fast2r_<type>`, `mmv3_fast2r_<type>`: `fast_rows_nr` in
//! kernels.cu) give every row bitwise what a warp a row gives (`fast_rows`, `mmv_fast1`'s):
//! proven here without a GPU; so do the long norm-fused kernels' rows after their norm
//! (`norm_long_mmv3_rows`, `norm_long_gate_up_rows`: rows grid-stride, across weights). `bench/mmv_emu/run.sh` cuts kernels.cu's FAST NUMERICS section out
//! as it is, compiles it as C++ with the attention emulation's shim (one thread per CUDA thread,
//! the shuffles through per-warp barriers), and runs both on random weights of every type with
//! a fast kernel: rows of fewer than 32 units, exactly 32 and more; odd and even row counts
//! (the last warp with one row). The GPU runs (`check --ops`, the token hashes) then only confirm
//! that the device does what the source says. The same harness, built twice, proves the device's
//! Q6_K and Q8_0 planes (`plan::q6k_planar`, `plan::q80_planar`; kernels.cu `q6p_at`, `q8p_at`)
//! and the repacked Q5_0 blocks give every row GGUF's blocks give. And the o projection with
//! its weights loaded before its grid wait (`mmv_pre1r_12`, `mmv_pre2r_12`: kernels.cu
//! `pre_rows`) gives every row `mmv_fast1_12`'s bits. So do a row's 32 lanes played by 4 or 8
//! (`played_rows`, `played_gate_up`: a cluster step's rows, session 53).

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
    // Five types of 32-value blocks x 4 row lengths x 2 row counts, three K-quants x 3 x 2,
    // and the o projection with its weights before its grid wait (pre_rows: mmv_pre1r and
    // mmv_pre2r together against a warp a row) on Q4_K rows of 5 lengths x 2 row counts.
    // (and 48 of the played rows' lines, below)
    assert_eq!(
        text.matches(": bitwise (0 rows differ)").count(),
        68 + 48,
        "{text}"
    );
    assert_eq!(text.matches("preload Q4_K").count(), 10, "{text}");
    // The long norm-fused kernels' rows, dealt grid-stride (norm_long_mmv3_rows for every type
    // and the three two-type pairs, norm_long_gate_up_rows with SiLU and GELU for every type),
    // give every row a warp a row gives.
    assert_eq!(
        text.matches(": rows bitwise (0 differ)").count(),
        27,
        "{text}"
    );
    // A row's 32 lanes played by 4 or 8 lanes (played_rows, played_gate_up: the cluster step's
    // row arithmetic) give every row a warp a row gives: Q5_0, Q8_0, Q4_K and Q6_K, rows of
    // fewer than 32 units, 32 and more, two row counts; and the gate/up pair's gate, up and
    // activation with SiLU and GELU.
    assert_eq!(played(&text, ": bitwise (0 rows differ)"), 48, "{text}");
    assert_eq!(played(&text, ": bitwise (0, 0, 0 differ)"), 96, "{text}");
    // One output one bit off in every shape is caught.
    let (ok, text) = emulate(true);
    assert!(!ok, "a perturbed output passed:\n{text}");
    assert_eq!(
        text.matches("MISMATCH (1 rows differ)").count(),
        68 + 48,
        "{text}"
    );
    assert_eq!(
        text.matches("rows MISMATCH (1 differ)").count(),
        27,
        "{text}"
    );
    assert_eq!(played(&text, ": MISMATCH (1, 0, 0 differ)"), 96, "{text}");
}

/// Lines of the played rows' report (`played ...`) that contain `what`.
fn played(text: &str, what: &str) -> usize {
    text.lines()
        .filter(|l| l.starts_with("played") && l.contains(what))
        .count()
}

/// `m` random rows of `k` values in blocks of `values` values and `bytes` bytes, the high byte
/// of each block's f16 `d` (at `d_high`) reduced below `d_max`: small and finite.
fn random_rows(
    k: usize,
    m: usize,
    seed: u64,
    (values, bytes): (usize, usize),
    d_high: usize,
    d_max: u8,
) -> Vec<u8> {
    let mut x = seed;
    let mut out: Vec<u8> = (0..k / values * bytes * m)
        .map(|_| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (x >> 56) as u8
        })
        .collect();
    for block in out.chunks_exact_mut(bytes) {
        block[d_high] %= d_max;
    }
    out
}

/// Random Q6_K rows (every super-block's `d` a small finite half), `m` rows of `k` values.
fn q6k_rows(k: usize, m: usize, seed: u64) -> Vec<u8> {
    random_rows(k, m, seed, (256, 210), 209, 0x3B)
}

/// Each row's (a warp a row, two rows a warp) bits as `emu` (one of run.sh's layout builds)
/// prints them for the rows in `bytes` (Q6_K, or Q5_0 / Q8_0 with `ty` "q5_0" / "q8_0").
fn layout_rows(emu: &std::path::Path, bytes: &[u8], k: usize, m: usize, ty: &str) -> Vec<String> {
    let file = emu.with_extension(format!("weights{ty}"));
    std::fs::write(&file, bytes).expect("write");
    let out = Command::new(emu)
        .arg("layout")
        .arg(&file)
        .arg(k.to_string())
        .arg(m.to_string())
        .arg(ty)
        .output()
        .expect("the emulation runs");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{text}");
    text.lines()
        .filter(|l| l.starts_with("row "))
        .map(str::to_string)
        .collect()
}

/// run.sh's two layout builds in a fresh directory: (GGUF's blocks, the device's layouts).
fn layout_builds(tag: &str) -> (std::path::PathBuf, std::path::PathBuf, std::path::PathBuf) {
    let dir = std::env::temp_dir().join(format!("lockstep_{tag}_layout_{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../bench/mmv_emu/run.sh");
    let built = Command::new("bash")
        .arg(script)
        .arg("layout-build")
        .arg(&dir)
        .output()
        .expect("bash runs");
    assert!(
        built.status.success(),
        "{}",
        String::from_utf8_lossy(&built.stderr)
    );
    (dir.join("emu_gguf"), dir.join("emu"), dir)
}

/// Real values: m rows, each finite, a warp a row equal to two rows a warp, most not zero.
fn assert_real_rows(rows: &[String], k: usize, m: usize) {
    assert_eq!(rows.len(), m, "k {k}: {rows:?}");
    let mut nonzero = 0;
    for line in rows {
        let bits: Vec<u32> = line
            .split_whitespace()
            .skip(2)
            .map(|h| u32::from_str_radix(h, 16).expect("hex"))
            .collect();
        assert_eq!(bits.len(), 2, "{line}");
        assert_eq!(bits[0], bits[1], "{line}");
        assert!(f32::from_bits(bits[0]).is_finite(), "{line}");
        nonzero += usize::from(f32::from_bits(bits[0]) != 0.0);
    }
    assert!(nonzero > m / 2, "k {k}: {rows:?}");
}

/// One device layout against GGUF's blocks: for each (k, m, seed), `rows` GGUF rows, `device`
/// their device layout, both builds' results bitwise equal and real; then byte `flip.0` of the
/// device's bytes XORed with `flip.1` must change them (the comparison can fail).
fn check_layout(
    tag: &str,
    ty: &str,
    cases: &[(usize, usize, u64)],
    rows: fn(usize, usize, u64) -> Vec<u8>,
    device: fn(&[u8]) -> Option<Vec<u8>>,
    flip: (usize, u8),
) {
    let (emu_gguf, emu_dev, dir) = layout_builds(tag);
    for &(k, m, seed) in cases {
        let gguf = rows(k, m, seed);
        let dev = device(&gguf).expect("whole blocks");
        let a = layout_rows(&emu_gguf, &gguf, k, m, ty);
        assert_eq!(
            a,
            layout_rows(&emu_dev, &dev, k, m, ty),
            "k {k}: GGUF's blocks against the device's"
        );
        assert_real_rows(&a, k, m);
        let mut bad = dev.clone();
        bad[flip.0] ^= flip.1;
        assert_eq!(
            layout_rows(&emu_gguf, &gguf, k, m, ty),
            a,
            "the GGUF build read the same file"
        );
        assert_ne!(
            layout_rows(&emu_dev, &bad, k, m, ty),
            a,
            "k {k}: a changed byte went unnoticed"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The device's Q6_K planes (`plan::q6k_planar`, read through kernels.cu `q6p_at`) give every
/// fast mat-vec row bitwise what GGUF's blocks give: the kernels' own source, both builds
/// (`-DLOCKSTEP_Q6K_GGUF` and the default), on the same rows repacked by the backend's own
/// function. Row lengths of 2 super-blocks, 8 (a row a group) and 17 (groups straddling rows).
#[test]
fn q6k_planes_compute_what_gguf_blocks_compute() {
    if !gxx_or_skip() {
        return;
    }
    check_layout(
        "q6k",
        "",
        &[(512, 13, 1), (2048, 9, 2), (4352, 11, 3)],
        q6k_rows,
        lockstep_backend_cuda::plan::q6k_planar,
        (17, 0x10),
    );
}

/// Random Q5_0 rows (every block's `d` a small finite half), `m` rows of `k` values.
fn q50_rows(k: usize, m: usize, seed: u64) -> Vec<u8> {
    random_rows(k, m, seed, (32, 22), 1, 0x2C)
}

/// The repacked Q5_0 blocks (`plan::q50_repacked`: 24 bytes, qh's bits permuted; kernels.cu
/// `Q50_BYTES` and `FastUnit<T_Q5_0>`, the default; GGUF's under `-DLOCKSTEP_Q50_GGUF`, knob
/// `LOCKSTEP_CUDA_Q50_REPACK=0`) give every fast mat-vec row bitwise what GGUF's 22-byte blocks
/// give: both builds of the kernels' own source on the same rows, repacked by the backend's own
/// function. Rows of 640 values (Gemma-3's), 576 (SmolLM2's) and 2048 (Gemma-3's down), odd and
/// even row counts.
#[test]
fn q50_device_blocks_compute_what_gguf_blocks_compute() {
    if !gxx_or_skip() {
        return;
    }
    // One high bit moved in the first block's qh.
    check_layout(
        "q50",
        "q5_0",
        &[(640, 13, 4), (576, 8, 5), (2048, 9, 6)],
        q50_rows,
        lockstep_backend_cuda::plan::q50_repacked,
        (4, 0x10),
    );
}

/// Random Q8_0 rows (every block's `d` a small finite half), `m` rows of `k` values.
fn q80_rows(k: usize, m: usize, seed: u64) -> Vec<u8> {
    random_rows(k, m, seed, (32, 34), 1, 0x2C)
}

/// The Q8_0 planes (`plan::q80_planar`: each 16 blocks' quants, then their scales; kernels.cu
/// `q8p_at` and `FastUnit<T_Q8_0>`, the default; GGUF's under `-DLOCKSTEP_Q80_GGUF`, knob
/// `LOCKSTEP_CUDA_Q80_PLANAR=0`) give every fast mat-vec row bitwise what GGUF's 34-byte blocks
/// give: both builds of the kernels' own source on the same rows, made planar by the backend's
/// own function. Rows of 640 values (Gemma-3's LM head: 20 blocks, groups straddling rows), 576
/// (SmolLM2's: 18) and 512 (a row two whole groups), odd and even row counts.
#[test]
fn q80_planes_compute_what_gguf_blocks_compute() {
    if !gxx_or_skip() {
        return;
    }
    // One bit of the first block's sixth quant.
    check_layout(
        "q80",
        "q8_0",
        &[(640, 13, 7), (576, 8, 8), (512, 9, 9)],
        q80_rows,
        lockstep_backend_cuda::plan::q80_planar,
        (5, 0x10),
    );
}
