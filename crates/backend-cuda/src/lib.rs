//! The CUDA backend: the same model graph on an NVIDIA GPU.
//!
//! Weights are uploaded once in their GGUF quant formats and decoded inside the kernels
//! (`kernels.cu`), which NVRTC compiles at run time to a CUBIN for the device's architecture;
//! the CUBIN is cached on disk (`compile.rs`). The CUDA libraries are opened at run time, so
//! this crate builds everywhere, and without a driver [`CudaBackend::new`] returns a clear
//! error instead of failing to link.
//!
//! Two numerics modes ([`Numerics`]). **Exact** (`cuda-exact`) follows the reference backend:
//! every dot product keeps the reference's eight interleaved f32 partial sums and its reduction
//! tree, element by element, and the kernels are compiled without FMA contraction; norms,
//! activations, softmax and the attention sum run in f64 as the reference's do. Only the f64
//! `exp`/`tanh` of the device library may differ from the host's by an ulp before the final
//! rounding to f32. **Fast** (`cuda`, the default) differs in the matmuls alone: activations are
//! quantized to int8 per 32 values (the cpu backend's quant8 format) and the quantized weights
//! are dotted with `__dp4a`, one warp per weight row, FMAs and a fixed butterfly (kernels.cu,
//! FAST NUMERICS); it declares quant8 arithmetic to `verify`. Both are batch-invariant bitwise:
//! a row's operations never depend on the other rows of the call.
//!
//! Taps: the attention kernel writes its scores and probabilities to device buffers and reads
//! them back for the next stage, so `kq` and `kq_softmax` are copies of the values consumed
//! (nothing is hidden). `k_read`/`v_read` are copies of the cache rows the kernel read. Copies
//! are made only when an observer asks for the tap.

use std::cell::RefCell;
use std::sync::{Arc, Mutex};

use cudarc::driver::{
    CudaContext, CudaFunction, CudaSlice, CudaStream, DevicePtr, DeviceRepr, LaunchConfig,
    PushKernelArg, ValidAsZeroBits,
};
use lockstep_graph::{
    emit_roped, nucleus_len, residual_norm_then_unfused, residual_norm_unfused,
    rope_store_attention_unfused, rope_store_unfused, scale_norm_then_unfused, Activation,
    AttentionParams, Backend, BackendError, Batch, HostTensor, KvLayout, LogitsOut, LogitsSummary,
    NormThen, QkRoped, QkvIn, Residual, ResidualThen, RopeParams, RopeStyle, RowPick,
    ScaleNormThen, StepKey, StepOut, Taps, WeightView,
};

pub mod audit;
pub mod cluster;
pub mod compile;
mod graph_exec;
mod knobs;
pub mod plan;
pub mod replay_clock;
pub mod steps;
pub mod timeline;

use knobs::*;

use steps::{Capacity, HostInput, InputKind};

/// Seeded faults of the CUDA kernels (builds with the `faults` feature): name, the macro that
/// turns it on in `kernels.cu`, and the real bug class it stands for.
pub const FAULTS: &[(&str, &str, &str)] = &[
    (
        "kv-skip-prefill",
        "FAULT_KV_SKIP_PREFILL",
        "a batched (prefill) kv_store writes nothing: the prompt's K/V never reach the cache",
    ),
    (
        "wrong-kv-head",
        "FAULT_WRONG_KV_HEAD",
        "query head h reads KV head h % n_kv instead of h / group",
    ),
    (
        "q4k-wrong-scale",
        "FAULT_Q4K_WRONG_SCALE",
        "Q4_K decoding in the matmul (exact and fast kernels) takes the neighbouring sub-block's scale and min",
    ),
    (
        "kv-view-offset",
        "FAULT_KV_VIEW_OFFSET",
        "attention ignores the layer's offset into the cache: every layer reads layer 0's K/V",
    ),
    (
        "mask-drift",
        "FAULT_MASK_DRIFT",
        "an explicit (even all-true) mask sends the scores down another path, one ulp off",
    ),
    (
        "f16-as-f32",
        "FAULT_F16_AS_F32",
        "f16 weights decoded as if they were f32 (4 bytes read per element)",
    ),
    (
        "add-overrun",
        "FAULT_ADD_OVERRUN",
        "the elementwise add writes one value past the end of its output (a bound off by one)",
    ),
    (
        "draw-libm-exp",
        "FAULT_DRAW_LIBM_EXP",
        "the device's whole-row draws and top-p totals weigh logits with CUDA's exp, not the sampler's det_exp (last bits differ)",
    ),
];

/// The fault `LOCKSTEP_CUDA_FAULT` names, in builds with the `faults` feature.
#[cfg(feature = "faults")]
fn seeded_fault() -> Result<Option<(&'static str, &'static str)>, BackendError> {
    let Some(v) = std::env::var_os("LOCKSTEP_CUDA_FAULT") else {
        return Ok(None);
    };
    let v = v.to_string_lossy();
    match FAULTS.iter().find(|f| f.0 == v) {
        Some(f) => Ok(Some((f.0, f.1))),
        None => Err(unavailable(format!(
            "unknown fault `{v}` in LOCKSTEP_CUDA_FAULT (known: {})",
            FAULTS.iter().map(|f| f.0).collect::<Vec<_>>().join(", ")
        ))),
    }
}

#[cfg(not(feature = "faults"))]
fn seeded_fault() -> Result<Option<(&'static str, &'static str)>, BackendError> {
    Ok(None)
}

use plan::QuantDesc;

/// How the matmuls compute (everything else is the same in both modes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Numerics {
    /// The reference's operations, bit for bit (backend name `cuda-exact`).
    Exact,
    /// quant8: int8 activations per 32 values, `__dp4a` dot products, FMA, a fixed warp
    /// reduction (backend name `cuda`, the default).
    Fast,
}

/// The kernel source, compiled by NVRTC at run time.
pub const KERNEL_SOURCE: &str = include_str!("kernels.cu");

/// An activation on the device: `[rows, cols]` f32, row-major. Its buffer goes back to the
/// backend's pool when it is dropped.
pub struct CudaTensor {
    buf: Option<CudaSlice<f32>>,
    rows: usize,
    cols: usize,
    pool: Arc<Mutex<Pool>>,
    /// Unique per backend: a tensor is never written after its op made it, so the id names its
    /// contents (fast numerics reuse one quantization of x for q, k and v).
    id: u64,
}

impl Drop for CudaTensor {
    fn drop(&mut self) {
        if let (Some(b), Ok(mut p)) = (self.buf.take(), self.pool.lock()) {
            p.give(b);
        }
    }
}

/// Device buffers of finished tensors, by length, for reuse: an allocation and a free per op
/// cost more host time than small kernels take on the GPU. Reuse is safe because everything
/// runs in order on one stream: a kernel that writes a reused buffer is queued after every
/// kernel that read it.
#[derive(Default)]
pub struct Pool {
    free: std::collections::HashMap<usize, Vec<CudaSlice<f32>>>,
    bytes: usize,
    /// A step graph's own pool keeps every buffer: the graph's kernels point into them.
    unbounded: bool,
    /// Output guards are on ([`CudaBackend::with_output_guards`]): buffers are views into
    /// guarded allocations the backend's [`GuardBook`] owns, so they are neither reused nor
    /// freed here.
    guarded: bool,
}

impl Pool {
    /// At most this much memory is kept for reuse.
    const MAX_BYTES: usize = 1 << 30;

    fn take(&mut self, n: usize) -> Option<CudaSlice<f32>> {
        if self.guarded {
            return None;
        }
        let b = self.free.get_mut(&n)?.pop()?;
        self.bytes -= n * 4;
        Some(b)
    }

    fn give(&mut self, b: CudaSlice<f32>) {
        if self.guarded {
            // The guard book frees the whole allocation this view points into.
            b.leak();
            return;
        }
        let n = b.len();
        if self.unbounded || self.bytes + n * 4 <= Self::MAX_BYTES {
            self.bytes += n * 4;
            self.free.entry(n).or_default().push(b);
        }
    }
}

impl CudaTensor {
    fn buf(&self) -> &CudaSlice<f32> {
        match &self.buf {
            Some(b) => b,
            None => unreachable!("the buffer is taken only on drop"),
        }
    }

    fn buf_mut(&mut self) -> &mut CudaSlice<f32> {
        match &mut self.buf {
            Some(b) => b,
            None => unreachable!("the buffer is taken only on drop"),
        }
    }

    pub fn rows(&self) -> usize {
        self.rows
    }
    pub fn cols(&self) -> usize {
        self.cols
    }
}

/// A weight on the device in its GGUF encoding (Q6_K and Q8_0 in planes: `plan::q6k_planar`,
/// `plan::q80_planar`; Q5_0 in
/// 24-byte blocks: `plan::q50_repacked`); vectors
/// (norm weights, biases) also as f32.
pub struct CudaWeight {
    desc: QuantDesc,
    rows: usize,
    cols: usize,
    data: WeightBytes,
    vector: Option<CudaSlice<f32>>,
}

/// A weight's bytes on the device: the allocation, and where the kernels read (its start, or
/// for a planar Q6_K or Q8_0 tensor the first address inside it that is a multiple of
/// `plan::Q6K_GROUP` or `plan::Q80_GROUP`, as kernels.cu's `q6p_at` and `q8p_at` need).
struct WeightBytes {
    alloc: CudaSlice<u8>,
    /// A view of `alloc` from an offset; never freed through (`alloc` frees the memory).
    inner: Option<std::mem::ManuallyDrop<CudaSlice<u8>>>,
}

impl std::ops::Deref for WeightBytes {
    type Target = CudaSlice<u8>;
    fn deref(&self) -> &CudaSlice<u8> {
        match &self.inner {
            Some(v) => v,
            None => &self.alloc,
        }
    }
}

/// The paged KV cache in device memory: `[layer][slot][kv_dim]` values for K and for V, the
/// same slot arithmetic as every backend (the engine computes slots). The values are f16 in
/// the fast builds and f32 in the exact one (knobs::kv_cache_f16, kernels.cu `kv_t`); the
/// buffers hold them as raw 16-bit words (two a value for f32), which only kernels read.
pub struct CudaKvCache {
    layout: KvLayout,
    k: CudaSlice<u16>,
    v: CudaSlice<u16>,
}

struct Kernels {
    /// The cluster decode step (`cluster`), where the module has it (an f32 cache) and the
    /// device takes its cluster and shared memory.
    decode_layers_cluster: Option<CudaFunction>,
    /// Per weight type (GGUF id): the decode (one row) and prefill (tiles of 8) matmuls.
    matmul: Vec<(i32, CudaFunction, CudaFunction)>,
    /// Per weight type: the fused gate/up/activation, decode and prefill.
    gate_up: Vec<(i32, CudaFunction, CudaFunction)>,
    embed_rows: CudaFunction,
    add_bias: CudaFunction,
    add: CudaFunction,
    scale: CudaFunction,
    act_mul: CudaFunction,
    rms_norm: CudaFunction,
    residual_norm: CudaFunction,
    rope: CudaFunction,
    rope_store: CudaFunction,
    gather_rows: CudaFunction,
    kv_store: CudaFunction,
    kv_gather: CudaFunction,
    attention: CudaFunction,
    /// The tiled attention (`plan::attention_tile`), heads of up to 256 and 512 values.
    attention_tile: CudaFunction,
    attention_tile_wide: CudaFunction,
    /// The split-key decode attention (`plan::use_split_attention`) and its combination.
    attention_split: CudaFunction,
    attention_combine: CudaFunction,
    /// The short decode attention (`plan::use_decode_attention`), heads of 64, 128 and 256
    /// values.
    attention_decode: [CudaFunction; 3],
    /// The same with rope_store's work for the block's heads and the step's key
    /// (`Backend::rope_store_attention`), heads of 64 and 128 values
    /// (`plan::rope_attention_fuses`).
    attention_decode_rope: [CudaFunction; 2],
    /// Heads of 256 without rope_store's work on a cluster of 4 or 8 blocks, each a chunk of
    /// the row's keys (`plan::decode_cluster_blocks`); `None` where the module lacks them (they
    /// are built for sm_90 and later).
    attention_decode_cl: Option<[CudaFunction; 2]>,
    /// The flash prefill attention (`plan::use_flash_attention`), heads of 64 and 128 values;
    /// `None` where its blocks could not get their shared memory.
    attention_flash: Option<(CudaFunction, CudaFunction)>,
    /// Streaming multiprocessors of the device (`plan::attention_spans`).
    n_sms: usize,
    /// `attention_split` blocks an SM holds (the driver's occupancy; `plan::attention_spans`).
    split_per_sm: usize,
    /// Dynamic shared memory a one-row (decode) tiled attention block may take.
    attention_one_row_smem: usize,
    dequant_rows: CudaFunction,
    /// The f16 tensor-core prefill's conversions (activations; decoded weight rows).
    to_f16: CudaFunction,
    dequant_rows_f16: CudaFunction,
    /// Fast numerics: per type with a fast kernel (`plan::FAST`), the matmul and the fused
    /// gate/up/activation; the activation quantizer and its values for the other types.
    fast_mm: Vec<(i32, FastPair)>,
    fast_gu: Vec<(i32, FastPair)>,
    /// Per type with a fast kernel: up to three weights (q, k, v) in one launch.
    fast_mm3: Vec<(i32, FastPair)>,
    /// Per type with a fast kernel: the one-row fused gate/up that also quantizes its
    /// activation for the down projection (`plan::gate_up_quantizes`).
    fast_gu_q8: Vec<(i32, CudaFunction)>,
    /// Per type with a fast kernel: `residual_norm_then`'s norm inside its one-row consumer
    /// (the q/k/v mat-vec; the gate/up, with or without the down projection's quantization).
    norm_mm3: Vec<(i32, CudaFunction)>,
    /// One-row norm-fused q/k/v of two types, by (q and k type, v type) (`plan::MIXED_QKV`).
    mixed_mm3: Vec<((i32, i32), CudaFunction)>,
    /// The same pairs without the norm, two rows a warp (`mmv3_fast2r_<q>_<v>`).
    mixed_mm3_2r: Vec<((i32, i32), CudaFunction)>,
    /// `scale_norm_then`'s one-row q/k/v with the norm (and the embedding's scale) inside, by
    /// type and by pair (`scale_norm_mmv3_fast1_<id>[_<v id>]`).
    scale_norm_mm3: Vec<(i32, CudaFunction)>,
    mixed_scale_mm3: Vec<((i32, i32), CudaFunction)>,
    /// The same for long rows (`scale_norm_long_mmv3_<id>[_<v id>]`, `plan::norm_fuses_long`).
    scale_long_mm3: Vec<(i32, CudaFunction)>,
    mixed_scale_long_mm3: Vec<((i32, i32), CudaFunction)>,
    norm_gu: Vec<(i32, CudaFunction)>,
    norm_gu_q8: Vec<(i32, CudaFunction)>,
    /// The same for rows longer than `plan::NORM_FUSED_MAX` (`plan::norm_fuses_long`): q/k/v
    /// by type, of two types by pair, gate/up by type.
    norm_long_mm3: Vec<(i32, CudaFunction)>,
    mixed_long_mm3: Vec<((i32, i32), CudaFunction)>,
    norm_long_gu: Vec<(i32, CudaFunction)>,
    quantize_q8: CudaFunction,
    q8_values: CudaFunction,
    /// The logits reduction (`LogitsOut::Top`): per-chunk candidates, then their merge.
    logits_top_part: CudaFunction,
    logits_top_merge: CudaFunction,
    logits_gather: CudaFunction,
    draw_leaves: CudaFunction,
    draw_pick: CudaFunction,
    nucleus_hist: CudaFunction,
    nucleus_gather: CudaFunction,
    nucleus_sort: CudaFunction,
}

/// The logits reduction's buffers, grown on demand: pass 1's keys, statistics and counts,
/// and the words that go to the host.
/// One fast kernel in its two builds: `_fast` (tiles of activation rows) and `_fast1` (one
/// row, decode; compiled without the tile paths, so their registers do not cap its occupancy).
/// Both do the same per-row arithmetic.
struct FastPair {
    tiles: CudaFunction,
    one_row: CudaFunction,
    /// One row against two weight rows a warp (`mmv_fast2r`, `mmv3_fast2r`; see
    /// `plan::fast_two_rows`). None for gate/up.
    two_rows: Option<CudaFunction>,
}

impl FastPair {
    /// The kernel and grid for `n` activation rows against `m` weight rows of `k` values of
    /// type `id`: two rows a warp where `plan::fast_two_rows` says and the caller `allow`s,
    /// else [`FastPair::for_rows`]'s.
    fn launch_for(
        &self,
        id: i32,
        (n, k, m): (usize, usize, usize),
        allow: bool,
    ) -> (&CudaFunction, (u32, u32)) {
        let two = self
            .two_rows
            .as_ref()
            .filter(|_| allow && plan::fast_two_rows(id, n, k, m, two_rows_knob()));
        match two {
            Some(f) => (f, (plan::fast_two_rows_grid(m), 1)),
            None => (self.for_rows(n), plan::fast_grid(n, m)),
        }
    }

    fn for_rows(&self, n: usize) -> &CudaFunction {
        if n == 1 {
            &self.one_row
        } else {
            &self.tiles
        }
    }
}

struct TopScratch {
    keys: CudaSlice<u64>,
    stats: CudaSlice<f64>,
    counts: CudaSlice<i32>,
    /// The merge's rows of `2k + 6` words, then `PICK_WORDS` a row for the picks.
    out: CudaSlice<f32>,
    /// Whole-row draws: each row's parameters (`DRAW_PARAMS` f64s), its segments' sums and
    /// their last tokens of positive weight.
    draw_params: CudaSlice<f64>,
    draw_sums: CudaSlice<f64>,
    draw_last: CudaSlice<i32>,
    /// Top-p candidates: the bin counts, the gathered keys and their count, and the sorted
    /// prefix a row (`1 + 2 NUC_CAP` words: the count, the ids, the logits' bits).
    nuc_hist: CudaSlice<i32>,
    nuc_keys: CudaSlice<u64>,
    nuc_count: CudaSlice<i32>,
    nuc_out: CudaSlice<u32>,
}

/// Options of the CUDA backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CudaOptions {
    pub numerics: Numerics,
    /// Batch-invariant: every row's result is bitwise independent of the other rows in the
    /// step, whatever their number (the same kernels for one row and for many). Off, a step
    /// of more than [`GEMM_MIN_ROWS`] rows multiplies on the tensor cores (cuBLAS, TF32),
    /// whose results depend on the batch's shape.
    pub deterministic: bool,
    /// Record and replay decode steps as CUDA graphs (`LOCKSTEP_CUDA_GRAPHS=0` also turns
    /// them off).
    pub step_graphs: bool,
}

impl Default for CudaOptions {
    fn default() -> Self {
        CudaOptions {
            numerics: Numerics::Fast,
            deterministic: false,
            step_graphs: true,
        }
    }
}

/// Steps with at least this many rows (prefill) use the tensor-core GEMM when the backend is
/// not deterministic. Above every step shape that is captured as a graph, so a replayed step
/// and an eager one of the same shape always take the same path.
pub const GEMM_MIN_ROWS: usize = steps::MAX_GRAPH_TOKENS + 1;

/// At most this many f32 values of decoded weight rows are kept for the GEMM at once (a larger
/// weight is multiplied in row chunks).
const GEMM_SCRATCH_FLOATS: usize = 64 << 20;

/// The tensor-core prefill: a cuBLAS handle on the backend's stream and the buffers weight rows
/// and activations are converted into.
struct TensorGemm {
    blas: cudarc::cublas::CudaBlas,
    /// f16 operands (the default) or TF32 (`LOCKSTEP_CUDA_GEMM=tf32`). Both round every
    /// operand to 11 significant bits and accumulate in f32; f16 moves half the bytes and runs
    /// at twice TF32's rate, but holds only values up to 65504 (see `overflow`).
    half: bool,
    scratch: RefCell<Option<CudaSlice<f32>>>,
    scratch_h: RefCell<Option<CudaSlice<u16>>>,
    /// The f16 copy of the activations, and the tensor it was made from (q, k and v, gate and
    /// up share one).
    x_h: RefCell<Option<CudaSlice<u16>>>,
    x_h_of: std::cell::Cell<Option<u64>>,
    /// Set on the device when a value beyond f16's range met a conversion; read and cleared
    /// when a step that ran an f16 GEMM ends.
    overflow: RefCell<CudaSlice<u32>>,
    ran: std::cell::Cell<bool>,
}

/// Whether the tensor-core prefill multiplies in f16 (`LOCKSTEP_CUDA_GEMM=tf32`: TF32).
fn gemm_in_f16() -> bool {
    std::env::var("LOCKSTEP_CUDA_GEMM").map_or(true, |v| v != "tf32")
}

struct AttnDev {
    info: CudaSlice<i32>,
    slots: CudaSlice<u32>,
    mask: CudaSlice<u8>,
    /// A step graph's own score buffers (eager steps share the backend's).
    scores: Option<Scores>,
}

/// The arguments that follow the short decode and flash attention kernels' common ones.
/// What `attention_decode_rope_<D>` takes besides the attention's arguments: rope_store's inputs,
/// its staged tables and the buffers of its taps (absent: nobody listens).
struct RopeFuse<'a> {
    k: &'a CudaTensor,
    v: &'a CudaTensor,
    q_norm: Option<&'a CudaWeight>,
    k_norm: Option<&'a CudaWeight>,
    eps: f32,
    rope_kind: InputKind,
    slots_kind: InputKind,
    half: i32,
    style: i32,
    outs: Option<RopedBufs>,
}

/// The fused kernel's copies of rope_store's outputs, for the taps.
struct RopedBufs {
    q_norm: Option<CudaSlice<f32>>,
    k_norm: Option<CudaSlice<f32>>,
    q: CudaSlice<f32>,
    k: CudaSlice<f32>,
}

/// A step's token ids when it embeds exactly one token: the table's rows and the token.
fn one_token_ids(store: &StepStore) -> Option<(usize, u32)> {
    let mut ids = store
        .inputs
        .iter()
        .filter_map(|s| match (&s.kind, &s.host) {
            (InputKind::Ids { vocab }, HostInput::U32(v)) => Some((*vocab, v.as_slice())),
            _ => None,
        });
    match (ids.next(), ids.next()) {
        (Some((vocab, &[token])), None) => Some((vocab, token)),
        _ => None,
    }
}

/// Which kernels run an attention (`CudaBackend::attention_route`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum AttRoute {
    Split,
    Decode,
    Flash,
    Tiled,
}

enum AttExtra {
    /// `attention_decode`: query heads a block serves (`plan::decode_attention_heads_per_block`).
    HeadsPerBlock(i32),
    /// `attention_flash`: the step's rows and the rows of a tile.
    Tiling(i32, i32),
}

/// A host table on the device (see [`steps`]).
enum DevInput {
    U32(CudaSlice<u32>),
    F64(CudaSlice<f64>),
    Attn(Box<AttnDev>),
}

struct Staged {
    kind: InputKind,
    host: HostInput,
    dev: DevInput,
    cap: Capacity,
}

/// A step shape: the model graph's key plus the cache the kernels write.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct FullKey {
    step: StepKey,
    cache: u64,
    /// The step's context class (`plan::long_context`): the attention kernel a decode step
    /// runs depends on it, so a graph is replayed only within its class.
    long: bool,
}

/// What one step shape's graph owns: its input tables and every buffer its kernels use.
struct StepStore {
    key: FullKey,
    inputs: Vec<Staged>,
    pool: Arc<Mutex<Pool>>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// Ops run as they are called.
    Eager,
    /// Ops run as they are called, with their tables in the step's own buffers, so the next
    /// step of this shape can be captured.
    Record,
    /// Ops are captured into a CUDA graph, not run.
    Capture,
}

struct Captured {
    graph: graph_exec::StepGraph,
    store: StepStore,
    out: CudaTensor,
    /// The graph's id in the step timeline, when it is on.
    timeline: Option<usize>,
}

/// Step graphs: recording, capture and replay of whole forward steps.
struct Steps {
    enabled: bool,
    mode: Mode,
    current: Option<StepStore>,
    recorded: std::collections::HashMap<FullKey, StepStore>,
    graphs: std::collections::HashMap<FullKey, Captured>,
    /// Why the step being captured cannot be replayed (a table that differs from the staged
    /// one, a buffer the graph would not own); the capture is dropped and the step rerun.
    broken: Option<String>,
    /// A buffer was allocated inside the capture: the graph's memory, never to be freed by us.
    leaked: bool,
    /// Shapes whose capture failed: run eagerly from then on.
    refused: std::collections::HashSet<FullKey>,
    /// The eager steps' tables, one per kind, reused while unchanged.
    eager: Vec<Staged>,
    /// Replayed steps, captured graphs and failed captures (for `lockstep bench`).
    pub replays: usize,
    pub captures: usize,
    pub failed: usize,
    /// Kernel-to-kernel edges made programmatic in the captured graphs.
    pub programmatic_edges: usize,
    /// Captured graphs whose layers run as the cluster decode step.
    pub cluster_graphs: usize,
    /// Captured graphs whose LM head can write the logits on the host (`head_rewrite`).
    pub host_head_graphs: usize,
    /// O projections loading their weights before their grid wait in the captured graphs
    /// (`graph_exec::preload_rewrite`).
    pub preloaded: usize,
    /// The graph with a launch made ahead of its step, waiting at its gate
    /// (`graph_exec::StepGraph::prelaunch`).
    pending: Option<FullKey>,
    /// Launches made ahead; of them taken by their step, released as dummy steps (the next
    /// step was another), and taken after they had timed out (the step run again).
    pub launched_ahead: usize,
    pub ahead_taken: usize,
    pub ahead_cancelled: usize,
    pub ahead_rerun: usize,
}

impl Steps {
    /// Releases the launch made ahead, if any, as a dummy step: what comes next is not the
    /// step it guessed (another shape, an eager or tapped step), or nothing.
    fn cancel_ahead(&mut self) {
        if let Some(k) = self.pending.take() {
            if self.graphs.get(&k).is_some_and(|c| c.graph.cancel()) {
                self.ahead_cancelled += 1;
            }
        }
    }
}

/// Attention's score buffers, grown on demand.
struct Scores {
    scores: CudaSlice<f32>,
    exps: CudaSlice<f64>,
    probs: CudaSlice<f64>,
}

pub struct CudaBackend {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    k: Kernels,
    gemm: Option<TensorGemm>,
    device: String,
    /// `cuda` (fast) or `cuda-exact`, with `[FAULT]` appended for a seeded fault.
    name: String,
    numerics: Numerics,
    /// The KV cache holds f16 values (knobs::kv_cache_f16), not f32.
    kv_f16: bool,
    /// Decode steps may run the split-key attention (`cuda`: fast numerics, not
    /// deterministic), which never forms per-key probabilities.
    split_attention: bool,
    /// The quantized activations of the current matmul (fast numerics), grown on demand.
    q8: RefCell<Option<CudaSlice<u8>>>,
    /// The tensor whose quantization `q8` holds, and the next tensor id.
    q8_of: std::cell::Cell<Option<u64>>,
    /// The activation a one-row fused gate/up quantized for the down projection (a buffer of
    /// its own: the kernel reads its input's quantization from `q8`), and that tensor's id.
    q8_act: RefCell<Option<CudaSlice<u8>>>,
    q8_act_of: std::cell::Cell<Option<u64>>,
    next_id: std::cell::Cell<u64>,
    /// Where the CUBIN came from: `cache` or `nvrtc` (for `doctor`-style reports).
    pub kernel_origin: &'static str,
    /// Step graphs get programmatic edges (`graph_exec`): compute capability 9.0 or later,
    /// where the kernels' `GRID_ENTER` waits, and not turned off by `LOCKSTEP_CUDA_PDL=0`.
    programmatic: bool,
    steps: RefCell<Steps>,
    scores: RefCell<Option<Scores>>,
    /// The logits reduction's buffers (`top_on_device`), and whether it runs on the device
    /// (`LOCKSTEP_CUDA_TOPK=host`: the host's reduction, for comparisons).
    top: RefCell<Option<TopScratch>>,
    reduce_on_device: bool,
    /// Page-locked staging for copies to the host (`host_f32`).
    pinned: RefCell<Option<cudarc::driver::PinnedHostSlice<f32>>>,
    pool: Arc<Mutex<Pool>>,
    /// Per-op (name, seconds, calls) since the last mark, when `LOCKSTEP_CUDA_PROFILE` is set.
    profile: Option<RefCell<ProfileTable>>,
    /// `LOCKSTEP_CUDA_PROFILE=host`: the profile charges each op its host time alone (no
    /// synchronization: what enqueueing it cost, and where the host waited for the GPU).
    profile_host: bool,
    /// Rope tables' rows by position, kept across steps (`plan::RopeRows`).
    rope_rows: RefCell<plan::RopeRows>,
    /// Guarded outputs (`check --ops`), when on.
    guards: Option<GuardBook>,
    /// The step timeline (`LOCKSTEP_CUDA_TIMELINE=FILE`, timeline.rs), when on.
    timeline: Option<RefCell<timeline::Recorder>>,
    /// The replay clock (`LOCKSTEP_CUDA_REPLAY_CLOCK=1`, replay_clock.rs), when on.
    replay_clock: Option<RefCell<ReplayClockState>>,
    /// Recorded after each replayed graph: what the host waits on for its logits, since a
    /// launch made ahead may wait at its gate behind it on the stream.
    after_graph: cudarc::driver::CudaEvent,
    /// A replay's tables go to the device in one batched copy (`upload_tables`): a driver of
    /// CUDA 13 or later, unless `LOCKSTEP_CUDA_BATCH_UPLOADS=0`.
    batch_uploads: bool,
}

