//! The tiled attention kernels (`attention_tile`, `attention_tile_wide`) keep each (row, head)'s
//! arithmetic bitwise the row kernel's (`attention`): proven here without a GPU.
//! `bench/attn_emu/run.sh` cuts those kernels out of `kernels.cu` as they are, compiles them as
//! C++ with a shim that runs one thread per CUDA thread (barriers for `__syncthreads` and the
//! shuffles), and compares scores, probabilities and outputs bitwise on random batches (GQA,
//! sliding windows, masks, several sequences, head sizes 8..512) under random tilings. The GPU
//! run then only confirms that the device does what the source says. The row kernel's fused
//! quantization of its output (fast numerics) is held to the declared q8 rule, recomputed on
//! the host from the output it wrote.
//!
//! The split-key decode kernels (`attention_split` + `attention_combine`, f32 flash-decoding;
//! heads of a multiple of 4 values, at most 256) are not bitwise anything: they are held, on
//! the same batches with random span counts, to the isolation bound `verify` applies to them
//! (scores within hd u scale sum|q k| of the row kernel's, outputs within
//! (2 max_ds + (2 spread + 2 n + 5 ceil(n / 8) + 12) u) sum p|v| of its f64 ones), and their
//! fused quantization to the q8 rule.

mod common;

use common::gxx_or_skip;
use std::process::Command;

fn emulate(cases: &str, seed: &str, perturb: bool, head_dim: Option<&str>) -> (bool, String) {
    emulate_with(cases, seed, perturb, head_dim, false)
}

fn emulate_with(
    cases: &str,
    seed: &str,
    perturb: bool,
    head_dim: Option<&str>,
    long: bool,
) -> (bool, String) {
    emulate_env(cases, seed, perturb, head_dim, long, &[])
}

/// Short decode cases within their bound, with their fused quantization right.
fn decode_within_bounds(text: &str) -> usize {
    text.lines()
        .filter(|l| {
            l.contains(" decode rows ")
                && l.contains(": within bounds (0 scores, 0 outputs")
                && l.ends_with("decode q8: ok")
        })
        .count()
}

/// Split-key cases within their bound.
fn split_within_bounds(text: &str) -> usize {
    text.lines()
        .filter(|l| {
            l.contains(" split rows ") && l.contains(": within bounds (0 scores, 0 outputs")
        })
        .count()
}

/// Flash cases (heads of 64) within their bound.
fn flash_within_bounds(text: &str) -> usize {
    text.lines()
        .filter(|l| l.contains(" flash hd 64 ") && l.contains(": within bounds (0 scores"))
        .count()
}

fn emulate_env(
    cases: &str,
    seed: &str,
    perturb: bool,
    head_dim: Option<&str>,
    long: bool,
    env: &[(&str, &str)],
) -> (bool, String) {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../bench/attn_emu/run.sh");
    let mut cmd = Command::new("bash");
    cmd.args([script, cases, seed]);
    cmd.envs(env.iter().copied());
    if perturb {
        cmd.env("ATTN_EMU_PERTURB", "1");
    }
    if let Some(hd) = head_dim {
        cmd.env("HD", hd);
    }
    if long {
        cmd.env("ATTN_EMU_LONG", "1");
    }
    let out = cmd.output().expect("bash runs");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text)
}

