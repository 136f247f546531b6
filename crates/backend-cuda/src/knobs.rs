//! The `LOCKSTEP_CUDA_*` environment variables: every choice the backend makes by measurement
//! can be turned back to the other one, so that a later session on another card can time both
//! in one call (as BENCHMARKS.md's session 25 did on the H200). The run-time ones are read once
//! per process; the kernel defines when a backend compiles its kernels. Unless a line says otherwise, both sides give the same values, bitwise
//! (the tokens in the sessions' scripts say so too).
//!
//! | variable (`LOCKSTEP_CUDA_` + ) | default | the other choice |
//! |---|---|---|
//! | `ATTN=row\|tile\|split\|unsplit`, `ATTN_TILE=N` | the attention kernel `plan` picks per step | one kind for every step (row and tile agree bitwise; split and flash round otherwise) |
//! | `ATTN_HEADS=group` | a decode block per query head where the step is small | a block per KV head |
//! | `ATTN_Q8=0` | the attention quantizes its output for the o projection | a separate `quantize_q8_32` |
//! | `ROPE_ATTN=0` | rope_store inside the short decode attention (heads of 64, 128) | two kernels |
//! | `SPLIT_KEYS=N` | `plan::ATT_SPLIT_MIN_KEYS` | the fewest keys a split-attention span (other rounding) |
//! | `SPLIT_SPANS=N` | split-key spans for one wave of blocks, at most 256 (`plan::attention_spans`) | N spans for every shape (other rounding) |
//! | `SPLIT_SQRT=1` (kernel define `ATT_S_SQRT_SPANS` + 8 blocks an SM) | spans of whole chunks in one wave | session 31's spans of ceil(sqrt(n) / 2) keys (other rounding) |
//! | `FLASH_WARPS=N` | `plan::flash_geometry` | warps a flash block (a tuning knob; not held bitwise) |
//! | `NORM_FUSE=0` | the norm inside its consumer (rows up to 1024) | `residual_norm`, then the consumer |
//! | `SCALE_NORM=0` | layer 0's embedding scale and norm inside its q/k/v launch (rows up to 1024) | `scale`, `rms_norm`, then the q/k/v |
//! | `NORM_PARTS=0` | long rows' `residual_norm` over several blocks | one block |
//! | `GATE_UP_Q8=0` | 32-row gate/up blocks quantize for the down projection | a separate quantizer |
//! | `NORM_GATE_UP_Q8=1` | norm-fused gate/up on 8-row blocks, then the quantizer | 32-row quantizing blocks |
//! | `MIXED_QKV=0` | q/k and a v of another type in one norm-fused launch | v alone |
//! | `MIXED_QKV_2R=0` | the same for a q/k/v after its own norm (Llama's rows), two rows a warp | v alone |
//! | `TWO_ROWS=0\|N`, `TWO_ROWS_QKV=0` | two weight rows a warp from `plan::TWO_ROWS_MIN` rows | a warp a row, or from N rows |
//! | `LAUNCH_AT_ENTRY=1` (kernel define) | the norms let the next kernel launch after their loads | at their entry |
//! | `Q8_SHUFFLE=1` (kernel define) | `redux.sync` in the activation quantization | shuffles |
//! | `LATE_LAUNCH=0` (kernel define) | the next kernel launched after the loads | at the grid wait |
//! | `ATTN_PLAIN_LATE=1` (kernel define) | the decode attention without rope (heads of 256) launches the next kernel at its grid wait | after its scores |
//! | `EVICT_FIRST=0` (kernel define) | weights stream through L2 evict-first | the default policy |
//! | `Q6K_PLANAR=0` (kernel define + upload) | Q6_K weights on the device in planes (`plan::q6k_planar`) | GGUF's 210-byte blocks |
//! | `Q80_PLANAR=0` (kernel define + upload) | Q8_0 weights on the device in planes (`plan::q80_planar`) | GGUF's 34-byte blocks |
//! | `Q50_REPACK=0` (kernel define + upload) | Q5_0 weights on the device as 24-byte blocks, qh's bits permuted (`plan::q50_repacked`) | GGUF's 22-byte blocks (the same values) |
//! | `KV=f16` (kernel define + cache) | the KV cache in f32 | fast numerics' cache in f16 (kernels.cu `kv_t`; other rounding, half the memory) |
//! | `FAST_F64=1` (kernel define) | fast numerics' norms and gated activations in f32 | in f64, as the exact kernels (other rounding) |
//! | `PDL=0` (graph_exec.rs) | programmatic edges in step graphs | plain edges |
//! | `CLUSTER_STEP=0` (cluster.rs, graph_exec.rs) | a replayed SmolLM2-shaped decode step's layers as one cluster kernel | the captured kernels |
//! | `ATT_CL=0\|4` | a one-row decode attention of heads of 256 on a cluster of 8 blocks, each a chunk of the keys (`attention_decode_cl8_256`) | `attention_decode_256` (a block a head, every key), or 4 blocks |
//! | `GEMM=tf32` | f16 tensor-core prefill | TF32 (other rounding) |
//! | `TOPK=host` | logits reduced on the device | on the host |
//! | `BATCH_UPLOADS=0` | a replay's tables in one copy | a copy each |
//! | `PRESTAGE=0` | while a replay runs, the likely next decode step's tables are staged behind it | each step's tables staged before its launch |
//! | `PRELAUNCH=0` / `=gate` (graph_exec.rs) | a replay that hands the logits to the host launches the next one-token step's graph while it runs; the token goes through a gate the host writes | each graph launched when its step comes (`gate`: through the gate all the same) |
//! | `HOST_LOGITS=0` (graph_exec.rs) | a replayed one-row LM head writes the logits a caller wants on the host into page-locked memory as it computes them | a copy after the graph |
//!
//! Tools, not choices: `PROFILE`, `TIMELINE=FILE` (timeline.rs), `REPLAY_CLOCK=1`
//! (replay_clock.rs), `CACHE=DIR` (compile.rs), `DEFINES="A B"` (an experiment's NVRTC defines;
//! `DEFINES=LOCKSTEP_TL_LAST` with `TIMELINE`: each grid's last block stamps, not its first),
//! `GRAPH_DOT=PREFIX` (graph_exec.rs: each step graph as the driver's debug printer writes it).