/// The replay clock's device events (before the graph, after it, after the logits' copy) and
/// what the host marked while a replay runs.
struct ReplayClockState {
    clock: replay_clock::ReplayClock,
    events: [cudarc::driver::CudaEvent; 3],
    /// A replay is between its launch and its end (`host_f32` marks the copy then).
    in_replay: bool,
    /// When `host_f32`'s synchronization returned, and whether it recorded the copy's event.
    synced_at: Option<std::time::Instant>,
    copy_recorded: bool,
    last_end: Option<std::time::Instant>,
    /// The last restage: time in `upload_tables`, tables rewritten, tables in all.
    upload: (std::time::Duration, usize, usize),
}

/// The int8 values (the first `len` bytes) and the block table (the rest) of the quantization
/// buffer a kernel is about to write, as its two pointer arguments; `None` when the op does not
/// quantize its output (`q8` not taken).
fn q8_parts<'a>(
    q8: &'a mut Option<std::cell::RefMut<'_, Option<CudaSlice<u8>>>>,
    len: usize,
) -> Option<(
    cudarc::driver::CudaViewMut<'a, u8>,
    cudarc::driver::CudaViewMut<'a, u8>,
)> {
    q8.as_mut()
        .and_then(|b| b.as_mut())
        .map(|b| b.split_at_mut(len))
}

/// Canary words on each side of a guarded output, and their value: a NaN with a payload no
/// kernel produces, compared by bits (so an output a kernel leaves unwritten reads as NaN).
const GUARD_WORDS: usize = 64;
const GUARD_CANARY: u32 = 0x7fa5_a5a5;

/// Every op output allocated while output guards are on: `GUARD_WORDS` canaries, the output,
/// `GUARD_WORDS` canaries, in one allocation the book owns (the tensor holds a view of the
/// middle). Checked once by `guard_violations`, freed when the backend is dropped.
#[derive(Default)]
struct GuardBook {
    /// (allocation, output length, op) not yet checked.
    pending: RefCell<Vec<(cudarc::driver::sys::CUdeviceptr, usize, String)>>,
    /// Every allocation and its length in floats, for the final free.
    all: RefCell<Vec<(cudarc::driver::sys::CUdeviceptr, usize)>>,
}