#[test]
fn tiled_attention_is_bitwise_the_row_kernel() {
    if !gxx_or_skip() {
        return;
    }
    let (ok, text) = emulate("6", "11", false, None);
    assert!(ok, "emulation failed:\n{text}");
    assert!(text.contains("PASS: 0 mismatches"), "{text}");
    // Six cases of three tilings each ran, and case 5 (heads of 64) had its output quantized.
    assert_eq!(text.matches(": ok (zero exps").count(), 18, "{text}");
    assert_eq!(text.matches("output quantized: ok").count(), 1, "{text}");
    // The split-key kernels run the cases whose heads they hold (a multiple of 4 values, at
    // most 256: not case 1's 300 nor case 3's 67): four within bounds, one quantized.
    let split_ok = text
        .lines()
        .filter(|l| l.contains(" split rows ") && l.contains(": within bounds (0 scores"))
        .count();
    assert_eq!(split_ok, 4, "{text}");
    assert_eq!(text.matches(" split rows ").count(), 4, "{text}");
    assert_eq!(text.matches("split q8: ok").count(), 1, "{text}");
    // One output one ulp off in the tiled run, one quantized value off, and a split-key output
    // 0.1% off, are caught.
    let (ok, text) = emulate("1", "11", true, Some("64"));
    assert!(
        !ok && text.contains("| tile") && text.contains("quantized: MISMATCH"),
        "a perturbed output passed:\n{text}"
    );
    // Five from the row, split and tiled kernels, one each from the short decode and flash
    // kernels (heads of 64).
    assert_eq!(text.matches("MISMATCH").count(), 7, "{text}");
    assert!(
        text.contains("split rows") && text.contains("1 outputs out of bound"),
        "{text}"
    );
}

/// The flash prefill kernels (`attention_flash_64` / `_128`: TF32 tensor cores, 3-term split,
/// f32 online softmax) within the bound verify holds them to, on contexts of 40 to 165 keys
/// (one to three chunks of 64, so the running max and sum are rescaled), with their fused
/// output quantization; the tensor-core product is emulated lane by lane from the PTX fragment
/// layouts, so a wrong fragment index fails here. A perturbed output is caught.
#[test]
fn flash_attention_is_within_the_f32_bound() {
    if !gxx_or_skip() {
        return;
    }
    let (ok, text) = emulate_with("3", "5", false, Some("64"), true);
    assert!(ok, "emulation failed:\n{text}");
    let flash_ok = flash_within_bounds(&text);
    assert_eq!(flash_ok, 3, "{text}");
    assert_eq!(text.matches("flash q8: ok").count(), 3, "{text}");
    let (ok, text) = emulate_with("1", "8", true, Some("64"), true);
    assert!(!ok, "a perturbed output passed:\n{text}");
    assert!(
        text.lines()
            .any(|l| l.contains(" flash hd 64 ") && l.contains("1 outputs out of bound")),
        "{text}"
    );
}