use crate::plan;

/// The NVRTC defines of a backend's build: the fast build's f32 norms and activations (`fast`:
/// fast numerics; `FAST_F64=1` turns them off), and those that bring back earlier sessions'
/// kernel variants (the table's "kernel define" rows); part of the kernel cache key like every
/// option.
pub(crate) fn kernel_defines(fast: bool) -> Vec<&'static str> {
    let on = |var: &str, value: &str| std::env::var(var).is_ok_and(|v| v == value);
    let mut d = Vec::new();
    // The KV cache in f16 where asked for (kernels.cu, kv_t); the exact kernels keep the
    // reference's f32.
    if kv_cache_f16(fast) {
        d.push("-DLOCKSTEP_KV_F16");
    }
    // Norms and gated activations in f32 (kernels.cu, norm_acc and act_apply); the exact
    // kernels keep the reference's f64.
    if fast && !on("LOCKSTEP_CUDA_FAST_F64", "1") {
        d.push("-DLOCKSTEP_FAST_F32");
    }
    // The norms letting the next kernel launch at their entry (kernels.cu, NORM_ENTER).
    if on("LOCKSTEP_CUDA_LAUNCH_AT_ENTRY", "1") {
        d.push("-DLOCKSTEP_LAUNCH_AT_ENTRY");
    }
    // The activation quantization's reductions by shuffles (kernels.cu, q8_block).
    if on("LOCKSTEP_CUDA_Q8_SHUFFLE", "1") {
        d.push("-DLOCKSTEP_Q8_SHUFFLE");
    }
    // quantize_q8_32 and the short decode attention letting the next kernel launch at their
    // grid wait (kernels.cu, LATE_LAUNCH).
    if on("LOCKSTEP_CUDA_LATE_LAUNCH", "0") {
        d.push("-DLOCKSTEP_EARLY_LAUNCH");
    }
    // The decode attention without rope_store's work letting the next kernel launch after its
    // scores instead of at its grid wait (kernels.cu, PLAIN_ATT_EARLY_LAUNCH).
    if on("LOCKSTEP_CUDA_ATTN_PLAIN_LATE", "1") {
        d.push("-DLOCKSTEP_ATTN_PLAIN_LATE");
    }
    // Q6_K weights read in GGUF's blocks (kernels.cu, q6p_at), as uploaded then; for every
    // build, exact and fast, since a process uploads its weights one way.
    if !q6k_planar_knob() {
        d.push("-DLOCKSTEP_Q6K_GGUF");
    }
    // Q8_0 weights read in GGUF's blocks (kernels.cu, q8p_at), likewise.
    if !q80_planar_knob() {
        d.push("-DLOCKSTEP_Q80_GGUF");
    }
    // Q5_0 weights read in GGUF's blocks (kernels.cu, Q50_BYTES), likewise.
    if !q50_repack_knob() {
        d.push("-DLOCKSTEP_Q50_GGUF");
    }
    // Session 31's split-key spans (kernels.cu, ATT_S_SQRT_SPANS; `attention_spans`).
    if split_sqrt_knob() {
        d.push("-DATT_S_SQRT_SPANS");
    }
    // The fast kernels' weights loaded with the default L2 policy (kernels.cu, ldw16).
    if on("LOCKSTEP_CUDA_EVICT_FIRST", "0") {
        d.push("-DLOCKSTEP_WEIGHTS_EVICT_NORMAL");
    }
    d
}

