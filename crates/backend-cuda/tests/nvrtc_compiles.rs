//! The kernels compile with NVRTC for sm_90 on machines without a GPU, when libnvrtc can be
//! loaded (CI finds it in the Python environment's CUDA runtime wheels). This catches a kernel
//! that does not compile before a device run does.

use std::path::PathBuf;
use std::sync::OnceLock;

use lockstep_backend_cuda::{audit, compile, plan, KERNEL_SOURCE};

/// Whether libnvrtc loads; when not, the caller skips (or fails, where CI requires it).
fn nvrtc_present() -> bool {
    // SAFETY: only tries to open the shared library by name.
    if unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        return true;
    }
    eprintln!("SKIPPED: libnvrtc could not be loaded (set LD_LIBRARY_PATH to a CUDA runtime)");
    if std::env::var_os("LOCKSTEP_REQUIRE_NVRTC").is_some() {
        panic!("LOCKSTEP_REQUIRE_NVRTC is set but libnvrtc could not be loaded");
    }
    false
}

/// The most bytes a thread of `decode_layers_cluster` may spill (NVRTC 13's ptxas: 20 for
/// session 38's kernel; session 37's spilled 24, the first build of session 38's 40).
const CLUSTER_SPILL_BOUND: u32 = 24;

/// The options of the `cuda` backend's default build: fast numerics' norms and activations in
/// f32 (lib.rs; the exact kernels' f64 build is one of the comparison builds below).
fn fast_options() -> Vec<&'static str> {
    let mut o = compile::NVRTC_OPTIONS.to_vec();
    o.push("-DLOCKSTEP_FAST_F32");
    o
}

/// The sm_90 cubin and ptxas's register counts, compiled once for both tests (a minute on
/// two cores).
fn sm90() -> &'static (Vec<u8>, compile::KernelRegisters) {
    static CUBIN: OnceLock<(Vec<u8>, compile::KernelRegisters)> = OnceLock::new();
    CUBIN.get_or_init(|| {
        compile::nvrtc_registers(KERNEL_SOURCE, "sm_90", &fast_options())
            .unwrap_or_else(|log| panic!("NVRTC failed:\n{log}"))
    })
}

/// The default build's PTX, compiled once for the tests that read it.
fn plain_ptx() -> &'static String {
    static PTX: OnceLock<String> = OnceLock::new();
    PTX.get_or_init(|| {
        compile::nvrtc_ptx(KERNEL_SOURCE, "compute_90", &fast_options())
            .unwrap_or_else(|log| panic!("NVRTC (PTX) failed:\n{log}"))
    })
}

#[test]
fn kernels_compile_for_sm90() {
    if !nvrtc_present() {
        return;
    }
    let (cubin, regs) = sm90();
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
        } else if name.starts_with("norm_long_") {
            // The long norm-fused kernels: plan::NORM_LONG_THREADS.
            plan::NORM_LONG_THREADS
        } else if name.starts_with("norm_") {
            // The norm fused into its consumer: plan::norm_fused_block, at most
            // plan::NORM_FUSED_BLOCK_MAX (the kernels' launch bounds).
            plan::NORM_FUSED_BLOCK_MAX
        } else if name == "decode_layers_cluster" {
            // One cluster of 16 blocks of 512 threads (graph_exec::cluster_rewrite).
            512
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
    for k in regs {
        let threads = largest_block(&k.name);
        assert!(
            k.registers * threads <= 65536,
            "{}: {} registers x {threads} threads exceed the register file",
            k.name,
            k.registers
        );
    }
    for k in regs.iter().filter(|k| {
        let n = &k.name;
        n.starts_with("gate_up_q8")
            || n.starts_with("attention_decode")
            || n.starts_with("norm_")
            || n == "decode_layers_cluster"
    }) {
        eprintln!(
            "{}: {} registers, {} bytes of spill stores",
            k.name, k.registers, k.spill_stores
        );
    }
    // The cluster decode step runs at its 128 registers a thread, and what ptxas spills is on
    // every layer's path: five more pointers in its argument spilled 40 bytes instead of 24
    // and cost 0.25 us a layer, 2.5% of SmolLM2's tg128 (session 38's lab). A change that
    // spills more is measured before it is kept.
    let cluster = regs
        .iter()
        .find(|k| k.name == "decode_layers_cluster")
        .expect("no report for decode_layers_cluster");
    assert!(
        cluster.spill_stores <= CLUSTER_SPILL_BOUND,
        "decode_layers_cluster spills {} bytes a thread (at most {CLUSTER_SPILL_BOUND}): time it \
         in bench/cluster_lab/step_cluster.cu before raising the bound",
        cluster.spill_stores
    );
    for k in [
        "decode_layers_cluster",
        "rms_norm",
        "residual_norm",
        "rope_store",
        "mmv3_fast_12",
        "gate_up_q8_fast1_12",
        "norm_mmv3_fast1_14",
        "norm_gate_up_fast1_14",
        "norm_gate_up_q8_fast1_3",
        "attention_decode_256",
        "attention_decode_cl4_256",
        "attention_decode_cl8_256",
        "attention_decode_rope_64",
        "attention_decode_rope_128",
    ] {
        assert!(regs.iter().any(|r| r.name == k), "no report for {k}");
    }
    // Every two-type q/k/v kernel the host loads is built (kernels.cu MIXED_QKV_FOR).
    for &(qk, v) in plan::MIXED_QKV {
        let k = format!("norm_mmv3_fast1_{}_{}", qk.id(), v.id());
        assert!(regs.iter().any(|r| r.name == k), "no report for {k}");
    }
}