/// The short decode kernels (`attention_decode_64` / `_128` / `_256`: one block per row and KV
/// head, or per row and a slice of its query heads, f32) within the bound verify holds them to,
/// on contexts up to 128 keys (windows, masks, GQA groups up to 8), with their fused output
/// quantization; every split of a group bitwise the whole group's. Heads of 256 also on a
/// cluster (`attention_decode_cl4_256` / `_cl8_256`: the row's keys cut over 4 or 8 blocks run
/// at once, their softmax partials combined through each other's shared memory), likewise. A
/// perturbed output, and a split one ulp off, are caught.
#[test]
fn decode_attention_is_within_the_f32_bound() {
    if !gxx_or_skip() {
        return;
    }
    for (hd, seed, long) in [
        ("64", "3", false),
        ("128", "5", false),
        ("256", "4", false),
        ("64", "5", true),
    ] {
        let (ok, text) = emulate_with("4", seed, false, Some(hd), long);
        assert!(ok, "emulation failed (heads of {hd}):\n{text}");
        let decode_ok = decode_within_bounds(&text);
        // Long contexts (over 128 keys) are not the kernel's: those cases skip it.
        assert!(
            decode_ok >= if long { 1 } else { 4 },
            "heads of {hd}:\n{text}"
        );
        assert!(!text.contains("NOT bitwise"), "heads of {hd}:\n{text}");
        // Heads of 256 also on a cluster of 4 and of 8 blocks (attention_decode_cl<N>_256),
        // every split of the group.
        let cluster_ok = text
            .lines()
            .filter(|l| {
                l.contains(" decode cluster ")
                    && l.contains(": within bounds (0 scores, 0 outputs")
                    && l.contains("cluster q8: ok")
            })
            .count();
        if hd == "256" && !long {
            assert!(cluster_ok >= 8, "heads of {hd}:\n{text}");
            assert_eq!(
                cluster_ok,
                text.matches(" decode cluster ").count(),
                "heads of {hd}:\n{text}"
            );
        } else {
            assert_eq!(text.matches(" decode cluster ").count(), 0, "{text}");
        }
        // The split-key kernels on every case (heads of 64, 128 and 256 fit them), over long
        // rows too (spans of many chunks).
        assert_eq!(split_within_bounds(&text), 4, "heads of {hd}:\n{text}");
        if !long {
            // Some case had a group to split: its one-head blocks ran and matched.
            assert!(
                text.lines()
                    .any(|l| l.contains(" heads a block 1: within bounds (0 scores, 0 outputs")),
                "heads of {hd}:\n{text}"
            );
        }
    }
    let mut cmd = Command::new("bash");
    cmd.arg(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../bench/attn_emu/run.sh"
    ))
    .args(["2", "3"])
    .env("HD", "64")
    .env("ATTN_EMU_PERTURB_SPLIT", "1");
    let out = cmd.output().expect("bash runs");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        !out.status.success() && text.contains("NOT bitwise the whole group's"),
        "a split one ulp off passed:\n{text}"
    );
    // A perturbed output of the block-a-head kernel (heads of 64) and of the cluster kernels
    // (heads of 256) fails.
    for (hd, kernel) in [("64", " decode rows "), ("256", " decode cluster ")] {
        let (ok, text) = emulate("1", "7", true, Some(hd));
        assert!(!ok, "a perturbed output passed:\n{text}");
        assert!(
            text.lines()
                .any(|l| l.contains(kernel) && l.contains("1 outputs out of bound")),
            "{text}"
        );
    }
}