/// Whether the KV cache holds f16 rather than f32: fast numerics with `LOCKSTEP_CUDA_KV=f16`
/// (as llama.cpp's and the cpu backend's default: half the cache's memory and half the bytes
/// its decode attention reads). Not the default: session 30 measured it 0-3.5% slower at tg128
/// on three of the four shapes, and from -2% to +8% at depth 4096 (BENCHMARKS.md). verify's
/// `kv_cache_f16` reads the same variable, so `check --ops` feeds the reference what the cache
/// holds.
pub(crate) fn kv_cache_f16(fast: bool) -> bool {
    fast && std::env::var("LOCKSTEP_CUDA_KV").is_ok_and(|v| v == "f16")
}

/// Whether Q6_K weights go to the device in planes (`plan::q6k_planar`, kernels.cu `q6p_at`):
/// the mat-vecs' unit loads become three aligned 16-byte loads and two small ones instead of 20
/// narrow ones (BENCHMARKS.md, session 27). `LOCKSTEP_CUDA_Q6K_PLANAR=0` uploads GGUF's blocks
/// and compiles the kernels that read them (the same values bitwise), for comparisons. Read once.
pub(crate) fn q6k_planar_knob() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("LOCKSTEP_CUDA_Q6K_PLANAR").map_or(true, |v| v != "0"))
}

/// Whether Q8_0 weights go to the device in planes (`plan::q80_planar`, kernels.cu `q8p_at`): a
/// unit's quants become two aligned 16-byte loads instead of GGUF's 2-byte-aligned run (the
/// Q8_0 LM heads of SmolLM2 and Gemma-3 above all). `LOCKSTEP_CUDA_Q80_PLANAR=0` uploads GGUF's
/// blocks and compiles the kernels that read them (the same values bitwise), for comparisons.
/// Read once.
pub(crate) fn q80_planar_knob() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("LOCKSTEP_CUDA_Q80_PLANAR").map_or(true, |v| v != "0"))
}