type ProfileTable = (std::time::Instant, Vec<(&'static str, f64, usize)>);

impl Drop for CudaBackend {
    fn drop(&mut self) {
        if let Some(g) = &self.guards {
            let _ = self.stream.synchronize();
            for (ptr, total) in g.all.borrow_mut().drain(..) {
                // SAFETY: an allocation of `total` floats the book owns (views into it were
                // leaked, never freed); dropping the rebuilt slice frees it once.
                drop(unsafe { self.stream.upgrade_device_ptr::<f32>(ptr, total) });
            }
        }
        if let Some(t) = &self.timeline {
            match t.borrow().finish(&self.stream) {
                Ok(summary) => eprint!("{summary}"),
                Err(e) => eprintln!("cuda timeline: {e}"),
            }
        }
        if let Some(c) = &self.replay_clock {
            // The first replays warm up (bench's untimed run is longer than this).
            let c = c.borrow();
            eprint!("{}", c.clock.summary(16));
            if let Some(line) = c.clock.counters_line(replay_clock::ThreadCounters::now()) {
                eprint!("{line}");
            }
        }
        if std::env::var_os("LOCKSTEP_CUDA_STATS").is_some() {
            let st = self.steps.borrow();
            eprintln!(
                "cuda step graphs: {} captured, {} replays, {} failed captures, {} programmatic edges, {} with the cluster decode step, {} o projections with early weights, {} with the head's logits on the host, {} launched ahead ({} taken, {} released as dummy steps, {} run again){}",
                st.captures,
                st.replays,
                st.failed,
                st.programmatic_edges,
                st.cluster_graphs,
                st.preloaded,
                st.host_head_graphs,
                st.launched_ahead,
                st.ahead_taken,
                st.ahead_cancelled,
                st.ahead_rerun,
                if st.enabled {
                    ""
                } else {
                    " (disabled by LOCKSTEP_CUDA_GRAPHS=0)"
                }
            );
        }
        if let Some(p) = &self.profile {
            let p = p.borrow();
            let total: f64 = p.1.iter().map(|e| e.1).sum();
            eprintln!(
                "cuda profile ({}):",
                if self.profile_host {
                    "host time between ops, not synchronized"
                } else {
                    "synchronized after every op"
                }
            );
            for (op, t, n) in &p.1 {
                eprintln!(
                    "  {op:<12} {:>10.3} ms {:>5.1}% {n:>8} calls {:>8.1} us/call",
                    t * 1e3,
                    100.0 * t / total.max(1e-12),
                    t * 1e6 / *n as f64
                );
            }
        }
    }
}

/// The driver's CUDA version (13000 for 13.0), when a driver is loaded.
fn driver_version() -> Option<i32> {
    let mut v = 0;
    // SAFETY: writes one int; called after the context was created (the library is loaded).
    let r = unsafe { cudarc::driver::sys::cuDriverGetVersion(&mut v) };
    r.result().ok().map(|_| v)
}

/// Whether the CUDA driver library can be loaded on this machine (says nothing about GPUs).
pub fn driver_present() -> bool {
    // SAFETY: only tries to open the shared library by name.
    unsafe { cudarc::driver::sys::is_culib_present() }
}

fn unavailable(why: impl Into<String>) -> BackendError {
    BackendError::Unavailable {
        backend: "cuda".into(),
        why: why.into(),
    }
}

/// A device failure inside an op whose signature has no error path (the `Backend` trait's
/// tensor ops). These are not consequences of input (shapes and indices are checked on the
/// host first) but of the device: out of memory, a lost context.
#[track_caller]
fn device_failure(op: &str, e: impl std::fmt::Display) -> ! {
    panic!("cuda backend: {op} failed on the device: {e}")
}

impl CudaBackend {
    /// Opens GPU 0 with fast numerics (the deployable default), see [`Self::with_numerics`].
    pub fn new() -> Result<CudaBackend, BackendError> {
        Self::with_numerics(Numerics::Fast)
    }

    /// Opens GPU 0, compiles (or loads from the cache) the kernels. Without a CUDA driver, NVRTC
    /// or a GPU, a clear [`BackendError::Unavailable`].
    pub fn with_numerics(numerics: Numerics) -> Result<CudaBackend, BackendError> {
        Self::with_options(CudaOptions {
            numerics,
            ..CudaOptions::default()
        })
    }

    /// Opens GPU 0 with options.
    pub fn with_options(opts: CudaOptions) -> Result<CudaBackend, BackendError> {
        let numerics = opts.numerics;
        // SAFETY: only tries to open the shared libraries by name.
        if !unsafe { cudarc::driver::sys::is_culib_present() } {
            return Err(unavailable(
                "no CUDA driver: libcuda.so could not be loaded (an NVIDIA GPU and its driver are needed)",
            ));
        }
        // SAFETY: as above.
        if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
            return Err(unavailable(
                "NVRTC (libnvrtc.so) could not be loaded; it compiles the kernels at run time",
            ));
        }
        let ctx = CudaContext::new(0).map_err(|e| unavailable(format!("no usable GPU: {e}")))?;
        // SAFETY: one stream is used for everything, so the cross-stream event bookkeeping this
        // turns off is never needed.
        unsafe { ctx.disable_event_tracking() };
        let stream = ctx
            .new_stream()
            .map_err(|e| unavailable(format!("creating a stream: {e}")))?;
        let device = ctx.name().unwrap_or_else(|_| "unknown GPU".into());
        let (maj, min) = ctx
            .compute_capability()
            .map_err(|e| unavailable(format!("compute capability: {e}")))?;
        let arch = compile::arch_name(maj, min);
        let nv = compile::nvrtc_version().map_err(unavailable)?;
        let fault = seeded_fault()?;
        let define = fault.map(|f| format!("-D{}", f.1));
        let mut options: Vec<&str> = compile::NVRTC_OPTIONS.to_vec();
        options.extend(define.as_deref());
        let replay_clock = if std::env::var("LOCKSTEP_CUDA_REPLAY_CLOCK").is_ok_and(|v| v == "1") {
            lockstep_graph::marks::enable();
            let ev = || {
                ctx.new_event(Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT))
                    .map_err(|e| unavailable(format!("replay clock events: {e}")))
            };
            Some(RefCell::new(ReplayClockState {
                clock: replay_clock::ReplayClock::default(),
                events: [ev()?, ev()?, ev()?],
                in_replay: false,
                synced_at: None,
                copy_recorded: false,
                last_end: None,
                upload: (std::time::Duration::ZERO, 0, 0),
            }))
        } else {
            None
        };
        let after_graph = ctx
            .new_event(Some(
                cudarc::driver::sys::CUevent_flags::CU_EVENT_DISABLE_TIMING,
            ))
            .map_err(|e| unavailable(format!("step graph event: {e}")))?;
        let timeline_file = std::env::var_os("LOCKSTEP_CUDA_TIMELINE").filter(|v| !v.is_empty());
        if timeline_file.is_some() {
            options.push("-DLOCKSTEP_TIMELINE");
        }
        // The fast build's f32 norms and activations, and earlier sessions' kernel variants
        // for comparisons (knobs.rs).
        options.extend(knobs::kernel_defines(numerics == Numerics::Fast));
        // Experiments' switches (`LOCKSTEP_CUDA_DEFINES="A B"`: -DA -DB), for comparisons of
        // kernel variants within one build; part of the cache key like every option.
        let extra: Vec<String> = std::env::var("LOCKSTEP_CUDA_DEFINES")
            .unwrap_or_default()
            .split_whitespace()
            .map(|d| format!("-D{d}"))
            .collect();
        options.extend(extra.iter().map(String::as_str));
        let key = compile::cache_key(KERNEL_SOURCE, &options, &arch, nv);
        let dir = compile::cache_dir();
        let (cubin, kernel_origin) =
            match dir.as_deref().and_then(|d| compile::load_cached(d, &key)) {
                Some(c) => (c, "cache"),
                None => {
                    let c = compile::nvrtc_cubin(KERNEL_SOURCE, &arch, &options)
                        .map_err(unavailable)?;
                    if let Some(d) = &dir {
                        compile::store_cached(d, &key, &c);
                    }
                    (c, "nvrtc")
                }
            };
        let module = ctx
            .load_module(cudarc::nvrtc::Ptx::from_binary(cubin))
            .map_err(|e| unavailable(format!("loading the kernels for {arch}: {e}")))?;
        let f = |name: &str| {
            module
                .load_function(name)
                .map_err(|e| unavailable(format!("kernel {name}: {e}")))
        };
        let mut matmul = Vec::new();
        let mut gate_up = Vec::new();
        for &ty in plan::SUPPORTED {
            let id = ty.id();
            matmul.push((
                id as i32,
                f(&format!("matmul_t1_{id}"))?,
                f(&format!("matmul_t8_{id}"))?,
            ));
            gate_up.push((
                id as i32,
                f(&format!("gate_up_t1_{id}"))?,
                f(&format!("gate_up_t8_{id}"))?,
            ));
        }
        let mut fast_mm = Vec::new();
        let mut fast_gu = Vec::new();
        let mut fast_mm3 = Vec::new();
        let mut fast_gu_q8 = Vec::new();
        let mut norm_mm3 = Vec::new();
        let mut mixed_mm3 = Vec::new();
        let mut mixed_mm3_2r = Vec::new();
        let mut mixed_long_mm3 = Vec::new();
        let mut scale_norm_mm3 = Vec::new();
        let mut mixed_scale_mm3 = Vec::new();
        let mut scale_long_mm3 = Vec::new();
        let mut mixed_scale_long_mm3 = Vec::new();
        for &(qk, v) in plan::MIXED_QKV {
            let (a, b) = (qk.id(), v.id());
            mixed_mm3.push((
                (a as i32, b as i32),
                f(&format!("norm_mmv3_fast1_{a}_{b}"))?,
            ));
            mixed_long_mm3.push(((a as i32, b as i32), f(&format!("norm_long_mmv3_{a}_{b}"))?));
            mixed_mm3_2r.push(((a as i32, b as i32), f(&format!("mmv3_fast2r_{a}_{b}"))?));
            mixed_scale_mm3.push((
                (a as i32, b as i32),
                f(&format!("scale_norm_mmv3_fast1_{a}_{b}"))?,
            ));
            mixed_scale_long_mm3.push((
                (a as i32, b as i32),
                f(&format!("scale_norm_long_mmv3_{a}_{b}"))?,
            ));
        }
        let mut norm_gu = Vec::new();
        let mut norm_gu_q8 = Vec::new();
        let mut norm_long_mm3 = Vec::new();
        let mut norm_long_gu = Vec::new();
        for &ty in plan::FAST {
            let id = ty.id();
            let pair = |op: &str| -> Result<FastPair, BackendError> {
                Ok(FastPair {
                    tiles: f(&format!("{op}_fast_{id}"))?,
                    one_row: f(&format!("{op}_fast1_{id}"))?,
                    two_rows: None,
                })
            };
            let two = |op: &str| -> Result<FastPair, BackendError> {
                let mut p = pair(op)?;
                p.two_rows = Some(f(&format!("{op}_fast2r_{id}"))?);
                Ok(p)
            };
            fast_mm.push((id as i32, two("mmv")?));
            fast_gu.push((id as i32, pair("gate_up")?));
            fast_mm3.push((id as i32, two("mmv3")?));
            fast_gu_q8.push((id as i32, f(&format!("gate_up_q8_fast1_{id}"))?));
            norm_mm3.push((id as i32, f(&format!("norm_mmv3_fast1_{id}"))?));
            scale_norm_mm3.push((id as i32, f(&format!("scale_norm_mmv3_fast1_{id}"))?));
            scale_long_mm3.push((id as i32, f(&format!("scale_norm_long_mmv3_{id}"))?));
            norm_gu.push((id as i32, f(&format!("norm_gate_up_fast1_{id}"))?));
            norm_long_mm3.push((id as i32, f(&format!("norm_long_mmv3_{id}"))?));
            norm_long_gu.push((id as i32, f(&format!("norm_long_gate_up_{id}"))?));
            if plan::norm_gate_up_quantizes(id as i32) {
                norm_gu_q8.push((id as i32, f(&format!("norm_gate_up_q8_fast1_{id}"))?));
            }
        }
        let attention_tile = f("attention_tile")?;
        let attention_tile_wide = f("attention_tile_wide")?;
        let attention_split = f("attention_split")?;
        // The spans fill one wave of this kernel's blocks (its registers set how many an SM
        // holds); a failed query falls back to the count the shipped kernel has.
        let split_per_sm = attention_split
            .occupancy_max_active_blocks_per_multiprocessor(plan::ATT_SPLIT_THREADS, 0, None)
            .ok()
            .and_then(|n| usize::try_from(n).ok())
            .filter(|&n| n > 0)
            .unwrap_or(plan::ATT_SPLIT_BLOCKS_PER_SM);
        let k = Kernels {
            matmul,
            gate_up,
            embed_rows: f("embed_rows")?,
            add_bias: f("add_bias")?,
            add: f("add")?,
            scale: f("scale")?,
            act_mul: f("act_mul")?,
            rms_norm: f("rms_norm")?,
            residual_norm: f("residual_norm")?,
            rope: f("rope")?,
            rope_store: f("rope_store")?,
            gather_rows: f("gather_rows")?,
            kv_store: f("kv_store")?,
            kv_gather: f("kv_gather")?,
            attention: f("attention")?,
            attention_one_row_smem: attention_smem_optin(
                &ctx,
                &[&attention_tile, &attention_tile_wide],
            ),
            attention_tile,
            attention_tile_wide,
            attention_split,
            split_per_sm,
            attention_combine: f("attention_combine")?,
            attention_decode: [
                f("attention_decode_64")?,
                f("attention_decode_128")?,
                f("attention_decode_256")?,
            ],
            attention_decode_rope: [
                f("attention_decode_rope_64")?,
                f("attention_decode_rope_128")?,
            ],
            attention_decode_cl: match (
                module.load_function("attention_decode_cl4_256"),
                module.load_function("attention_decode_cl8_256"),
            ) {
                (Ok(a), Ok(b)) => Some([a, b]),
                _ => None,
            },
            attention_flash: flash_kernels(f("attention_flash_64")?, f("attention_flash_128")?),
            decode_layers_cluster: cluster_kernel(module.load_function("decode_layers_cluster").ok()),
            n_sms: ctx
                .attribute(
                    cudarc::driver::sys::CUdevice_attribute_enum::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
                )
                .ok()
                .and_then(|n| usize::try_from(n).ok())
                .unwrap_or(132),
            dequant_rows: f("dequant_rows")?,
            to_f16: f("to_f16")?,
            dequant_rows_f16: f("dequant_rows_f16")?,
            fast_mm,
            fast_gu,
            fast_mm3,
            fast_gu_q8,
            norm_mm3,
            mixed_mm3,
            mixed_mm3_2r,
            scale_norm_mm3,
            mixed_scale_mm3,
            scale_long_mm3,
            mixed_scale_long_mm3,
            norm_gu,
            norm_gu_q8,
            norm_long_mm3,
            mixed_long_mm3,
            norm_long_gu,
            quantize_q8: f("quantize_q8_32")?,
            q8_values: f("q8_values")?,
            logits_top_part: f("logits_top_part")?,
            logits_top_merge: f("logits_top_merge")?,
            logits_gather: f("logits_gather")?,
            draw_leaves: f("draw_leaves")?,
            draw_pick: f("draw_pick")?,
            nucleus_hist: f("nucleus_hist")?,
            nucleus_gather: f("nucleus_gather")?,
            nucleus_sort: f("nucleus_sort")?,
        };
        // The tensor-core path needs cuBLAS; without it (or when deterministic) every matmul
        // uses the kernels above.
        // SAFETY: only tries to open the shared library by name.
        let gemm = if opts.deterministic
            || numerics == Numerics::Exact
            || !unsafe { cudarc::cublas::sys::is_culib_present() }
        {
            None
        } else {
            let blas = cudarc::cublas::CudaBlas::new(stream.clone())
                .map_err(|e| unavailable(format!("cuBLAS: {e}")))?;
            // SAFETY: a valid handle; TF32 tensor-op math for f32 GEMMs.
            unsafe {
                cudarc::cublas::sys::cublasSetMathMode(
                    *blas.handle(),
                    cudarc::cublas::sys::cublasMath_t::CUBLAS_TF32_TENSOR_OP_MATH,
                )
            }
            .result()
            .map_err(|e| unavailable(format!("cuBLAS math mode: {e}")))?;
            let overflow = stream
                .alloc_zeros::<u32>(1)
                .map_err(|e| unavailable(format!("f16 overflow flag: {e}")))?;
            Some(TensorGemm {
                blas,
                half: gemm_in_f16(),
                scratch: RefCell::new(None),
                scratch_h: RefCell::new(None),
                x_h: RefCell::new(None),
                x_h_of: std::cell::Cell::new(None),
                overflow: RefCell::new(overflow),
                ran: std::cell::Cell::new(false),
            })
        };
        let base_name = match (numerics, opts.deterministic) {
            (Numerics::Exact, _) => "cuda-exact",
            (Numerics::Fast, true) => "cuda-det",
            (Numerics::Fast, false) => "cuda",
        };
        Ok(CudaBackend {
            ctx,
            stream,
            k,
            device,
            gemm,
            name: match fault {
                Some((f, _)) => format!("{base_name}[{f}]"),
                None => base_name.into(),
            },
            numerics,
            kv_f16: knobs::kv_cache_f16(numerics == Numerics::Fast),
            split_attention: numerics == Numerics::Fast && !opts.deterministic,
            q8: RefCell::new(None),
            q8_of: std::cell::Cell::new(None),
            q8_act: RefCell::new(None),
            q8_act_of: std::cell::Cell::new(None),
            next_id: std::cell::Cell::new(0),
            kernel_origin,
            programmatic: maj >= 9 && graph_exec::pdl_enabled(),
            top: RefCell::new(None),
            reduce_on_device: std::env::var("LOCKSTEP_CUDA_TOPK").map_or(true, |v| v != "host"),
            steps: RefCell::new(Steps {
                enabled: opts.step_graphs
                    && std::env::var_os("LOCKSTEP_CUDA_GRAPHS").is_none_or(|v| v != "0"),
                mode: Mode::Eager,
                current: None,
                recorded: Default::default(),
                graphs: Default::default(),
                broken: None,
                leaked: false,
                refused: Default::default(),
                eager: Vec::new(),
                replays: 0,
                captures: 0,
                failed: 0,
                programmatic_edges: 0,
                cluster_graphs: 0,
                host_head_graphs: 0,
                preloaded: 0,
                pending: None,
                launched_ahead: 0,
                ahead_taken: 0,
                ahead_cancelled: 0,
                ahead_rerun: 0,
            }),
            scores: RefCell::new(None),
            pinned: RefCell::new(None),
            pool: Arc::default(),
            profile: std::env::var_os("LOCKSTEP_CUDA_PROFILE")
                .map(|_| RefCell::new((std::time::Instant::now(), Vec::new()))),
            profile_host: std::env::var("LOCKSTEP_CUDA_PROFILE").is_ok_and(|v| v == "host"),
            rope_rows: RefCell::default(),
            guards: None,
            timeline: timeline_file
                .map(|f| RefCell::new(timeline::Recorder::new(module.clone(), f.into()))),
            replay_clock,
            after_graph,
            batch_uploads: driver_version().is_some_and(|v| v >= 13000)
                && std::env::var("LOCKSTEP_CUDA_BATCH_UPLOADS").map_or(true, |v| v != "0"),
        })
    }

    /// Every op output gets guard regions (canaries on both sides, checked by
    /// `Backend::guard_violations`) and starts out as NaN canaries, so a kernel that writes
    /// past either end of its output, or leaves part of it unwritten, is caught (`check
    /// --ops`). Step graphs and buffer reuse are off; the memory is freed with the backend.
    pub fn with_output_guards(mut self) -> Self {
        if let Ok(mut p) = self.pool.lock() {
            *p = Pool {
                guarded: true,
                ..Pool::default()
            };
        }
        self.steps.get_mut().enabled = false;
        self.guards = Some(GuardBook::default());
        self
    }

    /// The GPU's name, as the driver reports it.
    pub fn device_name(&self) -> &str {
        &self.device
    }

    /// Device memory in use on the GPU (all processes), bytes: total minus free.
    pub fn memory_used(&self) -> Option<usize> {
        self.ctx
            .mem_get_info()
            .ok()
            .map(|(free, total)| total - free)
    }

    /// Waits for every queued kernel (for timing).
    pub fn synchronize(&self) -> Result<(), BackendError> {
        self.stream
            .synchronize()
            .map_err(|e| BackendError::Other(format!("cuda: {e}")))
    }

    /// An output buffer the next kernel writes completely (every op's kernel writes every
    /// element of its output). Left uninitialized: a zeroing memset would be one more launch
    /// per op, and decode of small models is bound by launches.
    /// An f32 output buffer, from the pool when one of that length is free (see [`Self::alloc`]).
    ///
    /// While a step is recorded or captured, buffers come from the step's own pool first
    /// (a captured step makes the same requests in the same order as its recording, so every
    /// request is met there or by the backend's pool, and the graph ends up owning them all).
    fn alloc_f32(&self, op: &str, n: usize) -> CudaSlice<f32> {
        let n = n.max(1);
        if let Some(g) = &self.guards {
            return self.alloc_guarded(g, op, n);
        }
        let st = self.steps.borrow();
        if let Some(store) = st.current.as_ref().filter(|_| st.mode != Mode::Eager) {
            if let Some(b) = store.pool.lock().ok().and_then(|mut p| p.take(n)) {
                return b;
            }
        }
        if let Some(b) = self.pool.lock().ok().and_then(|mut p| p.take(n)) {
            return b;
        }
        let capturing = st.mode == Mode::Capture;
        drop(st);
        if capturing {
            // An allocation inside a capture becomes the graph's; the capture is dropped and
            // this buffer must never be freed by us.
            let mut st = self.steps.borrow_mut();
            st.broken = Some(format!("{op}: a buffer of {n} floats was not in the pool"));
            st.leaked = true;
        }
        self.alloc::<f32>(op, n)
    }

    /// An output of `n` floats inside a guarded allocation (`with_output_guards`).
    fn alloc_guarded(&self, g: &GuardBook, op: &str, n: usize) -> CudaSlice<f32> {
        let total = n + 2 * GUARD_WORDS;
        let outer = self.alloc::<f32>(op, total);
        let ptr = outer.leak();
        // SAFETY: `ptr` is a live allocation of `total` 4-byte words (just made, owned by the
        // book from here on); the view starts GUARD_WORDS words in and holds n of them; it is
        // never freed through the view (the guarded pool leaks views, the book frees `ptr`).
        unsafe {
            cudarc::driver::sys::cuMemsetD32Async(
                ptr,
                GUARD_CANARY,
                total,
                self.stream.cu_stream(),
            )
            .result()
            .unwrap_or_else(|e| device_failure("output guards", e));
            g.pending.borrow_mut().push((ptr, n, op.to_string()));
            g.all.borrow_mut().push((ptr, total));
            self.stream
                .upgrade_device_ptr::<f32>(ptr + (GUARD_WORDS * 4) as u64, n)
        }
    }

    fn alloc<T: DeviceRepr + ValidAsZeroBits>(&self, op: &str, n: usize) -> CudaSlice<T> {
        // SAFETY: device memory of plain numbers; every kernel writes all of its output before
        // anything reads it (and a zero-sized op launches nothing and reads nothing).
        unsafe { self.stream.alloc::<T>(n.max(1)) }.unwrap_or_else(|e| device_failure(op, e))
    }

    /// `bytes` (and `plan::WEIGHT_PAD` zeros) at the first address of a fresh allocation that
    /// is a multiple of `align` (a multiple of 16).
    fn upload_aligned(
        &self,
        op: &str,
        bytes: &[u8],
        align: usize,
    ) -> Result<WeightBytes, BackendError> {
        let err = |e: cudarc::driver::DriverError| BackendError::Other(format!("cuda {op}: {e}"));
        let len = bytes.len() + plan::WEIGHT_PAD;
        let alloc = self.stream.alloc_zeros::<u8>(len + align).map_err(err)?;
        let base = {
            let (p, _sync) = alloc.device_ptr(&self.stream);
            p
        };
        let off = (align - (base % align as u64) as usize) % align;
        // SAFETY: `alloc` holds len + align bytes from `base`, so [base + off, base + off + len)
        // lies inside it. The view is never freed (ManuallyDrop): `alloc`, kept beside it in
        // the WeightBytes, frees the memory once, after the view's last use.
        let mut view = std::mem::ManuallyDrop::new(unsafe {
            self.stream.upgrade_device_ptr::<u8>(base + off as u64, len)
        });
        self.stream
            .memcpy_htod(bytes, &mut view.slice_mut(..bytes.len()))
            .map_err(err)?;
        Ok(WeightBytes {
            alloc,
            inner: Some(view),
        })
    }

    fn upload<T: DeviceRepr>(&self, op: &str, v: &[T]) -> Result<CudaSlice<T>, BackendError> {
        if v.is_empty() {
            // SAFETY: a one-element allocation nobody reads (kernels index by the lengths passed).
            return unsafe { self.stream.alloc::<T>(1) }
                .map_err(|e| BackendError::Other(format!("cuda {op}: {e}")));
        }
        self.stream
            .clone_htod(v)
            .map_err(|e| BackendError::Other(format!("cuda {op}: {e}")))
    }

    fn tensor(
        &self,
        op: &'static str,
        buf: CudaSlice<f32>,
        rows: usize,
        cols: usize,
    ) -> CudaTensor {
        self.mark(op);
        let st = self.steps.borrow();
        let pool = match st.current.as_ref().filter(|_| st.mode != Mode::Eager) {
            Some(store) => store.pool.clone(),
            None => self.pool.clone(),
        };
        let id = self.next_id.get();
        self.next_id.set(id + 1);
        CudaTensor {
            buf: Some(buf),
            rows,
            cols,
            pool,
            id,
        }
    }

    /// With `LOCKSTEP_CUDA_PROFILE` set: waits for the GPU and charges the time since the
    /// previous mark to `op` (a diagnostic; it serializes host and device). With
    /// `LOCKSTEP_CUDA_PROFILE=host`, no wait: `op` is charged the host's time since the
    /// previous mark (its enqueueing, and any wait of the host for the GPU inside it).
    fn mark(&self, op: &'static str) {
        let Some(prof) = &self.profile else { return };
        if !self.profile_host {
            let _ = self.stream.synchronize();
        }
        let mut p = prof.borrow_mut();
        let now = std::time::Instant::now();
        let dt = (now - p.0).as_secs_f64();
        p.0 = now;
        match p.1.iter_mut().find(|e| e.0 == op) {
            Some(e) => {
                e.1 += dt;
                e.2 += 1;
            }
            None => p.1.push((op, dt, 1)),
        }
    }

    fn elementwise(&self, op: &str, n: usize) -> LaunchConfig {
        let _ = op;
        LaunchConfig {
            grid_dim: (plan::blocks_for(n, 256), 1, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        }
    }

    fn vector<'w>(&self, w: &'w CudaWeight, op: &str) -> &'w CudaSlice<f32> {
        match &w.vector {
            Some(v) => v,
            // The model graph passes vectors here; a matrix is a programming error.
            None => panic!(
                "cuda {op}: weight of {} x {} is not a vector",
                w.rows, w.cols
            ),
        }
    }

    /// A device buffer holding `host` (a one-element one for an empty table), with room for
    /// `room` elements.
    fn upload_room<T: DeviceRepr + ValidAsZeroBits>(
        &self,
        op: &str,
        host: &[T],
        room: usize,
    ) -> Result<CudaSlice<T>, BackendError> {
        let room = room.max(host.len()).max(1);
        // SAFETY: plain numbers; the kernels read only the prefix the tables say is written.
        let mut d = unsafe { self.stream.alloc::<T>(room) }
            .map_err(|e| BackendError::Other(format!("cuda {op}: {e}")))?;
        if !host.is_empty() {
            let mut view = d.slice_mut(..host.len());
            self.stream
                .memcpy_htod(host, &mut view)
                .map_err(|e| BackendError::Other(format!("cuda {op}: {e}")))?;
        }
        Ok(d)
    }

    /// The table `host` on the device, in new buffers with room for `cap`.
    fn upload_input(&self, host: &HostInput, cap: Capacity) -> Result<DevInput, BackendError> {
        Ok(match host {
            HostInput::U32(v) => DevInput::U32(self.upload_room("inputs", v, cap.main)?),
            HostInput::Rope { table, .. } => {
                DevInput::F64(self.upload_room("rope table", table, cap.main)?)
            }
            HostInput::Attn(p) => DevInput::Attn(Box::new(AttnDev {
                info: self.upload_room("attention rows", &p.info, cap.info)?,
                slots: self.upload_room("attention slots", &p.slots, cap.main)?,
                mask: self.upload_room("attention mask", &p.mask, cap.mask)?,
                scores: None,
            })),
        })
    }

    /// A recorded step's attention table gets score buffers of its own, as large as `cap` and
    /// at least as large as this table needs ([`steps::score_room`]): the recording step runs
    /// its kernels for real, into them.
    fn own_scores(&self, dev: &mut DevInput, cap: Capacity, host: &HostInput) {
        if let DevInput::Attn(a) = dev {
            let n = steps::score_room(cap, host);
            a.scores = Some(Scores {
                scores: self.alloc("attention scores", n),
                exps: self.alloc("attention scores", n),
                probs: self.alloc("attention scores", n),
            });
        }
    }

    /// Rewrites a step's staged table in place (before a capture or a replay).
    fn rewrite_input(&self, s: &mut Staged, host: HostInput) -> Result<(), BackendError> {
        s.host = host;
        self.write_staged(s)
    }

    /// Writes a staged table's host values to its device buffers, a copy per part.
    fn write_staged(&self, s: &mut Staged) -> Result<(), BackendError> {
        fn put<T: DeviceRepr>(
            stream: &Arc<CudaStream>,
            host: &[T],
            d: &mut CudaSlice<T>,
        ) -> Result<(), BackendError> {
            if host.is_empty() {
                return Ok(());
            }
            // From pageable memory: the driver writes small copies into the stream itself, which
            // cost the host less than queueing them from page-locked memory (BENCHMARKS.md,
            // session 23).
            let mut view = d.slice_mut(..host.len());
            stream
                .memcpy_htod(host, &mut view)
                .map_err(|e| BackendError::Other(format!("cuda step inputs: {e}")))
        }
        match (&s.host, &mut s.dev) {
            (HostInput::U32(v), DevInput::U32(d)) => put(&self.stream, v, d)?,
            (HostInput::Rope { table, .. }, DevInput::F64(d)) => put(&self.stream, table, d)?,
            (HostInput::Attn(p), DevInput::Attn(d)) => {
                put(&self.stream, &p.info, &mut d.info)?;
                put(&self.stream, &p.slots, &mut d.slots)?;
                put(&self.stream, &p.mask, &mut d.mask)?;
            }
            _ => unreachable!("a kind always derives the same table type"),
        }
        Ok(())
    }

    /// `logits`' rows reduced on the device to their `k` largest entries and the monitors'
    /// statistics (kernels.cu, LOGITS REDUCTION): `2k + 6` words a row cross to the host.
    /// `None` where the reduction does not fit (`plan::top_blocks`) or
    /// `LOCKSTEP_CUDA_TOPK=host` asks for the host's.
    fn top_on_device(
        &self,
        logits: &CudaTensor,
        k: usize,
        picks: &[Option<RowPick>],
    ) -> Option<Vec<LogitsSummary>> {
        let (rows, v) = (logits.rows, logits.cols);
        let (nb, chunk) = plan::top_blocks(v, k)?;
        if !self.reduce_on_device {
            return None;
        }
        if rows == 0 {
            return Some(Vec::new());
        }
        // Picks that ask for draws or totals; a pick may ask only for a few tokens' logits.
        let picking = picks
            .iter()
            .any(|p| p.is_some_and(|p| p.draw.is_some() || p.wants_total()));
        let gathering = picks
            .iter()
            .any(|p| p.is_some_and(|p| !p.gather.is_empty()));
        if picks.iter().any(Option::is_some) && picks.len() != rows
            || picking && !plan::draw_fits(v)
        {
            return None;
        }
        let words = 2 * k + 6;
        let nseg = v.div_ceil(plan::DRAW_FANOUT);
        let mut scratch = self.top.borrow_mut();
        let fits = scratch.as_ref().is_some_and(|t| {
            t.keys.len() >= rows * nb * k
                && t.stats.len() >= rows * nb * 3
                && t.counts.len() >= rows * nb * 3
                && t.out.len() >= rows * (words + plan::PICK_WORDS)
                && t.draw_params.len() >= 2 * rows * plan::DRAW_PARAMS
                && t.draw_sums.len() >= rows * nseg
                && t.draw_last.len() >= rows * nseg
                && t.nuc_hist.len() >= rows * plan::NUC_BINS
                && t.nuc_keys.len() >= rows * plan::NUC_CAP
                && t.nuc_count.len() >= rows
                && t.nuc_out.len() >= rows * plan::nuc_words()
        });
        if !fits {
            let alloc = || -> Result<TopScratch, cudarc::driver::DriverError> {
                Ok(TopScratch {
                    keys: self.stream.alloc_zeros::<u64>(rows * nb * k)?,
                    stats: self.stream.alloc_zeros::<f64>(rows * nb * 3)?,
                    counts: self.stream.alloc_zeros::<i32>(rows * nb * 3)?,
                    out: self
                        .stream
                        .alloc_zeros::<f32>(rows * (words + plan::PICK_WORDS))?,
                    draw_params: self
                        .stream
                        .alloc_zeros::<f64>(2 * rows * plan::DRAW_PARAMS)?,
                    draw_sums: self.stream.alloc_zeros::<f64>(rows * nseg)?,
                    draw_last: self.stream.alloc_zeros::<i32>(rows * nseg)?,
                    nuc_hist: self.stream.alloc_zeros::<i32>(rows * plan::NUC_BINS)?,
                    nuc_keys: self.stream.alloc_zeros::<u64>(rows * plan::NUC_CAP)?,
                    nuc_count: self.stream.alloc_zeros::<i32>(rows)?,
                    nuc_out: self.stream.alloc_zeros::<u32>(rows * plan::nuc_words())?,
                })
            };
            *scratch = Some(alloc().unwrap_or_else(|e| device_failure("logits_top", e)));
        }
        let t = scratch.as_mut()?;
        let (vi, chunk_i, ki, nbi) = (v as i32, chunk as i32, k as i32, nb as i32);
        let mut b = self.stream.launch_builder(&self.k.logits_top_part);
        b.arg(logits.buf())
            .arg(&vi)
            .arg(&chunk_i)
            .arg(&ki)
            .arg(&mut t.keys)
            .arg(&mut t.stats)
            .arg(&mut t.counts);
        let cfg = LaunchConfig {
            grid_dim: (nb as u32, rows as u32, 1),
            block_dim: (plan::TOP_THREADS as u32, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: logits holds rows * v floats; the scratch holds rows * nb * k keys and
        // rows * nb * 3 statistics and counts (checked above); nb * chunk covers v with
        // chunk <= TOP_THREADS * TOP_PER (plan::top_blocks).
        unsafe { b.launch(cfg) }.unwrap_or_else(|e| device_failure("logits_top_part", e));
        let mut b = self.stream.launch_builder(&self.k.logits_top_merge);
        b.arg(logits.buf())
            .arg(&vi)
            .arg(&nbi)
            .arg(&ki)
            .arg(&t.keys)
            .arg(&t.stats)
            .arg(&t.counts)
            .arg(&mut t.out);
        let cfg = LaunchConfig {
            grid_dim: (rows as u32, 1, 1),
            block_dim: (plan::TOP_THREADS as u32, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: as above; out holds rows * (2k + 6) words, k <= TOP_MAX_K (the merge's
        // shared array) and nb * k <= TOP_THREADS * TOP_PER keys a row.
        unsafe { b.launch(cfg) }.unwrap_or_else(|e| device_failure("logits_top_merge", e));
        let nuclei = picks.iter().any(|p| p.is_some_and(|p| p.nucleus.is_some()));
        if picking {
            self.pick_on_device(logits, k, picks, t);
        }
        if nuclei {
            self.nuclei_on_device(logits, k, t);
        }
        let nuc_host = if nuclei {
            let view = t.nuc_out.slice(..rows * plan::nuc_words());
            self.stream
                .clone_dtoh(&view)
                .unwrap_or_else(|e| device_failure("top-p candidates", e))
        } else {
            Vec::new()
        };
        // The words are u32 bit patterns in an f32 buffer: copies move bits, never values.
        let n_words = rows * words + if picking { rows * plan::PICK_WORDS } else { 0 };
        let host = self.host_f32("logits_top", &t.out, n_words);
        self.mark("logits_top");
        let pick_word = |r: usize, i: usize| {
            host.get(rows * words + r * plan::PICK_WORDS + i)
                .filter(|_| picking)
                .map(|w| w.to_bits())
        };
        let pick = |r: usize| picks.get(r).copied().flatten().unwrap_or_default();
        let drawn =
            |r: usize| pick_word(r, 0).filter(|&t| pick(r).draw.is_some() && (t as usize) < v);
        let drawn_logit = |r: usize| drawn(r).and(pick_word(r, 3)).map(f32::from_bits);
        let total = |r: usize| match (pick_word(r, 1), pick_word(r, 2)) {
            (Some(lo), Some(hi)) if pick(r).wants_total() && (lo, hi) != (u32::MAX, u32::MAX) => {
                Some(f64::from_bits(u64::from(lo) | u64::from(hi) << 32))
            }
            _ => None,
        };
        Some(
            host[..rows * words]
                .chunks_exact(words)
                .enumerate()
                .map(|(r, o)| {
                    let bits = |i: usize| o[i].to_bits();
                    let non_finite = bits(2 * k) as usize;
                    let top = if non_finite > 0 {
                        Vec::new()
                    } else {
                        (0..k)
                            .filter(|&i| bits(i) != u32::MAX)
                            .map(|i| (bits(i), f32::from_bits(bits(k + i))))
                            .collect()
                    };
                    let entropy = f64::from_bits(
                        u64::from(bits(2 * k + 4)) | u64::from(bits(2 * k + 5)) << 32,
                    );
                    LogitsSummary {
                        top,
                        n_vocab: v,
                        non_finite,
                        nan: bits(2 * k + 1) as usize,
                        first_non_finite: (non_finite > 0)
                            .then(|| (bits(2 * k + 2), f32::from_bits(bits(2 * k + 3)))),
                        entropy,
                        drawn: drawn(r),
                        drawn_logit: drawn_logit(r),
                        total: total(r),
                        nucleus: None,
                        row: None,
                        gathered: Vec::new(),
                    }
                })
                .collect::<Vec<_>>(),
        )
        .map(|mut rows_out| {
            for (r, s) in rows_out.iter_mut().enumerate() {
                if pick(r).whole {
                    s.row = Some(self.host_row(logits, r));
                }
            }
            if gathering {
                let gathered = self.gather_on_device(logits, picks);
                for (r, (s, g)) in rows_out.iter_mut().zip(gathered).enumerate() {
                    s.gathered = g;
                    // Too few of the largest logits outside the gathered tokens: the row.
                    if s.row.is_none() && s.non_finite == 0 && pick(r).needs_row(&s.top, v) {
                        s.row = Some(self.host_row(logits, r));
                    }
                }
            }
            // Top-p: the gathered prefix when it holds the nucleus, else the row.
            for (r, s) in rows_out.iter_mut().enumerate() {
                if let (Some(p), Some(total)) = (pick(r).nucleus, s.total) {
                    let prefix = plan::nuc_prefix(&nuc_host, r);
                    if prefix
                        .as_ref()
                        .is_some_and(|pre| nucleus_len(pre, total, p).is_some())
                    {
                        s.nucleus = prefix;
                    } else {
                        s.row = Some(self.host_row(logits, r));
                    }
                }
            }
            rows_out
        })
    }

    /// Per row, `RowPick::gather`'s tokens with their logits (the bits of the row), from one
    /// `logits_gather` launch over every row's tokens. Tokens past the row come back NaN, as
    /// `RowPick::fill` gives them.
    fn gather_on_device(
        &self,
        logits: &CudaTensor,
        picks: &[Option<RowPick>],
    ) -> Vec<Vec<(u32, f32)>> {
        let v = logits.cols;
        let mut rows_of = Vec::new();
        let mut ids = Vec::new();
        for (r, p) in picks.iter().enumerate() {
            for &id in p.map_or(&[][..], |p| p.gather) {
                if (id as usize) < v {
                    rows_of.push(r as u32);
                    ids.push(id);
                }
            }
        }
        let n = ids.len();
        let got = if n == 0 {
            Vec::new()
        } else {
            let upload = |h: &[u32]| {
                self.stream
                    .clone_htod(h)
                    .unwrap_or_else(|e| device_failure("logits_gather", e))
            };
            let (rows_d, ids_d) = (upload(&rows_of), upload(&ids));
            let mut out = self
                .stream
                .alloc_zeros::<f32>(n)
                .unwrap_or_else(|e| device_failure("logits_gather", e));
            let (vi, ni) = (v as i32, n as i32);
            let mut b = self.stream.launch_builder(&self.k.logits_gather);
            b.arg(logits.buf())
                .arg(&vi)
                .arg(&rows_d)
                .arg(&ids_d)
                .arg(&ni)
                .arg(&mut out);
            // SAFETY: every pair names a row of `logits` (rows x v floats) and an id below v;
            // out holds one float a pair.
            unsafe { b.launch(self.elementwise("logits_gather", n)) }
                .unwrap_or_else(|e| device_failure("logits_gather", e));
            self.host_f32("logits_gather", &out, n)
        };
        let mut at = 0;
        picks
            .iter()
            .map(|p| {
                p.map_or(&[][..], |p| p.gather)
                    .iter()
                    .map(|&id| {
                        if (id as usize) < v {
                            at += 1;
                            (id, got.get(at - 1).copied().unwrap_or(f32::NAN))
                        } else {
                            (id, f32::NAN)
                        }
                    })
                    .collect()
            })
            .collect()
    }

    /// The top-p candidates of the rows whose parameters ask for a total alone
    /// (`RowPick::nucleus`, staged by `pick_on_device`): bin counts, the keys of the bins
    /// from the top within NUC_CAP, sorted, into `t.nuc_out`.
    fn nuclei_on_device(&self, logits: &CudaTensor, k: usize, t: &mut TopScratch) {
        let (rows, v) = (logits.rows, logits.cols);
        let (vi, ki) = (v as i32, k as i32);
        let words = 2 * k + 6;
        let zero = |what: &str, r: Result<(), cudarc::driver::DriverError>| {
            r.unwrap_or_else(|e| device_failure(what, e))
        };
        zero(
            "top-p bins",
            self.stream
                .memset_zeros(&mut t.nuc_hist.slice_mut(..rows * plan::NUC_BINS)),
        );
        zero(
            "top-p count",
            self.stream.memset_zeros(&mut t.nuc_count.slice_mut(..rows)),
        );
        let top_words = t.out.slice(..rows * words);
        let grid = (plan::nuc_blocks(v) as u32, rows as u32, 1);
        let mut b = self.stream.launch_builder(&self.k.nucleus_hist);
        b.arg(logits.buf())
            .arg(&vi)
            .arg(&top_words)
            .arg(&ki)
            .arg(&t.draw_params)
            .arg(&mut t.nuc_hist);
        let cfg = LaunchConfig {
            grid_dim: grid,
            block_dim: (plan::NUC_THREADS as u32, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: logits holds rows * v floats, the merge's words rows * (2k + 6), the
        // parameters rows * DRAW_PARAMS, the bins rows * NUC_BINS (checked by the caller).
        unsafe { b.launch(cfg) }.unwrap_or_else(|e| device_failure("nucleus_hist", e));
        let mut b = self.stream.launch_builder(&self.k.nucleus_gather);
        b.arg(logits.buf())
            .arg(&vi)
            .arg(&top_words)
            .arg(&ki)
            .arg(&t.draw_params)
            .arg(&t.nuc_hist)
            .arg(&mut t.nuc_keys)
            .arg(&mut t.nuc_count);
        // SAFETY: as above; the keys hold rows * NUC_CAP, and the kernel gathers only bins
        // whose running count stays within NUC_CAP.
        unsafe { b.launch(cfg) }.unwrap_or_else(|e| device_failure("nucleus_gather", e));
        let mut b = self.stream.launch_builder(&self.k.nucleus_sort);
        b.arg(logits.buf())
            .arg(&vi)
            .arg(&top_words)
            .arg(&ki)
            .arg(&t.draw_params)
            .arg(&t.nuc_keys)
            .arg(&t.nuc_count)
            .arg(&mut t.nuc_out);
        let cfg = LaunchConfig {
            grid_dim: (rows as u32, 1, 1),
            block_dim: (1024, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: as above; the output holds rows * (1 + 2 NUC_CAP) words.
        unsafe { b.launch(cfg) }.unwrap_or_else(|e| device_failure("nucleus_sort", e));
    }

    /// Row `r` of `logits` on the host.
    fn host_row(&self, logits: &CudaTensor, r: usize) -> Vec<f32> {
        let v = logits.cols;
        let view = logits.buf().slice(r * v..(r + 1) * v);
        self.stream
            .clone_dtoh(&view)
            .unwrap_or_else(|e| device_failure("logits row", e))
    }

    /// The whole-row picks of `picks` (one entry a row) from `logits`, after the top
    /// reduction (whose first value is each row's max): each row's `PICK_WORDS` after the
    /// merge's rows in `t.out`: the drawn token, the total weight's halves, the drawn token's
    /// logit (only the words a row asked for are written). A row that asks for a draw and its
    /// total takes two passes of the sum tree: the draw's (at its temperature, min-p), then
    /// the total's (temperature 1); the top-p candidates read the first pass's parameters.
    fn pick_on_device(
        &self,
        logits: &CudaTensor,
        k: usize,
        picks: &[Option<RowPick>],
        t: &mut TopScratch,
    ) {
        const TOTAL: [f64; 2] = [1.0, f64::NEG_INFINITY];
        let first: Vec<f64> = picks
            .iter()
            .flat_map(|p| match p {
                // u clamped as draw_row takes it, so a negative u is only ever the total's flag.
                Some(RowPick { draw: Some(d), .. }) => [
                    f64::from(d.temperature),
                    d.ln_min_p,
                    d.u.clamp(0.0, 1.0),
                    0.0,
                ],
                // The total at temperature 1 without min-p: the draw's tree, no walk.
                Some(p) if p.wants_total() => [
                    TOTAL[0],
                    TOTAL[1],
                    -1.0,
                    f64::from(u8::from(p.nucleus.is_some())),
                ],
                _ => [0.0; plan::DRAW_PARAMS],
            })
            .collect();
        self.draw_pass(logits, k, &first, 0, t);
        if picks
            .iter()
            .any(|p| p.is_some_and(|p| p.draw.is_some() && p.wants_total()))
        {
            let second: Vec<f64> = picks
                .iter()
                .flat_map(|p| match p {
                    Some(p) if p.draw.is_some() && p.wants_total() => {
                        [TOTAL[0], TOTAL[1], -1.0, 0.0]
                    }
                    _ => [0.0; plan::DRAW_PARAMS],
                })
                .collect();
            self.draw_pass(logits, k, &second, first.len(), t);
        }
    }

    /// One pass of `draw_leaves` and `draw_pick` on the parameters `params` (DRAW_PARAMS a
    /// row), staged at `at` in `t.draw_params`.
    fn draw_pass(
        &self,
        logits: &CudaTensor,
        k: usize,
        params: &[f64],
        at: usize,
        t: &mut TopScratch,
    ) {
        let (rows, v) = (logits.rows, logits.cols);
        let words = 2 * k + 6;
        let mut pv = t.draw_params.slice_mut(at..at + params.len());
        self.stream
            .memcpy_htod(params, &mut pv)
            .unwrap_or_else(|e| device_failure("draw parameters", e));
        let prm = t.draw_params.slice(at..at + params.len());
        let (vi, ki) = (v as i32, k as i32);
        let nseg = v.div_ceil(plan::DRAW_FANOUT);
        let (mut top_words, mut drawn) = t.out.split_at_mut(rows * words);
        let mut b = self.stream.launch_builder(&self.k.draw_leaves);
        b.arg(logits.buf())
            .arg(&vi)
            .arg(&mut top_words)
            .arg(&ki)
            .arg(&prm)
            .arg(&mut t.draw_sums)
            .arg(&mut t.draw_last);
        let cfg = LaunchConfig {
            grid_dim: (nseg.div_ceil(plan::DRAW_LEAF_WARPS) as u32, rows as u32, 1),
            block_dim: (32 * plan::DRAW_LEAF_WARPS as u32, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: logits holds rows * v floats, the merge's words rows * (2k + 6), the
        // parameters rows * DRAW_PARAMS, the sums and last tokens rows * nseg (checked by the
        // caller); the grid covers nseg warps a row, the kernel skips the warps past it.
        unsafe { b.launch(cfg) }.unwrap_or_else(|e| device_failure("draw_leaves", e));
        let mut b = self.stream.launch_builder(&self.k.draw_pick);
        b.arg(logits.buf())
            .arg(&vi)
            .arg(&mut top_words)
            .arg(&ki)
            .arg(&prm)
            .arg(&t.draw_sums)
            .arg(&t.draw_last)
            .arg(&mut drawn);
        let cfg = LaunchConfig {
            grid_dim: (rows as u32, 1, 1),
            block_dim: (1024, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: as above; `drawn` holds PICK_WORDS a row, and v <= 32^4 tokens (plan::draw_fits)
        // keeps the levels above the segments within the kernel's shared array.
        unsafe { b.launch(cfg) }.unwrap_or_else(|e| device_failure("draw_pick", e));
    }

    /// The module our kernels live in, when step graphs get programmatic edges.
    fn programmatic_module(&self) -> Option<cudarc::driver::sys::CUmodule> {
        if !self.programmatic {
            return None;
        }
        let mut m = std::mem::MaybeUninit::uninit();
        // SAFETY: a function handle of our loaded module, alive as long as `self.k`.
        unsafe { cudarc::driver::sys::cuFuncGetModule(m.as_mut_ptr(), self.k.add.cu_function()) }
            .result()
            .ok()?;
        // SAFETY: initialized by the successful call above.
        Some(unsafe { m.assume_init() })
    }

    /// Derives every table of a recorded step from `batch` and writes the changed ones to the
    /// step's buffers. `Ok(false)`: some table does not fit them (run this step eagerly).
    fn restage(&self, store: &mut StepStore, batch: &Batch) -> Result<bool, BackendError> {
        let t0 = self.replay_clock.is_some().then(std::time::Instant::now);
        let Some(changed) = Self::derive_tables(store, batch, false)? else {
            return Ok(false);
        };
        self.upload_changed(store, &changed, t0)?;
        Ok(true)
    }

    /// `batch`'s tables derived and compared with the staged ones: the indices of those that
    /// changed, their new values now the host's record (`None`: one does not fit its buffer,
    /// nothing recorded past it). With `gated` (the graph's token comes through its gate,
    /// `graph_exec::gate_rewrite`) the token ids are derived, so their checks run, but never
    /// listed: the graph does not read their buffer.
    fn derive_tables(
        store: &mut StepStore,
        batch: &Batch,
        gated: bool,
    ) -> Result<Option<Vec<usize>>, BackendError> {
        let mut changed = Vec::new();
        for (i, s) in store.inputs.iter_mut().enumerate() {
            let Some(host) = s.kind.derive_changed(batch, &s.host)? else {
                continue;
            };
            if !host.fits(s.cap) {
                return Ok(None);
            }
            s.host = host;
            if !(gated && matches!(s.kind, InputKind::Ids { .. })) {
                changed.push(i);
            }
        }
        Ok(Some(changed))
    }

    /// Writes the tables `changed` (of `derive_tables`) to the device; `t0`: the replay
    /// clock's start of the restage.
    fn upload_changed(
        &self,
        store: &mut StepStore,
        changed: &[usize],
        t0: Option<std::time::Instant>,
    ) -> Result<(), BackendError> {
        let t1 = t0.map(|_| std::time::Instant::now());
        if let Err(e) = self.upload_tables(&mut store.inputs, changed) {
            // What the device holds is unknown now: no later step may take it as staged.
            for &i in changed {
                store.inputs[i].host = HostInput::U32(Vec::new());
            }
            return Err(e);
        }
        if let (Some(c), Some(t1)) = (&self.replay_clock, t1) {
            c.borrow_mut().upload = (t1.elapsed(), changed.len(), store.inputs.len());
        }
        Ok(())
    }

    /// While a replay's graph runs: the tables of the step most likely to come next
    /// (`steps::next_decode_batch`) written to the graph's buffers, queued behind the graph on
    /// its stream, so the next restage finds them staged and writes only what differs (the
    /// token ids; at a page's end the slots). The host would otherwise wait for the graph: this
    /// takes the restage's trigonometry and uploads off the step's critical path
    /// (`LOCKSTEP_CUDA_PRESTAGE=0`: not done). A guess that does not fit is not staged; a
    /// failed write leaves the tables marked unknown, so the next restage writes them all.
    ///
    /// Returns whether every table of the guess is staged (with `gated`, all but the token ids,
    /// which the gate carries), so a launch queued after it runs the guessed step.
    fn prestage(&self, store: &mut StepStore, batch: &Batch, gated: bool) -> bool {
        if !knobs::prestage_knob() {
            return false;
        }
        let Some(next) = steps::next_decode_batch(batch) else {
            return false;
        };
        let mut changed = Vec::new();
        let mut all = true;
        for (i, s) in store.inputs.iter_mut().enumerate() {
            let gate_ids = gated && matches!(s.kind, InputKind::Ids { .. });
            match s.kind.derive_changed(&next, &s.host) {
                Ok(Some(host)) if host.fits(s.cap) => {
                    s.host = host;
                    if !gate_ids {
                        changed.push(i);
                    }
                }
                Ok(None) => {}
                _ => all &= gate_ids,
            }
        }
        if self.upload_tables(&mut store.inputs, &changed).is_err() {
            for &i in &changed {
                store.inputs[i].host = HostInput::U32(Vec::new());
            }
            return false;
        }
        all
    }

    /// Writes the host tables of `inputs[i]` for every `i` in `changed` to their device
    /// buffers. With `batch_uploads` (a driver of CUDA 13 or later) all of them in one
    /// `cuMemcpyBatchAsync` call: a replay rewrites 4 to 6 small tables, and each copy queued
    /// on its own costs the host 3-4 us (the replay clock, session 23).
    fn upload_tables(&self, inputs: &mut [Staged], changed: &[usize]) -> Result<(), BackendError> {
        // One table (a step after its guess: the token ids) costs a plain copy less than a
        // batch.
        if !self.batch_uploads || changed.len() <= 1 {
            for &i in changed {
                self.write_staged(&mut inputs[i])?;
            }
            return Ok(());
        }
        // (device destination, host source, bytes) of every non-empty table part.
        let mut dst: Vec<cudarc::driver::sys::CUdeviceptr> = Vec::new();
        let mut src: Vec<cudarc::driver::sys::CUdeviceptr> = Vec::new();
        let mut size: Vec<usize> = Vec::new();
        {
            let mut add = |d: cudarc::driver::sys::CUdeviceptr, p: *const u8, bytes: usize| {
                if bytes > 0 {
                    dst.push(d);
                    src.push(p as cudarc::driver::sys::CUdeviceptr);
                    size.push(bytes);
                }
            };
            for &i in changed {
                let s = &inputs[i];
                match (&s.host, &s.dev) {
                    (HostInput::U32(v), DevInput::U32(d)) => {
                        add(d.device_ptr(&self.stream).0, v.as_ptr().cast(), 4 * v.len())
                    }
                    (HostInput::Rope { table, .. }, DevInput::F64(d)) => add(
                        d.device_ptr(&self.stream).0,
                        table.as_ptr().cast(),
                        8 * table.len(),
                    ),
                    (HostInput::Attn(p), DevInput::Attn(d)) => {
                        add(
                            d.info.device_ptr(&self.stream).0,
                            p.info.as_ptr().cast(),
                            4 * p.info.len(),
                        );
                        add(
                            d.slots.device_ptr(&self.stream).0,
                            p.slots.as_ptr().cast(),
                            4 * p.slots.len(),
                        );
                        add(
                            d.mask.device_ptr(&self.stream).0,
                            p.mask.as_ptr().cast(),
                            p.mask.len(),
                        );
                    }
                    _ => unreachable!("a kind always derives the same table type"),
                }
            }
        }
        if dst.is_empty() {
            return Ok(());
        }
        let loc = cudarc::driver::sys::CUmemLocation {
            type_: cudarc::driver::sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_INVALID,
            id: 0,
        };
        let mut attrs = [cudarc::driver::sys::CUmemcpyAttributes {
            // The tables are read during the call (as a copy from pageable memory is), so the
            // host may replace them as soon as it returns.
            srcAccessOrder:
                cudarc::driver::sys::CUmemcpySrcAccessOrder::CU_MEMCPY_SRC_ACCESS_ORDER_DURING_API_CALL,
            srcLocHint: loc,
            dstLocHint: loc,
            flags: 0,
        }];
        let mut attr_at = [0usize];
        self.ctx
            .bind_to_thread()
            .map_err(|e| BackendError::Other(format!("cuda step inputs: {e}")))?;
        // SAFETY: `dst`, `src` and `size` have one entry per copy; each destination is a device
        // buffer of its table, at least as long as the table (`host.fits(s.cap)`, checked by
        // the caller), each source a live host vector of that table (`inputs` is borrowed for
        // the call) read before the call returns (DURING_API_CALL); one attribute for all.
        let r = unsafe {
            cudarc::driver::sys::cuMemcpyBatchAsync_v2(
                dst.as_mut_ptr(),
                src.as_mut_ptr(),
                size.as_mut_ptr(),
                dst.len(),
                attrs.as_mut_ptr(),
                attr_at.as_mut_ptr(),
                1,
                self.stream.cu_stream(),
            )
        };
        r.result()
            .map_err(|e| BackendError::Other(format!("cuda step inputs (batched copy): {e}")))
    }

    /// Puts the table `host` of `kind` where the op's kernel will read it: in an eager step an
    /// upload (skipped while the last table of that kind is the same); while recording, in the
    /// step's own buffers sized for any step of its shape; while capturing, nothing is copied,
    /// the table must be the one staged before the capture began.
    fn stage(&self, kind: InputKind, host: HostInput) -> Result<(), BackendError> {
        let mut st = self.steps.borrow_mut();
        let st = &mut *st;
        match st.mode {
            Mode::Eager => {
                if st.eager.iter().any(|s| s.kind == kind && s.host == host) {
                    return Ok(());
                }
                let cap = kind.capacity(0, 0);
                let dev = self.upload_input(&host, cap)?;
                st.eager.retain(|s| s.kind != kind);
                st.eager.push(Staged {
                    kind,
                    host,
                    dev,
                    cap,
                });
            }
            Mode::Record => {
                let Some(store) = st.current.as_mut() else {
                    unreachable!("a recorded step has a store")
                };
                if let Some(s) = store.inputs.iter_mut().find(|s| s.kind == kind) {
                    if s.host != host {
                        // Run correctly now (the copy is queued after the kernels that read
                        // the old table), but a replay could not know which table to stage.
                        st.broken = Some(format!("{kind:?}: two different tables in one step"));
                        if !host.fits(s.cap) {
                            s.dev = self.upload_input(&host, s.cap)?;
                            self.own_scores(&mut s.dev, s.cap, &host);
                            s.host = host;
                        } else {
                            self.rewrite_input(s, host)?;
                        }
                    }
                    return Ok(());
                }
                let k = store.key.step;
                let mut cap = kind.capacity(k.n_tokens, k.n_outputs);
                if cap.scores * 20 > steps::MAX_GRAPH_SCORE_BYTES || !host.fits(cap) {
                    st.broken = Some(format!("{kind:?}: tables too large to keep"));
                    cap = kind.capacity(0, 0);
                }
                let mut dev = self.upload_input(&host, cap)?;
                self.own_scores(&mut dev, cap, &host);
                store.inputs.push(Staged {
                    kind,
                    host,
                    dev,
                    cap,
                });
            }
            Mode::Capture => {
                let staged = st
                    .current
                    .as_ref()
                    .and_then(|c| c.inputs.iter().find(|s| s.kind == kind));
                match staged {
                    Some(s) if s.host == host => {}
                    Some(_) => st.broken = Some(format!("{kind:?}: differs from the staged table")),
                    None => {
                        // Cannot happen for a step of the recorded shape; the capture is
                        // dropped and the step fails rather than read an unstaged table.
                        st.broken = Some(format!("{kind:?}: not in the recording"));
                        return Err(BackendError::Other(format!(
                            "cuda step capture: {kind:?} was not recorded for this step shape"
                        )));
                    }
                }
            }
        }
        Ok(())
    }

    /// Runs `f` with the device table of `kind` staged for the current op (and, for
    /// attention, the score buffers the op should use when the step owns its own).
    fn with_input<R>(&self, kind: InputKind, f: impl FnOnce(&DevInput) -> R) -> R {
        let st = self.steps.borrow();
        let list = match (st.mode, st.current.as_ref()) {
            (Mode::Record | Mode::Capture, Some(store)) => &store.inputs,
            _ => &st.eager,
        };
        match list.iter().find(|s| s.kind == kind) {
            Some(s) => f(&s.dev),
            None => unreachable!("ops stage their tables before reading them"),
        }
    }

    /// Drops every recorded and captured step (a buffer they point into is being replaced).
    /// Inside a capture the capture is abandoned instead: the step then reruns eagerly.
    fn drop_step_graphs(&self, why: &str) {
        let mut st = self.steps.borrow_mut();
        if st.mode == Mode::Capture {
            st.broken = Some(format!("{why}: a shared buffer grew during a capture"));
            st.leaked = true;
            return;
        }
        st.graphs.clear();
        st.recorded.clear();
    }

    /// Device pointer of a cache (a step graph's kernels write that cache).
    fn cache_id(&self, cache: &CudaKvCache) -> u64 {
        let (p, _sync) = cache.k.device_ptr(&self.stream);
        p
    }

    fn ensure_scores(&self, n: usize) {
        let mut s = self.scores.borrow_mut();
        if s.as_ref().is_some_and(|s| s.scores.len() >= n) {
            return;
        }
        let n = n.max(1).next_power_of_two();
        *s = Some(Scores {
            scores: self.alloc("attention scores", n),
            exps: self.alloc("attention scores", n),
            probs: self.alloc("attention scores", n),
        });
    }

    /// `out = x W^T` on the tensor cores: chunks of W's rows decoded to f32, then one cuBLAS
    /// TF32 GEMM per chunk. Row-major `x [n, k]`, `W [m, k]`, `out [n, m]` are column-major
    /// `k x n`, `k x m`, `m x n`, so `out^T = W x^T` is `gemm(T, N)`.
    fn matmul_gemm(
        &self,
        g: &TensorGemm,
        x: &CudaTensor,
        w: &CudaWeight,
        out: &mut CudaSlice<f32>,
    ) {
        use cudarc::cublas::{sys::cublasOperation_t as Op, Gemm, GemmConfig};
        let (n, k, m) = (x.rows, x.cols, w.rows);
        if g.half && k.is_multiple_of(8) {
            return self.matmul_gemm_f16(g, x, w, out);
        }
        let chunk = (GEMM_SCRATCH_FLOATS / k).clamp(1, m);
        let mut scratch = g.scratch.borrow_mut();
        if scratch.as_ref().is_none_or(|s| s.len() < chunk * k) {
            *scratch = Some(self.alloc::<f32>("gemm scratch", chunk * k));
        }
        let Some(scr) = scratch.as_mut() else {
            unreachable!("allocated above")
        };
        let d = w.desc;
        let mut r0 = 0;
        while r0 < m {
            let rows = chunk.min(m - r0);
            let (r0i, ri, ki) = (r0 as i32, rows as i32, k as i32);
            let mut b = self.stream.launch_builder(&self.k.dequant_rows);
            b.arg(&*w.data)
                .arg(&mut *scr)
                .arg(&r0i)
                .arg(&ri)
                .arg(&ki)
                .arg(&d.id)
                .arg(&d.block)
                .arg(&d.bytes);
            // SAFETY: rows r0..r0+rows of the weight exist; scratch holds chunk x k values.
            unsafe { b.launch(self.elementwise("dequant_rows", rows * k)) }
                .unwrap_or_else(|e| device_failure("dequant_rows", e));
            let cfg = GemmConfig {
                transa: Op::CUBLAS_OP_T,
                transb: Op::CUBLAS_OP_N,
                m: ri,
                n: n as i32,
                k: ki,
                alpha: 1.0f32,
                lda: ki,
                ldb: ki,
                beta: 0.0f32,
                ldc: m as i32,
            };
            let mut dst = out.slice_mut(r0..);
            // SAFETY: A is rows x k (scratch), B is x (n x k), C starts at column r0 of the
            // m-wide output rows, with ldc = m: every write stays inside out (n x m).
            unsafe { g.blas.gemm(cfg, &*scr, x.buf(), &mut dst) }
                .unwrap_or_else(|e| device_failure("gemm", e));
            r0 += rows;
        }
    }

    /// [`Self::matmul_gemm`] with f16 operands: `x` converted once (kept for the next matmul of
    /// the same tensor), chunks of W's rows decoded to f16, one cuBLAS GEMM per chunk
    /// (`cublasGemmEx`, f16 inputs, f32 accumulation and output).
    fn matmul_gemm_f16(
        &self,
        g: &TensorGemm,
        x: &CudaTensor,
        w: &CudaWeight,
        out: &mut CudaSlice<f32>,
    ) {
        use cudarc::cublas::sys::{
            cublasComputeType_t as Compute, cublasGemmAlgo_t as Algo, cublasGemmEx,
            cublasOperation_t as Op, cudaDataType as Dt,
        };
        use cudarc::driver::{DevicePtr, DevicePtrMut};
        let (n, k, m) = (x.rows, x.cols, w.rows);
        g.ran.set(true);
        let mut flag = g.overflow.borrow_mut();
        let mut x_h = g.x_h.borrow_mut();
        if x_h.as_ref().is_none_or(|b| b.len() < n * k) {
            *x_h = Some(self.alloc::<u16>("f16 activations", n * k));
            g.x_h_of.set(None);
        }
        let Some(xh) = x_h.as_mut() else {
            unreachable!("allocated above")
        };
        if g.x_h_of.get() != Some(x.id) {
            let nk = (n * k) as i64;
            let mut b = self.stream.launch_builder(&self.k.to_f16);
            b.arg(x.buf()).arg(&mut *xh).arg(&mut *flag).arg(&nk);
            // SAFETY: x holds n x k values, xh at least as many.
            unsafe { b.launch(self.elementwise("to_f16", n * k)) }
                .unwrap_or_else(|e| device_failure("to_f16", e));
            g.x_h_of.set(Some(x.id));
        }
        let chunk = (2 * GEMM_SCRATCH_FLOATS / k).clamp(1, m);
        let mut scratch = g.scratch_h.borrow_mut();
        if scratch.as_ref().is_none_or(|s| s.len() < chunk * k) {
            *scratch = Some(self.alloc::<u16>("gemm scratch", chunk * k));
        }
        let Some(scr) = scratch.as_mut() else {
            unreachable!("allocated above")
        };
        let d = w.desc;
        let (alpha, beta) = (1.0f32, 0.0f32);
        let mut r0 = 0;
        while r0 < m {
            let rows = chunk.min(m - r0);
            let (r0i, ri, ki) = (r0 as i32, rows as i32, k as i32);
            let mut b = self.stream.launch_builder(&self.k.dequant_rows_f16);
            b.arg(&*w.data)
                .arg(&mut *scr)
                .arg(&mut *flag)
                .arg(&r0i)
                .arg(&ri)
                .arg(&ki)
                .arg(&d.id)
                .arg(&d.block)
                .arg(&d.bytes);
            // SAFETY: rows r0..r0+rows of the weight exist; k is a multiple of 8, so each
            // thread's eight values lie in one row and the scratch (chunk x k) holds them all.
            unsafe { b.launch(self.elementwise("dequant_rows_f16", rows * k / 8)) }
                .unwrap_or_else(|e| device_failure("dequant_rows_f16", e));
            {
                let (a_ptr, _ra) = scr.device_ptr(&self.stream);
                let (b_ptr, _rb) = xh.device_ptr(&self.stream);
                let mut dst = out.slice_mut(r0..);
                let (c_ptr, _rc) = dst.device_ptr_mut(&self.stream);
                // SAFETY: A (rows x k f16, lda k) is the scratch, B (n x k f16, ldb k) the
                // converted activations, C starts at column r0 of the m-wide f32 output rows
                // (ldc m): every write stays inside out (n x m). All on the handle's stream.
                unsafe {
                    cublasGemmEx(
                        *g.blas.handle(),
                        Op::CUBLAS_OP_T,
                        Op::CUBLAS_OP_N,
                        ri,
                        n as i32,
                        ki,
                        (&alpha as *const f32).cast(),
                        a_ptr as *const std::ffi::c_void,
                        Dt::CUDA_R_16F,
                        ki,
                        b_ptr as *const std::ffi::c_void,
                        Dt::CUDA_R_16F,
                        ki,
                        (&beta as *const f32).cast(),
                        c_ptr as *mut std::ffi::c_void,
                        Dt::CUDA_R_32F,
                        m as i32,
                        Compute::CUBLAS_COMPUTE_32F,
                        Algo::CUBLAS_GEMM_DEFAULT,
                    )
                }
                .result()
                .unwrap_or_else(|e| device_failure("f16 gemm", e));
            }
            r0 += rows;
        }
    }

    /// Whether an f16 GEMM of the step that ends now met a value beyond f16's range (the flag
    /// is cleared for the next step).
    fn f16_overflowed(&self) -> Result<(), BackendError> {
        let Some(g) = self.gemm.as_ref().filter(|g| g.ran.replace(false)) else {
            return Ok(());
        };
        let mut flag = g.overflow.borrow_mut();
        let v = self
            .stream
            .clone_dtoh(&*flag)
            .unwrap_or_else(|e| device_failure("f16 overflow flag", e));
        if v.first().is_some_and(|&f| f != 0) {
            self.stream
                .memset_zeros(&mut *flag)
                .unwrap_or_else(|e| device_failure("f16 overflow flag", e));
            return Err(BackendError::Other(
                "cuda: a value beyond f16's range (|x| > 65504) reached the f16 tensor-core \
                 prefill in this step, so its results are not finite; LOCKSTEP_CUDA_GEMM=tf32 \
                 or --deterministic multiply without f16"
                    .into(),
            ));
        }
        Ok(())
    }

    /// The first `n` values of `buf` on the host, through a page-locked staging buffer (a
    /// copy from pageable memory runs several times slower: for a 262144-token vocabulary that
    /// was a visible share of every decode step).
    fn host_f32(&self, what: &str, buf: &CudaSlice<f32>, n: usize) -> Vec<f32> {
        self.host_with(what, buf, n, <[f32]>::to_vec)
    }

    /// A replay's logits where its LM head wrote them on the host (`graph_exec::head_rewrite`):
    /// once the step has finished, lent from there or copied into the host tensor `out` asks
    /// for, as `logits_out` gives them after its copy.
    fn logits_from_head(
        &self,
        g: &graph_exec::StepGraph,
        logits: &CudaTensor,
        out: LogitsOut<'_>,
    ) -> Result<StepOut, BackendError> {
        // The event after the graph, not the stream: a launch ahead may wait at its gate
        // behind it.
        self.after_graph
            .synchronize()
            .unwrap_or_else(|e| device_failure("to_host", e));
        if let Some(c) = self.replay_clock.as_ref() {
            let mut c = c.borrow_mut();
            if c.in_replay {
                c.synced_at = Some(std::time::Instant::now());
            }
        }
        let (rows, n_vocab) = (logits.rows, logits.cols);
        let Some(host) = g.host_rows().and_then(|h| h.get(..rows * n_vocab)) else {
            return Err(BackendError::Other(
                "cuda step graph: the head's host rows are not there".into(),
            ));
        };
        self.mark("to_host");
        Ok(match out {
            LogitsOut::Lend(to) => {
                to.lend(host);
                StepOut::Lent { rows, n_vocab }
            }
            _ => StepOut::from_host(HostTensor::matrix(rows, n_vocab, host.to_vec()), out),
        })
    }

    /// `f` of the first `n` values of `buf` on the host, where they landed: the page-locked
    /// staging buffer itself (`LogitsOut::Lend`: no copy beyond the device's). `f` must not
    /// call back into the backend (the buffer is borrowed while it runs).
    fn host_with<R>(
        &self,
        what: &str,
        buf: &CudaSlice<f32>,
        n: usize,
        f: impl FnOnce(&[f32]) -> R,
    ) -> R {
        if n == 0 {
            return f(&[]);
        }
        let mut pinned = self.pinned.borrow_mut();
        if pinned.as_ref().is_none_or(|p| p.len() < n) {
            // SAFETY: page-locked host memory of plain floats; only the prefix the copy below
            // writes is ever read. Flags 0: cached memory (write-combined would make the host's
            // reads slow).
            *pinned = unsafe {
                self.ctx
                    .alloc_pinned_with_flags::<f32>(n.next_power_of_two(), 0)
            }
            .ok();
        }
        let Some(p) = pinned.as_mut() else {
            // No page-locked memory to be had: the plain copy.
            let v = self
                .stream
                .clone_dtoh(buf)
                .unwrap_or_else(|e| device_failure(what, e));
            return f(&v[..n]);
        };
        // The staging buffer as a plain slice of exactly n values (a copy moves as many bytes
        // as its destination holds); page-locked, so the driver copies it asynchronously.
        let dst = match p.as_mut_slice() {
            Ok(s) => &mut s[..n],
            Err(e) => device_failure(what, e),
        };
        self.stream
            .memcpy_dtoh(&buf.slice(..n), dst)
            .unwrap_or_else(|e| device_failure(what, e));
        let mut clock = self
            .replay_clock
            .as_ref()
            .map(|c| c.borrow_mut())
            .filter(|c| c.in_replay);
        if let Some(c) = clock.as_mut() {
            c.copy_recorded = c.events[2].record(&self.stream).is_ok();
        }
        self.stream
            .synchronize()
            .unwrap_or_else(|e| device_failure(what, e));
        if let Some(c) = clock.as_mut() {
            c.synced_at = Some(std::time::Instant::now());
        }
        drop(clock);
        f(dst)
    }

    /// The numerics mode this backend was opened with.
    pub fn numerics(&self) -> Numerics {
        self.numerics
    }

    /// Fast numerics: quantizes `x` (`n x k`, k a multiple of 32: every quantized type's rows
    /// are whole blocks of 32 or 256) into the scratch buffer, `n * k` int8 values then per 32
    /// values `{f32 d, i32 sum}`. The buffer is reused by every matmul: everything runs in
    /// order on one stream, so the next quantization is queued after the kernels that read it.
    /// When it already holds `x` (q, k and v read one tensor), nothing is launched.
    fn quantize_q8(&self, x: &CudaTensor) {
        if self.q8_of.get() == Some(x.id) {
            return;
        }
        let (n, k) = (x.rows, x.cols);
        assert!(
            k.is_multiple_of(32),
            "quant8 activations: rows of {k} values"
        );
        let mut q8 = self.q8_room(n, k);
        let Some(buf) = q8.as_mut() else {
            unreachable!("allocated above")
        };
        let nblk = n * k / 32;
        if nblk == 0 {
            return;
        }
        let (mut q, mut d) = buf.split_at_mut(n * k);
        let nb = nblk as i32;
        let mut b = self.stream.launch_builder(&self.k.quantize_q8);
        b.arg(x.buf()).arg(&mut q).arg(&mut d).arg(&nb);
        let cfg = LaunchConfig {
            // One warp per 32-value block, 8 per block of threads.
            grid_dim: (nblk.div_ceil(8) as u32, 1, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: x holds n * k floats; q has n * k bytes, d the rest of a buffer of
        // q8_bytes(n, k) (8 bytes per block, 8-aligned since n * k is a multiple of 32).
        unsafe { b.launch(cfg) }.unwrap_or_else(|e| device_failure("quantize_q8", e));
        self.q8_of.set(Some(x.id));
    }

    /// The quantized activations of `x` for a fast kernel: the buffer a fused gate/up filled
    /// for it (`q8_act`), else the scratch buffer, quantized now unless it already holds `x`.
    fn q8_for(&self, x: &CudaTensor) -> std::cell::Ref<'_, Option<CudaSlice<u8>>> {
        if self.q8_act_of.get() == Some(x.id) {
            return self.q8_act.borrow();
        }
        self.quantize_q8(x);
        self.q8.borrow()
    }

    /// Stages the (cos, sin) table of `positions` for rope parameters `p` and returns its kind.
    /// The table is a function of the positions: computed only when they changed.
    fn stage_rope_table(
        &self,
        positions: &[u32],
        p: RopeParams,
    ) -> Result<InputKind, BackendError> {
        let kind = InputKind::Rope {
            n_rot: p.n_rot,
            base_bits: p.base.to_bits(),
        };
        // Already staged for these positions (every layer after the first, and a step at the
        // positions of the one before): `stage` would find the same table and do nothing, so
        // return before building its argument. A prefill's table is large (Gemma-3, 512
        // positions: 1 MiB), and cloning it to compare it again cost each layer's rope_store
        // about 0.35 ms of host time: 6 ms of Gemma-3's pp512 step, enough to leave the GPU
        // waiting for launches (BENCHMARKS.md, session 16).
        let known = {
            let st = self.steps.borrow();
            let list = match (st.mode, st.current.as_ref()) {
                (Mode::Record | Mode::Capture, Some(store)) => &store.inputs,
                _ => &st.eager,
            };
            list.iter().find(|s| s.kind == kind).is_some_and(
                |s| matches!(&s.host, HostInput::Rope { positions: ps, .. } if ps == positions),
            )
        };
        if known {
            return Ok(kind);
        }
        let host = HostInput::Rope {
            positions: positions.to_vec(),
            table: self
                .rope_rows
                .borrow_mut()
                .table(positions, p.n_rot, p.base),
        };
        self.stage(kind, host)?;
        Ok(kind)
    }

    /// What `kv_store` checks before it writes: shapes, the layer, every slot.
    fn check_kv_store(
        &self,
        cache: &CudaKvCache,
        layer: usize,
        k: &CudaTensor,
        v: &CudaTensor,
        batch: &Batch,
    ) -> Result<(), BackendError> {
        let l = cache.layout;
        let d = l.kv_dim;
        if k.cols != d || v.cols != d || k.rows != batch.slots.len() || v.rows != k.rows {
            return Err(BackendError::Kv(format!(
                "kv_store: K [{}, {}] / V [{}, {}] for {} slots of width {d}",
                k.rows,
                k.cols,
                v.rows,
                v.cols,
                batch.slots.len()
            )));
        }
        if layer >= l.n_layers {
            return Err(BackendError::Kv(format!(
                "layer {layer} outside the cache ({} layers)",
                l.n_layers
            )));
        }
        if let Some(&s) = batch.slots.iter().find(|&&s| s as usize >= l.n_slots()) {
            return Err(BackendError::Kv(format!(
                "layer {layer} slot {s} outside the cache ({} layers x {} slots)",
                l.n_layers,
                l.n_slots()
            )));
        }
        Ok(())
    }

    /// The quantized-activation buffer with room for `n` rows of `k`, its contents forgotten
    /// (the caller is about to overwrite them).
    fn q8_room(&self, n: usize, k: usize) -> std::cell::RefMut<'_, Option<CudaSlice<u8>>> {
        let bytes = plan::q8_bytes(n, k);
        let mut q8 = self.q8.borrow_mut();
        if q8.as_ref().is_none_or(|b| b.len() < bytes) {
            // Step graphs point at the old buffer: they are dropped with it. (A capture never
            // gets here: its recording already grew the buffer to this step's size.)
            self.drop_step_graphs("quantize_q8");
            *q8 = Some(self.alloc::<u8>("quantize_q8", bytes.max(1).next_power_of_two()));
        }
        self.q8_of.set(None);
        q8
    }

    /// The fused gate/up's activation buffer with room for one row of `m`, its contents
    /// forgotten (grown as `q8_room` grows the scratch buffer).
    fn q8_act_room(&self, m: usize) -> std::cell::RefMut<'_, Option<CudaSlice<u8>>> {
        let bytes = plan::q8_bytes(1, m);
        let mut q8 = self.q8_act.borrow_mut();
        if q8.as_ref().is_none_or(|b| b.len() < bytes) {
            self.drop_step_graphs("gate_up quantization");
            *q8 = Some(self.alloc::<u8>("gate_up quantization", bytes.next_power_of_two()));
        }
        self.q8_act_of.set(None);
        q8
    }

    /// Whether a norm of `n` rows of `k` values in groups of `g` quantizes its output for the
    /// matmul that follows (fast numerics, whole rows of 32-value blocks, and a step the
    /// quantized kernels will run rather than the tensor-core GEMM).
    fn norm_quantizes(&self, n: usize, k: usize, g: usize) -> bool {
        self.numerics == Numerics::Fast
            && g == k
            && k.is_multiple_of(32)
            && n > 0
            && !(self.gemm.is_some() && n >= GEMM_MIN_ROWS)
    }

    /// Launch geometry of the norm kernels (`rms_norm`, `add_rms_norm`): a block per group.
    fn norm_cfg(groups: usize, g: usize) -> LaunchConfig {
        LaunchConfig {
            grid_dim: (groups as u32, 1, 1),
            block_dim: (plan::norm_threads(g), 1, 1),
            shared_mem_bytes: 0,
        }
    }

    /// A norm-fused one-row q/k/v launch's outputs as tensors: its norm (whose quantization the
    /// launch left in the scratch buffer), q, k, and v, or, where the launch had no v (v of
    /// another type without a two-type kernel), v's own matmul on that quantization.
    fn norm_qkv_outputs(
        &self,
        out: CudaSlice<f32>,
        q: CudaSlice<f32>,
        k: CudaSlice<f32>,
        v: Option<CudaSlice<f32>>,
        [wq, wk, wv]: [&CudaWeight; 3],
    ) -> (CudaTensor, (CudaTensor, CudaTensor, CudaTensor)) {
        let normed = self.tensor("rms_norm", out, 1, wq.cols);
        self.q8_of.set(Some(normed.id));
        let q = self.tensor("matmul", q, 1, wq.rows);
        let k = self.tensor("matmul", k, 1, wk.rows);
        let v = match v {
            Some(v) => self.tensor("matmul", v, 1, wv.rows),
            None => self.matmul(&normed, wv),
        };
        (normed, (q, k, v))
    }

    /// The norm-fused one-row q/k/v kernel for q and k of `wqk`'s type and v of `wv`'s, where
    /// `plan::MIXED_QKV` has the pair.
    fn mixed_qkv(&self, wqk: &CudaWeight, wv: &CudaWeight) -> Option<&CudaFunction> {
        mixed_qkv_knob()
            .then(|| mixed_pair(&self.k.mixed_mm3, wqk, wv))
            .flatten()
    }

    /// `matmul` of one activation against up to three weights of one type with a fast kernel
    /// and one row length, in one launch (each product bitwise what `matmul_fast` gives).
    fn matmul_fast_multi(&self, x: &CudaTensor, ws: &[&CudaWeight]) -> Vec<CudaTensor> {
        self.matmul_fast_multi_with(x, ws, None)
    }

    /// `matmul_fast_multi`, or with `mixed` (`mmv3_fast2r_<q>_<v>`, one activation row) q/k/v
    /// whose v is of another type, two rows a warp.
    fn matmul_fast_multi_with(
        &self,
        x: &CudaTensor,
        ws: &[&CudaWeight],
        mixed: Option<&CudaFunction>,
    ) -> Vec<CudaTensor> {
        let (n, k) = (x.rows, x.cols);
        let Some((_, f)) = self.k.fast_mm3.iter().find(|(id, _)| *id == ws[0].desc.id) else {
            unreachable!("callers check the type has a fast kernel")
        };
        let same_type = |w: &&CudaWeight| w.desc == ws[0].desc;
        assert!(ws.len() <= 3 && ws.iter().all(|w| w.cols == k));
        assert!(match mixed {
            None => ws.iter().all(same_type),
            Some(_) => n == 1 && ws.len() == 3 && ws[..2].iter().all(same_type),
        });
        let mut outs: Vec<CudaSlice<f32>> = ws
            .iter()
            .map(|w| self.alloc_f32("matmul", n * w.rows))
            .collect();
        let m: Vec<i32> = (0..3)
            .map(|i| ws.get(i).map_or(0, |w| w.rows as i32))
            .collect();
        let total: usize = ws.iter().map(|w| w.rows).sum();
        if n > 0 && total > 0 {
            let q8 = self.q8_for(x);
            let Some(buf) = q8.as_ref() else {
                unreachable!("quantize_q8 allocates it")
            };
            let (qv, dv) = (buf.slice(..n * k), buf.slice(n * k..plan::q8_bytes(n, k)));
            // Two rows a warp keeps a warp's rows in one weight: q's and k's row counts even.
            let even = m[0] % 2 == 0 && m[1] % 2 == 0;
            let (kernel, (gx, gy)) = match mixed {
                Some(kernel) => (kernel, (plan::fast_two_rows_grid(total), 1)),
                None => f.launch_for(ws[0].desc.id, (n, k, total), even && two_rows_qkv_knob()),
            };
            let (ni, ki) = (n as i32, k as i32);
            let null = 0u64;
            let mut b = self.stream.launch_builder(kernel);
            for i in 0..3 {
                match ws.get(i) {
                    Some(w) => b.arg(&*w.data),
                    None => b.arg(&null),
                };
            }
            b.arg(&qv).arg(&dv);
            for o in outs.iter_mut() {
                b.arg(o);
            }
            for _ in ws.len()..3 {
                b.arg(&null);
            }
            b.arg(&ni).arg(&ki).arg(&m[0]).arg(&m[1]).arg(&m[2]);
            let cfg = LaunchConfig {
                grid_dim: (gx, gy, 1),
                block_dim: (plan::FAST_THREADS, 1, 1),
                shared_mem_bytes: 0,
            };
            // SAFETY: each weight has m_i rows of k encoded values and its output n x m_i
            // floats; missing weights have m_i = 0 and are never touched; the quantized
            // activations are n x k with their block table.
            unsafe { b.launch(cfg) }.unwrap_or_else(|e| device_failure("matmul", e));
        }
        outs.into_iter()
            .zip(ws)
            .map(|(o, w)| self.tensor("matmul", o, n, w.rows))
            .collect()
    }

    /// `matmul` in fast numerics, for a quantized weight type.
    fn matmul_fast(&self, x: &CudaTensor, w: &CudaWeight) -> CudaTensor {
        let (n, k, m) = (x.rows, x.cols, w.rows);
        let mut out = self.alloc_f32("matmul", n * m);
        if n == 0 || m == 0 {
            return self.tensor("matmul", out, n, m);
        }
        let q8 = self.q8_for(x);
        let Some(buf) = q8.as_ref() else {
            unreachable!("quantize_q8 allocates it")
        };
        let (qv, dv) = (buf.slice(..n * k), buf.slice(n * k..plan::q8_bytes(n, k)));
        let (ni, ki, mi) = (n as i32, k as i32, m as i32);
        if let Some((_, f)) = self.k.fast_mm.iter().find(|(id, _)| *id == w.desc.id) {
            let (kernel, (gx, gy)) = f.launch_for(w.desc.id, (n, k, m), true);
            let mut b = self.stream.launch_builder(kernel);
            b.arg(&*w.data)
                .arg(&qv)
                .arg(&dv)
                .arg(&mut out)
                .arg(&ni)
                .arg(&ki)
                .arg(&mi);
            let cfg = LaunchConfig {
                grid_dim: (gx, gy, 1),
                block_dim: (plan::FAST_THREADS, 1, 1),
                shared_mem_bytes: 0,
            };
            // SAFETY: the weight is m rows of k encoded values (16-byte aligned rows for the
            // K-quants: whole blocks of 144 / 176 bytes from a 256-aligned allocation); the
            // quantized activations n x k with their block table; out n x m.
            unsafe { b.launch(cfg) }.unwrap_or_else(|e| device_failure("matmul", e));
            drop(q8);
            return self.tensor("matmul", out, n, m);
        }
        // A quantized type without a fast kernel: the exact kernel on the quantized values.
        let mut xv = self.alloc_f32("matmul", n * k);
        let nv = (n * k) as i32;
        let mut b = self.stream.launch_builder(&self.k.q8_values);
        b.arg(&qv).arg(&dv).arg(&mut xv).arg(&nv);
        // SAFETY: n * k quants and their block table in, n * k floats out.
        unsafe { b.launch(self.elementwise("matmul", n * k)) }
            .unwrap_or_else(|e| device_failure("matmul", e));
        drop(q8);
        let Some((_, t1, t8)) = self.k.matmul.iter().find(|(id, _, _)| *id == w.desc.id) else {
            unreachable!("load_weight admits only types with kernels")
        };
        let (gx, gy) = plan::matmul_grid(n, m);
        let mut b = self.stream.launch_builder(if n == 1 { t1 } else { t8 });
        b.arg(&*w.data)
            .arg(&xv)
            .arg(&mut out)
            .arg(&ni)
            .arg(&ki)
            .arg(&mi);
        let cfg = LaunchConfig {
            grid_dim: (gx, gy, 1),
            block_dim: (plan::MATMUL_THREADS, 1, 1),
            shared_mem_bytes: plan::MATMUL_SMEM_BYTES,
        };
        // SAFETY: xv is n x k, the weight m rows of k encoded values, out n x m.
        unsafe { b.launch(cfg) }.unwrap_or_else(|e| device_failure("matmul", e));
        if let Ok(mut p) = self.pool.lock() {
            p.give(xv);
        }
        self.tensor("matmul", out, n, m)
    }

    /// `gate_up_act` in fast numerics: one kernel when both weights have one type with a fast
    /// kernel and one shape (each value bitwise the separate fast `matmul`s and `act_mul`:
    /// the same per-row operations), else the separate ops.
    fn gate_up_fast(
        &self,
        x: &CudaTensor,
        gate: &CudaWeight,
        up: &CudaWeight,
        act: Activation,
    ) -> (CudaTensor, CudaTensor, CudaTensor) {
        let fused = self
            .k
            .fast_gu
            .iter()
            .find(|(id, _)| *id == gate.desc.id)
            .filter(|_| gate.desc == up.desc && gate.rows == up.rows && gate.cols == up.cols);
        let Some((_, f)) = fused else {
            let g = self.matmul(x, gate);
            let u = self.matmul(x, up);
            let a = self.act_mul(&g, &u, act);
            return (g, u, a);
        };
        assert_eq!(
            x.cols, gate.cols,
            "gate_up_act: x has {} columns, weight rows have {}",
            x.cols, gate.cols
        );
        let (n, k, m) = (x.rows, x.cols, gate.rows);
        let mut g = self.alloc_f32("gate_up_act", n * m);
        let mut u = self.alloc_f32("gate_up_act", n * m);
        let mut a = self.alloc_f32("gate_up_act", n * m);
        // One row: the kernel that also quantizes the activation for the down projection,
        // where its blocks fit one wave (and x's quantization is not in the buffer it writes).
        let fused_q8 = self
            .k
            .fast_gu_q8
            .iter()
            .find(|(id, _)| *id == gate.desc.id)
            .filter(|_| {
                gate_up_q8_knob()
                    && plan::gate_up_quantizes(n, m, self.k.n_sms)
                    && self.q8_act_of.get() != Some(x.id)
            });
        if let Some((_, fq)) = fused_q8 {
            {
                let q8 = self.q8_for(x);
                let Some(buf) = q8.as_ref() else {
                    unreachable!("quantize_q8 allocates it")
                };
                let (qv, dv) = (buf.slice(..k), buf.slice(k..plan::q8_bytes(1, k)));
                let mut out_q8 = self.q8_act_room(m);
                let Some(abuf) = out_q8.as_mut() else {
                    unreachable!("allocated above")
                };
                let (mut aq, mut ad) = abuf.split_at_mut(m);
                let (ki, mi) = (k as i32, m as i32);
                let (ai, c) = act_args(act);
                let mut b = self.stream.launch_builder(fq);
                b.arg(&*gate.data)
                    .arg(&*up.data)
                    .arg(&qv)
                    .arg(&dv)
                    .arg(&mut g)
                    .arg(&mut u)
                    .arg(&mut a)
                    .arg(&ki)
                    .arg(&mi)
                    .arg(&ai)
                    .arg(&c)
                    .arg(&mut aq)
                    .arg(&mut ad);
                let cfg = LaunchConfig {
                    grid_dim: ((m / 32) as u32, 1, 1),
                    block_dim: (plan::GATE_UP_Q8_THREADS, 1, 1),
                    shared_mem_bytes: 0,
                };
                // SAFETY: both weights m rows of k encoded values (checked equal), m a multiple
                // of 32 (`plan::gate_up_quantizes`): one block per 32 rows; the quantized input
                // is 1 x k with its block table; the outputs 1 x m, the activation's
                // quantization m bytes then m / 32 block records (`plan::q8_bytes(1, m)`).
                unsafe { b.launch(cfg) }.unwrap_or_else(|e| device_failure("gate_up_act", e));
            }
            let act_t = self.tensor("gate_up_act", a, n, m);
            self.q8_act_of.set(Some(act_t.id));
            return (
                self.tensor("gate_up_act", g, n, m),
                self.tensor("gate_up_act", u, n, m),
                act_t,
            );
        }
        if n > 0 && m > 0 {
            let q8 = self.q8_for(x);
            let Some(buf) = q8.as_ref() else {
                unreachable!("quantize_q8 allocates it")
            };
            let (qv, dv) = (buf.slice(..n * k), buf.slice(n * k..plan::q8_bytes(n, k)));
            let (gx, gy) = plan::fast_grid(n, m);
            let (ni, ki, mi) = (n as i32, k as i32, m as i32);
            let (ai, c) = act_args(act);
            let mut b = self.stream.launch_builder(f.for_rows(n));
            b.arg(&*gate.data)
                .arg(&*up.data)
                .arg(&qv)
                .arg(&dv)
                .arg(&mut g)
                .arg(&mut u)
                .arg(&mut a)
                .arg(&ni)
                .arg(&ki)
                .arg(&mi)
                .arg(&ai)
                .arg(&c);
            let cfg = LaunchConfig {
                grid_dim: (gx, gy, 1),
                block_dim: (plan::FAST_THREADS, 1, 1),
                shared_mem_bytes: 0,
            };
            // SAFETY: both weights m rows of k encoded values (checked equal); the quantized
            // activations n x k with their block table; the three outputs n x m.
            unsafe { b.launch(cfg) }.unwrap_or_else(|e| device_failure("gate_up_act", e));
        }
        (
            self.tensor("gate_up_act", g, n, m),
            self.tensor("gate_up_act", u, n, m),
            self.tensor("gate_up_act", a, n, m),
        )
    }
}

/// The q/k/v half of a norm-fused q/k/v launch's arguments (kernels.cu `NORM_MMV3_ARGS` after
/// `NORM_IN_ARGS`): the three weights (v's null without it), the three outputs (v's null without
/// it), their rows `m`.
macro_rules! qkv_launch_args {
    ($l:ident, $wq:ident, $wk:ident, $wv:ident, $with_v:ident, $q:ident, $k:ident, $v:ident, $m:ident, $null:ident) => {
        $l.arg(&*$wq.data).arg(&*$wk.data);
        match $with_v {
            true => $l.arg(&*$wv.data),
            false => $l.arg(&$null),
        };
        $l.arg(&mut $q).arg(&mut $k);
        match $v.as_mut() {
            Some(o) => $l.arg(o),
            None => $l.arg(&$null),
        };
        $l.arg(&$m[0]).arg(&$m[1]).arg(&$m[2]);
    };
}

impl Backend for CudaBackend {
    type Tensor = CudaTensor;
    type Weight = CudaWeight;
    type KvCache = CudaKvCache;

    fn name(&self) -> &str {
        &self.name
    }

    fn guard_violations(&self) -> Vec<String> {
        let Some(g) = &self.guards else {
            return Vec::new();
        };
        let pending = std::mem::take(&mut *g.pending.borrow_mut());
        if pending.is_empty() {
            return Vec::new();
        }
        if let Err(e) = self.stream.synchronize() {
            return vec![format!(
                "the device failed before the guards were read: {e}"
            )];
        }
        let mut out = Vec::new();
        let mut words = vec![0u32; GUARD_WORDS];
        for (ptr, n, op) in pending {
            for (side, at) in [
                ("before", ptr),
                ("after", ptr + ((GUARD_WORDS + n) * 4) as u64),
            ] {
                // SAFETY: both regions lie inside the live allocation at `ptr`
                // (GUARD_WORDS + n + GUARD_WORDS words); the stream is idle.
                let read = unsafe { cudarc::driver::result::memcpy_dtoh_sync(&mut words, at) };
                match read {
                    Err(e) => out.push(format!("{op}: guard {side} its output unreadable: {e}")),
                    Ok(()) => {
                        let bad = words.iter().filter(|&&w| w != GUARD_CANARY).count();
                        if bad > 0 {
                            out.push(format!(
                                "{op} wrote {bad} of the {GUARD_WORDS} guard words {side} its output of {n} values"
                            ));
                        }
                    }
                }
            }
        }
        out
    }

    fn hidden_taps(&self) -> &'static [&'static str] {
        // The split-key decode attention normalizes whole spans, the short decode attention
        // whole rows at their end, the flash prefill attention running sums: never single keys.
        if self.split_attention {
            &["kq_softmax"]
        } else {
            &[]
        }
    }

    fn replay_step(
        &self,
        key: StepKey,
        cache: &mut CudaKvCache,
        batch: &Batch,
        out: LogitsOut<'_>,
    ) -> Result<Option<StepOut>, BackendError> {
        let fk = FullKey {
            step: key,
            cache: self.cache_id(cache),
            long: plan::long_context(batch),
        };
        // The replay clock's instants (none without it: this is every decode step's path).
        let now = || self.replay_clock.is_some().then(std::time::Instant::now);
        let t0 = now();
        let marks = t0.map(|_| lockstep_graph::marks::take());
        let mut st = self.steps.borrow_mut();
        let st = &mut *st;
        // A launch ahead of another shape's graph: not this step.
        if st.pending.is_some_and(|k| k != fk) {
            st.cancel_ahead();
        }
        let Some(c) = st.graphs.get_mut(&fk) else {
            return Ok(None);
        };
        let gated = c.graph.gated();
        let token = batch.tokens.first().copied().unwrap_or(0);
        let changed = match Self::derive_tables(&mut c.store, batch, gated) {
            Ok(Some(changed)) => changed,
            other => {
                // A bad batch, or tables that do not fit: a launch ahead is not this step.
                st.cancel_ahead();
                return match other {
                    Err(e) => Err(e),
                    _ => {
                        st.graphs.remove(&fk);
                        Ok(None)
                    }
                };
            }
        };
        // The launch made ahead by the step before (`prelaunch`, below): taken when this is
        // the step it guessed (every table as staged but the token), else released as a
        // dummy step and this one launched after it.
        let mut taken = None;
        if st.pending.take().is_some() {
            if changed.is_empty() {
                taken = c.graph.open(token);
                st.ahead_taken += 1;
            } else if c.graph.cancel() {
                st.ahead_cancelled += 1;
            }
        }
        // Taken: nothing to write (every table was as staged).
        self.upload_changed(&mut c.store, &changed, t0)?;
        let t1 = now();
        let clock_on = |i: usize| {
            self.replay_clock.as_ref().map(|rc| {
                let mut rc = rc.borrow_mut();
                rc.in_replay = true;
                rc.events[i].record(&self.stream).is_ok()
            })
        };
        // Logits wanted on the host: where the graph's head can write them there itself, it
        // does, and no copy follows the graph.
        let on_host = matches!(out, LogitsOut::Lend(_) | LogitsOut::Full);
        let head_writes = c
            .graph
            .host_logits(on_host)
            .map_err(|e| BackendError::Other(format!("cuda step graph's head: {e}")))?
            && on_host;
        let before = clock_on(0);
        let launch_err = |e| BackendError::Other(format!("cuda step graph launch: {e}"));
        if taken.is_none() {
            match (&self.timeline, c.timeline) {
                (Some(t), Some(id)) => t
                    .borrow_mut()
                    .around(id, &self.stream, || c.graph.launch_with(token).map(|_| ())),
                _ => c.graph.launch_with(token).map(|_| ()),
            }
            .map_err(launch_err)?;
        }
        self.after_graph
            .record(&self.stream)
            .map_err(|e| BackendError::Other(format!("cuda step graph event: {e}")))?;
        let after = clock_on(1);
        let t2 = now();
        let staged = self.prestage(&mut c.store, batch, gated);
        // The next step's graph launched now, while this one runs, its token left to the gate:
        // only where the caller wants the logits on the host (their wait is an event's, which
        // does not wait for it) and the guess's K/V slot is the sequence's own.
        if staged
            && head_writes
            && self.timeline.is_none()
            && knobs::prelaunch_knob() == knobs::Prelaunch::On
            && steps::launch_ahead_safe(batch, cache.layout.block_size)
            && c.graph.prelaunch().map_err(launch_err)?
        {
            st.pending = Some(fk);
            st.launched_ahead += 1;
        }
        let t2b = now();
        if let Some(t) = taken {
            // The launch ahead ran on this token unless it timed out at its gate before the
            // host came (kernels.cu GATE_TIMEOUT_CYCLES): then it was a dummy step, and this one
            // runs again, after the launch ahead made just now is released as one too.
            self.after_graph
                .synchronize()
                .map_err(|e| BackendError::Other(format!("cuda step graph: {e}")))?;
            if !c.graph.ran_with(t, token) {
                if st.pending.take().is_some() && c.graph.cancel() {
                    st.ahead_cancelled += 1;
                }
                st.ahead_rerun += 1;
                let Some(changed) = Self::derive_tables(&mut c.store, batch, gated)? else {
                    st.graphs.remove(&fk);
                    return Ok(None);
                };
                self.upload_changed(&mut c.store, &changed, None)?;
                let again = c.graph.launch_with(token).map_err(launch_err)?;
                self.after_graph
                    .record(&self.stream)
                    .and_then(|_| self.after_graph.synchronize())
                    .map_err(|e| BackendError::Other(format!("cuda step graph: {e}")))?;
                if !c.graph.ran_with(again, token) {
                    return Err(BackendError::Other(
                        "cuda step graph: its embedding did not take the token at its gate".into(),
                    ));
                }
            }
        }
        let h = if head_writes {
            self.logits_from_head(&c.graph, &c.out, out)
        } else {
            self.logits_out(&c.out, out)
        };
        if let (Some(rc), Some(t0), Some(t1), Some(t2)) = (&self.replay_clock, t0, t1, t2) {
            let t3 = std::time::Instant::now();
            let mut rc = rc.borrow_mut();
            let rc = &mut *rc;
            let us = |d: std::time::Duration| d.as_secs_f64() * 1e6;
            let synced = rc.synced_at.take().unwrap_or(t3);
            let ms = |a: usize, b: usize| {
                rc.events[a]
                    .elapsed_ms(&rc.events[b])
                    .ok()
                    .map(|v| f64::from(v) * 1e3)
            };
            let timed = before == Some(true) && after == Some(true);
            let [entry, built, exit, replay_exit, returned] = marks.unwrap_or([None; 5]);
            let span = |a: Option<std::time::Instant>, b: Option<std::time::Instant>| {
                a.zip(b).map(|(a, b)| us(b.saturating_duration_since(a)))
            };
            let sample = replay_clock::ReplaySample {
                between_us: rc.last_end.map(|e| us(t0.saturating_duration_since(e))),
                caller_us: span(rc.last_end, entry),
                unwind_us: span(rc.last_end, exit),
                tail_us: span(rc.last_end, replay_exit),
                return_us: span(replay_exit, returned),
                engine_us: span(entry, built),
                graph_fn_us: span(built, Some(t0)),
                restage_us: us(t1 - t0),
                upload_us: us(rc.upload.0),
                uploads: rc.upload.1,
                tables: rc.upload.2,
                launch_us: us(t2 - t1),
                wait_us: us(synced.saturating_duration_since(t2)),
                ahead_us: t2b.map_or(0.0, |b| us(b.saturating_duration_since(t2))),
                finish_us: us(t3.saturating_duration_since(synced)),
                graph_us: if timed { ms(0, 1) } else { None },
                copy_us: if timed && rc.copy_recorded {
                    ms(1, 2)
                } else {
                    None
                },
            };
            rc.clock.push(sample);
            rc.clock
                .mark_counters(16, replay_clock::ThreadCounters::now);
            rc.in_replay = false;
            rc.copy_recorded = false;
            rc.last_end = Some(std::time::Instant::now());
        }
        let h = h?;
        st.replays += 1;
        lockstep_graph::marks::mark(lockstep_graph::marks::Mark::ReplayExit);
        Ok(Some(h))
    }

    fn begin_step(
        &self,
        key: StepKey,
        cache: &CudaKvCache,
        batch: &Batch,
    ) -> Result<(), BackendError> {
        let fk = FullKey {
            step: key,
            cache: self.cache_id(cache),
            long: plan::long_context(batch),
        };
        let mut st = self.steps.borrow_mut();
        // The ops run eagerly on the stream: a launch ahead must not hold them up.
        st.cancel_ahead();
        st.mode = Mode::Eager;
        st.broken = None;
        st.leaked = false;
        if !st.enabled
            || self.profile.is_some()
            || key.n_tokens == 0
            || key.n_tokens > steps::MAX_GRAPH_TOKENS
            || st.refused.contains(&fk)
        {
            return Ok(());
        }
        if let Some(mut store) = st.recorded.remove(&fk) {
            // The second step of this shape: stage its tables, then capture its ops.
            match self.restage(&mut store, batch) {
                Ok(true) => {}
                // Tables that do not fit, or a bad batch (the op reports it): run eagerly.
                Ok(false) | Err(_) => return Ok(()),
            }
            if self
                .stream
                .begin_capture(
                    cudarc::driver::sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED,
                )
                .is_err()
            {
                return Ok(());
            }
            st.mode = Mode::Capture;
            st.current = Some(store);
        } else if st.recorded.len() + st.graphs.len() < steps::MAX_GRAPHS {
            st.mode = Mode::Record;
            st.current = Some(StepStore {
                key: fk,
                inputs: Vec::new(),
                pool: Arc::new(Mutex::new(Pool {
                    unbounded: true,
                    ..Pool::default()
                })),
            });
        }
        Ok(())
    }

    fn end_step(
        &self,
        logits: CudaTensor,
        out: LogitsOut<'_>,
    ) -> Result<Option<StepOut>, BackendError> {
        let mode = self.steps.borrow().mode;
        match mode {
            Mode::Eager => {
                let h = self.logits_out(&logits, out)?;
                self.f16_overflowed()?;
                Ok(Some(h))
            }
            Mode::Record => {
                let h = self.logits_out(&logits, out)?;
                drop(logits);
                let mut st = self.steps.borrow_mut();
                st.mode = Mode::Eager;
                match (st.current.take(), st.broken.is_some()) {
                    (Some(store), false) => {
                        st.recorded.insert(store.key, store);
                    }
                    // Tables that cannot be staged: this shape runs eagerly from now on.
                    (Some(store), true) => {
                        st.refused.insert(store.key);
                    }
                    (None, _) => {}
                }
                Ok(Some(h))
            }
            Mode::Capture => {
                let mut st = self.steps.borrow_mut();
                st.mode = Mode::Eager;
                let store = st.current.take();
                let cluster = self
                    .k
                    .decode_layers_cluster
                    .as_ref()
                    .filter(|_| cluster::enabled())
                    .map(|f| f.cu_function());
                // A one-row step's LM head may write the logits on the host itself.
                let head =
                    (logits.rows == 1 && knobs::host_logits_knob()).then(|| graph_exec::HeadOf {
                        logits: logits.buf().device_ptr(&self.stream).0,
                        len: logits.cols,
                    });
                // A one-token step's embedding may take its token through a gate, so its
                // graph can be launched ahead of it (`prelaunch`), where launches ahead happen.
                let ids = store.as_ref().and_then(one_token_ids);
                let gate = ids
                    .filter(|_| steps::gates(knobs::prelaunch_knob(), out))
                    .map(|(vocab, _)| graph_exec::GateOf { vocab });
                let graph = graph_exec::StepGraph::end_capture(
                    &self.stream,
                    self.programmatic_module(),
                    cluster,
                    head,
                    gate,
                );
                match (graph, st.broken.take(), store) {
                    (Ok(Some(graph)), None, Some(store)) => {
                        let timeline = self.timeline.as_ref().and_then(|t| {
                            graph
                                .kernel_chain()
                                .ok()
                                .map(|chain| t.borrow_mut().add_graph(chain))
                        });
                        graph
                            .launch_with(ids.map_or(0, |(_, token)| token))
                            .map_err(|e| {
                                BackendError::Other(format!("cuda step graph launch: {e}"))
                            })?;
                        let h = self.logits_out(&logits, out)?;
                        st.captures += 1;
                        st.programmatic_edges += graph.programmatic_edges;
                        st.cluster_graphs += usize::from(graph.cluster_layers() > 0);
                        st.host_head_graphs += usize::from(graph.has_host_logits());
                        st.preloaded += graph.preloaded;
                        st.graphs.insert(
                            store.key,
                            Captured {
                                graph,
                                store,
                                out: logits,
                                timeline,
                            },
                        );
                        Ok(Some(h))
                    }
                    (_, _, store) => {
                        // Nothing ran: the caller runs the step again, eagerly.
                        st.failed += 1;
                        if let Some(s) = &store {
                            st.refused.insert(s.key);
                        }
                        if std::mem::take(&mut st.leaked) {
                            std::mem::forget(logits);
                            std::mem::forget(store);
                        }
                        Ok(None)
                    }
                }
            }
        }
    }

    fn logits_out(&self, logits: &CudaTensor, out: LogitsOut<'_>) -> Result<StepOut, BackendError> {
        let (k, picks) = match out {
            LogitsOut::Full => (0, &[][..]),
            LogitsOut::Lend(to) => {
                let (rows, n_vocab) = (logits.rows, logits.cols);
                self.host_with("to_host", logits.buf(), rows * n_vocab, |r| to.lend(r));
                self.mark("to_host");
                return Ok(StepOut::Lent { rows, n_vocab });
            }
            LogitsOut::Top(k) => (k, &[][..]),
            LogitsOut::TopPick(k, picks) => (k, picks),
        };
        if k > 0 {
            if let Some(rows) = self.top_on_device(logits, k, picks) {
                return Ok(StepOut::Top(rows));
            }
        }
        Ok(StepOut::from_host(self.to_host(logits), out))
    }

    fn abandon_step(&self) {
        // A failed step's f16 range flag must not fail the next one.
        if let Some(g) = self.gemm.as_ref().filter(|g| g.ran.replace(false)) {
            self.stream
                .memset_zeros(&mut *g.overflow.borrow_mut())
                .unwrap_or_else(|e| device_failure("f16 overflow flag", e));
        }
        let mut st = self.steps.borrow_mut();
        let mode = std::mem::replace(&mut st.mode, Mode::Eager);
        let store = st.current.take();
        if mode == Mode::Capture {
            let _ = self
                .stream
                .end_capture(cudarc::driver::sys::CUgraphInstantiate_flags(0));
            st.failed += 1;
            if std::mem::take(&mut st.leaked) {
                std::mem::forget(store);
            }
        }
    }

    fn load_weight(&self, w: WeightView<'_>) -> Result<CudaWeight, BackendError> {
        let bad = |why: String| BackendError::Weight {
            name: w.name.to_string(),
            why,
        };
        let q50_repacked = w.ty == lockstep_quant::GgmlType::Q5_0 && knobs::q50_repack_knob();
        let desc = plan::device_desc(w.ty, q50_repacked).ok_or_else(|| {
            bad(format!(
                "type {} is not supported by the cuda backend",
                w.ty
            ))
        })?;
        let n: u64 = w.dims.iter().product();
        let cols = w.dims.first().copied().unwrap_or(1) as usize;
        if cols == 0 || !cols.is_multiple_of(desc.block as usize) {
            return Err(bad(format!(
                "rows of {cols} values are not whole {} blocks of {}",
                w.ty, desc.block
            )));
        }
        if i32::try_from(cols).is_err() {
            return Err(bad(format!("rows of {cols} values are too long")));
        }
        let rows = (n as usize) / cols;
        let expected = rows * (cols / desc.block as usize) * w.ty.type_size();
        if w.data.len() != expected {
            return Err(bad(format!(
                "{} bytes for {rows} x {cols} {} (expected {expected})",
                w.data.len(),
                w.ty
            )));
        }
        let data = if w.ty == lockstep_quant::GgmlType::Q6K && knobs::q6k_planar_knob() {
            let planar = plan::q6k_planar(w.data)
                .ok_or_else(|| bad("not whole Q6_K super-blocks".to_string()))?;
            self.upload_aligned(w.name, &planar, plan::Q6K_GROUP)?
        } else if w.ty == lockstep_quant::GgmlType::Q8_0 && knobs::q80_planar_knob() {
            let planar =
                plan::q80_planar(w.data).ok_or_else(|| bad("not whole Q8_0 blocks".to_string()))?;
            self.upload_aligned(w.name, &planar, plan::Q80_GROUP)?
        } else {
            let repacked = if q50_repacked {
                Some(
                    plan::q50_repacked(w.data)
                        .ok_or_else(|| bad("not whole Q5_0 blocks".to_string()))?,
                )
            } else {
                None
            };
            let bytes = repacked.as_deref().unwrap_or(w.data);
            // Padded: the matmul stages rows with aligned 16-byte loads.
            let mut padded = Vec::with_capacity(bytes.len() + plan::WEIGHT_PAD);
            padded.extend_from_slice(bytes);
            padded.resize(bytes.len() + plan::WEIGHT_PAD, 0);
            WeightBytes {
                alloc: self.upload(w.name, &padded)?,
                inner: None,
            }
        };
        let vector = if rows == 1 {
            let v =
                lockstep_quant::dequantize(w.ty, w.data, cols).map_err(|e| bad(e.to_string()))?;
            Some(self.upload(w.name, &v)?)
        } else {
            None
        };
        Ok(CudaWeight {
            desc,
            rows,
            cols,
            data,
            vector,
        })
    }

    fn alloc_kv(&self, layout: KvLayout) -> Result<CudaKvCache, BackendError> {
        let n = layout
            .n_layers
            .checked_mul(layout.n_slots())
            .and_then(|n| n.checked_mul(layout.kv_dim))
            .ok_or_else(|| BackendError::Kv(format!("layout {layout:?} overflows")))?;
        let (words, ty) = if self.kv_f16 { (1, "f16") } else { (2, "f32") };
        let alloc = |what: &str| {
            self.stream
                .alloc_zeros::<u16>(n.max(1) * words)
                .map_err(|e| {
                    BackendError::Kv(format!(
                        "allocating {what} ({n} {ty} values) on the GPU: {e}"
                    ))
                })
        };
        Ok(CudaKvCache {
            layout,
            k: alloc("K")?,
            v: alloc("V")?,
        })
    }

    fn to_host(&self, t: &CudaTensor) -> HostTensor {
        let v = self.host_f32("to_host", t.buf(), t.rows * t.cols);
        self.mark("to_host");
        HostTensor::matrix(t.rows, t.cols, v)
    }

    fn embed(&self, table: &CudaWeight, ids: &[u32]) -> Result<CudaTensor, BackendError> {
        // A step's first op (a tapped step begins here, not in `begin_step`): a launch ahead
        // must not hold up its kernels.
        if let Ok(mut st) = self.steps.try_borrow_mut() {
            st.cancel_ahead();
        }
        for (row, &id) in ids.iter().enumerate() {
            if id as usize >= table.rows {
                return Err(BackendError::TokenOutOfRange {
                    id,
                    row,
                    vocab: table.rows,
                });
            }
        }
        let kind = InputKind::Ids { vocab: table.rows };
        self.stage(kind, HostInput::U32(ids.to_vec()))?;
        let mut out = self.alloc_f32("embed", ids.len() * table.cols);
        if !ids.is_empty() {
            let cols = table.cols as i32;
            let d = table.desc;
            self.with_input(kind, |dev| {
                let DevInput::U32(d_ids) = dev else {
                    unreachable!("ids are u32")
                };
                let mut b = self.stream.launch_builder(&self.k.embed_rows);
                b.arg(&*table.data)
                    .arg(d_ids)
                    .arg(&mut out)
                    .arg(&cols)
                    .arg(&d.id)
                    .arg(&d.block)
                    .arg(&d.bytes);
                let cfg = LaunchConfig {
                    grid_dim: (ids.len() as u32, 1, 1),
                    block_dim: (256, 1, 1),
                    shared_mem_bytes: 0,
                };
                // SAFETY: `ids` were checked against the table's rows; `out` holds ids x cols.
                unsafe { b.launch(cfg) }
                    .map_err(|e| BackendError::Other(format!("cuda embed: {e}")))
            })?;
        }
        Ok(self.tensor("embed", out, ids.len(), table.cols))
    }

    fn matmul(&self, x: &CudaTensor, w: &CudaWeight) -> CudaTensor {
        assert_eq!(
            x.cols, w.cols,
            "matmul: x has {} columns, weight rows have {}",
            x.cols, w.cols
        );
        let (n, k, m) = (x.rows, x.cols, w.rows);
        // Long steps (prefill) on the tensor cores, unless deterministic.
        if let Some(g) = self.gemm.as_ref().filter(|_| n >= GEMM_MIN_ROWS && m > 0) {
            let mut out = self.alloc_f32("matmul", n * m);
            self.matmul_gemm(g, x, w, &mut out);
            return self.tensor("matmul", out, n, m);
        }
        if self.numerics == Numerics::Fast && plan::fast_quantizes(w.desc.id) {
            return self.matmul_fast(x, w);
        }
        let mut out = self.alloc_f32("matmul", n * m);
        if n > 0 && m > 0 {
            let (gx, gy) = plan::matmul_grid(n, m);
            let Some((_, t1, t8)) = self.k.matmul.iter().find(|(id, _, _)| *id == w.desc.id) else {
                unreachable!("load_weight admits only types with kernels")
            };
            let f = if n == 1 { t1 } else { t8 };
            let (ni, ki, mi) = (n as i32, k as i32, m as i32);
            let mut b = self.stream.launch_builder(f);
            b.arg(&*w.data)
                .arg(x.buf())
                .arg(&mut out)
                .arg(&ni)
                .arg(&ki)
                .arg(&mi);
            let cfg = LaunchConfig {
                grid_dim: (gx, gy, 1),
                block_dim: (plan::MATMUL_THREADS, 1, 1),
                shared_mem_bytes: plan::MATMUL_SMEM_BYTES,
            };
            // SAFETY: x is n x k, the weight m rows of k encoded values, out n x m (checked).
            unsafe { b.launch(cfg) }.unwrap_or_else(|e| device_failure("matmul", e));
        }
        self.tensor("matmul", out, n, m)
    }

    /// One kernel for `gate = x Wg^T`, `up = x Wu^T` and `act(gate) * up` when both weights
    /// have one type and shape: each warp decodes two rows of each, the activation is applied
    /// as the two dots finish. Every value is bitwise what `matmul` and `act_mul` give.
    fn gate_up_act(
        &self,
        x: &CudaTensor,
        gate: &CudaWeight,
        up: &CudaWeight,
        act: Activation,
    ) -> (CudaTensor, CudaTensor, CudaTensor) {
        if self.numerics == Numerics::Fast
            && plan::fast_quantizes(gate.desc.id)
            && (self.gemm.is_none() || x.rows < GEMM_MIN_ROWS)
        {
            return self.gate_up_fast(x, gate, up, act);
        }
        let fused = self
            .k
            .gate_up
            .iter()
            .find(|(id, _, _)| *id == gate.desc.id)
            .filter(|_| gate.desc == up.desc && gate.rows == up.rows && gate.cols == up.cols)
            .filter(|_| self.gemm.is_none() || x.rows < GEMM_MIN_ROWS);
        let Some((_, t1, t8)) = fused else {
            let g = self.matmul(x, gate);
            let u = self.matmul(x, up);
            let a = self.act_mul(&g, &u, act);
            return (g, u, a);
        };
        assert_eq!(
            x.cols, gate.cols,
            "gate_up_act: x has {} columns, weight rows have {}",
            x.cols, gate.cols
        );
        let (n, k, m) = (x.rows, x.cols, gate.rows);
        let mut g = self.alloc_f32("gate_up_act", n * m);
        let mut u = self.alloc_f32("gate_up_act", n * m);
        let mut a = self.alloc_f32("gate_up_act", n * m);
        if n > 0 && m > 0 {
            let (gx, gy) = plan::gate_up_grid(n, m);
            let f = if n == 1 { t1 } else { t8 };
            let (ni, ki, mi) = (n as i32, k as i32, m as i32);
            let (ai, c) = act_args(act);
            let mut b = self.stream.launch_builder(f);
            b.arg(&*gate.data)
                .arg(&*up.data)
                .arg(x.buf())
                .arg(&mut g)
                .arg(&mut u)
                .arg(&mut a)
                .arg(&ni)
                .arg(&ki)
                .arg(&mi)
                .arg(&ai)
                .arg(&c);
            let cfg = LaunchConfig {
                grid_dim: (gx, gy, 1),
                block_dim: (plan::MATMUL_THREADS, 1, 1),
                shared_mem_bytes: plan::MATMUL_SMEM_BYTES,
            };
            // SAFETY: x is n x k; both weights m rows of k encoded values (checked equal);
            // the three outputs n x m.
            unsafe { b.launch(cfg) }.unwrap_or_else(|e| device_failure("gate_up_act", e));
        }
        (
            self.tensor("gate_up_act", g, n, m),
            self.tensor("gate_up_act", u, n, m),
            self.tensor("gate_up_act", a, n, m),
        )
    }

    fn add_bias(&self, x: &CudaTensor, bias: &CudaWeight) -> CudaTensor {
        assert_eq!(x.cols, bias.cols, "bias length");
        let v = self.vector(bias, "add_bias");
        let n = x.rows * x.cols;
        let mut out = self.alloc_f32("add_bias", n);
        let (r, c) = (x.rows as i32, x.cols as i32);
        let mut b = self.stream.launch_builder(&self.k.add_bias);
        b.arg(x.buf()).arg(v).arg(&mut out).arg(&r).arg(&c);
        // SAFETY: one thread per element of x, bias of x.cols.
        unsafe { b.launch(self.elementwise("add_bias", n)) }
            .unwrap_or_else(|e| device_failure("add_bias", e));
        self.tensor("add_bias", out, x.rows, x.cols)
    }

    fn rms_norm(&self, x: &CudaTensor, weight: &CudaWeight, eps: f32) -> CudaTensor {
        let g = weight.cols;
        assert!(
            g > 0 && weight.rows == 1 && x.cols.is_multiple_of(g),
            "rms_norm group {g} vs {} columns",
            x.cols
        );
        let v = self.vector(weight, "rms_norm");
        let groups = x.rows * x.cols / g;
        let mut out = self.alloc_f32("rms_norm", x.rows * x.cols);
        let quant = self.norm_quantizes(x.rows, x.cols, g);
        if groups > 0 {
            let gi = g as i32;
            let null = 0u64;
            let nk = x.rows * x.cols;
            let mut q8 = quant.then(|| self.q8_room(x.rows, x.cols));
            let mut parts = q8_parts(&mut q8, nk);
            let mut b = self.stream.launch_builder(&self.k.rms_norm);
            b.arg(x.buf()).arg(v).arg(&mut out).arg(&gi).arg(&eps);
            match parts.as_mut() {
                Some((q, d)) => b.arg(q).arg(d),
                None => b.arg(&null).arg(&null),
            };
            // SAFETY: one block per group of g values; weight has g values; the quantized
            // buffer (when given) has room for q8_bytes(rows, cols).
            unsafe { b.launch(Self::norm_cfg(groups, g)) }
                .unwrap_or_else(|e| device_failure("rms_norm", e));
        }
        let t = self.tensor("rms_norm", out, x.rows, x.cols);
        if quant {
            self.q8_of.set(Some(t.id));
        }
        t
    }

    fn residual_norm(
        &self,
        a: &CudaTensor,
        b: &CudaTensor,
        post: Option<&CudaWeight>,
        next: Option<&CudaWeight>,
        eps: f32,
    ) -> Residual<CudaTensor> {
        let row = |w: Option<&CudaWeight>| w.is_none_or(|w| w.rows == 1 && w.cols == a.cols);
        if !row(post)
            || !row(next)
            || (post.is_none() && next.is_none())
            || !plan::residual_fits(a.cols)
        {
            // Norms of groups within a row, or a plain add: the separate ops.
            return residual_norm_unfused(self, a, b, post, next, eps);
        }
        assert!(a.rows == b.rows && a.cols == b.cols, "add: shapes differ");
        let (n, k) = (a.rows, a.cols);
        let mut bn = post.map(|_| self.alloc_f32("rms_norm", n * k));
        let mut sum = self.alloc_f32("add", n * k);
        let mut out = next.map(|_| self.alloc_f32("rms_norm", n * k));
        let quant = next.is_some() && self.norm_quantizes(n, k, k);
        if n > 0 {
            let gi = k as i32;
            let null = 0u64;
            let mut q8 = quant.then(|| self.q8_room(n, k));
            let mut parts = q8_parts(&mut q8, n * k);
            let mut l = self.stream.launch_builder(&self.k.residual_norm);
            l.arg(a.buf()).arg(b.buf());
            match post {
                Some(w) => l.arg(self.vector(w, "rms_norm")),
                None => l.arg(&null),
            };
            match bn.as_mut() {
                Some(o) => l.arg(o),
                None => l.arg(&null),
            };
            l.arg(&mut sum);
            match next {
                Some(w) => l.arg(self.vector(w, "rms_norm")),
                None => l.arg(&null),
            };
            match out.as_mut() {
                Some(o) => l.arg(o),
                None => l.arg(&null),
            };
            l.arg(&gi).arg(&eps);
            match parts.as_mut() {
                Some((q, d)) => l.arg(q).arg(d),
                None => l.arg(&null).arg(&null),
            };
            let mut cfg = Self::norm_cfg(n, k);
            cfg.grid_dim.1 = plan::residual_parts(n, k, norm_parts_knob());
            // SAFETY: a, b, and every output are n x k, one block per row (or per part of the
            // row, each writing its own values); the weights have k values (checked); the
            // quantized buffer (when given) has room for q8_bytes(n, k).
            unsafe { l.launch(cfg) }.unwrap_or_else(|e| device_failure("residual_norm", e));
        }
        let post = bn.map(|o| self.tensor("rms_norm", o, n, k));
        let sum = self.tensor("add", sum, n, k);
        let normed = out.map(|o| self.tensor("rms_norm", o, n, k));
        if let Some(t) = normed.as_ref().filter(|_| quant) {
            self.q8_of.set(Some(t.id));
        }
        Residual { post, sum, normed }
    }

    fn residual_norm_then(
        &self,
        a: &CudaTensor,
        b: &CudaTensor,
        post: Option<&CudaWeight>,
        next: &CudaWeight,
        eps: f32,
        then: NormThen<'_, CudaWeight>,
    ) -> ResidualThen<CudaTensor> {
        let (n, g) = (a.rows, a.cols);
        let row = |w: &CudaWeight| w.rows == 1 && w.cols == g;
        let fast =
            |w: &CudaWeight| w.cols == g && plan::FAST.iter().any(|t| t.id() as i32 == w.desc.id);
        let consumer = match then {
            NormThen::Qkv { wq, wk, .. } => fast(wq) && wk.desc == wq.desc && wk.cols == g,
            NormThen::GateUp { gate, up, .. } => {
                fast(gate) && up.desc == gate.desc && up.rows == gate.rows && up.cols == g
            }
        };
        // Rows longer than the fused blocks take (`plan::norm_fuses_long`): at most one block of
        // 1024 threads an SM, the norm once a block, rows grid-stride.
        let long = !plan::norm_fuses(n, g) && plan::norm_fuses_long(n, g) && norm_long_knob();
        let long_kernel = match then {
            NormThen::Qkv { wq, wv, .. } if wv.desc == wq.desc => {
                find_kernel(&self.k.norm_long_mm3, wq.desc.id)
            }
            NormThen::Qkv { wq, wv, .. } => mixed_pair(&self.k.mixed_long_mm3, wq, wv),
            NormThen::GateUp { gate, .. } => find_kernel(&self.k.norm_long_gu, gate.desc.id),
        };
        let long_ok = long
            && long_kernel.is_some()
            && match then {
                NormThen::Qkv { wv, .. } => fast(wv),
                NormThen::GateUp { .. } => true,
            };
        if self.numerics != Numerics::Fast
            || !norm_fuse_knob()
            || !(plan::norm_fuses(n, g) || long_ok)
            || b.rows != n
            || b.cols != g
            || !post.is_none_or(row)
            || !row(next)
            || !consumer
        {
            return residual_norm_then_unfused(self, a, b, post, next, eps, then);
        }
        let mut bn = post.map(|_| self.alloc_f32("rms_norm", g));
        let mut sum = self.alloc_f32("add", g);
        let mut out = self.alloc_f32("rms_norm", g);
        let null = 0u64;
        let (gi, nt) = (g as i32, plan::norm_threads(g) as i32);
        let mut q8 = self.q8_room(1, g);
        let Some(q8buf) = q8.as_mut() else {
            unreachable!("q8_room allocates it")
        };
        let (mut qv, mut dv) = q8buf.split_at_mut(g);
        // residual_norm's arguments, in its order (kernels.cu NORM_IN_ARGS).
        macro_rules! norm_args {
            ($l:ident) => {
                $l.arg(a.buf()).arg(b.buf());
                match post {
                    Some(w) => $l.arg(self.vector(w, "rms_norm")),
                    None => $l.arg(&null),
                };
                match bn.as_mut() {
                    Some(o) => $l.arg(o),
                    None => $l.arg(&null),
                };
                $l.arg(&mut sum)
                    .arg(self.vector(next, "rms_norm"))
                    .arg(&mut out)
                    .arg(&gi)
                    .arg(&eps)
                    .arg(&nt)
                    .arg(&mut qv)
                    .arg(&mut dv);
            };
        }
        // Both launches: a, b and the norm outputs are one row of g values (g a multiple of
        // 32, at most NORM_FUSED_MAX: `plan::norm_fuses`, or NORM_LONG_MAX with the long
        // kernels: `plan::norm_fuses_long`), the norm weights g values (checked); the
        // quantized buffer has room for q8_bytes(1, g); the block has at least norm_threads(g)
        // threads; the consumer's weights are rows of g encoded values (checked) and its
        // outputs have their row counts. Blocks of `plan::norm_fused_block` threads for the
        // consumer's rows (one a warp), or the long kernels' grid (`plan::norm_long_grid`).
        let block = |rows: usize| {
            if long_ok {
                return (
                    plan::NORM_LONG_THREADS,
                    plan::norm_long_grid(rows, self.k.n_sms),
                );
            }
            let threads = plan::norm_fused_block(g, rows, self.k.n_sms);
            (threads, rows.div_ceil((threads / 32) as usize) as u32)
        };
        let outs = match then {
            NormThen::Qkv { wq, wk, wv } => {
                let mixed = match long_kernel.filter(|_| long_ok) {
                    Some(f) => Some(f),
                    None => (fast(wv) && wv.desc != wq.desc)
                        .then(|| self.mixed_qkv(wq, wv))
                        .flatten(),
                };
                let f = match mixed {
                    Some(f) => f,
                    None => {
                        let Some((_, f)) = self.k.norm_mm3.iter().find(|(id, _)| *id == wq.desc.id)
                        else {
                            unreachable!("every fast type has its fused kernel")
                        };
                        f
                    }
                };
                let with_v = fast(wv) && (wv.desc == wq.desc || mixed.is_some());
                let mut q = self.alloc_f32("matmul", wq.rows);
                let mut k = self.alloc_f32("matmul", wk.rows);
                let mut v = with_v.then(|| self.alloc_f32("matmul", wv.rows));
                let m = [
                    wq.rows as i32,
                    wk.rows as i32,
                    if with_v { wv.rows as i32 } else { 0 },
                ];
                let total = m.iter().map(|&r| r as usize).sum::<usize>();
                let (threads, blocks) = block(total);
                let cfg = LaunchConfig {
                    grid_dim: (blocks, 1, 1),
                    block_dim: (threads, 1, 1),
                    shared_mem_bytes: 0,
                };
                let mut l = self.stream.launch_builder(f);
                norm_args!(l);
                qkv_launch_args!(l, wq, wk, wv, with_v, q, k, v, m, null);
                // SAFETY: see "both launches" above; m2 = 0 (no v) leaves W2 untouched.
                unsafe { l.launch(cfg) }
                    .unwrap_or_else(|e| device_failure("residual_norm_then", e));
                drop(q8);
                let (normed, (q, k, v)) = self.norm_qkv_outputs(out, q, k, v, [wq, wk, wv]);
                return ResidualThen {
                    post: bn.map(|o| self.tensor("rms_norm", o, 1, g)),
                    sum: self.tensor("add", sum, 1, g),
                    normed,
                    outs: (q, k, v),
                };
            }
            NormThen::GateUp { gate, up, act } => {
                let m = gate.rows;
                // Blocks of 32 rows that also quantize the activation for the down projection
                // (where they fit one wave, as `gate_up_act` decides; only for the 32-value
                // block types, whose first weight units fit the registers of such a block, and
                // after a single norm: `plan::norm_fused_gate_up_quantizes`) only when
                // `LOCKSTEP_CUDA_NORM_GATE_UP_Q8=1` asks: on the H200 the 8-row blocks and the
                // separate quantizer are faster (`norm_gate_up_q8_knob`).
                let quantizes = !long_ok
                    && gate_up_q8_knob()
                    && norm_gate_up_q8_knob()
                    && plan::norm_fused_gate_up_quantizes(
                        m,
                        self.k.n_sms,
                        gate.desc.id,
                        post.is_some(),
                    );
                let list = if long_ok {
                    &self.k.norm_long_gu
                } else if quantizes {
                    &self.k.norm_gu_q8
                } else {
                    &self.k.norm_gu
                };
                let Some((_, f)) = list.iter().find(|(id, _)| *id == gate.desc.id) else {
                    unreachable!("every fast type has its fused kernels")
                };
                let mut gv = self.alloc_f32("gate_up_act", m);
                let mut uv = self.alloc_f32("gate_up_act", m);
                let mut av = self.alloc_f32("gate_up_act", m);
                let mi = m as i32;
                let (ai, c) = act_args(act);
                let mut act_q8 = quantizes.then(|| self.q8_act_room(m));
                let mut act_parts = q8_parts(&mut act_q8, m);
                let cfg = if quantizes {
                    LaunchConfig {
                        grid_dim: ((m / 32) as u32, 1, 1),
                        block_dim: (plan::GATE_UP_Q8_THREADS, 1, 1),
                        shared_mem_bytes: 0,
                    }
                } else {
                    let (threads, blocks) = block(m);
                    LaunchConfig {
                        grid_dim: (blocks, 1, 1),
                        block_dim: (threads, 1, 1),
                        shared_mem_bytes: 0,
                    }
                };
                let mut l = self.stream.launch_builder(f);
                norm_args!(l);
                l.arg(&*gate.data)
                    .arg(&*up.data)
                    .arg(&mut gv)
                    .arg(&mut uv)
                    .arg(&mut av)
                    .arg(&mi)
                    .arg(&ai)
                    .arg(&c);
                if let Some((q, d)) = act_parts.as_mut() {
                    l.arg(q).arg(d);
                }
                // SAFETY: see "both launches" above; when quantizing, m is a multiple of 32
                // (`plan::gate_up_quantizes`), one 32-row block each, and the activation's
                // buffer has room for q8_bytes(1, m).
                unsafe { l.launch(cfg) }
                    .unwrap_or_else(|e| device_failure("residual_norm_then", e));
                drop(act_q8);
                drop(q8);
                let act_t = self.tensor("gate_up_act", av, 1, m);
                if quantizes {
                    self.q8_act_of.set(Some(act_t.id));
                }
                (
                    self.tensor("gate_up_act", gv, 1, m),
                    self.tensor("gate_up_act", uv, 1, m),
                    act_t,
                )
            }
        };
        let normed = self.tensor("rms_norm", out, 1, g);
        self.q8_of.set(Some(normed.id));
        ResidualThen {
            post: bn.map(|o| self.tensor("rms_norm", o, 1, g)),
            sum: self.tensor("add", sum, 1, g),
            normed,
            outs,
        }
    }

    fn scale_norm_then(
        &self,
        x: &CudaTensor,
        scale: Option<f32>,
        norm: &CudaWeight,
        eps: f32,
        then: NormThen<'_, CudaWeight>,
    ) -> ScaleNormThen<CudaTensor> {
        let (n, g) = (x.rows, x.cols);
        let fast =
            |w: &CudaWeight| w.cols == g && plan::FAST.iter().any(|t| t.id() as i32 == w.desc.id);
        let NormThen::Qkv { wq, wk, wv } = then else {
            return scale_norm_then_unfused(self, x, scale, norm, eps, then);
        };
        // Rows longer than the fused blocks take: the long kernels' grid, as in
        // `residual_norm_then`.
        let long = !plan::norm_fuses(n, g) && plan::norm_fuses_long(n, g) && norm_long_knob();
        if self.numerics != Numerics::Fast
            || !norm_fuse_knob()
            || !scale_norm_knob()
            || !(plan::norm_fuses(n, g) || long)
            || !(norm.rows == 1 && norm.cols == g)
            || !fast(wq)
            || wk.desc != wq.desc
            || wk.cols != g
        {
            return scale_norm_then_unfused(self, x, scale, norm, eps, then);
        }
        // v of the q/k type, or of a type paired with it (`plan::MIXED_QKV`); else v is its
        // own matmul on the quantization the kernel leaves, as in `residual_norm_then`.
        // (The long kernels take v of another type only in a pair, as `residual_norm_then`'s.)
        let (one, pairs) = if long {
            (&self.k.scale_long_mm3, &self.k.mixed_scale_long_mm3)
        } else {
            (&self.k.scale_norm_mm3, &self.k.mixed_scale_mm3)
        };
        let paired = (fast(wv) && wv.desc != wq.desc && (long || mixed_qkv_knob()))
            .then(|| mixed_pair(pairs, wq, wv))
            .flatten();
        if long && fast(wv) && wv.desc != wq.desc && paired.is_none() {
            return scale_norm_then_unfused(self, x, scale, norm, eps, then);
        }
        let with_v = fast(wv) && (wv.desc == wq.desc || paired.is_some());
        let f = match paired {
            Some(f) => f,
            None => {
                let Some((_, f)) = one.iter().find(|(id, _)| *id == wq.desc.id) else {
                    unreachable!("every fast type has its scaled q/k/v kernel")
                };
                f
            }
        };
        let mut sum = scale.map(|_| self.alloc_f32("scale", g));
        let mut out = self.alloc_f32("rms_norm", g);
        let mut q = self.alloc_f32("matmul", wq.rows);
        let mut k = self.alloc_f32("matmul", wk.rows);
        let mut v = with_v.then(|| self.alloc_f32("matmul", wv.rows));
        let null = 0u64;
        let (gi, nt) = (g as i32, plan::norm_threads(g) as i32);
        let s = scale.unwrap_or(1.0);
        let mut q8 = self.q8_room(1, g);
        let Some(q8buf) = q8.as_mut() else {
            unreachable!("q8_room allocates it")
        };
        let (mut qv, mut dv) = q8buf.split_at_mut(g);
        let m = [
            wq.rows as i32,
            wk.rows as i32,
            if with_v { wv.rows as i32 } else { 0 },
        ];
        let total = m.iter().map(|&r| r as usize).sum::<usize>();
        let (threads, blocks) = if long {
            (
                plan::NORM_LONG_THREADS,
                plan::norm_long_grid(total, self.k.n_sms),
            )
        } else {
            let t = plan::norm_fused_block(g, total, self.k.n_sms);
            (t, total.div_ceil((t / 32) as usize) as u32)
        };
        let cfg = LaunchConfig {
            grid_dim: (blocks, 1, 1),
            block_dim: (threads, 1, 1),
            shared_mem_bytes: 0,
        };
        // NORM_MMV3_ARGS then s: a (the embedding row), b, pw, bn (null: not read), sum (the
        // scaled row, or null without a scale), nw, out, g, eps, nt, q, ds, the weights, the
        // outputs, their rows.
        let mut l = self.stream.launch_builder(f);
        l.arg(x.buf()).arg(&null).arg(&null).arg(&null);
        match sum.as_mut() {
            Some(o) => l.arg(o),
            None => l.arg(&null),
        };
        l.arg(self.vector(norm, "rms_norm"))
            .arg(&mut out)
            .arg(&gi)
            .arg(&eps)
            .arg(&nt)
            .arg(&mut qv)
            .arg(&mut dv);
        qkv_launch_args!(l, wq, wk, wv, with_v, q, k, v, m, null);
        l.arg(&s);
        // SAFETY: x and the outputs are one row of g values (g a multiple of 32, at most
        // NORM_FUSED_MAX: `plan::norm_fuses`, or NORM_LONG_MAX with the long kernels:
        // `plan::norm_fuses_long`), the norm weights g values (checked); the quantized buffer
        // has room for q8_bytes(1, g); the block has at least norm_threads(g) threads
        // (`plan::norm_fused_block`, or the long kernels' 1024); the weights are rows of g
        // encoded values (checked) and each output has its weight's rows; m2 = 0 (no v)
        // leaves W2 untouched.
        unsafe { l.launch(cfg) }.unwrap_or_else(|e| device_failure("scale_norm_then", e));
        drop(q8);
        let (normed, outs) = self.norm_qkv_outputs(out, q, k, v, [wq, wk, wv]);
        ScaleNormThen {
            scaled: sum.map(|o| self.tensor("scale", o, 1, g)),
            normed,
            outs,
        }
    }

    fn matmul_qkv(
        &self,
        x: &CudaTensor,
        wq: &CudaWeight,
        wk: &CudaWeight,
        wv: &CudaWeight,
    ) -> (CudaTensor, CudaTensor, CudaTensor) {
        let n = x.rows;
        let one_launch = |w: &CudaWeight| {
            self.numerics == Numerics::Fast
                && w.cols == x.cols
                && plan::FAST.iter().any(|t| t.id() as i32 == w.desc.id)
                && !(self.gemm.is_some() && n >= GEMM_MIN_ROWS)
        };
        if !one_launch(wq) || !one_launch(wk) || wq.desc != wk.desc {
            return (self.matmul(x, wq), self.matmul(x, wk), self.matmul(x, wv));
        }
        if one_launch(wv) && wv.desc == wq.desc {
            let mut o = self.matmul_fast_multi(x, &[wq, wk, wv]).into_iter();
            let (Some(q), Some(k), Some(v)) = (o.next(), o.next(), o.next()) else {
                unreachable!("three weights, three products")
            };
            return (q, k, v);
        }
        // v of another type (Q4_K_M files keep some layers' v in Q6_K): one row in one launch,
        // two rows a warp (plan::qkv_mixed_one_launch); else q and k together, v alone.
        let ms = [wq.rows, wk.rows, wv.rows];
        let mixed = mixed_pair(&self.k.mixed_mm3_2r, wq, wv).filter(|_| {
            one_launch(wv) && plan::qkv_mixed_one_launch(n, ms, mixed_qkv_two_rows_knob())
        });
        if let Some(kernel) = mixed {
            let mut o = self
                .matmul_fast_multi_with(x, &[wq, wk, wv], Some(kernel))
                .into_iter();
            let (Some(q), Some(k), Some(v)) = (o.next(), o.next(), o.next()) else {
                unreachable!("three weights, three products")
            };
            return (q, k, v);
        }
        let mut o = self.matmul_fast_multi(x, &[wq, wk]).into_iter();
        let (Some(q), Some(k)) = (o.next(), o.next()) else {
            unreachable!("two weights, two products")
        };
        (q, k, self.matmul(x, wv))
    }

    fn rope_store(
        &self,
        cache: &mut CudaKvCache,
        layer: usize,
        qkv: QkvIn<'_, Self>,
        positions: &[u32],
        p: RopeParams,
        batch: &Batch,
    ) -> Result<QkRoped<CudaTensor>, BackendError> {
        let (q, k, v) = (qkv.q, qkv.k, qkv.v);
        let hd = p.head_dim;
        let fits = self.rope_store_fits(cache, &qkv, positions, p);
        let l = cache.layout;
        if !fits || q.rows == 0 {
            // Shapes the fused kernel does not take (or nothing to do): the separate ops,
            // which check and report every mismatch.
            return rope_store_unfused(self, cache, layer, qkv, positions, p, batch);
        }
        let QkvIn {
            q_norm,
            k_norm,
            eps,
            ..
        } = qkv;
        self.check_kv_store(cache, layer, k, v, batch)?;
        let (rows, n_heads, n_kv_heads) = (q.rows, q.cols / hd, k.cols / hd);
        let half = p.n_rot / 2;
        let rope_kind = self.stage_rope_table(positions, p)?;
        let slots_kind = InputKind::KvSlots {
            n_slots: l.n_slots(),
        };
        self.stage(slots_kind, HostInput::U32(batch.slots.clone()))?;
        let mut q_normed = q_norm.map(|_| self.alloc_f32("rms_norm", q.rows * q.cols));
        let mut k_normed = k_norm.map(|_| self.alloc_f32("rms_norm", k.rows * k.cols));
        let mut q_rope = self.alloc_f32("rope", q.rows * q.cols);
        let mut k_rope = self.alloc_f32("rope", k.rows * k.cols);
        let base = layer * l.n_slots();
        let null = 0u64;
        let (nh, nkh, hdi, hi, ri) = (
            n_heads as i32,
            n_kv_heads as i32,
            hd as i32,
            half as i32,
            rows as i32,
        );
        let style: i32 = match p.style {
            RopeStyle::Norm => 0,
            RopeStyle::Neox => 1,
        };
        self.with_input(rope_kind, |table| {
            self.with_input(slots_kind, |slots| -> Result<(), BackendError> {
                let (DevInput::F64(table), DevInput::U32(slots)) = (table, slots) else {
                    unreachable!("a rope table is f64, slots are u32")
                };
                let mut b = self.stream.launch_builder(&self.k.rope_store);
                b.arg(q.buf()).arg(k.buf()).arg(v.buf());
                match q_norm {
                    Some(w) => b.arg(self.vector(w, "rope_store")),
                    None => b.arg(&null),
                };
                match k_norm {
                    Some(w) => b.arg(self.vector(w, "rope_store")),
                    None => b.arg(&null),
                };
                b.arg(&eps);
                match q_normed.as_mut() {
                    Some(o) => b.arg(o),
                    None => b.arg(&null),
                };
                match k_normed.as_mut() {
                    Some(o) => b.arg(o),
                    None => b.arg(&null),
                };
                b.arg(&mut q_rope)
                    .arg(&mut k_rope)
                    .arg(&mut cache.k)
                    .arg(&mut cache.v)
                    .arg(slots)
                    .arg(&base)
                    .arg(table)
                    .arg(&nh)
                    .arg(&nkh)
                    .arg(&hdi)
                    .arg(&hi)
                    .arg(&style)
                    .arg(&ri);
                let cfg = LaunchConfig {
                    grid_dim: (rows as u32, (n_heads + 2 * n_kv_heads) as u32, 1),
                    block_dim: (plan::norm_threads(hd), 1, 1),
                    shared_mem_bytes: 0,
                };
                // SAFETY: q is rows x (n_heads * hd), k and v rows x kv_dim, the norm weights
                // hd values (checked above), the outputs as their inputs; the layer and every
                // slot were checked against the cache; the table has rows x half pairs.
                unsafe { b.launch(cfg) }
                    .map(|_| ())
                    .map_err(|e| BackendError::Kv(format!("cuda rope_store: {e}")))
            })
        })?;
        self.mark("kv_store");
        Ok(QkRoped {
            q_norm: q_normed.map(|o| self.tensor("rms_norm", o, q.rows, q.cols)),
            k_norm: k_normed.map(|o| self.tensor("rms_norm", o, k.rows, k.cols)),
            q: self.tensor("rope", q_rope, q.rows, q.cols),
            k: self.tensor("rope", k_rope, k.rows, k.cols),
        })
    }

    fn add(&self, a: &CudaTensor, b: &CudaTensor) -> CudaTensor {
        assert!(a.rows == b.rows && a.cols == b.cols, "add: shapes differ");
        let n = a.rows * a.cols;
        let mut out = self.alloc_f32("add", n);
        let ni = n as i32;
        let mut l = self.stream.launch_builder(&self.k.add);
        l.arg(a.buf()).arg(b.buf()).arg(&mut out).arg(&ni);
        // SAFETY: three buffers of n floats.
        unsafe { l.launch(self.elementwise("add", n)) }
            .unwrap_or_else(|e| device_failure("add", e));
        self.tensor("add", out, a.rows, a.cols)
    }

    fn scale(&self, x: &CudaTensor, s: f32) -> CudaTensor {
        let n = x.rows * x.cols;
        let mut out = self.alloc_f32("scale", n);
        let ni = n as i32;
        let mut l = self.stream.launch_builder(&self.k.scale);
        l.arg(x.buf()).arg(&s).arg(&mut out).arg(&ni);
        // SAFETY: two buffers of n floats.
        unsafe { l.launch(self.elementwise("scale", n)) }
            .unwrap_or_else(|e| device_failure("scale", e));
        self.tensor("scale", out, x.rows, x.cols)
    }

    fn act_mul(&self, gate: &CudaTensor, up: &CudaTensor, act: Activation) -> CudaTensor {
        assert!(
            gate.rows == up.rows && gate.cols == up.cols,
            "act_mul: shapes differ"
        );
        let n = gate.rows * gate.cols;
        let mut out = self.alloc_f32("act_mul", n);
        let ni = n as i32;
        let (a, c) = act_args(act);
        let mut l = self.stream.launch_builder(&self.k.act_mul);
        l.arg(gate.buf())
            .arg(up.buf())
            .arg(&mut out)
            .arg(&ni)
            .arg(&a)
            .arg(&c);
        // SAFETY: three buffers of n floats.
        unsafe { l.launch(self.elementwise("act_mul", n)) }
            .unwrap_or_else(|e| device_failure("act_mul", e));
        self.tensor("act_mul", out, gate.rows, gate.cols)
    }

    fn rope(&self, x: &CudaTensor, positions: &[u32], p: RopeParams) -> CudaTensor {
        assert_eq!(x.rows, positions.len(), "rope: one position per row");
        assert!(
            p.head_dim > 0 && x.cols.is_multiple_of(p.head_dim) && p.n_rot <= p.head_dim,
            "rope: columns are whole heads"
        );
        let n = x.rows * x.cols;
        let mut out = self.alloc_f32("rope", n);
        let half = p.n_rot / 2;
        if n == 0 {
            return self.tensor("rope", out, x.rows, x.cols);
        }
        let kind = self
            .stage_rope_table(positions, p)
            .unwrap_or_else(|e| device_failure("rope", e));
        let (r, c, hd, h) = (x.rows as i32, x.cols as i32, p.head_dim as i32, half as i32);
        let style: i32 = match p.style {
            RopeStyle::Norm => 0,
            RopeStyle::Neox => 1,
        };
        self.with_input(kind, |dev| {
            let DevInput::F64(table) = dev else {
                unreachable!("a rope table is f64")
            };
            let mut l = self.stream.launch_builder(&self.k.rope);
            l.arg(x.buf())
                .arg(&mut out)
                .arg(table)
                .arg(&r)
                .arg(&c)
                .arg(&hd)
                .arg(&h)
                .arg(&style);
            // SAFETY: one thread per element of x (rows x cols); the table has rows x half
            // pairs.
            unsafe { l.launch(self.elementwise("rope", n)) }
                .unwrap_or_else(|e| device_failure("rope", e));
        });
        self.tensor("rope", out, x.rows, x.cols)
    }

    fn select_rows(&self, x: &CudaTensor, rows: &[usize]) -> CudaTensor {
        let idx: Vec<u32> = rows
            .iter()
            .map(|&r| {
                assert!(r < x.rows, "select_rows: row {r} of {}", x.rows);
                r as u32
            })
            .collect();
        let mut out = self.alloc_f32("select_rows", rows.len() * x.cols);
        if !rows.is_empty() {
            let kind = InputKind::Select { n_rows: x.rows };
            self.stage(kind, HostInput::U32(idx))
                .unwrap_or_else(|e| device_failure("select_rows", e));
            let c = x.cols as i32;
            self.with_input(kind, |dev| {
                let DevInput::U32(d) = dev else {
                    unreachable!("row indices are u32")
                };
                let mut l = self.stream.launch_builder(&self.k.gather_rows);
                l.arg(x.buf()).arg(d).arg(&mut out).arg(&c);
                let cfg = LaunchConfig {
                    grid_dim: (rows.len() as u32, 1, 1),
                    block_dim: (256, 1, 1),
                    shared_mem_bytes: 0,
                };
                // SAFETY: every index was checked < x.rows.
                unsafe { l.launch(cfg) }.unwrap_or_else(|e| device_failure("select_rows", e));
            });
        }
        self.tensor("select_rows", out, rows.len(), x.cols)
    }

    fn kv_store(
        &self,
        cache: &mut CudaKvCache,
        layer: usize,
        k: &CudaTensor,
        v: &CudaTensor,
        batch: &Batch,
    ) -> Result<(), BackendError> {
        self.check_kv_store(cache, layer, k, v, batch)?;
        let l = cache.layout;
        let d = l.kv_dim;
        if batch.slots.is_empty() {
            return Ok(());
        }
        let kind = InputKind::KvSlots {
            n_slots: l.n_slots(),
        };
        self.stage(kind, HostInput::U32(batch.slots.clone()))?;
        let base = layer * l.n_slots();
        let di = d as i32;
        self.with_input(kind, |dev| {
            let DevInput::U32(slots) = dev else {
                unreachable!("slots are u32")
            };
            let mut b = self.stream.launch_builder(&self.k.kv_store);
            b.arg(k.buf())
                .arg(v.buf())
                .arg(&mut cache.k)
                .arg(&mut cache.v)
                .arg(slots)
                .arg(&base)
                .arg(&di);
            let cfg = LaunchConfig {
                grid_dim: (batch.slots.len() as u32, 1, 1),
                block_dim: (256, 1, 1),
                shared_mem_bytes: 0,
            };
            // SAFETY: layer and every slot were checked against the layout.
            unsafe { b.launch(cfg) }.map_err(|e| BackendError::Kv(format!("cuda kv_store: {e}")))
        })?;
        self.mark("kv_store");
        Ok(())
    }

    fn attention(
        &self,
        cache: &CudaKvCache,
        layer: usize,
        q: &CudaTensor,
        batch: &Batch,
        p: AttentionParams,
        taps: &mut Taps<'_>,
    ) -> Result<CudaTensor, BackendError> {
        self.attention_with(cache, layer, q, batch, p, taps, None)
    }

    fn rope_store_attention(
        &self,
        cache: &mut CudaKvCache,
        layer: usize,
        qkv: QkvIn<'_, Self>,
        positions: &[u32],
        rope: RopeParams,
        batch: &Batch,
        attn: AttentionParams,
        taps: &mut Taps<'_>,
    ) -> Result<CudaTensor, BackendError> {
        let (q, k, v) = (qkv.q, qkv.k, qkv.v);
        let hd = rope.head_dim;
        let fused = rope_attention_knob()
            && plan::rope_attention_fuses(hd)
            && self.rope_store_fits(cache, &qkv, positions, rope)
            && q.rows > 0
            && attn.head_dim == hd
            && q.cols == attn.n_heads * hd
            && k.cols == attn.n_kv_heads * hd
            && attn.n_kv_heads > 0
            && attn.n_heads.is_multiple_of(attn.n_kv_heads)
            && self.attention_route(q.rows, batch, attn) == AttRoute::Decode;
        if !fused {
            return rope_store_attention_unfused(
                self, cache, layer, qkv, positions, rope, batch, attn, taps,
            );
        }
        self.check_kv_store(cache, layer, k, v, batch)?;
        let rope_kind = self.stage_rope_table(positions, rope)?;
        let slots_kind = InputKind::KvSlots {
            n_slots: cache.layout.n_slots(),
        };
        self.stage(slots_kind, HostInput::U32(batch.slots.clone()))?;
        // The taps' copies, written by the kernel from the registers it consumed; nothing
        // when nobody listens.
        let outs = taps.active().then(|| RopedBufs {
            q_norm: qkv
                .q_norm
                .map(|_| self.alloc_f32("rms_norm", q.rows * q.cols)),
            k_norm: qkv
                .k_norm
                .map(|_| self.alloc_f32("rms_norm", k.rows * k.cols)),
            q: self.alloc_f32("rope", q.rows * q.cols),
            k: self.alloc_f32("rope", k.rows * k.cols),
        });
        let rf = RopeFuse {
            k,
            v,
            q_norm: qkv.q_norm,
            k_norm: qkv.k_norm,
            eps: qkv.eps,
            rope_kind,
            slots_kind,
            half: (rope.n_rot / 2) as i32,
            style: match rope.style {
                RopeStyle::Norm => 0,
                RopeStyle::Neox => 1,
            },
            outs,
        };
        self.attention_with(cache, layer, q, batch, attn, taps, Some(rf))
    }
}

impl CudaBackend {
    /// Whether `rope_store`'s kernel takes these shapes (else the separate ops run).
    fn rope_store_fits(
        &self,
        cache: &CudaKvCache,
        qkv: &QkvIn<'_, Self>,
        positions: &[u32],
        p: RopeParams,
    ) -> bool {
        let hd = p.head_dim;
        let l = cache.layout;
        let (q, k, v) = (qkv.q, qkv.k, qkv.v);
        let head_norm = |w: Option<&CudaWeight>| w.is_none_or(|w| w.rows == 1 && w.cols == hd);
        hd > 0
            && hd <= plan::ROPE_MAX_HEAD
            && p.n_rot <= hd
            && q.cols.is_multiple_of(hd)
            && k.cols == l.kv_dim
            && v.cols == l.kv_dim
            && k.cols.is_multiple_of(hd)
            && q.rows == k.rows
            && v.rows == k.rows
            && positions.len() == q.rows
            && head_norm(qkv.q_norm)
            && head_norm(qkv.k_norm)
    }

    /// Which kernels `attention` runs for `rows` query rows of `batch`.
    fn attention_route(&self, rows: usize, batch: &Batch, p: AttentionParams) -> AttRoute {
        let hd = p.head_dim;
        let (choice, _) = attention_knobs();
        let long = plan::long_context(batch);
        if plan::use_split_attention(
            choice,
            self.split_attention,
            rows,
            batch.seqs.len(),
            p.n_heads,
            p.n_kv_heads,
            hd,
            long,
        ) {
            return AttRoute::Split;
        }
        if plan::use_decode_attention(
            choice,
            self.split_attention,
            rows,
            batch.seqs.len(),
            p.n_heads,
            p.n_kv_heads,
            hd,
            long,
        ) {
            return AttRoute::Decode;
        }
        if self.k.attention_flash.is_some()
            && plan::use_flash_attention(
                choice,
                self.split_attention,
                rows,
                batch.seqs.len(),
                p.n_heads,
                p.n_kv_heads,
                hd,
            )
        {
            return AttRoute::Flash;
        }
        AttRoute::Tiled
    }

    /// `attention`, or with `rope` the fused decode kernel doing rope_store's work too (the
    /// caller checked that the route is `AttRoute::Decode` and rope_store's shapes).
    #[allow(clippy::too_many_arguments)]
    fn attention_with(
        &self,
        cache: &CudaKvCache,
        layer: usize,
        q: &CudaTensor,
        batch: &Batch,
        p: AttentionParams,
        taps: &mut Taps<'_>,
        mut rope: Option<RopeFuse<'_>>,
    ) -> Result<CudaTensor, BackendError> {
        let hd = p.head_dim;
        let q_dim = p.n_heads * hd;
        let kv_dim = p.n_kv_heads * hd;
        let l = cache.layout;
        if hd > 512 {
            return Err(BackendError::Other(format!(
                "cuda attention: heads of {hd} values (the kernel holds at most 512)"
            )));
        }
        if q.cols != q_dim
            || kv_dim != l.kv_dim
            || p.n_kv_heads == 0
            || !p.n_heads.is_multiple_of(p.n_kv_heads)
        {
            return Err(BackendError::Kv(format!(
                "attention: q has {} columns for {} heads of {hd} ({} KV heads); cache rows are {} wide",
                q.cols, p.n_heads, p.n_kv_heads, l.kv_dim
            )));
        }
        if layer >= l.n_layers {
            return Err(BackendError::Kv(format!(
                "layer {layer} outside the cache ({} layers)",
                l.n_layers
            )));
        }
        let plan = plan::attention_plan(batch, q.rows, p.n_heads, l.n_slots())?;
        let (n_scores, n_keys) = (plan.n_scores, plan.n_keys);
        let kind = InputKind::Attn {
            n_heads: p.n_heads,
            n_slots: l.n_slots(),
        };
        self.stage(kind, HostInput::Attn(plan))?;
        if self.steps.borrow().mode == Mode::Eager {
            self.ensure_scores(n_scores);
        }
        let mut out = self.alloc_f32("attention", q.rows * q_dim);
        let base = layer * l.n_slots();
        let (choice, force_tile_rows) = attention_knobs();
        let row_kernel = plan::use_row_attention(choice, q.rows, batch.seqs.len(), hd);
        let route = self.attention_route(q.rows, batch, p);
        let split = route == AttRoute::Split;
        let decode = route == AttRoute::Decode;
        let flash = route == AttRoute::Flash;
        if rope.is_some() && !decode {
            unreachable!("rope_store_attention fuses only the short decode kernel")
        }
        let n_spans =
            knobs::attention_spans(q.rows, p.n_kv_heads, self.k.n_sms, self.k.split_per_sm);
        // A pooled tensor, so a step graph finds it in its pool (a plain buffer would be freed
        // on drop, and a capture that allocates fails).
        let mut partials = split.then(|| {
            let n = (q.rows * p.n_heads * n_spans * (hd + plan::ATT_SPLIT_PART_HEAD)).max(1);
            let b = self.alloc_f32("attention partials", n);
            self.tensor("attention partials", b, 1, n)
        });
        // The kernel quantizes its output for the next matmul (fast numerics).
        let quant = hd.is_multiple_of(32)
            && self.norm_quantizes(q.rows, q_dim, q_dim)
            && attention_quantizes();
        let mut q8 = quant.then(|| self.q8_room(q.rows, q_dim));
        self.with_input(kind, |dev| -> Result<(), BackendError> {
            let DevInput::Attn(dev) = dev else {
                unreachable!("an attention table")
            };
            let shared = self.scores.borrow();
            let s = match (&dev.scores, shared.as_ref()) {
                (Some(own), _) => own,
                (None, Some(s)) => s,
                (None, None) => unreachable!("allocated above"),
            };
            if let (Some(part), true) = (partials.as_mut().map(|t| t.buf_mut()), q.rows > 0) {
                let (nh, nkh, hdi) = (p.n_heads as i32, p.n_kv_heads as i32, hd as i32);
                let window: i32 = p.window.map_or(0, |w| w.min(i32::MAX as u32) as i32);
                let (spans, min_keys) = (n_spans as i32, split_min_keys() as i32);
                let mut b = self.stream.launch_builder(&self.k.attention_split);
                b.arg(q.buf())
                    .arg(&cache.k)
                    .arg(&cache.v)
                    .arg(&dev.slots)
                    .arg(&dev.info)
                    .arg(&dev.mask)
                    .arg(&s.scores)
                    .arg(&mut *part)
                    .arg(&base)
                    .arg(&nh)
                    .arg(&nkh)
                    .arg(&hdi)
                    .arg(&p.scale)
                    .arg(&window)
                    .arg(&min_keys);
                let cfg = LaunchConfig {
                    grid_dim: (q.rows as u32, p.n_kv_heads as u32, n_spans as u32),
                    block_dim: (plan::ATT_SPLIT_THREADS, 1, 1),
                    shared_mem_bytes: 0,
                };
                // SAFETY: the plan checked every slot against the cache, every row's sequence and
                // mask; the score buffer holds n_scores values; `part` holds (head_dim + 4)
                // floats per (row, head, span); the group and head size are within the block's
                // arrays (`plan::use_split_attention`).
                unsafe { b.launch(cfg) }
                    .map_err(|e| BackendError::Other(format!("cuda attention_split: {e}")))?;
                let null = 0u64;
                let mut parts = q8_parts(&mut q8, q.rows * q_dim);
                let mut b = self.stream.launch_builder(&self.k.attention_combine);
                b.arg(&*part).arg(&mut out).arg(&nh).arg(&hdi).arg(&spans);
                match parts.as_mut() {
                    Some((qq, dd)) => b.arg(qq).arg(dd),
                    None => b.arg(&null).arg(&null),
                };
                let cfg = LaunchConfig {
                    grid_dim: (q.rows as u32, p.n_heads as u32, 1),
                    block_dim: (plan::ATT_COMBINE_THREADS, 1, 1),
                    shared_mem_bytes: 0,
                };
                // SAFETY: `part` was written above for every (row, head, span); `out` holds
                // q.rows x q_dim floats and the q8 buffers that many values.
                unsafe { b.launch(cfg) }
                    .map_err(|e| BackendError::Other(format!("cuda attention_combine: {e}")))?;
            } else if q.rows > 0 && (decode || (flash && self.k.attention_flash.is_some())) {
                // The short decode and flash kernels take the same arguments, flash then its
                // tiling (rows, rows a tile).
                let (nh, nkh) = (p.n_heads as i32, p.n_kv_heads as i32);
                let window: i32 = p.window.map_or(0, |w| w.min(i32::MAX as u32) as i32);
                let null = 0u64;
                let (func, cfg, extra, what) = if decode {
                    let (threads, _) = plan::decode_attention_shape(hd).ok_or_else(|| {
                        BackendError::Other(format!("cuda attention_decode: heads of {hd}"))
                    })?;
                    // Heads of 256 on a cluster where the module has its kernels: the grid's z
                    // is the cluster's blocks, each a chunk of the row's keys.
                    let cluster = match (&self.k.attention_decode_cl, rope.is_some()) {
                        (Some(fs), false) => {
                            plan::decode_cluster_blocks(hd, attention_cluster_knob())
                                .map(|cq| (cq, &fs[usize::from(cq == 8)]))
                        }
                        _ => None,
                    };
                    let func = match (hd, rope.is_some(), cluster) {
                        (_, false, Some((_, f))) => f,
                        (64, false, None) => &self.k.attention_decode[0],
                        (128, false, None) => &self.k.attention_decode[1],
                        (_, false, None) => &self.k.attention_decode[2],
                        (64, true, _) => &self.k.attention_decode_rope[0],
                        (128, true, _) => &self.k.attention_decode_rope[1],
                        (_, true, _) => unreachable!("plan::rope_attention_fuses"),
                    };
                    let threads = if cluster.is_some() {
                        plan::ATT_CLUSTER_THREADS
                    } else {
                        threads
                    };
                    let hpb = if attention_head_split_knob() {
                        plan::decode_attention_heads_per_block(
                            q.rows,
                            p.n_heads,
                            p.n_kv_heads,
                            self.k.n_sms,
                        )
                    } else {
                        p.n_heads / p.n_kv_heads
                    };
                    let slices = p.n_heads / p.n_kv_heads / hpb;
                    let cfg = LaunchConfig {
                        grid_dim: (
                            q.rows as u32,
                            (p.n_kv_heads * slices) as u32,
                            cluster.map_or(1, |(cq, _)| cq),
                        ),
                        block_dim: (threads, 1, 1),
                        shared_mem_bytes: 0,
                    };
                    (
                        func,
                        cfg,
                        AttExtra::HeadsPerBlock(hpb as i32),
                        "attention_decode",
                    )
                } else {
                    let Some((f64k, f128k)) = self.k.attention_flash.as_ref() else {
                        unreachable!("checked above")
                    };
                    let geom = plan::flash_geometry(
                        q.rows,
                        p.n_heads,
                        p.n_kv_heads,
                        hd,
                        self.k.n_sms,
                        flash_warps_knob(),
                    );
                    let cfg = LaunchConfig {
                        grid_dim: (geom.grid.0, geom.grid.1, 1),
                        block_dim: (32 * geom.warps as u32, 1, 1),
                        shared_mem_bytes: geom.smem_bytes,
                    };
                    let tiling = AttExtra::Tiling(q.rows as i32, geom.tile_rows as i32);
                    let func = if hd == 64 { f64k } else { f128k };
                    (func, cfg, tiling, "attention_flash")
                };
                let n_rows = q.rows as i32;
                let rope_inputs = rope.as_ref().map(|rf| (rf.rope_kind, rf.slots_kind));
                let mut launch = |rt: Option<(&CudaSlice<f64>, &CudaSlice<u32>)>| {
                    let mut b = self.stream.launch_builder(func);
                    b.arg(q.buf())
                        .arg(&cache.k)
                        .arg(&cache.v)
                        .arg(&dev.slots)
                        .arg(&dev.info)
                        .arg(&dev.mask);
                    // The scores are written only for a listener (the kq tap).
                    if taps.active() {
                        b.arg(&s.scores);
                    } else {
                        b.arg(&null);
                    }
                    b.arg(&mut out)
                        .arg(&base)
                        .arg(&nh)
                        .arg(&nkh)
                        .arg(&p.scale)
                        .arg(&window);
                    match &extra {
                        AttExtra::HeadsPerBlock(hpb) => b.arg(hpb),
                        AttExtra::Tiling(n_rows, tile_rows) => b.arg(n_rows).arg(tile_rows),
                    };
                    let mut parts = q8_parts(&mut q8, q.rows * q_dim);
                    match parts.as_mut() {
                        Some((qq, dd)) => b.arg(qq).arg(dd),
                        None => b.arg(&null).arg(&null),
                    };
                    // rope_store's arguments (`attention_decode_rope_<D>`): its inputs, norms,
                    // the taps' copies (null: nobody listens), the new rows' slots, the rope
                    // table.
                    if let (Some(rf), Some((table, slots))) = (rope.as_mut(), rt) {
                        b.arg(rf.k.buf()).arg(rf.v.buf());
                        for w in [rf.q_norm, rf.k_norm] {
                            match w {
                                Some(w) => b.arg(self.vector(w, "rope_store")),
                                None => b.arg(&null),
                            };
                        }
                        b.arg(&rf.eps);
                        match rf.outs.as_mut() {
                            Some(o) => {
                                match o.q_norm.as_mut() {
                                    Some(x) => b.arg(x),
                                    None => b.arg(&null),
                                };
                                match o.k_norm.as_mut() {
                                    Some(x) => b.arg(x),
                                    None => b.arg(&null),
                                };
                                b.arg(&mut o.q).arg(&mut o.k);
                            }
                            None => {
                                b.arg(&null).arg(&null).arg(&null).arg(&null);
                            }
                        }
                        b.arg(slots)
                            .arg(&base)
                            .arg(table)
                            .arg(&rf.half)
                            .arg(&rf.style)
                            .arg(&n_rows);
                    }
                    // SAFETY: the plan checked every slot against the cache, every row's
                    // sequence and mask; the score buffer holds n_scores values. Short decode:
                    // every row attends over fewer than `plan::ATT_DECODE_MAX_KEYS` keys and the
                    // group and head size are the block's (`plan::use_decode_attention`); with
                    // rope_store's work, k and v are rows x kv_dim, the norm weights head_dim
                    // values, every new slot was checked against the cache (check_kv_store), the
                    // table holds rows x half pairs, the kernel writes the cache through the
                    // pointers it reads (one stream orders every launch). Flash: the block's
                    // shared memory is `plan::flash_smem` for its warps, within what
                    // `flash_kernels` opted in to; a block's row-heads (tile_rows x group) fit
                    // its warps (`plan::flash_geometry`).
                    unsafe { b.launch(cfg) }
                        .map(|_| ())
                        .map_err(|e| BackendError::Other(format!("cuda {what}: {e}")))
                };
                match rope_inputs {
                    None => launch(None)?,
                    Some((rk, sk)) => self.with_input(rk, |table| {
                        self.with_input(sk, |slots| {
                            let (DevInput::F64(table), DevInput::U32(slots)) = (table, slots)
                            else {
                                unreachable!("a rope table is f64, slots are u32")
                            };
                            launch(Some((table, slots)))
                        })
                    })?,
                }
            } else if q.rows > 0 {
                let (nh, nkh, hdi) = (p.n_heads as i32, p.n_kv_heads as i32, hd as i32);
                let window: i32 = p.window.map_or(0, |w| w.min(i32::MAX as u32) as i32);
                let tile = plan::attention_tile(
                    q.rows,
                    batch.seqs.len(),
                    p.n_heads,
                    p.n_kv_heads,
                    hd,
                    force_tile_rows,
                    self.k.attention_one_row_smem,
                );
                let func = if row_kernel {
                    &self.k.attention
                } else if tile.wide {
                    &self.k.attention_tile_wide
                } else {
                    &self.k.attention_tile
                };
                let mut b = self.stream.launch_builder(func);
                b.arg(q.buf())
                    .arg(&cache.k)
                    .arg(&cache.v)
                    .arg(&dev.slots)
                    .arg(&dev.info)
                    .arg(&dev.mask)
                    .arg(&s.scores)
                    .arg(&s.exps)
                    .arg(&s.probs)
                    .arg(&mut out)
                    .arg(&base)
                    .arg(&nh)
                    .arg(&nkh)
                    .arg(&hdi)
                    .arg(&p.scale)
                    .arg(&window);
                let (n_rows, tile_rows, heads, chunk) = (
                    q.rows as i32,
                    tile.tile_rows as i32,
                    tile.heads as i32,
                    tile.chunk as i32,
                );
                let null = 0u64;
                let mut parts = q8_parts(&mut q8, q.rows * q_dim);
                let cfg = if row_kernel {
                    LaunchConfig {
                        grid_dim: (q.rows as u32, p.n_heads as u32, 1),
                        block_dim: (128, 1, 1),
                        shared_mem_bytes: 0,
                    }
                } else {
                    b.arg(&n_rows).arg(&tile_rows).arg(&heads).arg(&chunk);
                    LaunchConfig {
                        grid_dim: (tile.grid.0, tile.grid.1, 1),
                        block_dim: (plan::ATT_TILE_THREADS as u32, 1, 1),
                        shared_mem_bytes: tile.smem_bytes,
                    }
                };
                // Both kernels take the quantized output's buffers last (null: not quantized).
                match parts.as_mut() {
                    Some((qq, dd)) => b.arg(qq).arg(dd),
                    None => b.arg(&null).arg(&null),
                };
                // SAFETY: the plan checked every slot against the cache, every row's sequence and
                // mask; the score buffers hold n_scores values; the tiled kernels' shared memory
                // and per-thread accumulators are sized by `plan::attention_tile` (host test).
                unsafe { b.launch(cfg) }
                    .map_err(|e| BackendError::Other(format!("cuda attention: {e}")))?;
            }
            if taps.active() {
                // rope_store's outputs first, as the unfused ops emit them.
                if let Some(o) = rope.as_mut().and_then(|rf| rf.outs.take()) {
                    let rows = q.rows;
                    let roped = QkRoped {
                        q_norm: o.q_norm.map(|b| self.tensor("rms_norm", b, rows, q_dim)),
                        k_norm: o.k_norm.map(|b| self.tensor("rms_norm", b, rows, kv_dim)),
                        q: self.tensor("rope", o.q, rows, q_dim),
                        k: self.tensor("rope", o.k, rows, kv_dim),
                    };
                    emit_roped(self, layer, &roped, taps);
                }
                let gather = |c: &CudaSlice<u16>| -> HostTensor {
                    let mut o = self.alloc::<f32>("k_read tap", n_keys * kv_dim);
                    if n_keys > 0 {
                        let di = kv_dim as i32;
                        let mut b = self.stream.launch_builder(&self.k.kv_gather);
                        b.arg(c).arg(&dev.slots).arg(&mut o).arg(&base).arg(&di);
                        let cfg = LaunchConfig {
                            grid_dim: (n_keys as u32, 1, 1),
                            block_dim: (256, 1, 1),
                            shared_mem_bytes: 0,
                        };
                        // SAFETY: the slots were checked by the plan; o holds n_keys rows.
                        unsafe { b.launch(cfg) }
                            .unwrap_or_else(|e| device_failure("k_read tap", e));
                    }
                    HostTensor::matrix(
                        n_keys,
                        kv_dim,
                        self.host_f32("k_read tap", &o, n_keys * kv_dim),
                    )
                };
                taps.emit_layer(layer, "k_read", || gather(&cache.k));
                taps.emit_layer(layer, "v_read", || gather(&cache.v));
                taps.emit_layer(layer, "kq", || {
                    HostTensor::new(vec![n_scores], self.host_f32("kq tap", &s.scores, n_scores))
                });
                // The split-key, short decode and flash paths never form per-key
                // probabilities (`hidden_taps`).
                if !split && !decode && !flash {
                    taps.emit_layer(layer, "kq_softmax", || {
                        let mut v = self
                            .stream
                            .clone_dtoh(&s.probs)
                            .unwrap_or_else(|e| device_failure("kq_softmax tap", e));
                        v.truncate(n_scores);
                        HostTensor::new(vec![n_scores], v.into_iter().map(|x| x as f32).collect())
                    });
                }
            }
            Ok(())
        })?;
        drop(q8);
        drop(partials);
        let t = self.tensor("attention", out, q.rows, q_dim);
        if quant {
            self.q8_of.set(Some(t.id));
        }
        Ok(t)
    }
}

/// The dynamic shared memory a one-row tiled attention block may take: more than a block gets
/// without opting in ([`plan::attention_one_row_smem`]) where the device allows it and the
/// kernels accept the attribute, else [`plan::ATT_TILE_SMEM`].
fn attention_smem_optin(ctx: &CudaContext, funcs: &[&CudaFunction]) -> usize {
    use cudarc::driver::sys::{CUdevice_attribute_enum as D, CUfunction_attribute_enum as F};
    let optin = ctx
        .attribute(D::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)
        .unwrap_or(0);
    let want = plan::attention_one_row_smem(usize::try_from(optin).unwrap_or(0));
    let Ok(attr) = i32::try_from(want) else {
        return plan::ATT_TILE_SMEM;
    };
    if want > plan::ATT_TILE_SMEM
        && funcs.iter().all(|f| {
            f.set_attribute(F::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, attr)
                .is_ok()
        })
    {
        want
    } else {
        plan::ATT_TILE_SMEM
    }
}

/// The cluster decode step's kernel, ready to launch: its shared memory and non-portable
/// cluster size opted in, and one cluster of its shape schedulable on this device (`None` where
/// the module lacks it or the device refuses any of these: the captured graphs are kept).
fn cluster_kernel(f: Option<CudaFunction>) -> Option<CudaFunction> {
    use cudarc::driver::sys;
    use cudarc::driver::sys::CUfunction_attribute_enum as F;
    let f = f?;
    let smem = i32::try_from(cluster::SMEM_BYTES).ok()?;
    f.set_attribute(F::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem)
        .ok()?;
    f.set_attribute(F::CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1)
        .ok()?;
    // SAFETY: plain data; the cluster dimension is the attribute's one field read.
    let mut attr: sys::CUlaunchAttribute = unsafe { std::mem::zeroed() };
    attr.id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
    attr.value.clusterDim.x = cluster::BLOCKS;
    attr.value.clusterDim.y = 1;
    attr.value.clusterDim.z = 1;
    let cfg = sys::CUlaunchConfig {
        gridDimX: cluster::BLOCKS,
        gridDimY: 1,
        gridDimZ: 1,
        blockDimX: cluster::THREADS,
        blockDimY: 1,
        blockDimZ: 1,
        sharedMemBytes: cluster::SMEM_BYTES,
        hStream: std::ptr::null_mut(),
        attrs: &mut attr,
        numAttrs: 1,
    };
    let mut clusters = 0i32;
    // SAFETY: a loaded function, a configuration whose one attribute outlives the call.
    unsafe { sys::cuOccupancyMaxActiveClusters(&mut clusters, f.cu_function(), &cfg) }
        .result()
        .ok()?;
    (clusters > 0).then_some(f)
}

/// The kernel of weight type `id` in a per-type table.
fn find_kernel(table: &[(i32, CudaFunction)], id: i32) -> Option<&CudaFunction> {
    table.iter().find(|(t, _)| *t == id).map(|(_, f)| f)
}

/// The kernel of a two-type q/k/v table (`plan::MIXED_QKV`) for q and k of `wqk`'s type and v of
/// `wv`'s, where the table has the pair.
fn mixed_pair<'a>(
    table: &'a [((i32, i32), CudaFunction)],
    wqk: &CudaWeight,
    wv: &CudaWeight,
) -> Option<&'a CudaFunction> {
    table
        .iter()
        .find(|(pair, _)| *pair == (wqk.desc.id, wv.desc.id))
        .map(|(_, f)| f)
}

/// The flash kernels, each allowed the dynamic shared memory of its largest block (beyond the
/// default 48 KiB: an opt-in); `None` if the device refuses it (then the tiled kernels run).
fn flash_kernels(k64: CudaFunction, k128: CudaFunction) -> Option<(CudaFunction, CudaFunction)> {
    use cudarc::driver::sys::CUfunction_attribute_enum as F;
    let ok = [(&k64, 64), (&k128, 128)].iter().all(|(f, hd)| {
        i32::try_from(plan::flash_smem(*hd, plan::ATT_FLASH_MAX_WARPS)).is_ok_and(|b| {
            f.set_attribute(F::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, b)
                .is_ok()
        })
    });
    ok.then_some((k64, k128))
}

/// An activation as the kernels take it: its code (kernels.cu `act`: 0 SiLU, 1 GELU tanh) and
/// GELU's sqrt(2/pi), computed by the reference's host expression.
fn act_args(act: Activation) -> (i32, f64) {
    let code = match act {
        Activation::Silu => 0,
        Activation::GeluTanh => 1,
    };
    (code, (2.0 / std::f64::consts::PI).sqrt())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_a_driver_new_fails_with_a_clear_message() {
        // SAFETY: only probes for the library.
        if unsafe { cudarc::driver::sys::is_culib_present() } {
            // A machine with a driver: the GPU path is checked on the device instead.
            return;
        }
        let e = match CudaBackend::new() {
            Ok(_) => panic!("a backend without a driver"),
            Err(e) => e.to_string(),
        };
        assert!(e.contains("cuda backend") && e.contains("libcuda"), "{e}");
    }

    #[test]
    fn kernel_source_declares_every_kernel_the_host_loads() {
        for &ty in plan::SUPPORTED {
            assert!(
                KERNEL_SOURCE.contains(&format!("MATMUL_FOR({})", ty.id())),
                "{ty}"
            );
        }
        for name in [
            "embed_rows",
            "add_bias",
            "add",
            "scale",
            "act_mul",
            "rms_norm",
            "residual_norm",
            "rope",
            "rope_store",
            "gather_rows",
            "kv_store",
            "kv_gather",
            "attention",
        ] {
            let decl = format!("__global__ void {name}(");
            let bounded = format!("__global__ void __launch_bounds__(1024) {name}(");
            assert!(
                KERNEL_SOURCE.contains(&decl) || KERNEL_SOURCE.contains(&bounded),
                "{name}"
            );
        }
        // Every supported type has a case in the device decoder.
        for &ty in plan::SUPPORTED {
            let id = ty.id();
            let line = KERNEL_SOURCE
                .lines()
                .find(|l| l.starts_with("#define T_") && l.ends_with(&format!(" {id}")));
            assert!(line.is_some(), "{ty}: no type id {id} in kernels.cu");
            let macro_name = line.unwrap().split_whitespace().nth(1).unwrap();
            assert!(
                KERNEL_SOURCE.contains(&format!("case {macro_name}:")),
                "{ty}: no decoder case"
            );
        }
        for &ty in plan::FAST {
            for name in [
                "mmv_fast",
                "gate_up_fast",
                "mmv3_fast",
                "mmv_fast1",
                "gate_up_fast1",
                "mmv3_fast1",
            ] {
                assert!(
                    KERNEL_SOURCE.contains(&format!("FAST_FOR({})", ty.id())),
                    "{name} {ty}"
                );
            }
        }
        // `scale_norm_then`'s kernels (`scale_norm_mmv3_fast1_<id>[_<v id>]`): every fast type,
        // every pair of `plan::MIXED_QKV`.
        for &ty in plan::FAST {
            assert!(
                KERNEL_SOURCE.contains(&format!("SCALE_NORM_MMV3_ONE({})\n", ty.id())),
                "scale_norm_mmv3_fast1_{}",
                ty.id()
            );
        }
        let pairs = plan::MIXED_QKV
            .iter()
            .map(|(a, b)| format!("M({}, {})", a.id(), b.id()))
            .collect::<Vec<_>>()
            .join(" ");
        assert!(KERNEL_SOURCE.contains(&format!("#define MIXED_QKV_FOR(M) {pairs}\n")));
        assert!(KERNEL_SOURCE.contains("MIXED_QKV_FOR(SCALE_NORM_MMV3_PAIR)\n"));
        assert!(KERNEL_SOURCE.contains("MIXED_QKV_FOR(SCALE_NORM_LONG_PAIR)\n"));
        for &ty in plan::FAST {
            assert!(KERNEL_SOURCE.contains(&format!("SCALE_NORM_LONG_ONE({})\n", ty.id())));
        }
        for name in ["quantize_q8_32", "q8_values"] {
            assert!(
                KERNEL_SOURCE.contains(&format!("__global__ void {name}(")),
                "{name}"
            );
        }
        // The fast kernels' geometry: one warp per row, tiles of FAST_TILE rows.
        assert!(KERNEL_SOURCE.contains("int nt = min(8, n - t0)"));
        assert_eq!(plan::FAST_TILE, 8);
        // The shared-memory layout the host sizes is the kernel's.
        assert!(KERNEL_SOURCE.contains("#define SEG_BYTES 1024"));
        // The norm fused into its consumer: the host's limits are the kernels' (the shared row,
        // the launch bounds).
        assert!(KERNEL_SOURCE.contains(&format!("#define NORM_FUSED_MAX {}", plan::NORM_FUSED_MAX)));
        assert!(KERNEL_SOURCE.contains(&format!(
            "#define NORM_FUSED_THREADS {}",
            plan::NORM_FUSED_BLOCK_MAX
        )));
        assert!(KERNEL_SOURCE.contains("smem + (size_t)warp * 8 * SEG_WORDS"));
        // Every seeded fault has its switch in the kernels.
        for (name, define, _) in FAULTS {
            assert!(
                KERNEL_SOURCE.contains(&format!("#ifdef {define}")),
                "{name}"
            );
        }
        // Whole-row draws: det_exp's constants are the sampler's, bit for bit, and the
        // geometry the host sizes is the kernels'.
        {
            use lockstep_sampling::row_draw::{det_exp_consts as c, DET_EXP_COEFFS, DRAW_FANOUT};
            for (define, bits) in [
                ("DX_LOG2E", c::LOG2E),
                ("DX_LN2_HI", c::LN2_HI),
                ("DX_LN2_LO", c::LN2_LO),
                ("DX_MIN_X", c::MIN_X),
            ] {
                assert!(
                    KERNEL_SOURCE.contains(&format!("#define {define} 0x{bits:016X}ull\n")),
                    "{define}"
                );
            }
            let coeffs = DET_EXP_COEFFS
                .iter()
                .map(|b| format!("0x{b:016X}ull"))
                .collect::<Vec<_>>();
            let at = KERNEL_SOURCE
                .find("DX_COEFFS[12] = {")
                .expect("the coefficients");
            let listed: String = KERNEL_SOURCE[at..]
                .chars()
                .skip_while(|&ch| ch != '{')
                .skip(1)
                .take_while(|&ch| ch != '}')
                .filter(|ch| !ch.is_whitespace())
                .collect();
            assert_eq!(listed, coeffs.join(","));
            assert_eq!(plan::DRAW_FANOUT, DRAW_FANOUT);
            assert_eq!(DRAW_FANOUT, 32, "a warp's butterfly");
            assert!(KERNEL_SOURCE.contains(&format!("#define DRAW_PARAMS {}\n", plan::DRAW_PARAMS)));
            assert!(KERNEL_SOURCE.contains(&format!("#define PICK_WORDS {}\n", plan::PICK_WORDS)));
            assert!(KERNEL_SOURCE.contains("__launch_bounds__(256)\n    draw_leaves("));
            assert_eq!(32 * plan::DRAW_LEAF_WARPS, 256);
            // Levels above the segments of 32^4 tokens: 1024 + 32 + 1 nodes.
            assert!(KERNEL_SOURCE.contains("#define DRAW_MAX_UPPER 1024\n"));
            assert!(plan::draw_fits(32usize.pow(4)) && !plan::draw_fits(32usize.pow(4) + 1));
            for (define, v) in [
                ("NUC_BINS", plan::NUC_BINS),
                ("NUC_CAP", plan::NUC_CAP),
                ("NUC_THREADS", plan::NUC_THREADS),
            ] {
                assert!(
                    KERNEL_SOURCE.contains(&format!("#define {define} {v}\n")),
                    "{define}"
                );
            }
            // The sort's block: two keys a thread.
            assert_eq!(plan::NUC_CAP, 2 * 1024);
            assert_eq!(plan::NUC_BINS % plan::NUC_THREADS, 0);
        }
        // The attention kernel's 128 threads hold at most 4 output elements each.
        assert!(KERNEL_SOURCE.contains("#define ATT_MAX_D 4"));
        // The limits the host checks before the fused kernels.
        assert!(KERNEL_SOURCE.contains(&format!("#define NORM_MAXV {}", plan::NORM_MAXV)));
        assert!(KERNEL_SOURCE.contains(&format!("#define ROPE_MAX_HEAD {}", plan::ROPE_MAX_HEAD)));
        // The plane groups the host uploads at (`plan::q6k_planar`, `plan::q80_planar`) are the
        // ones `q6p_at` and `q8p_at` find a block's group and member by.
        for (define, group, block, members) in [
            (
                "Q6P_GROUP",
                plan::Q6K_GROUP,
                plan::Q6K_BLOCK,
                plan::Q6K_GROUP_BLOCKS,
            ),
            (
                "Q8P_GROUP",
                plan::Q80_GROUP,
                plan::Q80_BLOCK,
                plan::Q80_GROUP_BLOCKS,
            ),
        ] {
            assert!(KERNEL_SOURCE.contains(&format!("#define {define} {group}")));
            assert!(
                KERNEL_SOURCE.contains(&format!("(int)(((size_t)b / {block}) & {})", members - 1))
            );
        }
        // The tiled attention's geometry is the one `plan::attention_tile` sizes.
        for (define, v) in [
            ("ATT_T_THREADS", plan::ATT_TILE_THREADS),
            ("ATT_T_MAX_RH", plan::ATT_TILE_MAX_RH),
            ("ATT_T_ACC", plan::ATT_TILE_ACC),
        ] {
            assert!(
                KERNEL_SOURCE.contains(&format!("#define {define} {v}\n")),
                "{define}"
            );
        }
        assert!(KERNEL_SOURCE.contains("return ((head_dim + 3) & ~3) + 4;"));
        assert!(KERNEL_SOURCE.contains("ATTENTION_TILE(attention_tile, 1)"));
        // The flash kernels the host loads, and the geometry `plan` sizes them by.
        for hd in plan::ATT_FLASH_HEADS {
            assert!(KERNEL_SOURCE.contains(&format!("ATTENTION_FLASH({hd})")));
        }
        assert!(KERNEL_SOURCE.contains(&format!("#define ATT_F_KEYS {}", plan::ATT_FLASH_KEYS)));
        assert!(KERNEL_SOURCE.contains(&format!(
            "#define ATT_F_MAX_WARPS {}",
            plan::ATT_FLASH_MAX_WARPS
        )));
        assert!(KERNEL_SOURCE.contains("ATTENTION_TILE(attention_tile_wide, 2)"));
        // The split-key attention's limits, as the host plans them.
        for (name, v) in [
            ("ATT_SPLIT_SPANS", plan::ATT_SPLIT_MAX_SPANS),
            ("ATT_S_MAX_G", plan::ATT_SPLIT_MAX_GROUP),
            ("ATT_S_MAX_D", plan::ATT_SPLIT_MAX_HEAD),
            ("ATT_S_THREADS", plan::ATT_SPLIT_THREADS as usize),
            ("ATT_S_PART_HEAD", plan::ATT_SPLIT_PART_HEAD),
            ("ATT_C_THREADS", plan::ATT_COMBINE_THREADS as usize),
        ] {
            assert!(
                KERNEL_SOURCE.contains(&format!("#define {name} {v}\n")),
                "{name} is not {v} in kernels.cu"
            );
        }
        // Row-info width agrees between host and kernel.
        assert!(KERNEL_SOURCE.contains(&format!("#define ROW_INFO {}", plan::ROW_INFO)));
        // The span rule `plan::attention_span_keys` states.
        assert!(KERNEL_SOURCE.contains(
            "int per = ck * max((min_keys + ck - 1) / ck, ((n + ck - 1) / ck + n_spans - 1) / n_spans);"
        ));
    }
}