/// `attention_decode_rope_64` / `_128` (rope_store's work inside the short decode kernel,
/// `Backend::rope_store_attention`): output, scores, quantized output, the q/k taps (rotated, and
/// normed when the heads have norms) and the whole cache bitwise what `rope_store` then
/// `attention_decode_<D>` give, for every split of the group, full and half rotations in both
/// styles, starting from a cache whose new rows are NaN (the fused kernel must write them and
/// never read them). An output one ulp off is caught.
#[test]
fn fused_rope_decode_is_bitwise_the_two_kernels() {
    if !gxx_or_skip() {
        return;
    }
    // (The random batches may give two sequences one slot, which the engine never does; the
    // harness then says it skips the comparison. These seeds share none and compare five
    // (case, split) pairs each.)
    let mut all = String::new();
    for (hd, seed) in [("64", "3"), ("128", "3")] {
        let (ok, text) = emulate_env("3", seed, false, Some(hd), false, &[("ATTN_EMU_ROPE", "1")]);
        assert!(ok, "emulation failed (heads of {hd}):\n{text}");
        let same = text
            .lines()
            .filter(|l| {
                l.contains(" decode+rope rows ")
                    && l.ends_with("bitwise rope_store then attention_decode")
            })
            .count();
        assert!(same >= 4, "heads of {hd}:\n{text}");
        assert!(!text.contains("rope: MISMATCH"), "heads of {hd}:\n{text}");
        all += &text;
    }
    // The fast build (norms in f32, -DLOCKSTEP_FAST_F32: the cuda backend's build), with its
    // f32 cache and with the f16 one of LOCKSTEP_CUDA_KV=f16 (-DLOCKSTEP_KV_F16): the two paths
    // still run the same norm and round the step's own key and value to f16 alike (the fused
    // kernel's own copies are the cache row's values), so still bitwise (with norms for heads
    // of 64, seed 3).
    let mut fast = String::new();
    for (hd, flags) in [
        ("64", "-DLOCKSTEP_FAST_F32"),
        ("128", "-DLOCKSTEP_FAST_F32"),
        ("64", "-DLOCKSTEP_FAST_F32 -DLOCKSTEP_KV_F16"),
        ("128", "-DLOCKSTEP_FAST_F32 -DLOCKSTEP_KV_F16"),
    ] {
        let out = Command::new("bash")
            .arg(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../../bench/attn_emu/run.sh"
            ))
            .args(["3", "3", flags])
            .env("HD", hd)
            .env("ATTN_EMU_ROPE", "1")
            .output()
            .expect("bash runs");
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{flags}, heads of {hd}:\n{text}");
        assert!(
            !text.contains("rope: MISMATCH"),
            "{flags}, heads of {hd}:\n{text}"
        );
        let same = text
            .lines()
            .filter(|l| {
                l.contains(" decode+rope rows ")
                    && l.ends_with("bitwise rope_store then attention_decode")
            })
            .count();
        assert!(same >= 4, "{flags}, heads of {hd}:\n{text}");
        fast += &text;
    }
    assert!(fast.contains(" norms: bitwise"), "{fast}");
    // Heads with and without norms were covered.
    assert!(all.contains(" norms: bitwise"), "{all}");
    assert!(
        all.lines()
            .any(|l| l.contains(" decode+rope ") && !l.contains(" norms")),
        "{all}"
    );
    let mut cmd = Command::new("bash");
    cmd.arg(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../bench/attn_emu/run.sh"
    ))
    .args(["1", "3"])
    .env("HD", "64")
    .env("ATTN_EMU_ROPE", "1")
    .env("ATTN_EMU_PERTURB_ROPE", "1");
    let out = cmd.output().expect("bash runs");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        !out.status.success() && text.contains("rope: MISMATCH in output"),
        "a fused output one ulp off passed:\n{text}"
    );
}

/// The f16 KV cache (`LOCKSTEP_CUDA_KV=f16`: `-DLOCKSTEP_KV_F16`, kernels.cu `kv_t`): every kernel reads
/// the same cache values (converted on load), so the tiled kernels stay bitwise the row
/// kernel, and the split-key, short decode and flash kernels within their bounds of it, on a
/// cache that holds f16 values.
#[test]
fn kernels_agree_on_an_f16_cache() {
    if !gxx_or_skip() {
        return;
    }
    let f16 = [("ATTN_EMU_FLAGS", "-DLOCKSTEP_KV_F16")];
    let (ok, text) = emulate_env("4", "11", false, None, false, &f16);
    assert!(ok, "emulation failed:\n{text}");
    assert!(text.contains("PASS: 0 mismatches"), "{text}");
    assert_eq!(text.matches(": ok (zero exps").count(), 12, "{text}");
    for (hd, seed, long) in [
        ("64", "3", false),
        ("128", "5", false),
        ("256", "4", false),
        ("64", "5", true),
    ] {
        let (ok, text) = emulate_env("3", seed, false, Some(hd), long, &f16);
        assert!(ok, "emulation failed (heads of {hd}):\n{text}");
        let decode_ok = decode_within_bounds(&text);
        assert!(
            decode_ok >= if long { 1 } else { 3 },
            "heads of {hd}:\n{text}"
        );
        assert!(!text.contains("NOT bitwise"), "heads of {hd}:\n{text}");
        assert_eq!(split_within_bounds(&text), 3, "heads of {hd}:\n{text}");
        if long {
            let flash_ok = flash_within_bounds(&text);
            assert!(flash_ok >= 1, "{text}");
        }
    }
    // A perturbed output is still caught on an f16 cache.
    let (ok, text) = emulate_env("1", "7", true, Some("64"), false, &f16);
    assert!(!ok, "a perturbed output passed:\n{text}");
}