/// Whether Q5_0 weights go to the device as 24-byte blocks with qh's bits permuted
/// (`plan::q50_repacked`, kernels.cu `Q50_BYTES`): a unit's words become three aligned 8-byte
/// loads, and each dp4a word's high bits one shift and one mask away (the same values bitwise;
/// BENCHMARKS.md, sessions 40-41). `LOCKSTEP_CUDA_Q50_REPACK=0` uploads GGUF's blocks and
/// compiles the kernels that read them, for comparisons. Read once.
pub(crate) fn q50_repack_knob() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("LOCKSTEP_CUDA_Q50_REPACK").map_or(true, |v| v != "0"))
}

/// `LOCKSTEP_CUDA_FLASH_WARPS=N`: warps a flash block (1 to 4; a tuning knob, 0 = chosen by
/// `plan::flash_geometry`).
pub(crate) fn flash_warps_knob() -> usize {
    static W: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *W.get_or_init(|| {
        std::env::var("LOCKSTEP_CUDA_FLASH_WARPS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    })
}

/// Whether the attention kernels quantize their output for the next matmul
/// (`LOCKSTEP_CUDA_ATTN_Q8=0`: a separate `quantize_q8_32` launch does; the same values
/// bitwise, a comparison knob).
pub(crate) fn attention_quantizes() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("LOCKSTEP_CUDA_ATTN_Q8").map_or(true, |v| v != "0"))
}

/// The fewest keys a span of the split-key attention gets: [`plan::ATT_SPLIT_MIN_KEYS`], or
/// `LOCKSTEP_CUDA_SPLIT_KEYS=N` (a tuning knob: it changes the spans, so the rounding).
pub(crate) fn split_min_keys() -> usize {
    static KEYS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *KEYS.get_or_init(|| {
        std::env::var("LOCKSTEP_CUDA_SPLIT_KEYS")
            .ok()
            .and_then(|v| v.parse().ok())
            .filter(|&n: &usize| (1..=1 << 20).contains(&n))
            .unwrap_or(plan::ATT_SPLIT_MIN_KEYS)
    })
}

/// Spans of the split-key attention for a step's shape: [`plan::attention_spans`] (one wave of
/// `per_sm` blocks an SM), or `LOCKSTEP_CUDA_SPLIT_SPANS=N` spans (1 to
/// [`plan::ATT_SPLIT_MAX_SPANS`]) for every shape, a tuning knob (other rounding).
pub(crate) fn attention_spans(
    n_rows: usize,
    n_kv_heads: usize,
    n_sms: usize,
    per_sm: usize,
) -> usize {
    static FIXED: std::sync::OnceLock<Option<usize>> = std::sync::OnceLock::new();
    let fixed = FIXED.get_or_init(|| {
        std::env::var("LOCKSTEP_CUDA_SPLIT_SPANS")
            .ok()
            .and_then(|v| v.parse().ok())
            .filter(|&n: &usize| (1..=plan::ATT_SPLIT_MAX_SPANS).contains(&n))
    });
    if let Some(n) = *fixed {
        return n;
    }
    if split_sqrt_knob() {
        // Session 31's: 8 blocks an SM, rounded up, at most 128 spans.
        let blocks = (n_rows * n_kv_heads).max(1);
        return (8 * n_sms.max(1)).div_ceil(blocks).clamp(1, 128);
    }
    plan::attention_spans(n_rows, n_kv_heads, n_sms, per_sm)
}

/// `LOCKSTEP_CUDA_SPLIT_SQRT=1`: session 31's split-key spans, for comparisons. Read once.
fn split_sqrt_knob() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("LOCKSTEP_CUDA_SPLIT_SQRT").is_ok_and(|v| v == "1"))
}

