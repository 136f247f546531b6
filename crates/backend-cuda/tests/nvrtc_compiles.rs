//! The kernels compile with NVRTC for sm_90 on machines without a GPU, when libnvrtc can be
//! loaded (CI finds it in the Python environment's CUDA runtime wheels). This catches a kernel
//! that does not compile before a device run does.

use lockstep_backend_cuda::{compile, plan, KERNEL_SOURCE};

#[test]
fn kernels_compile_for_sm90() {
    // SAFETY: only tries to open the shared library by name.
    if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        eprintln!("SKIPPED: libnvrtc could not be loaded (set LD_LIBRARY_PATH to a CUDA runtime)");
        if std::env::var_os("LOCKSTEP_REQUIRE_NVRTC").is_some() {
            panic!("LOCKSTEP_REQUIRE_NVRTC is set but libnvrtc could not be loaded");
        }
        return;
    }
    let (cubin, regs) = compile::nvrtc_registers(KERNEL_SOURCE, "sm_90", compile::NVRTC_OPTIONS)
        .unwrap_or_else(|log| panic!("NVRTC failed:\n{log}"));
    assert_eq!(&cubin[..4], b"\x7fELF");
    // Every kernel fits the register file at the largest block the host launches it with
    // (65536 registers per block on sm_90); a kernel that does not fails every launch with
    // "too many resources requested" (session 6: residual_norm at 1024 threads, 72 registers).
    let largest_block = |name: &str| -> u32 {
        if name == "rms_norm" || name == "residual_norm" {
            // plan::norm_threads: up to 1024 for rows of 4096 values and more.
            1024
        } else if name == "rope_store" {
            plan::norm_threads(plan::ROPE_MAX_HEAD)
        } else if name.starts_with("gate_up_q8_fast1_") || name.starts_with("norm_gate_up_q8") {
            // One warp per row of a 32-row output block (plan::GATE_UP_Q8_THREADS).
            1024
        } else if name.starts_with("norm_") {
            // The norm fused into its consumer: plan::norm_fused_threads, at most 256.
            plan::norm_fused_threads(plan::NORM_FUSED_MAX)
        } else if name == "attention_decode_256" {
            // 128 keys x 4 parts (plan::decode_attention_shape).
            512
        } else if name.starts_with("attention_tile") {
            256
        } else {
            // Every other kernel: 128 or 256 threads a block.
            256
        }
    };
    assert!(regs.len() > 50, "ptxas reported {} kernels", regs.len());
    for (name, n) in &regs {
        let threads = largest_block(name);
        assert!(
            n * threads <= 65536,
            "{name}: {n} registers x {threads} threads exceed the register file"
        );
    }
    for (name, n) in regs.iter().filter(|(n, _)| {
        n.starts_with("gate_up_q8") || n.starts_with("attention_decode") || n.starts_with("norm_")
    }) {
        eprintln!("{name}: {n} registers");
    }
    for k in [
        "rms_norm",
        "residual_norm",
        "rope_store",
        "mmv3_fast_12",
        "gate_up_q8_fast1_12",
        "norm_mmv3_fast1_14",
        "norm_gate_up_fast1_14",
        "norm_gate_up_q8_fast1_3",
        "attention_decode_256",
    ] {
        assert!(regs.iter().any(|(n, _)| n == k), "no report for {k}");
    }
}