/// nvdisasm: `LOCKSTEP_NVDISASM`, else on PATH, else beside a libnvrtc directory of
/// LD_LIBRARY_PATH (the CUDA wheels put it in `../bin`).
fn nvdisasm() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("LOCKSTEP_NVDISASM") {
        return Some(PathBuf::from(p));
    }
    let dirs = |var: &str| -> Vec<PathBuf> {
        std::env::var_os(var)
            .map(|v| std::env::split_paths(&v).collect())
            .unwrap_or_default()
    };
    let on_path = dirs("PATH").into_iter().map(|d| d.join("nvdisasm"));
    let beside = dirs("LD_LIBRARY_PATH")
        .into_iter()
        .map(|d| d.join("..").join("bin").join("nvdisasm"));
    on_path.chain(beside).find(|p| p.is_file())
}

/// No kernel reads global memory ahead of its grid wait unless its source does so on purpose:
/// ptxas kept every load the PTX puts after `griddepcontrol.wait` after it (see
/// `lockstep_backend_cuda::audit` for the race this catches, session 12's).
#[test]
fn no_load_moves_above_a_grid_wait() {
    if !nvrtc_present() {
        return;
    }
    let Some(tool) = nvdisasm() else {
        eprintln!("SKIPPED: no nvdisasm (set LOCKSTEP_NVDISASM, or put it on PATH)");
        if std::env::var_os("LOCKSTEP_REQUIRE_NVDISASM").is_some() {
            panic!("LOCKSTEP_REQUIRE_NVDISASM is set but nvdisasm was not found");
        }
        return;
    };
    // The PTX (the front end's order) compiles beside the cubin (ptxas's).
    let ptx = std::thread::spawn(|| plain_ptx().clone());
    let (cubin, _) = sm90();
    let path = std::env::temp_dir().join(format!("lockstep-audit-{}.cubin", std::process::id()));
    std::fs::write(&path, cubin).expect("write the cubin");
    let out = std::process::Command::new(&tool)
        .arg("-c")
        .arg(&path)
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", tool.display()));
    let _ = std::fs::remove_file(&path);
    assert!(
        out.status.success(),
        "nvdisasm failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let sass = audit::sass_pre_wait(&String::from_utf8_lossy(&out.stdout));
    let ptx = audit::ptx_pre_wait(&ptx.join().expect("PTX compile thread"));
    // Every kernel, and the ones that load before their wait on purpose, were seen.
    assert!(
        ptx.len() > 50 && sass.len() >= ptx.len(),
        "{} / {}",
        ptx.len(),
        sass.len()
    );
    for k in [
        "norm_mmv3_fast1_12",
        "norm_gate_up_fast1_6",
        "attention_decode_128",
    ] {
        assert!(ptx[k].waits && ptx[k].loads > 0, "{k}: {:?}", ptx[k]);
    }
    // The one-row mat-vecs wait before their first weight load, in the source as in the SASS
    // (session 46: loading first measured slower in every form).
    for k in [
        "mmv_fast1_12",
        "mmv_fast2r_14",
        "gate_up_fast1_12",
        "mmv3_fast1_14",
    ] {
        assert!(ptx[k].waits && ptx[k].loads == 0, "{k}: {:?}", ptx[k]);
    }
    // ptxas keeps the norm-fused kernels' first weight units before their waits (loaded after
    // the norm instead, Gemma-3's tg128 fell 7.5%, session 46). Its vector loads merge a few of
    // the PTX's, so the counts differ by some; with the units sunk below the wait only the
    // norm weights' loads stay (4 of 14 in norm_gate_up_fast1_6), under half.
    for (k, p) in ptx
        .iter()
        .filter(|(k, _)| k.starts_with("norm_") && k.contains("fast1"))
    {
        let s = &sass[k.as_str()];
        assert!(
            p.loads > 0 && 2 * s.loads > p.loads,
            "{k}: {} loads before the wait in the PTX, {} in the SASS",
            p.loads,
            s.loads
        );
    }
    // The long norm-fused kernels' L2 prefetches of their first rows stay before the wait
    // (their point: DRAM streams the weights while the block runs the norm, session 47).
    let long: Vec<_> = ptx.keys().filter(|k| k.starts_with("norm_long_")).collect();
    assert!(long.len() >= 16, "{long:?}");
    for k in long {
        let (p, s) = (&ptx[k.as_str()], &sass[k.as_str()]);
        assert!(
            p.waits && p.prefetches > 0 && s.prefetches > 0,
            "{k}: {} prefetches before the wait in the PTX, {} in the SASS",
            p.prefetches,
            s.prefetches
        );
    }
    let bad = audit::hoisted_over_wait(&ptx, &sass);
    assert!(
        bad.is_empty(),
        "loads moved above a grid wait:\n{}",
        bad.join("\n")
    );
}

/// The step timeline's build (`LOCKSTEP_CUDA_TIMELINE`, timeline.rs) compiles, stamps the
/// global timer and declares the records the host reads by name. It carries session 43's
/// diagnostic defines too (the quantizer's and the norms' IEEE divisions, the NaN branch, the
/// prologue's leading barrier: the arithmetic before, which a comparison compiles), so they
/// compile without a build of their own.
#[test]
fn the_timeline_build_compiles_with_its_records() {
    if !nvrtc_present() {
        return;
    }
    let mut options = fast_options();
    options.extend([
        "-DLOCKSTEP_TIMELINE",
        "-DLOCKSTEP_Q8_IEEE_DIV",
        "-DLOCKSTEP_Q8_NAN_BRANCH",
        "-DLOCKSTEP_NORM_IEEE_DIV",
        "-DLOCKSTEP_NORM_LEAD_SYNC",
    ]);
    let ptx = compile::nvrtc_ptx(KERNEL_SOURCE, "compute_90", &options)
        .unwrap_or_else(|log| panic!("NVRTC failed with LOCKSTEP_TIMELINE:\n{log}"));
    for name in ["lockstep_timeline", "lockstep_timeline_n", "%globaltimer"] {
        assert!(ptx.contains(name), "the timeline build's PTX lacks {name}");
    }
    // The default build carries none of it.
    let plain = plain_ptx();
    assert!(!plain.contains("lockstep_timeline") && !plain.contains("%globaltimer"));
}

/// The builds the comparison knobs select (lib.rs: `LOCKSTEP_CUDA_EVICT_FIRST=0`,
/// `LOCKSTEP_CUDA_Q8_SHUFFLE=1`, `LOCKSTEP_CUDA_LATE_LAUNCH=0`, `LOCKSTEP_CUDA_ATTN_PLAIN_LATE=1`,
/// `LOCKSTEP_CUDA_LAUNCH_AT_ENTRY=1`,
/// `LOCKSTEP_CUDA_Q6K_PLANAR=0`, `LOCKSTEP_CUDA_Q50_REPACK=0`, `LOCKSTEP_CUDA_Q80_PLANAR=0`,
/// `LOCKSTEP_CUDA_KV=f16`)
/// compile, so a later session's comparison does not start with a broken kernel; and the
/// weights' evict-first policy is in the default build and only there.
#[test]
fn the_comparison_builds_compile() {
    if !nvrtc_present() {
        return;
    }
    let mut options = compile::NVRTC_OPTIONS.to_vec();
    options.extend([
        "-DLOCKSTEP_WEIGHTS_EVICT_NORMAL",
        "-DLOCKSTEP_Q8_SHUFFLE",
        "-DLOCKSTEP_EARLY_LAUNCH",
        "-DLOCKSTEP_ATTN_PLAIN_LATE",
        "-DLOCKSTEP_LAUNCH_AT_ENTRY",
        "-DLOCKSTEP_Q6K_GGUF",
        "-DLOCKSTEP_Q50_GGUF",
        "-DLOCKSTEP_Q80_GGUF",
        "-DLOCKSTEP_KV_F16",
    ]);
    // Without LOCKSTEP_FAST_F32: also the exact kernels' build (and LOCKSTEP_CUDA_FAST_F64=1's),
    // whose norms take the f64 square root the fast build replaced by rsqrt.approx.f32.
    let ptx = compile::nvrtc_ptx(KERNEL_SOURCE, "compute_90", &options)
        .unwrap_or_else(|log| panic!("NVRTC failed with the comparison defines:\n{log}"));
    let evict = "createpolicy.fractional.L2::evict_first";
    assert!(!ptx.contains(evict) && !ptx.contains("L2::cache_hint"));
    let plain = plain_ptx();
    assert!(ptx.contains("sqrt.rn.f64") && !ptx.contains("rsqrt.approx.f32"));
    assert!(plain.contains("rsqrt.approx.f32"));
    assert!(
        plain.contains(evict),
        "the default build's PTX lacks {evict}"
    );
    // Every fast type's one-row mat-vecs (a warp a row, two rows a warp) load their weights
    // under the policy.
    for kernel in [2, 3, 6, 7, 8, 12, 13, 14]
        .iter()
        .flat_map(|id| [format!("mmv_fast1_{id}"), format!("mmv_fast2r_{id}")])
    {
        let entry = format!(".entry {kernel}(");
        let start = plain
            .find(&entry)
            .unwrap_or_else(|| panic!("no {entry} in the PTX"));
        let end = plain[start + entry.len()..]
            .find(".entry ")
            .map_or(plain.len(), |e| start + entry.len() + e);
        assert!(
            plain[start..end].contains("ld.global.nc.L2::cache_hint"),
            "{kernel} loads no weight with the evict-first policy"
        );
    }
}