/// The fewest weight rows a one-row mat-vec runs two a warp from (`plan::fast_two_rows`; twice
/// that for rows of more than 32 units): [`plan::TWO_ROWS_MIN`], `LOCKSTEP_CUDA_TWO_ROWS=N`
/// (rows), or `=0` (never: every mat-vec a warp a row, the same values bitwise), for
/// comparisons. Read once.
pub(crate) fn two_rows_knob() -> Option<usize> {
    static MIN: std::sync::OnceLock<Option<usize>> = std::sync::OnceLock::new();
    *MIN.get_or_init(|| match std::env::var("LOCKSTEP_CUDA_TWO_ROWS") {
        Ok(v) => v.parse().ok().filter(|&n: &usize| n > 0),
        Err(_) => Some(plan::TWO_ROWS_MIN),
    })
}

/// Whether a replay stages the likely next decode step's tables while its graph runs
/// (`CudaBackend::prestage`); `LOCKSTEP_CUDA_PRESTAGE=0`: only before each launch (the same
/// tables either way), for comparisons. Read once.
pub(crate) fn prestage_knob() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("LOCKSTEP_CUDA_PRESTAGE").map_or(true, |v| v != "0"))
}

/// Whether one-token step graphs take their token through a gate
/// (`graph_exec::gate_rewrite`), and whether a replay whose caller wants the logits on the host
/// then launches the next step's graph while its own runs (`StepGraph::prelaunch`).
/// `LOCKSTEP_CUDA_PRELAUNCH=0`: neither (the graphs as captured); `=gate`: the gate alone, every
/// graph launched when its step comes (what the gate itself costs). The same values in every
/// case. Read once.
pub(crate) fn prelaunch_knob() -> Prelaunch {
    static K: std::sync::OnceLock<Prelaunch> = std::sync::OnceLock::new();
    *K.get_or_init(
        || match std::env::var("LOCKSTEP_CUDA_PRELAUNCH").as_deref() {
            Ok("0") => Prelaunch::Off,
            Ok("gate") => Prelaunch::GateOnly,
            _ => Prelaunch::On,
        },
    )
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Prelaunch {
    Off,
    GateOnly,
    On,
}

/// Whether a replayed step's one-row LM head writes the logits into page-locked host memory
/// itself when the caller wants them on the host (`graph_exec::head_rewrite`);
/// `LOCKSTEP_CUDA_HOST_LOGITS=0`: the copy after the graph (the same values bitwise), for
/// comparisons. Read once.
pub(crate) fn host_logits_knob() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("LOCKSTEP_CUDA_HOST_LOGITS").map_or(true, |v| v != "0"))
}

/// Whether one-row q/k/v launches (`matmul_fast_multi`) run two rows a warp where
/// `plan::fast_two_rows` says; `LOCKSTEP_CUDA_TWO_ROWS_QKV=0`: a warp a row (the same values
/// bitwise), for comparisons. Read once.
pub(crate) fn two_rows_qkv_knob() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("LOCKSTEP_CUDA_TWO_ROWS_QKV").map_or(true, |v| v != "0"))
}

/// Whether one-row fused gate/ups may quantize their activation for the down projection
/// (`plan::gate_up_quantizes`); `LOCKSTEP_CUDA_GATE_UP_Q8=0` runs the separate quantizer (the
/// same values), for comparison. Read once.
pub(crate) fn gate_up_q8_knob() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("LOCKSTEP_CUDA_GATE_UP_Q8").map_or(true, |v| v != "0"))
}

/// Whether a norm-fused gate/up may take the 32-row blocks that also quantize the activation
/// for the down projection (`norm_gate_up_q8_fast1`, `plan::norm_fused_gate_up_quantizes`):
/// only with `LOCKSTEP_CUDA_NORM_GATE_UP_Q8=1`. By default it runs `norm_gate_up_fast1`'s
/// 8-row blocks and then `quantize_q8_32` (the same values bitwise). That pair was the
/// slower one on the H100 (session 15: SmolLM2 1601 against 1623 tok/s). On the H200 it is
/// the faster, in six rounds over two calls: SmolLM2 Q4_1 +1.6% to +4.0% tg128, a Q8_0
/// SmolLM2 +4.7% to +5.3% (BENCHMARKS.md, session 25). Read once.
pub(crate) fn norm_gate_up_q8_knob() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("LOCKSTEP_CUDA_NORM_GATE_UP_Q8").is_ok_and(|v| v == "1"))
}

/// Whether a one-row residual_norm spreads over several blocks (`plan::residual_parts`);
/// `LOCKSTEP_CUDA_NORM_PARTS=0` keeps one block a row.
pub(crate) fn norm_parts_knob() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("LOCKSTEP_CUDA_NORM_PARTS").map_or(true, |v| v != "0"))
}

/// Whether one-row norm-fused q/k/v with v of another type run in one launch
/// (`plan::MIXED_QKV`);
/// `LOCKSTEP_CUDA_MIXED_QKV=0` runs v alone (the same values bitwise), for comparison. Read
/// once.
pub(crate) fn mixed_qkv_knob() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("LOCKSTEP_CUDA_MIXED_QKV").map_or(true, |v| v != "0"))
}

/// Whether a replayed step's o projection after the decode attention loads its weights before
/// its grid wait (`graph_exec::preload_rewrite`, `plan::o_preload_kernel`; the same values
/// bitwise): by default (session 50: Llama-1B tg128 +1.8%, Gemma-3 and the 8B unchanged);
/// `LOCKSTEP_CUDA_O_PRELOAD=0` keeps `mmv_fast1` / `mmv_fast2r`, for comparison. Read once.
pub(crate) fn o_preload_knob() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("LOCKSTEP_CUDA_O_PRELOAD").map_or(true, |v| v != "0"))
}

/// Whether a decode attention block may serve fewer than its KV head's whole group of query
/// heads (`plan::decode_attention_heads_per_block`); `LOCKSTEP_CUDA_ATTN_HEADS=group` keeps a
/// block per KV head (the same values bitwise), for comparison. Read once.
pub(crate) fn attention_head_split_knob() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("LOCKSTEP_CUDA_ATTN_HEADS").map_or(true, |v| v != "group"))
}

/// How many blocks of a cluster cut a decode row's keys for heads of 256
/// (`attention_decode_cl<N>_256`, `plan::decode_cluster_blocks`): 8 by default (Gemma-3's tg128
/// +5 to +8.5% against `attention_decode_256`, 4 blocks within 0.4% of 8; BENCHMARKS.md, session 41);
/// `LOCKSTEP_CUDA_ATT_CL=4` four, `=0` none (`attention_decode_256`, a block a head with every
/// key), for comparison. Read once.
pub(crate) fn attention_cluster_knob() -> u32 {
    static N: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    *N.get_or_init(|| match std::env::var("LOCKSTEP_CUDA_ATT_CL").as_deref() {
        Ok("0") => 0,
        Ok("4") => 4,
        _ => 8,
    })
}

/// Whether a decode step's rope_store runs inside its short decode attention kernel
/// (`Backend::rope_store_attention`); `LOCKSTEP_CUDA_ROPE_ATTN=0` runs the two kernels (the same
/// values bitwise), for comparison. Read once.
pub(crate) fn rope_attention_knob() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("LOCKSTEP_CUDA_ROPE_ATTN").map_or(true, |v| v != "0"))
}

/// Whether a decode q/k/v with v of another type and its norm on its own (rows over
/// `plan::NORM_FUSED_MAX`) runs as one launch (`plan::qkv_mixed_one_launch`);
/// `LOCKSTEP_CUDA_MIXED_QKV_2R=0` runs v as a launch of its own (the same values bitwise).
pub(crate) fn mixed_qkv_two_rows_knob() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("LOCKSTEP_CUDA_MIXED_QKV_2R").map_or(true, |v| v != "0"))
}

/// Whether one-row `residual_norm_then` runs its norm inside the consumer's kernel
/// (`plan::norm_fuses`); `LOCKSTEP_CUDA_NORM_FUSE=0` runs `residual_norm` then the consumer
/// (the same values bitwise), for comparison. Read once.
pub(crate) fn norm_fuse_knob() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("LOCKSTEP_CUDA_NORM_FUSE").map_or(true, |v| v != "0"))
}

/// Whether one-row `scale_norm_then` (layer 0's embedding scale, norm and q/k/v) runs in one
/// launch (`scale_norm_mmv3_fast1_*`); `LOCKSTEP_CUDA_SCALE_NORM=0` runs `scale`, `rms_norm`
/// and the q/k/v launch (the same values bitwise), for comparison. Read once.
pub(crate) fn scale_norm_knob() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("LOCKSTEP_CUDA_SCALE_NORM").map_or(true, |v| v != "0"))
}

/// Whether one-row `residual_norm_then` of rows longer than `plan::NORM_FUSED_MAX`
/// (`plan::norm_fuses_long`) runs its norm inside the consumer's kernel (`norm_long_*`);
/// `LOCKSTEP_CUDA_NORM_LONG=0` runs `residual_norm` then the consumer (the same values
/// bitwise), for comparison. Read once.
pub(crate) fn norm_long_knob() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("LOCKSTEP_CUDA_NORM_LONG").map_or(true, |v| v != "0"))
}

/// Tuning knobs of the attention kernels, read once: `LOCKSTEP_CUDA_ATTN=row` (or `tile`) runs
/// the one block per (row, head) kernel (or the tiled ones) for every step instead of
/// [`plan::use_row_attention`]'s choice (for comparison: both compute the same values
/// bitwise); `unsplit` keeps decode steps off the split-key kernels
/// ([`plan::use_split_attention`]), `split` runs them on every decode step they hold (not the
/// short decode kernel, [`plan::use_decode_attention`]); `LOCKSTEP_CUDA_ATTN_TILE=N` sets the
/// rows per tile (a power of two that fits, at most N) instead of `plan::attention_tile`'s
/// choice.
pub(crate) fn attention_knobs() -> (plan::AttnChoice, usize) {
    static KNOBS: std::sync::OnceLock<(plan::AttnChoice, usize)> = std::sync::OnceLock::new();
    *KNOBS.get_or_init(|| {
        let choice = match std::env::var("LOCKSTEP_CUDA_ATTN").as_deref() {
            Ok("row") => plan::AttnChoice::Row,
            Ok("tile") => plan::AttnChoice::Tile,
            Ok("split") => plan::AttnChoice::Split,
            Ok("unsplit") => plan::AttnChoice::Unsplit,
            _ => plan::AttnChoice::Auto,
        };
        let cap = std::env::var("LOCKSTEP_CUDA_ATTN_TILE")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        (choice, cap)
    })
}

#[cfg(test)]
mod tests {
    use super::kernel_defines;

    #[test]
    fn only_the_fast_build_takes_the_f32_norms() {
        // LOCKSTEP_CUDA_FAST_F64=1 in the environment turns it off: skip the claim then.
        if std::env::var("LOCKSTEP_CUDA_FAST_F64").is_ok_and(|v| v == "1") {
            assert!(!kernel_defines(true).contains(&"-DLOCKSTEP_FAST_F32"));
            return;
        }
        assert!(kernel_defines(true).contains(&"-DLOCKSTEP_FAST_F32"));
        assert!(!kernel_defines(false).contains(&"-DLOCKSTEP_FAST_F32"));
    }

    #[test]
    fn only_the_fast_build_may_keep_an_f16_cache() {
        assert!(!kernel_defines(false).contains(&"-DLOCKSTEP_KV_F16"));
        let asked = std::env::var("LOCKSTEP_CUDA_KV").is_ok_and(|v| v == "f16");
        assert_eq!(kernel_defines(true).contains(&"-DLOCKSTEP_KV_F16"), asked);
    }
}
