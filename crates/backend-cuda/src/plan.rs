//! Host-side planning, free of CUDA so CI tests it: which quant types the kernels decode,
//! launch geometry, and the per-row tables the attention kernel reads.

use lockstep_graph::{BackendError, Batch};
use lockstep_quant::GgmlType;

/// The weight types the kernels decode (every type the cpu backend supports).
pub const SUPPORTED: &[GgmlType] = &[
    GgmlType::F32,
    GgmlType::F16,
    GgmlType::Bf16,
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::Q8_0,
    GgmlType::Q2K,
    GgmlType::Q3K,
    GgmlType::Q4K,
    GgmlType::Q5K,
    GgmlType::Q6K,
    GgmlType::Iq4Nl,
    GgmlType::Iq4Xs,
];

/// What the kernels need to walk a row of `ty`: the GGUF type id (the kernels' `switch`),
/// elements per block and bytes per block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QuantDesc {
    pub id: i32,
    pub block: i32,
    pub bytes: i32,
}

pub fn quant_desc(ty: GgmlType) -> Option<QuantDesc> {
    SUPPORTED.contains(&ty).then(|| QuantDesc {
        id: ty.id() as i32,
        block: ty.block_size() as i32,
        bytes: ty.type_size() as i32,
    })
}

/// [`quant_desc`] for the bytes as uploaded: a repacked Q5_0 block ([`q50_repacked`]) is 24
/// bytes, and the kernels that walk rows by the host's block size (embed_rows, dequant_rows,
/// dequant_rows_f16) must step by those.
pub fn device_desc(ty: GgmlType, q50_repacked: bool) -> Option<QuantDesc> {
    quant_desc(ty).map(|d| QuantDesc {
        bytes: if q50_repacked && ty == GgmlType::Q5_0 {
            Q50_DEVICE_BLOCK as i32
        } else {
            d.bytes
        },
        ..d
    })
}

/// Threads per block of the matmul kernels: 4 warps, each covering 4 weight rows.
pub const MATMUL_THREADS: u32 = 128;
/// Weight rows per matmul block.
pub const MATMUL_ROWS_PER_BLOCK: u32 = MATMUL_THREADS / 32 * 4;
/// Shared memory of a matmul block: per warp, two buffers of 4 rows of `SEG_BYTES` (1024)
/// plus 32 bytes of alignment slack (`SEG_WORDS` 16-byte words each), as `kernels.cu` lays
/// it out.
pub const MATMUL_SMEM_BYTES: u32 = (MATMUL_THREADS / 32) * 2 * 4 * (1024 / 16 + 2) * 16;
// A block may use 48 KiB of shared memory without opting in.
const _: () = assert!(MATMUL_SMEM_BYTES <= 48 * 1024);
/// Bytes of padding after every weight: the matmul's last 16-byte staging load of a row may
/// reach up to 15 bytes past its end.
pub const WEIGHT_PAD: usize = 16;
/// Bytes of a Q6_K super-block (256 values) in GGUF.
pub const Q6K_BLOCK: usize = 210;
/// Super-blocks a Q6_K plane group holds (kernels.cu `q6p_at`).
pub const Q6K_GROUP_BLOCKS: usize = 8;
/// Bytes of a Q6_K plane group: also the alignment of a planar tensor's device address, so a
/// kernel finds a block's group and place in it from the block's address alone.
pub const Q6K_GROUP: usize = Q6K_BLOCK * Q6K_GROUP_BLOCKS;

/// A Q6_K tensor's GGUF bytes (whole 210-byte super-blocks) in the device's planes
/// (kernels.cu `q6p_at`, the layout's description): each group of 8 consecutive super-blocks
/// becomes, for its 32 units of 64 values (unit `4 b + 2 n + h` of member `b`), plane A (each
/// unit's ql bytes `64 n + 16 h ..+16`), plane B (`64 n + 32 + 16 h ..+16`), plane H (qh bytes
/// `32 n + 16 h ..+16`), plane S (scales `8 n + 2 k + h`, k = 0..3), then the members' d. The
/// last group is padded with zero blocks to whole groups. None when the bytes are not whole
/// super-blocks.
pub fn q6k_planar(gguf: &[u8]) -> Option<Vec<u8>> {
    if !gguf.len().is_multiple_of(Q6K_BLOCK) {
        return None;
    }
    let groups = (gguf.len() / Q6K_BLOCK).div_ceil(Q6K_GROUP_BLOCKS);
    let mut out = vec![0u8; groups * Q6K_GROUP];
    for (g, dst) in out.chunks_exact_mut(Q6K_GROUP).enumerate() {
        let (planes, ds) = dst.split_at_mut(1664);
        let (a, rest) = planes.split_at_mut(512);
        let (b, rest) = rest.split_at_mut(512);
        let (h, sc) = rest.split_at_mut(512);
        for m in 0..Q6K_GROUP_BLOCKS {
            let start = (g * Q6K_GROUP_BLOCKS + m) * Q6K_BLOCK;
            let Some(src) = gguf.get(start..start + Q6K_BLOCK) else {
                break; // padding: zero blocks
            };
            let (ql, rest) = src.split_at(128);
            let (qh, rest) = rest.split_at(64);
            let (scales, d) = rest.split_at(16);
            for n in 0..2 {
                for hh in 0..2 {
                    let j = 4 * m + 2 * n + hh;
                    let at = 16 * j;
                    a[at..at + 16].copy_from_slice(&ql[64 * n + 16 * hh..][..16]);
                    b[at..at + 16].copy_from_slice(&ql[64 * n + 32 + 16 * hh..][..16]);
                    h[at..at + 16].copy_from_slice(&qh[32 * n + 16 * hh..][..16]);
                    for k in 0..4 {
                        sc[4 * j + k] = scales[8 * n + 2 * k + hh];
                    }
                }
            }
            ds[2 * m..2 * m + 2].copy_from_slice(d);
        }
    }
    Some(out)
}

/// Bytes of a Q8_0 block (32 values) in GGUF.
pub const Q80_BLOCK: usize = 34;
/// Blocks a Q8_0 plane group holds (kernels.cu `q8p_at`).
pub const Q80_GROUP_BLOCKS: usize = 16;
/// Bytes of a Q8_0 plane group: also the alignment of a planar tensor's device address, so a
/// kernel finds a block's group and place in it from the block's address alone (as for Q6_K).
pub const Q80_GROUP: usize = Q80_BLOCK * Q80_GROUP_BLOCKS;

/// A Q8_0 tensor's GGUF bytes (whole 34-byte blocks: d, qs[32]) in the device's planes
/// (kernels.cu `q8p_at`): each group of 16 consecutive blocks becomes their 16 x 32 quants, then
/// their 16 d. A unit is then two aligned 16-byte loads and one of 2 bytes instead of GGUF's
/// 2-byte-aligned run of 34. The last group is padded with zero blocks to whole groups. None
/// when the bytes are not whole blocks.
pub fn q80_planar(gguf: &[u8]) -> Option<Vec<u8>> {
    if !gguf.len().is_multiple_of(Q80_BLOCK) {
        return None;
    }
    let groups = (gguf.len() / Q80_BLOCK).div_ceil(Q80_GROUP_BLOCKS);
    let mut out = vec![0u8; groups * Q80_GROUP];
    for (src, m) in gguf.chunks_exact(Q80_BLOCK).zip(0usize..) {
        let (g, b) = (m / Q80_GROUP_BLOCKS, m % Q80_GROUP_BLOCKS);
        let dst = &mut out[g * Q80_GROUP..][..Q80_GROUP];
        dst[32 * b..32 * b + 32].copy_from_slice(&src[2..]);
        dst[512 + 2 * b..512 + 2 * b + 2].copy_from_slice(&src[..2]);
    }
    Some(out)
}

/// Bytes of a Q5_0 block (32 values) in GGUF and repacked for the device (kernels.cu `Q50_BYTES`;
/// GGUF's under `LOCKSTEP_Q50_GGUF`).
pub const Q50_BLOCK: usize = 22;
pub const Q50_DEVICE_BLOCK: usize = 24;

/// The bit of a device Q5_0 block's qh word that holds element `e`'s high bit (kernels.cu
/// `q50_hbit`): element `4 i + b` (the low nibbles of qs word `i`, byte `b`) at `8 b + 4 + i`,
/// element `16 + 4 i + b` (that word's high nibbles) at `8 b + i`. So a dp4a word's four high
/// bits are `(qh >> i) & 0x10101010` and `(qh << (4 - i)) & 0x10101010`.
pub fn q50_hbit(e: usize) -> usize {
    let f = e & 15;
    8 * (f & 3) + (f >> 2) + if e < 16 { 4 } else { 0 }
}

/// A Q5_0 tensor's GGUF bytes (whole 22-byte blocks: d, qh, qs[16]) as the device's 24-byte
/// blocks (kernels.cu `Q50_BYTES`): d, two zero bytes, qh with its bits moved to
/// [`q50_hbit`]'s places, qs. Aligned words and a cheaper decode, the same values. None when
/// the bytes are not whole blocks.
pub fn q50_repacked(gguf: &[u8]) -> Option<Vec<u8>> {
    if !gguf.len().is_multiple_of(Q50_BLOCK) {
        return None;
    }
    let mut out = vec![0u8; gguf.len() / Q50_BLOCK * Q50_DEVICE_BLOCK];
    for (src, dst) in gguf
        .chunks_exact(Q50_BLOCK)
        .zip(out.chunks_exact_mut(Q50_DEVICE_BLOCK))
    {
        let (d, rest) = src.split_at(2);
        let (qh, qs) = rest.split_at(4);
        let qh = u32::from_le_bytes([qh[0], qh[1], qh[2], qh[3]]);
        let moved = (0..32).fold(0u32, |acc, e| acc | (((qh >> e) & 1) << q50_hbit(e)));
        dst[..2].copy_from_slice(d);
        dst[4..8].copy_from_slice(&moved.to_le_bytes());
        dst[8..].copy_from_slice(qs);
    }
    Some(out)
}

/// Activation rows sharing one decode of the weights in the batched kernel.
pub const MATMUL_TILE: usize = 8;

/// Grid of a matmul of `n` activation rows against `m` weight rows: x = weight-row blocks,
/// y = activation-row tiles (capped; the kernel loops over the rest).
pub fn matmul_grid(n: usize, m: usize) -> (u32, u32) {
    let x = (m as u32).div_ceil(MATMUL_ROWS_PER_BLOCK);
    let tiles = n.div_ceil(MATMUL_TILE).max(1) as u32;
    (x.max(1), tiles.min(64))
}

/// Grid of the fused gate/up kernel: each warp covers 2 rows of each weight.
pub fn gate_up_grid(n: usize, m: usize) -> (u32, u32) {
    let x = (m as u32).div_ceil(MATMUL_ROWS_PER_BLOCK / 2);
    let tiles = n.div_ceil(MATMUL_TILE).max(1) as u32;
    (x.max(1), tiles.min(64))
}

/// Weight types with a fast (quant8, `__dp4a`) kernel, `mmv_fast_<id>` / `gate_up_fast_<id>`.
/// The other quantized types (Q2_K, Q3_K, IQ4_NL, IQ4_XS) run the exact kernel on the
/// quantized activations' values in fast mode; F32/F16/BF16 are not quantized (quant8 keeps
/// float weights' activations in f32) and run the exact kernel on x.
pub const FAST: &[GgmlType] = &[
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::Q8_0,
    GgmlType::Q4K,
    GgmlType::Q5K,
    GgmlType::Q6K,
];

/// The (q and k, v) type pairs with a one-row norm-fused q/k/v kernel of two types
/// (`norm_mmv3_fast1_<q>_<v>`; kernels.cu `MIXED_QKV_FOR`): llama.cpp's K-quant mixtures keep
/// some layers' v in Q6_K (Q8_0 where a row is not whole super-blocks and the rest falls back to
/// Q5_0, as Gemma-3-270M's rows of 640). Without one, such a layer's v is a launch of its own.
pub const MIXED_QKV: &[(GgmlType, GgmlType)] = &[
    (GgmlType::Q5_0, GgmlType::Q8_0),
    (GgmlType::Q4K, GgmlType::Q6K),
    (GgmlType::Q5K, GgmlType::Q6K),
];

/// Whether a decode q/k/v with v of another type (a [`MIXED_QKV`] pair `(qk, v)`) runs as one
/// launch, `mmv3_fast2r_<qk>_<v>`: one activation row, q's and k's row counts even (a warp's
/// two rows are rows of one weight), and the knob (`LOCKSTEP_CUDA_MIXED_QKV_2R=0`: q and k
/// together, v a launch of its own). Each row's arithmetic is the two-row warps', so every
/// value is bitwise the separate launches'.
pub fn qkv_mixed_one_launch(n: usize, ms: [usize; 3], knob: bool) -> bool {
    knob && n == 1
        && ms[0].is_multiple_of(2)
        && ms[1].is_multiple_of(2)
        && ms.iter().all(|&m| m > 0)
}

/// Whether fast numerics quantize the activations of a matmul against a weight of type `id`.
pub fn fast_quantizes(id: i32) -> bool {
    ![GgmlType::F32, GgmlType::F16, GgmlType::Bf16]
        .iter()
        .any(|t| t.id() as i32 == id)
}

/// Threads per block of the fast kernels: one warp per weight row.
pub const FAST_THREADS: u32 = 128;

/// Values in a fast kernel's unit of weights (kernels.cu `FastUnit<TY>::E`): a lane's share
/// of a row per pass of its warp.
pub fn fast_unit_elems(id: i32) -> usize {
    let wide = [GgmlType::Q4K, GgmlType::Q5K, GgmlType::Q6K];
    if wide.iter().any(|t| t.id() as i32 == id) {
        64
    } else {
        32
    }
}

/// Rows from which a one-row mat-vec runs two weight rows a warp, unless
/// `LOCKSTEP_CUDA_TWO_ROWS` says otherwise. Halving the warps of a short mat-vec (SmolLM2's
/// and Gemma-3's o, 576 / 640 rows) costs more than the lanes' loads in flight give back; from
/// Llama-1B's o (2048 rows) and at the LM heads it pays (session 24, H200, tg128 against every
/// mat-vec a warp a row: Gemma-3 +4.5 / +8.5% with the LM head alone, Llama-1B +4.1 / +6.3%
/// with every mat-vec, SmolLM2 +1.0%; 576 / 640-row mat-vecs two rows a warp cost SmolLM2 and
/// Gemma-3 1-3% of that).
pub const TWO_ROWS_MIN: usize = 2048;

/// Whether a fast mat-vec of `n` activation rows against `m` weight rows of `k` values of type
/// `id` runs `mmv_fast2r_<id>` (two weight rows a warp; every output bitwise `mmv_fast1`'s):
/// one activation row and at least `min_rows` weight rows for rows of at most one unit a lane
/// (a lane has one unit of a row in flight, fewer where the row has under 32 units), twice
/// that for longer rows (`None`: never). Session 24 (H200, tg128): the 8B's o, down and LM
/// head (4096 / 128256 rows of 64-224 units) +2-3% two rows a warp; Llama-1B's down (2048 rows
/// of 128 units) lost 2-3% of what its o and LM head gained.
pub fn fast_two_rows(id: i32, n: usize, k: usize, m: usize, min_rows: Option<usize>) -> bool {
    min_rows.is_some_and(|min| {
        let long = k / fast_unit_elems(id) > 32;
        n == 1 && m >= min.max(1) * if long { 2 } else { 1 }
    })
}

/// Blocks of `mmv_fast2r`: two rows a warp, `FAST_THREADS / 32` warps a block.
pub fn fast_two_rows_grid(m: usize) -> u32 {
    (m as u32).div_ceil(2 * (FAST_THREADS / 32)).max(1)
}
/// Activation rows per tile of the fast kernels (a block loops over tiles strided by grid.y).
pub const FAST_TILE: usize = 8;

/// Grid of a fast matmul (or fused gate/up: one warp per row of each weight) of `n` activation
/// rows against `m` weight rows. The grid never changes a row's arithmetic.
pub fn fast_grid(n: usize, m: usize) -> (u32, u32) {
    let x = (m as u32).div_ceil(FAST_THREADS / 32);
    let tiles = n.div_ceil(FAST_TILE).max(1) as u32;
    (x.max(1), tiles.min(64))
}

/// Threads of a `gate_up_q8_fast1` block: one warp per row of a 32-row output block.
pub const GATE_UP_Q8_THREADS: u32 = 1024;

/// Whether a fused gate/up of `n` activation rows against `m` weight rows runs the kernel that
/// also quantizes its activation (`gate_up_q8_fast1`, sparing the down projection's
/// `quantize_q8_32` launch): one row (decode), whole 32-value blocks, and blocks of 32 rows
/// that fit one wave on `n_sms` SMs (each SM holds one such block: larger layers keep the
/// 4-warp blocks and the separate quantizer). A row's values do not depend on it.
pub fn gate_up_quantizes(n: usize, m: usize, n_sms: usize) -> bool {
    n == 1 && m > 0 && m.is_multiple_of(32) && m / 32 <= n_sms
}

/// The longest row a norm fused into its consumer takes (kernels.cu `NORM_FUSED_MAX`: its
/// shared-memory quantization, four values a thread).
pub const NORM_FUSED_MAX: usize = 1024;

/// Whether `residual_norm_then` runs the norm inside its consumer (`norm_mmv3_fast1`,
/// `norm_gate_up_fast1`): one activation row (decode) of `g` values, whole 32-value blocks,
/// at most [`NORM_FUSED_MAX`]. Every block of the consumer reads the whole row and runs the
/// norm before its first product, so this is for decode steps of short rows alone (on the
/// H100: SmolLM2 tg128 1540 against 1457 unfused; at 2048 and 4096 values, with blocks of 512
/// and 1024 threads, Llama-1B fell from 1174 to 859 and the 8B from 338 to 243).
pub fn norm_fuses(n: usize, g: usize) -> bool {
    n == 1 && g >= 32 && g.is_multiple_of(32) && g <= NORM_FUSED_MAX
}

/// The longest row the long norm-fused kernels take (kernels.cu `NORM_LONG_MAX`: their
/// shared-memory quantization, four values a norm thread of at most 1024).
pub const NORM_LONG_MAX: usize = 4096;

/// Threads of a long norm-fused block (kernels.cu `norm_long_*`, their launch bounds).
pub const NORM_LONG_THREADS: u32 = 1024;

/// Whether `residual_norm_then` runs the norm inside its consumer for rows longer than
/// [`NORM_FUSED_MAX`] (`norm_long_mmv3_*`, `norm_long_gate_up_*`): one activation row of `g`
/// values, whole 32-value blocks, at most [`NORM_LONG_MAX`]. Session 12's fusion of such rows
/// ran the norm in every block of 32 rows, several an SM one after another, and lost (above);
/// these run it once a block, at most a block an SM ([`norm_long_grid`]), with the first rows'
/// weights asked into L2 meanwhile.
pub fn norm_fuses_long(n: usize, g: usize) -> bool {
    n == 1 && g > NORM_FUSED_MAX && g.is_multiple_of(32) && g <= NORM_LONG_MAX
}

/// Blocks of a long norm-fused launch of `rows` weight rows (a warp a row, rows grid-stride)
/// on `n_sms` SMs: one an SM, fewer when the rows fill fewer.
pub fn norm_long_grid(rows: usize, n_sms: usize) -> u32 {
    let per_block = (NORM_LONG_THREADS / 32) as usize;
    rows.div_ceil(per_block).clamp(1, n_sms.max(1)) as u32
}

/// Whether a norm-fused gate/up of weight type `id` may take `gate_up_q8`'s 32-row blocks
/// (that also quantize the activation): the 32-value block types, whose first weight units
/// (loaded before the grid wait, both weights) fit a 1024-thread block's registers; the
/// K-quants' would spill.
pub fn norm_gate_up_quantizes(id: i32) -> bool {
    [
        GgmlType::Q4_0,
        GgmlType::Q4_1,
        GgmlType::Q5_0,
        GgmlType::Q5_1,
        GgmlType::Q8_0,
    ]
    .iter()
    .any(|t| t.id() as i32 == id)
}

/// Whether a one-row norm-fused gate/up of `m` rows of type `id` may run the 32-row quantizing
/// blocks (`norm_gate_up_q8_fast1`; the host runs them only when `LOCKSTEP_CUDA_NORM_GATE_UP_Q8=1`
/// asks, since on the H200 the 8-row blocks and the separate quantizer are faster, session 25):
/// where `gate_up_quantizes` and `norm_gate_up_quantizes` allow, and only after a single norm. Each block runs the whole norm prologue before its rows;
/// with a post norm too (Gemma-3's sandwich norms) that prologue is twice as long, and 64
/// such blocks of 1024 threads, one an SM, cost more than the 8-row blocks and the separate
/// quantizer: Gemma-3 1406 tok/s against 1492 (three rounds each, H100, BENCHMARKS.md
/// session 15), SmolLM2 (no post norm) 1623 against 1601.
pub fn norm_fused_gate_up_quantizes(m: usize, n_sms: usize, id: i32, post_norm: bool) -> bool {
    !post_norm && gate_up_quantizes(1, m, n_sms) && norm_gate_up_quantizes(id)
}

/// Threads of a block of a norm-fused consumer that is not `gate_up_q8`'s 32-row shape: the
/// norm's own block ([`norm_threads`]), at least [`FAST_THREADS`]; one warp a weight row.
pub fn norm_fused_threads(g: usize) -> u32 {
    norm_threads(g).max(FAST_THREADS)
}

/// The most threads of such a block (kernels.cu `NORM_FUSED_THREADS`, its launch bounds).
pub const NORM_FUSED_BLOCK_MAX: u32 = 512;

/// Threads of each block of a norm-fused consumer of `rows` weight rows (one a warp) on a
/// card of `n_sms` SMs: [`norm_fused_threads`], doubled (up to [`NORM_FUSED_BLOCK_MAX`])
/// while the grid has more blocks than SMs. Every block runs the whole norm before its rows
/// (a dependent chain of loads and two block reductions, most of such a launch's time), so a
/// grid of more blocks than SMs puts two of those chains on one SM, where they slow each
/// other. Gemma-3-270M's q/k/v (1536 rows) and gate/up (2048) go from 192 and 256 blocks of
/// 256 threads to 96 and 128 of 512: tg128 +1.2 to +1.5% on the H200 (BENCHMARKS.md session
/// 42; 1024 threads a block lost 7%). The norm's own threads and every row's arithmetic are
/// unchanged, so every value is the same.
pub fn norm_fused_block(g: usize, rows: usize, n_sms: usize) -> u32 {
    let mut t = norm_fused_threads(g);
    while t < NORM_FUSED_BLOCK_MAX && rows.div_ceil((t / 32) as usize) > n_sms.max(1) {
        t *= 2;
    }
    t
}

/// Bytes of the quantized activations of `n` rows of `k` (k a multiple of 32): `n * k` int8
/// values, then per 32 values an 8-byte `{f32 d, i32 sum}` (`Q8Blk` in kernels.cu).
pub fn q8_bytes(n: usize, k: usize) -> usize {
    n * k + n * (k / 32) * 8
}

/// Threads of the block that norms one group of `g` values (kernels.cu `norm_group`): about
/// four values a thread, a power of two from one warp to 1024. A function of `g` alone, so a
/// group's summation order never depends on the batch, and the fused norms (`add_rms_norm`,
/// the per-head norms in `rope_store`) use the same count as the separate `rms_norm`.
pub fn norm_threads(g: usize) -> u32 {
    (g.div_ceil(4).next_power_of_two()).clamp(32, 1024) as u32
}

/// Values a norm thread holds in registers (kernels.cu `NORM_MAXV`): `residual_norm` takes rows
/// of at most this many times `norm_threads` values (8192); longer rows run as separate ops.
pub const NORM_MAXV: usize = 8;

/// Blocks a one-row `residual_norm` of `g` values runs on (grid.y): one per value a thread
/// holds, each computing the whole norm and writing its share (kernels.cu, residual_norm), so
/// the per-value work (the quantization's shuffles) is spread over as many SMs. Session 19's
/// timeline found Llama-1B's and the 8B's one-block residual_norm 6-9 us a call, most of it
/// after the loads (tg128 +2-5% on those two). Rows the norm-fused consumers take
/// ([`NORM_FUSED_MAX`] and shorter: only the last layer's norm is a residual_norm there) keep one
/// block (SmolLM2 with three: +2% in one call, -2 to -5% in another); rows of a prefill already
/// fill the GPU.
/// `LOCKSTEP_CUDA_NORM_PARTS=0` keeps one block.
pub fn residual_parts(n: usize, g: usize, knob: bool) -> u32 {
    if n != 1 || !knob || g <= NORM_FUSED_MAX {
        return 1;
    }
    (g.div_ceil(norm_threads(g) as usize) as u32).clamp(1, NORM_MAXV as u32)
}

/// Whether `residual_norm`'s kernel takes rows of `g` values.
pub fn residual_fits(g: usize) -> bool {
    g > 0 && g <= NORM_MAXV * norm_threads(g) as usize
}

/// Whether a decode step's `rope_store` runs inside its short decode attention kernel
/// (`attention_decode_rope_<D>`, `Backend::rope_store_attention`), by head size. Heads of 64 and
/// 128 values: one launch fewer a layer, SmolLM2 +7-11% tg128, the 8B +0.3-2.4%, Llama-3.2-1B
/// within its spread (-0.7% to +1.6%). Not Gemma-3's 256 (with its per-head norms): the fused
/// blocks of 512 threads lost 1-4% against the two kernels (BENCHMARKS.md, session 17), and
/// again 0.8-4.2% with the heads normed at once (session 28: 121 registers a thread, so a block
/// needs an SM the q/k/v launch has left entirely), so that instance is not built; inside the
/// cluster kernel of heads of 256 it lost 2-6% (session 41, `bench/session41/rope_cl.patch`).
pub fn rope_attention_fuses(head_dim: usize) -> bool {
    head_dim == 64 || head_dim == 128
}

/// The longest head `rope_store`'s kernel takes (kernels.cu `ROPE_MAX_HEAD`).
pub const ROPE_MAX_HEAD: usize = 512;

/// Blocks of `threads` covering `n` elements.
pub fn blocks_for(n: usize, threads: u32) -> u32 {
    (n as u32).div_ceil(threads).max(1)
}

/// The per-row table of the attention kernel (5 ints a row: slots offset, key count,
/// position, score offset, mask offset or -1), the concatenated key slots, the concatenated
/// masks, and the total number of scores (every sequence's rows x heads x keys, in the order
/// the reference emits its `kq` tap).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AttnPlan {
    pub info: Vec<i32>,
    pub slots: Vec<u32>,
    pub mask: Vec<u8>,
    pub n_scores: usize,
    /// Key rows read in all (for the k_read / v_read taps).
    pub n_keys: usize,
}

pub const ROW_INFO: usize = 5;

fn too_big(what: &str) -> BackendError {
    BackendError::Kv(format!(
        "attention: {what} does not fit the kernel's 32-bit indices"
    ))
}

pub fn attention_plan(
    batch: &Batch,
    n_rows: usize,
    n_heads: usize,
    n_slots: usize,
) -> Result<AttnPlan, BackendError> {
    let mut p = AttnPlan {
        info: vec![0; n_rows * ROW_INFO],
        ..AttnPlan::default()
    };
    let mut covered = vec![false; n_rows];
    for seq in &batch.seqs {
        let n_kv = seq.kv_slots.len();
        if seq.first_row + seq.n_rows > n_rows {
            return Err(BackendError::Kv(format!(
                "attention: sequence rows {}..{} outside the batch of {n_rows}",
                seq.first_row,
                seq.first_row + seq.n_rows
            )));
        }
        if (seq.first_pos as usize) + seq.n_rows > n_kv {
            return Err(BackendError::Kv(format!(
                "attention: {} new tokens from position {} but only {n_kv} key slots",
                seq.n_rows, seq.first_pos
            )));
        }
        if let Some(&bad) = seq.kv_slots.iter().find(|&&s| s as usize >= n_slots) {
            return Err(BackendError::Kv(format!(
                "attention: key slot {bad} outside the cache of {n_slots} slots"
            )));
        }
        let mask_base = match &seq.mask {
            Some(m) => {
                if m.len() != seq.n_rows * n_kv {
                    return Err(BackendError::Kv(format!(
                        "mask has {} entries, expected {} x {n_kv}",
                        m.len(),
                        seq.n_rows
                    )));
                }
                let b = p.mask.len();
                p.mask.extend(m.iter().map(|&v| v as u8));
                Some(b)
            }
            None => None,
        };
        let slots_off = p.slots.len();
        p.slots.extend_from_slice(&seq.kv_slots);
        p.n_keys += n_kv;
        for i in 0..seq.n_rows {
            let row = seq.first_row + i;
            covered[row] = true;
            let mask_off = match mask_base {
                Some(b) => i32::try_from(b + i * n_kv).map_err(|_| too_big("the mask"))?,
                None => -1,
            };
            let score_off = p.n_scores + i * n_heads * n_kv;
            let cell = &mut p.info[row * ROW_INFO..(row + 1) * ROW_INFO];
            cell[0] = i32::try_from(slots_off).map_err(|_| too_big("the key slots"))?;
            cell[1] = i32::try_from(n_kv).map_err(|_| too_big("the key count"))?;
            cell[2] =
                i32::try_from(seq.first_pos as usize + i).map_err(|_| too_big("a position"))?;
            cell[3] = i32::try_from(score_off).map_err(|_| too_big("the score matrix"))?;
            cell[4] = mask_off;
        }
        p.n_scores += seq.n_rows * n_heads * n_kv;
    }
    if let Some(row) = covered.iter().position(|c| !c) {
        return Err(BackendError::Kv(format!(
            "attention: batch row {row} belongs to no sequence"
        )));
    }
    i32::try_from(p.n_scores).map_err(|_| too_big("the score matrix"))?;
    Ok(p)
}

/// Threads of a tiled attention block (`ATT_T_THREADS` in kernels.cu).
pub const ATT_TILE_THREADS: usize = 256;
/// The most row-heads one tiled attention block holds (`ATT_T_MAX_RH`).
pub const ATT_TILE_MAX_RH: usize = 64;
/// The most f64 output accumulators one thread holds (`ATT_T_ACC`).
pub const ATT_TILE_ACC: usize = 16;
/// Dynamic shared memory a tiled attention block may take: 48 KiB (no opt-in) less the
/// kernel's static per-row-head tables ([`ATT_TILE_STATIC_SMEM`]) and some slack.
pub const ATT_TILE_SMEM: usize = 44 * 1024;
/// Dynamic shared memory a one-row tile (decode) may take where the device lets a block opt in
/// to it (larger chunks: fewer memory round trips in the latency-bound decode).
pub const ATT_TILE_SMEM_ONE_ROW: usize = 144 * 1024;
/// Static shared memory of a tiled attention block (its per-row-head tables), kept free.
pub const ATT_TILE_STATIC_SMEM: usize = 3 * 1024;
// The tables: per row-head a size_t offset, six ints, an f32 max and an f64 sum (2816 bytes,
// as ptxas reports); with the dynamic part, within the 48 KiB a block has without opting in.
const _: () = assert!(ATT_TILE_MAX_RH * (8 + 6 * 4 + 4 + 8) <= ATT_TILE_STATIC_SMEM);
const _: () = assert!(ATT_TILE_SMEM + ATT_TILE_STATIC_SMEM <= 48 * 1024);
/// Blocks the planner aims for (two per SM of a 132-SM H100) before it shrinks tiles to 2 rows.
pub const ATT_TILE_TARGET_BLOCKS: usize = 264;

/// Which attention kernel a step runs: chosen per step shape ([`use_row_attention`]) or forced
/// by `LOCKSTEP_CUDA_ATTN` for comparisons.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttnChoice {
    Auto,
    Row,
    Tile,
    /// The split-key kernels where they apply ([`use_split_attention`]), else `Auto`'s choice.
    Split,
    /// `Auto`'s choice without the split-key kernels (for comparisons).
    Unsplit,
}

/// Query heads per KV head the split-key attention serves in one block (`ATT_S_MAX_G`), and
/// the longest head it holds (`ATT_S_MAX_D`).
pub const ATT_SPLIT_MAX_GROUP: usize = 8;
pub const ATT_SPLIT_MAX_HEAD: usize = 256;
/// Threads of an `attention_split` block.
pub const ATT_SPLIT_THREADS: u32 = 128;
/// Threads of an `attention_combine` block (a block per (row, head): many threads, so that
/// the spans' sums are read in few round trips).
pub const ATT_COMBINE_THREADS: u32 = 512;
/// Floats before a partial's sums in `attention_split`'s output (m, l, padding), so that the
/// sums are 16-byte aligned; a partial is `head_dim + ATT_SPLIT_PART_HEAD` floats.
pub const ATT_SPLIT_PART_HEAD: usize = 4;
/// The fewest keys a span of the split-key attention gets (rounded up to whole chunks).
pub const ATT_SPLIT_MIN_KEYS: usize = 8;
/// The most spans a row's keys may be cut into (`ATT_SPLIT_SPANS`: one `attention_combine`
/// thread reads a span's maximum), and the most the default rule takes: session 32 (H200,
/// tg128 at depth 4096 with spans fixed) measured SmolLM2 1311 tokens/s at 132 spans against
/// 1168 at 128's two chunks a span, Gemma-3 1609 at 256 and 1612 at 512 against 1550 at 128,
/// and at depth 1024 Gemma-3 1752 at 256 against 1693 at 512.
pub const ATT_SPLIT_MAX_SPANS: usize = 512;
pub const ATT_SPLIT_SPANS_CAP: usize = 256;
/// Blocks of `attention_split` an SM holds where the driver's occupancy query fails (its 103
/// registers a thread allow 4 blocks of 128 threads in session 31's build).
pub const ATT_SPLIT_BLOCKS_PER_SM: usize = 4;

/// A decode step is "long" when one of its sequences attends over at least this many keys.
/// Session 8 (H100, tg128 from an empty cache, keys 1..128, spans of at least 8 keys): the
/// split-key kernels lost to the row kernel for heads of 64 values (SmolLM2 899.7 / 902.7
/// against 942.4 / 933.2 tokens/s, Llama-3.2-1B 889.4 / 890.8 against 941.7 / 947.4) and won
/// for Gemma-3's 256 (961.3 / 927.0 against 849.7 / 855.5); over 1024 tokens they won
/// everywhere (SmolLM2 730.7 against 355.4, Gemma-3 793.0 against 349.3).
pub const ATT_SPLIT_FROM_KEYS: usize = 128;

/// Whether the step's longest sequence attends over [`ATT_SPLIT_FROM_KEYS`] keys or more.
/// Part of the CUDA step graphs' key, so a graph recorded in one class is never replayed in
/// the other.
pub fn long_context(batch: &Batch) -> bool {
    batch
        .seqs
        .iter()
        .any(|s| s.kv_slots.len() >= ATT_SPLIT_FROM_KEYS)
}

/// Whether a step runs the split-key attention (`attention_split` + `attention_combine`):
/// only where the backend allows it (`cuda`: fast numerics, not deterministic), only for
/// decode steps (one row a sequence: a prefill's rows share their keys in the tiles), only
/// for the head layouts its blocks hold, and by default only for heads of more than 128
/// values or long contexts (`long`, see [`ATT_SPLIT_FROM_KEYS`]). The choice depends on the
/// step's shape and context class alone, both in the step graphs' key, so a replayed graph
/// runs what the eager step ran.
#[allow(clippy::too_many_arguments)]
pub fn use_split_attention(
    choice: AttnChoice,
    allowed: bool,
    n_rows: usize,
    n_seqs: usize,
    n_heads: usize,
    n_kv_heads: usize,
    head_dim: usize,
    long: bool,
) -> bool {
    let fits = n_kv_heads > 0
        && n_heads.is_multiple_of(n_kv_heads)
        && n_heads / n_kv_heads <= ATT_SPLIT_MAX_GROUP
        && head_dim <= ATT_SPLIT_MAX_HEAD
        && head_dim.is_multiple_of(4);
    // Short decode steps with heads over 128 values (where the row kernel lost) take the
    // short decode kernel where it holds the layout.
    let wanted = match choice {
        AttnChoice::Split => true,
        AttnChoice::Auto => long || (head_dim > 128 && !decode_fits(n_heads, n_kv_heads, head_dim)),
        AttnChoice::Row | AttnChoice::Tile | AttnChoice::Unsplit => false,
    };
    allowed && fits && n_rows <= n_seqs && wanted
}

/// Head sizes with a short decode attention kernel (`attention_decode_<D>`).
pub const ATT_DECODE_HEADS: [usize; 3] = [64, 128, 256];

/// An `attention_decode_<D>` block (`AttDecodeShape<D>`): its threads (128 keys x the parts a
/// K row is cut into) and the most query heads per KV head it serves; `None` for a head size
/// without a kernel.
pub fn decode_attention_shape(head_dim: usize) -> Option<(u32, usize)> {
    match head_dim {
        64 | 128 => Some((256, 8)),
        256 => Some((512, 4)),
        _ => None,
    }
}

/// Threads of an `attention_decode_cl<N>_256` block (kernels.cu `ATT_CL_THREADS`).
pub const ATT_CLUSTER_THREADS: u32 = 256;

/// The blocks of the cluster that cuts a short decode row's keys (`attention_decode_cl<N>_256`,
/// N = 4 or 8, each block a chunk of at most `ATT_DECODE_MAX_KEYS / N` keys for the same heads,
/// their softmax partials combined through the cluster's shared memory): heads of 256 only,
/// whose block a head is bound by its K and V bytes into one SM (BENCHMARKS.md, sessions 29
/// and 41). `wanted`: the knob's 4 or 8, or 0 for none.
pub fn decode_cluster_blocks(head_dim: usize, wanted: u32) -> Option<u32> {
    (head_dim == 256 && matches!(wanted, 4 | 8)).then_some(wanted)
}

/// The kernel a replayed step's o projection runs with its weights loaded before its grid
/// wait (kernels.cu `mmv_pre1r_12` / `mmv_pre2r_12`, `graph_exec::preload_rewrite`), given the
/// kernel before it (`prev`), its own (`kernel`), its activation rows and its row length `k`
/// (0: not known yet, the names alone): only a one-row `mmv_fast1_12` or `mmv_fast2r_12` of
/// at most 64 Q4_K units a row right after a decode attention kernel, which moves few bytes
/// while the weights stream. `None` keeps the kernel.
pub fn o_preload_kernel(prev: &str, kernel: &str, rows: i32, k: i32) -> Option<&'static str> {
    // 64 units of 64 values: two a lane
    if !prev.starts_with("attention_decode") || rows != 1 || k > 64 * 64 {
        return None;
    }
    match kernel {
        "mmv_fast1_12" => Some("mmv_pre1r_12"),
        "mmv_fast2r_12" => Some("mmv_pre2r_12"),
        _ => None,
    }
}

/// How many of a KV head's query heads one `attention_decode` block serves (`hpb`, a divisor of
/// the group): the whole group where the step has blocks enough to fill the GPU that way (each
/// K and V row is then loaded once per block for all of them), else fewer, down to one a block:
/// a decode step of one sequence otherwise runs on `n_kv_heads` SMs (one for Gemma-3) with the
/// whole group's work serialized in each. A head's arithmetic is the same whatever the split.
pub fn decode_attention_heads_per_block(
    n_rows: usize,
    n_heads: usize,
    n_kv_heads: usize,
    n_sms: usize,
) -> usize {
    let group = n_heads / n_kv_heads.max(1);
    (1..=group)
        .rev()
        .filter(|h| group.is_multiple_of(*h))
        .find(|h| n_rows * n_kv_heads * (group / h) >= n_sms)
        .unwrap_or(1)
}

/// The most keys a row of `attention_decode` attends over (`ATT_D_MAX_KEYS`): the steps it runs
/// are short (`long_context` false: every sequence has fewer than [`ATT_SPLIT_FROM_KEYS`]).
pub const ATT_DECODE_MAX_KEYS: usize = 128;
const _: () = assert!(ATT_SPLIT_FROM_KEYS <= ATT_DECODE_MAX_KEYS);

/// Whether a step runs the short decode attention (`attention_decode_<D>`): only where the
/// backend allows it (`cuda`: fast numerics, not deterministic), only for decode steps (one row
/// a sequence) of short contexts (`long` false; long ones take the split-key kernels), only for
/// the head sizes it has kernels for and groups its blocks hold, and not when
/// `LOCKSTEP_CUDA_ATTN` asks for another kernel. Like the split choice, a function of the
/// step's shape and context class, both in the step graphs' key.
#[allow(clippy::too_many_arguments)]
pub fn use_decode_attention(
    choice: AttnChoice,
    allowed: bool,
    n_rows: usize,
    n_seqs: usize,
    n_heads: usize,
    n_kv_heads: usize,
    head_dim: usize,
    long: bool,
) -> bool {
    let wanted = matches!(choice, AttnChoice::Auto | AttnChoice::Unsplit);
    allowed && decode_fits(n_heads, n_kv_heads, head_dim) && n_rows <= n_seqs && !long && wanted
}

/// Whether an `attention_decode` block holds this head layout.
fn decode_fits(n_heads: usize, n_kv_heads: usize, head_dim: usize) -> bool {
    n_kv_heads > 0
        && n_heads.is_multiple_of(n_kv_heads)
        && decode_attention_shape(head_dim).is_some_and(|(_, g)| n_heads / n_kv_heads <= g)
}

/// Head sizes with a flash prefill kernel (`attention_flash_<D>`).
pub const ATT_FLASH_HEADS: [usize; 2] = [64, 128];
/// Keys a flash block stages at a time (`ATT_F_KEYS`).
pub const ATT_FLASH_KEYS: usize = 64;
/// The most warps of a flash block (`ATT_F_MAX_WARPS`); each holds 16 row-heads.
pub const ATT_FLASH_MAX_WARPS: usize = 4;

/// Whether a step runs the flash prefill attention (`attention_flash_<D>`): only where the
/// backend allows it (`cuda`: fast numerics, not deterministic), only for steps where some
/// sequence has several rows (a prefill: decode steps keep the row and split-key kernels), only
/// for the head sizes it has kernels for and groups its blocks hold, and not when
/// `LOCKSTEP_CUDA_ATTN` asks for the row or tiled kernels.
pub fn use_flash_attention(
    choice: AttnChoice,
    allowed: bool,
    n_rows: usize,
    n_seqs: usize,
    n_heads: usize,
    n_kv_heads: usize,
    head_dim: usize,
) -> bool {
    let fits = n_kv_heads > 0
        && n_heads.is_multiple_of(n_kv_heads)
        && n_heads / n_kv_heads <= 16 * ATT_FLASH_MAX_WARPS
        && ATT_FLASH_HEADS.contains(&head_dim);
    let wanted = !matches!(choice, AttnChoice::Row | AttnChoice::Tile);
    allowed && fits && n_rows > n_seqs && wanted
}

/// Launch geometry of the flash prefill attention.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlashGeom {
    /// Warps a block (16 row-heads each).
    pub warps: usize,
    /// Batch rows a block: as many as its row-heads hold, all query heads of one KV head.
    pub tile_rows: usize,
    /// (row tiles, KV heads).
    pub grid: (u32, u32),
    /// Dynamic shared memory: K and V chunks, the block's q rows, the chunk's slots.
    pub smem_bytes: u32,
}

/// Dynamic shared memory of a flash block of `warps` warps for heads of `head_dim` values:
/// (2 chunks of keys + 16 rows a warp) rows of head_dim + 4 floats, then the chunk's slots.
pub fn flash_smem(head_dim: usize, warps: usize) -> usize {
    (2 * ATT_FLASH_KEYS + 16 * warps) * (head_dim + 4) * 4 + ATT_FLASH_KEYS * 4
}

/// The flash geometry: the most warps a block (the fewest K and V reloads) that still gives
/// every SM a block (`n_sms`), else the fewest warps that hold a group; `force_warps` (the
/// `LOCKSTEP_CUDA_FLASH_WARPS` knob, 0 = choose) overrides where it holds the group. Only
/// speed depends on it.
pub fn flash_geometry(
    n_rows: usize,
    n_heads: usize,
    n_kv_heads: usize,
    head_dim: usize,
    n_sms: usize,
    force_warps: usize,
) -> FlashGeom {
    let group = (n_heads / n_kv_heads.max(1)).max(1);
    let min_warps = group.div_ceil(16).clamp(1, ATT_FLASH_MAX_WARPS);
    let blocks = |w: usize| n_rows.div_ceil(16 * w / group) * n_kv_heads;
    let warps = if (min_warps..=ATT_FLASH_MAX_WARPS).contains(&force_warps) {
        force_warps
    } else {
        (min_warps..=ATT_FLASH_MAX_WARPS)
            .rev()
            .find(|&w| blocks(w) >= n_sms)
            .unwrap_or(min_warps)
    };
    let tile_rows = 16 * warps / group;
    FlashGeom {
        warps,
        tile_rows,
        grid: (n_rows.div_ceil(tile_rows) as u32, n_kv_heads as u32),
        smem_bytes: flash_smem(head_dim, warps) as u32,
    }
}

/// How many spans the split-key attention cuts each row's keys into: as many as one wave of
/// blocks (rows x KV heads x spans, `per_sm` blocks resident on each of `n_sms` SMs) holds, at
/// most [`ATT_SPLIT_SPANS_CAP`]. The kernel then gives every span the same whole number of
/// chunks, the fewest that cover its row in these spans (kernels.cu `attention_split`), so
/// each block reads its keys in as few round trips as the wave allows. A function of the
/// step's shape, never of its context length (spans of a short context stay empty).
///
/// Session 31's rule, 8 blocks an SM in spans of at least ceil(sqrt(n) / 2) keys, ran the 8B's
/// row of 4224 keys in 1024 blocks (two waves) of 33 keys: two round trips, one for one key.
pub fn attention_spans(n_rows: usize, n_kv_heads: usize, n_sms: usize, per_sm: usize) -> usize {
    let blocks = (n_rows * n_kv_heads).max(1);
    ((per_sm.max(1) * n_sms.max(1)) / blocks).clamp(1, ATT_SPLIT_SPANS_CAP)
}

/// Keys a span of a row of `n` visible keys, as `attention_split` computes them: a whole
/// number of chunks of `chunk` keys, at least `min_keys`, the fewest that cover the row in
/// `n_spans` spans. (The host never needs it; the tests hold the rule's properties.)
pub fn attention_span_keys(n: usize, chunk: usize, n_spans: usize, min_keys: usize) -> usize {
    let chunk = chunk.max(1);
    chunk
        * min_keys
            .div_ceil(chunk)
            .max(n.div_ceil(chunk).div_ceil(n_spans.max(1)))
}

/// Whether a step of `n_rows` rows in `n_seqs` sequences, heads of `head_dim` values, runs the
/// one block per (row, head) attention kernel rather than the tiled one. Both give the same
/// values bitwise, so this is speed alone. A decode step (one row a sequence) has no rows to
/// share staged keys between; there the row kernel won for heads of up to 128 values and lost
/// for Gemma-3's 256 (tg128 on an H100, session 7: Llama-3.2-1B 923.9 against 864.8 tokens/s,
/// SmolLM2 914.0 / 878.1, Llama-3.1-8B 266.6 / 256.6, Gemma-3-270M 793.5 / 841.7). The choice
/// depends on the step's shape alone, never on its context length, so a step graph replays
/// the kernel the eager step would run. (Over longer contexts the tiles win everywhere: tg1024
/// SmolLM2 350.3 / 397.9.)
pub fn use_row_attention(
    choice: AttnChoice,
    n_rows: usize,
    n_seqs: usize,
    head_dim: usize,
) -> bool {
    match choice {
        AttnChoice::Row => true,
        AttnChoice::Tile => false,
        AttnChoice::Auto | AttnChoice::Split | AttnChoice::Unsplit => {
            n_rows <= n_seqs && head_dim <= 128
        }
    }
}

/// Launch geometry of the tiled attention kernels (`attention_tile` for heads of up to 256
/// values, `attention_tile_wide` up to 512). Only speed depends on it: every (row, head) gets
/// the same arithmetic whatever the tiling, so any choice keeps results bitwise equal and
/// batch-invariant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AttnTile {
    /// Batch rows per block (a tile's rows are processed in runs of one sequence).
    pub tile_rows: usize,
    /// Query heads per block, all of one KV head (a group larger than this is split).
    pub heads: usize,
    /// Keys staged in shared memory at a time.
    pub chunk: usize,
    /// Whether the wide kernel (heads of more than 256 values) runs.
    pub wide: bool,
    /// x: row tiles; y: KV heads x head sub-groups.
    pub grid: (u32, u32),
    pub smem_bytes: u32,
}

/// Floats per staged K/V or q row in the tiled kernel (`att_stride`): 16-byte aligned, padded
/// by 4 so the rows' float4 reads spread over the banks.
pub fn att_stride(head_dim: usize) -> usize {
    head_dim.div_ceil(4) * 4 + 4
}

/// Dynamic shared memory of a tiled attention block: `chunk` K/V rows, then a region holding
/// `rh` q rows or `chunk` f64 probabilities for each of `rh` row-heads rounded up to a multiple
/// of the weighted sum's row-head groups (16-byte rounded), then two buffers of `chunk` slots.
pub fn attention_tile_smem(head_dim: usize, rh: usize, chunk: usize) -> usize {
    let stride = att_stride(head_dim);
    let rg = ATT_TILE_THREADS / head_dim.clamp(1, ATT_TILE_THREADS);
    let rh_pad = rh.div_ceil(rg) * rg;
    let region = (rh * stride * 4).max(rh_pad * chunk * 8).div_ceil(16) * 16;
    chunk * stride * 4 + region + 2 * chunk * 4
}

/// The dynamic shared memory a one-row tile may take on a device whose blocks may opt in to
/// `optin` bytes: [`ATT_TILE_SMEM_ONE_ROW`] or what the device allows, never less than
/// [`ATT_TILE_SMEM`] (which needs no opt-in).
pub fn attention_one_row_smem(optin: usize) -> usize {
    ATT_TILE_SMEM_ONE_ROW
        .min(optin.saturating_sub(ATT_TILE_STATIC_SMEM))
        .max(ATT_TILE_SMEM)
}

/// The tiling of an attention call of `n_rows` rows in `n_seqs` sequences. `force_tile_rows`
/// (0: chosen here; a tuning knob) sets the rows per tile, rounded down to a power of two that
/// fits the kernel; a one-row tile may take `one_row_smem` bytes of shared memory (the
/// kernels' opt-in, [`attention_one_row_smem`]). The caller checked `1 <= head_dim <= 512`
/// and that the KV heads divide the heads.
pub fn attention_tile(
    n_rows: usize,
    n_seqs: usize,
    n_heads: usize,
    n_kv_heads: usize,
    head_dim: usize,
    force_tile_rows: usize,
    one_row_smem: usize,
) -> AttnTile {
    let group = (n_heads / n_kv_heads.max(1)).max(1);
    let wide = head_dim > ATT_TILE_THREADS;
    // Pass 2: a thread holds `nd` elements of `ceil(rh / rg)` row-heads.
    let (dw, nd) = if wide {
        (ATT_TILE_THREADS, 2)
    } else {
        (head_dim.max(1), 1)
    };
    let rg = ATT_TILE_THREADS / dw;
    let rh_max = (ATT_TILE_ACC / nd * rg).min(ATT_TILE_MAX_RH);
    let mut heads = group.min(rh_max);
    let per_seq = n_rows / n_seqs.max(1);
    if per_seq < 2 {
        // Decode: a block's work is one row's serial chains; fewer heads a block spread the
        // rest (scores, exps) over more SMs while the blocks are few.
        let blocks = |h: usize| n_rows * n_kv_heads * group.div_ceil(h);
        while heads > 1 && blocks(heads) < ATT_TILE_TARGET_BLOCKS {
            heads = heads.div_ceil(2);
        }
    }
    let n_sub = group.div_ceil(heads);
    let cap = if force_tile_rows == 0 {
        per_seq
    } else {
        force_tile_rows
    };
    let mut tile_rows = 1;
    while tile_rows * 2 <= cap && tile_rows * 2 * heads <= rh_max {
        tile_rows *= 2;
    }
    let blocks = |t: usize| n_rows.div_ceil(t) * n_kv_heads * n_sub;
    while force_tile_rows == 0 && tile_rows > 2 && blocks(tile_rows) < ATT_TILE_TARGET_BLOCKS {
        tile_rows /= 2;
    }
    let rh = tile_rows * heads;
    let budget = if tile_rows == 1 {
        one_row_smem.max(ATT_TILE_SMEM)
    } else {
        ATT_TILE_SMEM
    };
    let mut chunk = 256;
    while chunk > 8 && attention_tile_smem(head_dim, rh, chunk) > budget {
        chunk /= 2;
    }
    AttnTile {
        tile_rows,
        heads,
        chunk,
        wide,
        grid: (
            n_rows.div_ceil(tile_rows).max(1) as u32,
            (n_kv_heads * n_sub) as u32,
        ),
        smem_bytes: attention_tile_smem(head_dim, rh, chunk) as u32,
    }
}

/// `(cos, sin)` of every (row, pair) for rotary embedding, interleaved, computed exactly as
/// the reference does (f64 `powf` and `sin_cos` on the host).
pub fn rope_table(positions: &[u32], n_rot: usize, base: f32) -> Vec<f64> {
    let half = n_rot / 2;
    let inv = rope_inverse_frequencies(n_rot, base);
    let mut out = Vec::with_capacity(positions.len() * half * 2);
    for &pos in positions {
        let pos = f64::from(pos);
        for &f in inv.iter() {
            let (s, c) = (pos * f).sin_cos();
            out.push(c);
            out.push(s);
        }
    }
    out
}

/// `base^(-2i / n_rot)` for the `n_rot / 2` pairs, computed once per (n_rot, base) on each
/// thread: a decode step's table is one row, whose `powf`s cost as much host time as its
/// `sin_cos`s (Gemma-3: two tables of 128 pairs before every replay). The same expression as
/// ever, so the tables are bitwise the same.
fn rope_inverse_frequencies(n_rot: usize, base: f32) -> std::rc::Rc<[f64]> {
    type Kept = Vec<((usize, u32), std::rc::Rc<[f64]>)>;
    thread_local! {
        static KEPT: std::cell::RefCell<Kept> = const { std::cell::RefCell::new(Vec::new()) };
    }
    let key = (n_rot, base.to_bits());
    KEPT.with(|k| {
        let mut k = k.borrow_mut();
        if let Some((_, v)) = k.iter().find(|(kk, _)| *kk == key) {
            return v.clone();
        }
        let v: std::rc::Rc<[f64]> = (0..n_rot / 2)
            .map(|i| f64::from(base).powf(-2.0 * i as f64 / n_rot as f64))
            .collect();
        // A handful of kinds in a process (a model has one or two); a runaway list is cut.
        if k.len() >= 16 {
            k.clear();
        }
        k.push((key, v.clone()));
        v
    })
}

/// Rows of [`rope_table`] by position, per (rotated dims, base), kept across steps: a prefill at
/// positions an earlier one covered (every prompt starts at 0) copies its rows instead of
/// computing a `sin_cos` per pair (Gemma-3's 512 positions: 65536 of them, milliseconds of host
/// time while the GPU waits). Each row is computed by `rope_table` itself, so a table is
/// bitwise `rope_table`'s.
#[derive(Default)]
pub struct RopeRows {
    kinds: Vec<((usize, u32), Vec<f64>)>,
}

impl RopeRows {
    /// The most positions kept for one kind (Gemma-3's 256 rotated dims: 16 MiB).
    pub const MAX_POSITIONS: usize = 8192;

    /// `rope_table(positions, n_rot, base)`, from the kept rows. The rows grow, contiguously
    /// from position 0, only while that costs at most twice what the table alone would (a
    /// prefill's run of positions; a lone decode step far ahead computes its own row).
    pub fn table(&mut self, positions: &[u32], n_rot: usize, base: f32) -> Vec<f64> {
        let w = n_rot / 2 * 2;
        let Some(&max) = positions.iter().max() else {
            return Vec::new();
        };
        let max = max as usize;
        if w == 0 || max >= Self::MAX_POSITIONS {
            return rope_table(positions, n_rot, base);
        }
        let key = (n_rot, base.to_bits());
        let i = match self.kinds.iter().position(|(k, _)| *k == key) {
            Some(i) => i,
            None => {
                self.kinds.push((key, Vec::new()));
                self.kinds.len() - 1
            }
        };
        let rows = &mut self.kinds[i].1;
        let have = rows.len() / w;
        if max >= have {
            if max + 1 - have > 2 * positions.len() {
                return rope_table(positions, n_rot, base);
            }
            let more: Vec<u32> = (have as u32..=max as u32).collect();
            rows.extend(rope_table(&more, n_rot, base));
        }
        let mut out = Vec::with_capacity(positions.len() * w);
        for &p in positions {
            let p = p as usize;
            out.extend_from_slice(&rows[p * w..(p + 1) * w]);
        }
        out
    }
}

/// Threads of a `logits_top_part` / `logits_top_merge` block and the most logits (or, when
/// merging, keys) one thread holds (`TOP_THREADS`, `TOP_PER` in kernels.cu).
pub const TOP_THREADS: usize = 256;
pub const TOP_PER: usize = 16;
/// The most candidates a row is reduced to on the device (the merge keeps them in shared
/// memory).
pub const TOP_MAX_K: usize = 64;
/// The logits a first-pass block takes when there are enough blocks to spare.
const TOP_CHUNK: usize = 2048;

/// Whole-row draws (`LogitsOut::TopDraw`, kernels.cu `draw_leaves` / `draw_pick`): the sum
/// tree's fanout (a warp, lockstep_sampling's `DRAW_FANOUT`), the parameters a row
/// (`DRAW_PARAMS`), and the segments (warps) a `draw_leaves` block takes.
pub const DRAW_FANOUT: usize = lockstep_graph::DRAW_FANOUT;
pub const DRAW_PARAMS: usize = 4;
pub const DRAW_LEAF_WARPS: usize = 8;
/// Words a row's picks take after the top reduction's rows: the drawn token, the total's
/// two halves, the drawn token's logit (`draw_pick`).
pub const PICK_WORDS: usize = 4;

/// Top-p candidates (kernels.cu `nucleus_hist` / `_gather` / `_sort`): bins of the logits
/// near the max, the most candidates a row gathers, the threads of the first two passes.
pub const NUC_BINS: usize = 2048;
pub const NUC_CAP: usize = 2048;
pub const NUC_THREADS: usize = 256;

/// Words of a row's sorted candidates: the count, the ids, the logits' bits.
pub fn nuc_words() -> usize {
    1 + 2 * NUC_CAP
}

/// Blocks a row of `n_vocab` logits takes in the first two passes (a few thousand logits a
/// block, at most 64).
pub fn nuc_blocks(n_vocab: usize) -> usize {
    n_vocab.div_ceil(NUC_THREADS * 16).clamp(1, 64)
}

/// Row `r`'s sorted candidates from `nucleus_sort`'s words: `None` when it gathered none.
pub fn nuc_prefix(words: &[u32], r: usize) -> Option<Vec<(u32, f32)>> {
    let w = words.get(r * nuc_words()..(r + 1) * nuc_words())?;
    let n = (*w.first()? as usize).min(NUC_CAP);
    (n > 0).then(|| {
        (0..n)
            .map(|i| (w[1 + i], f32::from_bits(w[1 + NUC_CAP + i])))
            .collect()
    })
}

/// Whether the device draws from rows of `n_vocab` logits: `draw_pick` holds the levels above
/// the segments in shared memory, which fits vocabularies up to 32^4 tokens.
pub fn draw_fits(n_vocab: usize) -> bool {
    (1..=DRAW_FANOUT.pow(4)).contains(&n_vocab)
}

/// How the device reduces rows of `n_vocab` logits to their `k` largest: `(blocks per row,
/// logits per block)`, such that the blocks cover the row, a block holds at most
/// `TOP_THREADS * TOP_PER` logits and the merge at most as many keys (`blocks * k`). `None`:
/// the reduction does not fit (`k` of 0 or above [`TOP_MAX_K`], or a vocabulary too large),
/// the host reduces instead.
pub fn top_blocks(n_vocab: usize, k: usize) -> Option<(usize, usize)> {
    let cap = TOP_THREADS * TOP_PER;
    if k == 0 || k > TOP_MAX_K || n_vocab == 0 {
        return None;
    }
    let most_blocks = cap / k;
    let mut nb = n_vocab.div_ceil(TOP_CHUNK);
    if nb > most_blocks {
        nb = most_blocks;
    }
    let chunk = n_vocab.div_ceil(nb).next_multiple_of(TOP_THREADS);
    // Rounding the chunk up may leave the last blocks nothing: drop them.
    let nb = n_vocab.div_ceil(chunk);
    (chunk <= cap && nb * chunk >= n_vocab).then_some((nb, chunk))
}

#[cfg(test)]
mod tests {
    use super::*;
    use lockstep_graph::BatchSeq;

    #[test]
    fn the_o_projection_after_a_decode_attention_loads_its_weights_early() {
        // Gemma-3's and Llama-1B's (a row a warp), the 8B's (two rows a warp).
        for prev in [
            "attention_decode_cl8_256",
            "attention_decode_rope_64",
            "attention_decode_rope_128",
        ] {
            assert_eq!(
                o_preload_kernel(prev, "mmv_fast1_12", 1, 1024),
                Some("mmv_pre1r_12")
            );
            assert_eq!(
                o_preload_kernel(prev, "mmv_fast2r_12", 1, 4096),
                Some("mmv_pre2r_12")
            );
        }
        // Rows of more than 64 units, several activation rows, another type, another kernel
        // before it (the down after its quantizer, the split attention's combine).
        for (prev, kernel, rows, k) in [
            ("attention_decode_rope_128", "mmv_fast2r_12", 1, 8192),
            ("attention_decode_rope_128", "mmv_fast2r_12", 2, 4096),
            ("attention_decode_rope_128", "mmv_fast2r_14", 1, 4096),
            ("quantize_q8_32", "mmv_fast2r_12", 1, 4096),
            ("attention_combine", "mmv_fast1_12", 1, 2048),
        ] {
            assert_eq!(
                o_preload_kernel(prev, kernel, rows, k),
                None,
                "{prev} {kernel}"
            );
        }
    }

    #[test]
    fn flash_attention_runs_prefills_of_the_heads_it_has_kernels_for() {
        let f = |choice, rows, seqs, heads, kv, hd| {
            use_flash_attention(choice, true, rows, seqs, heads, kv, hd)
        };
        // Llama-1B (32 / 8 heads of 64), 8B (32 / 8 of 128), SmolLM2 (9 / 3 of 64) prefills.
        assert!(f(AttnChoice::Auto, 512, 1, 32, 8, 64));
        assert!(f(AttnChoice::Auto, 512, 1, 32, 8, 128));
        assert!(f(AttnChoice::Auto, 7, 2, 9, 3, 64));
        // Decode steps, other head sizes (Gemma-3's 256), forced kernels, cuda-det: not.
        assert!(!f(AttnChoice::Auto, 4, 4, 32, 8, 64));
        assert!(!f(AttnChoice::Auto, 512, 1, 4, 1, 256));
        assert!(!f(AttnChoice::Tile, 512, 1, 32, 8, 64));
        assert!(!f(AttnChoice::Row, 512, 1, 32, 8, 64));
        assert!(!use_flash_attention(
            AttnChoice::Auto,
            false,
            512,
            1,
            32,
            8,
            64
        ));
        // A group larger than a block's 64 row-heads.
        assert!(!f(AttnChoice::Auto, 512, 1, 65, 1, 64));
    }

    #[test]
    fn flash_geometry_holds_whole_groups_and_fits_its_shared_memory() {
        for (rows, heads, kv, hd) in [
            (512, 32, 8, 64),
            (512, 32, 8, 128),
            (512, 9, 3, 64),
            (512, 14, 2, 64),
            (3, 64, 1, 128),
            (1000, 1, 1, 64),
        ] {
            for force in 0..=5 {
                let g = flash_geometry(rows, heads, kv, hd, 132, force);
                let group = heads / kv;
                assert!((1..=ATT_FLASH_MAX_WARPS).contains(&g.warps));
                assert!(
                    g.tile_rows >= 1 && g.tile_rows * group <= 16 * g.warps,
                    "{g:?}"
                );
                assert!(g.grid.0 as usize * g.tile_rows >= rows);
                assert_eq!(g.grid.1 as usize, kv);
                assert!(g.smem_bytes as usize <= flash_smem(128, ATT_FLASH_MAX_WARPS));
            }
        }
        // 1B prefill: four warps (16 rows x 4 heads), 32 x 8 blocks; SmolLM2's 3 KV heads
        // need smaller blocks to cover 132 SMs.
        let g = flash_geometry(512, 32, 8, 64, 132, 0);
        assert_eq!((g.warps, g.tile_rows, g.grid), (4, 16, (32, 8)));
        let g = flash_geometry(512, 9, 3, 64, 132, 0);
        assert_eq!((g.warps, g.tile_rows), (2, 10));
        assert!(g.grid.0 * g.grid.1 >= 132);
        // The largest block: 101 632 bytes (an opt-in beyond the default 48 KiB).
        assert_eq!(flash_smem(128, 4), (128 + 64) * 132 * 4 + 256);
    }

    #[test]
    fn two_rows_a_warp_for_one_row_mat_vecs_of_at_most_a_unit_a_lane() {
        let src = include_str!("kernels.cu");
        for &ty in FAST {
            let id = ty.id() as i32;
            // The unit size agrees with kernels.cu's FastUnit (K-quants through FastUnitK45),
            // and every fast type has its two-row kernel.
            let e = fast_unit_elems(id);
            let k45 = matches!(ty, GgmlType::Q4K | GgmlType::Q5K);
            let name = format!("struct FastUnit<T_{}> {{", ty.name().to_uppercase());
            let unit = if k45 {
                src.find("struct FastUnitK45 {")
            } else {
                src.find(&name)
            };
            let Some(at) = unit else {
                panic!("{ty}: no fast unit in kernels.cu ({name})")
            };
            let decl = &src[at..at + 120];
            assert!(decl.contains(&format!("E = {e};")), "{ty}: {decl}");
            assert!(src.contains(&format!("FAST_TWO_ROWS({id})")), "{ty}");
            for op in ["mmv", "mmv3"] {
                assert!(src.contains(&format!("{op}_fast2r_##TY(")), "{op}");
            }
        }
        let (q8, q4k) = (GgmlType::Q8_0.id() as i32, GgmlType::Q4K.id() as i32);
        // The small models' LM heads (rows of 576 / 640 values), Llama-1B's o (2048 x 2048).
        let min = Some(TWO_ROWS_MIN);
        assert!(fast_two_rows(q8, 1, 640, 262144, min));
        assert!(fast_two_rows(q8, 1, 576, 49152, min));
        assert!(fast_two_rows(q4k, 1, 2048, 2048, min));
        // SmolLM2's and Gemma-3's o (576 / 640 rows) keep a warp a row by default.
        assert!(!fast_two_rows(q8, 1, 576, 576, min));
        assert!(!fast_two_rows(q4k, 1, 1024, 640, min));
        assert!(fast_two_rows(q4k, 1, 1024, 640, Some(1)));
        // Rows of more than a unit a lane from twice the rows: the 8B's o and down (4096 rows)
        // and LM head, not Llama-1B's down (2048 rows of 8192 values).
        let q6k = GgmlType::Q6K.id() as i32;
        assert!(fast_two_rows(q4k, 1, 4096, 4096, min));
        assert!(fast_two_rows(q6k, 1, 14336, 4096, min));
        assert!(fast_two_rows(q6k, 1, 4096, 128256, min));
        assert!(!fast_two_rows(q4k, 1, 8192, 2048, min));
        assert!(!fast_two_rows(q8, 1, 1056, 2048, min));
        // Prefill rows, too few rows, the knob off.
        assert!(!fast_two_rows(q8, 2, 640, 262144, Some(1)));
        assert!(!fast_two_rows(q8, 1, 640, 1000, Some(16384)));
        assert!(!fast_two_rows(q8, 1, 640, 262144, None));
        // Two rows a warp, four warps a block: an odd last row gets a warp of its own.
        assert_eq!(fast_two_rows_grid(262144), 32768);
        assert_eq!(fast_two_rows_grid(67), 9);
        assert_eq!(fast_two_rows_grid(1), 1);
    }

    #[test]
    fn decode_steps_with_heads_up_to_128_take_the_row_attention_and_the_rest_the_tiles() {
        use AttnChoice::*;
        assert!(use_row_attention(Auto, 1, 1, 64));
        assert!(use_row_attention(Auto, 64, 64, 128));
        assert!(!use_row_attention(Auto, 1, 1, 256));
        assert!(!use_row_attention(Auto, 2, 1, 64));
        assert!(!use_row_attention(Auto, 65, 64, 64));
        assert!(use_row_attention(Row, 512, 1, 256));
        assert!(!use_row_attention(Tile, 1, 1, 64));
    }

    #[test]
    fn a_mixed_qkv_is_one_launch_only_for_one_row_of_whole_warp_pairs() {
        // Llama-3.1-8B's q/k/v (4096 / 1024 / 1024 rows), Llama-3.2-1B's (2048 / 512 / 512).
        assert!(qkv_mixed_one_launch(1, [4096, 1024, 1024], true));
        assert!(qkv_mixed_one_launch(1, [2048, 512, 513], true));
        assert!(!qkv_mixed_one_launch(1, [4096, 1024, 1024], false));
        assert!(!qkv_mixed_one_launch(2, [4096, 1024, 1024], true));
        // An odd q or k would give a warp a row of each weight.
        assert!(!qkv_mixed_one_launch(1, [2047, 512, 512], true));
        assert!(!qkv_mixed_one_launch(1, [2048, 511, 512], true));
        assert!(!qkv_mixed_one_launch(1, [2048, 512, 0], true));
        // Every row a warp pair covers is a row of the grid.
        let ms = [2048usize, 512, 513];
        let total: usize = ms.iter().sum();
        assert!(fast_two_rows_grid(total) as usize * 2 * (FAST_THREADS as usize / 32) >= total);
    }

    #[test]
    fn two_type_qkv_pairs_are_fast_types_of_one_block_size() {
        for &(qk, v) in MIXED_QKV {
            assert_ne!(qk, v);
            assert!(FAST.contains(&qk) && FAST.contains(&v), "{qk:?} {v:?}");
            // One row length serves both: their blocks divide the same rows.
            let (a, b) = (qk.block_size(), v.block_size());
            assert!(a.max(b) % a.min(b) == 0, "{qk:?} {v:?}");
        }
    }

    #[test]
    fn decode_attention_splits_a_group_only_where_the_step_has_too_few_blocks() {
        // One sequence: a block a query head (SmolLM2 9 / 3, Gemma-3 4 / 1, Llama 32 / 8).
        assert_eq!(decode_attention_heads_per_block(1, 9, 3, 132), 1);
        assert_eq!(decode_attention_heads_per_block(1, 4, 1, 132), 1);
        assert_eq!(decode_attention_heads_per_block(1, 32, 8, 132), 1);
        // Enough rows: the whole group a block, each K/V row loaded once.
        assert_eq!(decode_attention_heads_per_block(64, 9, 3, 132), 3);
        assert_eq!(decode_attention_heads_per_block(17, 32, 8, 132), 4);
        // In between: the largest divisor of the group that still fills the GPU.
        assert_eq!(decode_attention_heads_per_block(9, 32, 8, 132), 2);
        assert_eq!(decode_attention_heads_per_block(40, 4, 1, 132), 1);
        assert_eq!(decode_attention_heads_per_block(40, 4, 1, 80), 2);
        // Multi-head attention: nothing to split.
        assert_eq!(decode_attention_heads_per_block(1, 8, 8, 132), 1);
        for rows in [1, 2, 5, 33, 200] {
            for (nh, nkh) in [(9, 3), (4, 1), (32, 8), (12, 2), (8, 8)] {
                let h = decode_attention_heads_per_block(rows, nh, nkh, 132);
                assert!(
                    h >= 1 && (nh / nkh).is_multiple_of(h),
                    "{rows} {nh} {nkh}: {h}"
                );
            }
        }
    }

    #[test]
    fn only_heads_of_256_cut_their_keys_over_a_cluster() {
        // kernels.cu builds attention_decode_cl4_256 and _cl8_256: 4 or 8 blocks, heads of 256.
        assert_eq!(decode_cluster_blocks(256, 4), Some(4));
        assert_eq!(decode_cluster_blocks(256, 8), Some(8));
        assert_eq!(decode_cluster_blocks(256, 0), None);
        assert_eq!(decode_cluster_blocks(256, 2), None);
        for hd in [64, 128, 512] {
            assert_eq!(decode_cluster_blocks(hd, 8), None, "heads of {hd}");
        }
        // Each block's chunk fits its one key a lane (kernels.cu AttClShape: KPB <= 32), and
        // a block's share of a head's outputs is whole q8 blocks.
        for cq in [4usize, 8] {
            assert!(ATT_DECODE_MAX_KEYS.div_ceil(cq) <= 32);
            assert_eq!((256 / cq) % 32, 0);
        }
    }

    #[test]
    fn decode_attention_runs_short_decode_steps_the_split_kernels_leave() {
        use AttnChoice::*;
        // SmolLM2 (9/3 x 64), Llama-3.2-1B (32/8 x 64), Llama-3.1-8B (32/8 x 128) and Gemma-3
        // (4/1 x 256) decode steps of short contexts, one sequence or several.
        assert!(use_decode_attention(Auto, true, 1, 1, 9, 3, 64, false));
        assert!(use_decode_attention(Auto, true, 1, 1, 4, 1, 256, false));
        assert!(use_decode_attention(Auto, true, 1, 1, 32, 8, 64, false));
        assert!(use_decode_attention(Auto, true, 16, 16, 32, 8, 128, false));
        assert!(use_decode_attention(Unsplit, true, 1, 1, 32, 8, 128, false));
        // Where the split kernels run (long contexts, Gemma-3's heads of 256) it does not, and
        // the two choices never overlap on a shape either takes.
        for (nh, nkh, hd) in [(9, 3, 64), (32, 8, 64), (32, 8, 128), (4, 1, 256)] {
            for long in [false, true] {
                let d = use_decode_attention(Auto, true, 1, 1, nh, nkh, hd, long);
                let s = use_split_attention(Auto, true, 1, 1, nh, nkh, hd, long);
                assert!(!(d && s), "{nh}/{nkh} x {hd} long {long}");
                assert!(d || s, "{nh}/{nkh} x {hd} long {long}: neither");
            }
        }
        // Not for cuda-det / cuda-exact, prefills, forced kernels, or layouts it cannot hold.
        assert!(!use_decode_attention(Auto, false, 1, 1, 32, 8, 64, false));
        assert!(!use_decode_attention(Auto, true, 2, 1, 32, 8, 64, false));
        assert!(!use_decode_attention(Row, true, 1, 1, 32, 8, 64, false));
        assert!(!use_decode_attention(Tile, true, 1, 1, 32, 8, 64, false));
        assert!(!use_decode_attention(Split, true, 1, 1, 32, 8, 64, false));
        assert!(!use_decode_attention(Auto, true, 1, 1, 32, 2, 64, false));
        assert!(!use_decode_attention(Auto, true, 1, 1, 8, 8, 96, false));
        assert!(!use_decode_attention(Auto, true, 1, 1, 8, 1, 256, false));
        // Its blocks: 128 keys x parts of at most 64 values (the kernel's AttDecodeShape).
        assert_eq!(decode_attention_shape(64), Some((256, 8)));
        assert_eq!(decode_attention_shape(256), Some((512, 4)));
        assert_eq!(decode_attention_shape(512), None);
        for hd in ATT_DECODE_HEADS {
            let (threads, _) = decode_attention_shape(hd).expect("a kernel");
            assert_eq!(threads as usize, ATT_DECODE_MAX_KEYS * (hd / 64).max(2));
        }
    }

    #[test]
    fn split_attention_runs_decode_steps_it_can_hold_when_allowed() {
        use AttnChoice::*;
        // Decode steps at long contexts, and short ones with heads over 128 values the short
        // decode kernel cannot hold (8 query heads a KV head of 256).
        assert!(use_split_attention(Auto, true, 1, 1, 4, 1, 256, true));
        assert!(!use_split_attention(Auto, true, 1, 1, 4, 1, 256, false));
        assert!(use_split_attention(Auto, true, 1, 1, 8, 1, 256, false));
        assert!(use_split_attention(Auto, true, 1, 1, 32, 8, 64, true));
        assert!(!use_split_attention(Auto, true, 1, 1, 32, 8, 64, false));
        assert!(use_split_attention(Auto, true, 1, 1, 9, 3, 64, true));
        assert!(use_split_attention(Split, true, 16, 16, 32, 8, 128, false));
        // Not for cuda-det / cuda-exact, prefills, forced kernels, or layouts it cannot hold.
        assert!(!use_split_attention(Auto, false, 1, 1, 4, 1, 256, true));
        assert!(!use_split_attention(Auto, true, 2, 1, 4, 1, 256, true));
        assert!(!use_split_attention(Row, true, 1, 1, 4, 1, 64, true));
        assert!(!use_split_attention(Tile, true, 1, 1, 4, 1, 64, true));
        assert!(!use_split_attention(Unsplit, true, 1, 1, 4, 1, 256, true));
        assert!(!use_split_attention(Auto, true, 1, 1, 16, 1, 64, true));
        assert!(!use_split_attention(Auto, true, 1, 1, 4, 1, 512, true));
        assert!(!use_split_attention(Auto, true, 1, 1, 6, 4, 64, true));
        // Rows of K and V are read four values at a time.
        assert!(!use_split_attention(Auto, true, 1, 1, 4, 1, 66, true));
        assert!(use_split_attention(Auto, true, 1, 1, 16, 2, 256, true));
    }

    #[test]
    fn attention_spans_fill_one_wave_from_the_shape_alone() {
        // One decode row, 4 blocks an SM on 132 SMs: 528 blocks, at most 256 spans.
        assert_eq!(attention_spans(1, 1, 132, 4), 256);
        assert_eq!(attention_spans(1, 3, 132, 4), 176);
        assert_eq!(attention_spans(1, 8, 132, 4), 66);
        assert_eq!(attention_spans(4, 8, 132, 4), 16);
        // A batch that fills the device alone: one span a row.
        assert_eq!(attention_spans(64, 8, 132, 4), 1);
        assert_eq!(attention_spans(512, 8, 132, 4), 1);
        assert_eq!(attention_spans(0, 0, 0, 0), 1);
        assert_eq!(attention_spans(1, 8, 132, 5), 82);
    }

    #[test]
    fn attention_spans_are_whole_chunks_that_cover_the_row() {
        // The 8B at depth 4096 (heads of 128: chunks of 16 keys): 264 chunks in 66 spans.
        assert_eq!(attention_span_keys(4224, 16, 66, 8), 64);
        // Llama-1B (heads of 64, chunks of 32): 132 chunks in 66 spans, not 33 keys (32 + 1).
        assert_eq!(attention_span_keys(4224, 32, 66, 8), 64);
        // A short row: one chunk, however few keys; min_keys rounds up to a chunk.
        assert_eq!(attention_span_keys(130, 32, 128, 8), 32);
        assert_eq!(attention_span_keys(130, 8, 128, 40), 40);
        assert_eq!(attention_span_keys(0, 8, 128, 8), 8);
        for n in [1usize, 7, 128, 129, 1000, 4096, 4224, 32768] {
            for (chunk, spans) in [(8, 128), (16, 66), (32, 128), (32, 1)] {
                let per = attention_span_keys(n, chunk, spans, 8);
                assert_eq!(per % chunk, 0, "{n} {chunk} {spans}");
                assert!(per * spans >= n, "{n} {chunk} {spans}: {per}");
                // The fewest such: one chunk less would not cover the row.
                assert!(
                    per == chunk || (per - chunk) * spans < n,
                    "{n} {chunk} {spans}"
                );
            }
        }
    }

    #[test]
    fn every_cpu_type_has_a_descriptor_with_its_block_geometry() {
        for &ty in SUPPORTED {
            let d = quant_desc(ty).unwrap();
            assert_eq!(d.id as u32, ty.id());
            assert_eq!(d.block as usize, ty.block_size());
            assert_eq!(d.bytes as usize, ty.type_size());
        }
        assert_eq!(
            quant_desc(GgmlType::Q4K),
            Some(QuantDesc {
                id: 12,
                block: 256,
                bytes: 144
            })
        );
        assert_eq!(
            quant_desc(GgmlType::Q8_0),
            Some(QuantDesc {
                id: 8,
                block: 32,
                bytes: 34
            })
        );
        assert!(quant_desc(GgmlType::Iq2Xxs).is_none());
        assert!(quant_desc(GgmlType::Q8K).is_none());
    }

    #[test]
    fn matmul_grid_covers_every_row() {
        assert_eq!(matmul_grid(1, 576), (36, 1));
        assert_eq!(matmul_grid(1, 577), (37, 1));
        assert_eq!(matmul_grid(9, 16), (1, 2));
        assert_eq!(matmul_grid(100_000, 16), (1, 64));
        assert_eq!(matmul_grid(0, 0), (1, 1));
        assert_eq!(blocks_for(257, 256), 2);
        assert_eq!(gate_up_grid(1, 1536), (192, 1));
        assert_eq!(gate_up_grid(1, 1537), (193, 1));
        assert_eq!(gate_up_grid(512, 8), (1, 64));
        assert_eq!(blocks_for(0, 256), 1);
        // Fits the 48 KiB a block may use without opting in.
        assert_eq!(MATMUL_SMEM_BYTES, 33_792);
    }

    fn seq(first_row: usize, n_rows: usize, first_pos: u32, slots: Vec<u32>) -> BatchSeq {
        BatchSeq {
            first_row,
            n_rows,
            first_pos,
            kv_slots: slots,
            mask: None,
        }
    }

    #[test]
    fn attention_plan_lays_out_rows_scores_and_masks() {
        let mut b = Batch {
            seqs: vec![seq(0, 2, 0, vec![4, 5]), seq(2, 1, 2, vec![8, 9, 10])],
            ..Batch::default()
        };
        b.seqs[1].mask = Some(vec![true, false, true]);
        let p = attention_plan(&b, 3, 2, 16).unwrap();
        assert_eq!(p.slots, vec![4, 5, 8, 9, 10]);
        assert_eq!(p.mask, vec![1, 0, 1]);
        // seq 0: 2 rows x 2 heads x 2 keys = 8 scores; seq 1 starts there.
        assert_eq!(p.info, vec![0, 2, 0, 0, -1, 0, 2, 1, 4, -1, 2, 3, 2, 8, 0]);
        assert_eq!(p.n_scores, 8 + 6);
        assert_eq!(p.n_keys, 5);
    }

    #[test]
    fn attention_plan_rejects_bad_batches() {
        let b = Batch {
            seqs: vec![seq(0, 1, 0, vec![99])],
            ..Batch::default()
        };
        let e = attention_plan(&b, 1, 1, 16).unwrap_err().to_string();
        assert!(e.contains("slot 99"), "{e}");
        let b = Batch {
            seqs: vec![seq(0, 2, 0, vec![1])],
            ..Batch::default()
        };
        assert!(attention_plan(&b, 2, 1, 16).is_err());
        let b = Batch {
            seqs: vec![seq(0, 1, 0, vec![1])],
            ..Batch::default()
        };
        let e = attention_plan(&b, 2, 1, 16).unwrap_err().to_string();
        assert!(e.contains("row 1"), "{e}");
        let mut b = Batch {
            seqs: vec![seq(0, 1, 0, vec![1])],
            ..Batch::default()
        };
        b.seqs[0].mask = Some(vec![true, true]);
        assert!(attention_plan(&b, 1, 1, 16).is_err());
    }

    #[test]
    fn attention_tiles_fit_the_kernel_for_every_head_shape() {
        for hd in 1..=512 {
            for (nh, nkv) in [(1, 1), (9, 3), (32, 8), (4, 1), (64, 1), (128, 2), (8, 8)] {
                for (rows, seqs) in [(1, 1), (7, 7), (512, 1), (100, 1), (37, 3), (2048, 1)] {
                    let force = [0, 1, 3, 64][(hd + rows) % 4];
                    let t = attention_tile(rows, seqs, nh, nkv, hd, force, ATT_TILE_SMEM);
                    let rh = t.tile_rows * t.heads;
                    assert!(rh <= ATT_TILE_MAX_RH, "{hd} {nh}/{nkv} {rows}: {t:?}");
                    let (dw, nd) = if hd > 256 { (256, 2) } else { (hd, 1) };
                    let rg = ATT_TILE_THREADS / dw;
                    assert!(rh.div_ceil(rg) * nd <= ATT_TILE_ACC, "{hd}: {t:?}");
                    assert!(t.smem_bytes as usize <= ATT_TILE_SMEM, "{hd}: {t:?}");
                    assert!(t.chunk >= 8 && t.chunk.is_power_of_two());
                    assert_eq!(t.wide, hd > 256);
                    // Every row and every head is covered.
                    assert!(t.grid.0 as usize * t.tile_rows >= rows);
                    let group = nh / nkv;
                    assert_eq!(t.grid.1 as usize, nkv * group.div_ceil(t.heads));
                    assert!(t.heads >= 1 && t.heads <= group);
                }
            }
        }
        // Decode: one row per sequence, one row a tile, a whole KV group a block when there are
        // enough blocks, else one head a block.
        let t = attention_tile(256, 256, 9, 3, 64, 0, ATT_TILE_SMEM);
        assert_eq!((t.tile_rows, t.heads, t.grid), (1, 3, (256, 3)));
        let t = attention_tile(1, 1, 9, 3, 64, 0, ATT_TILE_SMEM);
        assert_eq!((t.tile_rows, t.heads, t.grid), (1, 1, (1, 9)));
        let t = attention_tile(32, 32, 32, 8, 64, 0, ATT_TILE_SMEM);
        assert_eq!((t.tile_rows, t.heads, t.grid), (1, 2, (32, 16)));
        // Prefill of 512 rows (SmolLM2's heads): tiles shrink to give the SMs work.
        let t = attention_tile(512, 1, 9, 3, 64, 0, ATT_TILE_SMEM);
        assert_eq!((t.tile_rows, t.heads, t.grid), (4, 3, (128, 3)));
        // A forced tile: rounded down to a power of two, as large as fits, even for decode.
        for (force, rows) in [(2, 2), (16, 16), (100, 16), (6, 4)] {
            let t = attention_tile(512, 1, 9, 3, 64, force, ATT_TILE_SMEM);
            assert_eq!(t.tile_rows, rows, "{force}");
        }
        assert_eq!(
            attention_tile(8, 8, 9, 3, 64, 4, ATT_TILE_SMEM).tile_rows,
            4
        );
        // Llama 1B: 8 KV heads of 4; gemma3 1B: one KV head of 4 heads of 256.
        let t = attention_tile(512, 1, 32, 8, 64, 0, ATT_TILE_SMEM);
        assert_eq!((t.tile_rows, t.heads, t.grid), (8, 4, (64, 8)));
        let t = attention_tile(512, 1, 4, 1, 256, 0, ATT_TILE_SMEM);
        assert_eq!((t.tile_rows, t.heads, t.grid), (2, 4, (256, 1)));
        // A group too large for one block is split.
        let t = attention_tile(512, 1, 64, 1, 128, 0, ATT_TILE_SMEM);
        assert_eq!((t.tile_rows, t.heads, t.grid.1), (1, 32, 2));
        // With the opt-in, a decode tile stages more keys at a time (never over the budget).
        let big = attention_one_row_smem(227 * 1024);
        assert_eq!(big, ATT_TILE_SMEM_ONE_ROW);
        assert_eq!(attention_one_row_smem(40 * 1024), ATT_TILE_SMEM);
        assert_eq!(attention_one_row_smem(0), ATT_TILE_SMEM);
        for hd in [64, 128, 256, 512] {
            let small = attention_tile(1, 1, 8, 2, hd, 0, ATT_TILE_SMEM);
            let t = attention_tile(1, 1, 8, 2, hd, 0, big);
            assert!(
                t.chunk >= small.chunk && t.smem_bytes as usize <= big,
                "{hd}: {t:?}"
            );
            assert_eq!((t.tile_rows, t.grid), (small.tile_rows, small.grid));
        }
        assert_eq!(attention_tile(1, 1, 4, 1, 256, 0, big).chunk, 128);
        // Prefill tiles never take the opt-in (several blocks share an SM).
        let t = attention_tile(512, 1, 9, 3, 64, 0, big);
        assert!(t.smem_bytes as usize <= ATT_TILE_SMEM);
        assert_eq!(att_stride(64), 68);
        assert_eq!(att_stride(66), 72);
    }

    #[test]
    fn rope_table_matches_the_reference_formula() {
        let t = rope_table(&[0, 7], 4, 10000.0);
        assert_eq!(t.len(), 2 * 2 * 2);
        assert_eq!(&t[..4], &[1.0, 0.0, 1.0, 0.0]);
        let f1 = 10000f64.powf(-0.5);
        assert_eq!(t[4], 7f64.cos());
        assert_eq!(t[5], 7f64.sin());
        assert_eq!(t[6], (7.0 * f1).cos());
        assert_eq!(t[7], (7.0 * f1).sin());
        // The kept inverse frequencies: every kind, asked for again and again (past the cut of
        // the kept list too), gives the formula's values bitwise.
        for round in 0..3 {
            for (i, n_rot) in [64usize, 128, 256, 6].into_iter().enumerate() {
                for base in [
                    10000.0f32,
                    1_000_000.0,
                    500000.0,
                    10.0 + i as f32 + round as f32,
                ] {
                    let t = rope_table(&[3, 1000], n_rot, base);
                    for (j, pos) in [3.0f64, 1000.0].into_iter().enumerate() {
                        for p in 0..n_rot / 2 {
                            let f = f64::from(base).powf(-2.0 * p as f64 / n_rot as f64);
                            let (sn, cs) = (pos * f).sin_cos();
                            let at = (j * (n_rot / 2) + p) * 2;
                            assert_eq!(t[at].to_bits(), cs.to_bits(), "{n_rot} {base} {pos} {p}");
                            assert_eq!(t[at + 1].to_bits(), sn.to_bits());
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn kept_rope_rows_are_bitwise_the_table() {
        let mut r = RopeRows::default();
        // A prefill from 0, a longer one, a chunk past it, decode steps, another kind, a
        // position past what is kept, an empty step: each bitwise rope_table's.
        let steps: Vec<(Vec<u32>, usize, f32)> = vec![
            ((0..512).collect(), 256, 10000.0),
            ((0..700).collect(), 256, 10000.0),
            ((700..900).collect(), 256, 10000.0),
            (vec![900, 17, 4000], 256, 10000.0),
            ((0..64).collect(), 256, 1_000_000.0),
            ((0..33).rev().collect(), 64, 500000.0),
            (vec![RopeRows::MAX_POSITIONS as u32 + 5, 3], 128, 10000.0),
            (vec![], 64, 10000.0),
            ((0..5).collect(), 6, 10000.0),
        ];
        for (ps, n_rot, base) in &steps {
            let got = r.table(ps, *n_rot, *base);
            let want = rope_table(ps, *n_rot, *base);
            assert_eq!(got.len(), want.len(), "{n_rot} {base}");
            assert!(
                got.iter()
                    .zip(&want)
                    .all(|(a, b)| a.to_bits() == b.to_bits()),
                "{n_rot} {base}"
            );
        }
        // The rows grew for the prefills, not for the lone step at 4000 (rows 0..900 kept).
        let (_, rows) = &r.kinds[0];
        assert_eq!(rows.len(), 900 * 256);
    }

    #[test]
    fn norm_blocks_are_whole_warps_of_a_few_values_each() {
        for (g, t) in [
            (64, 32),
            (128, 32),
            (256, 64),
            (576, 256),
            (640, 256),
            (2048, 512),
        ] {
            assert_eq!(norm_threads(g), t, "group of {g}");
        }
        assert_eq!(norm_threads(4096), 1024);
        assert_eq!(norm_threads(16384), 1024);
        assert_eq!(norm_threads(1), 32);
        assert!(residual_fits(8192) && !residual_fits(8193) && !residual_fits(0));
        // Every head rope_store takes fits the registers of its block.
        assert!((1..=ROPE_MAX_HEAD).all(residual_fits));
        for g in 1..5000 {
            let t = norm_threads(g) as usize;
            assert!(t.is_multiple_of(32) && t <= 1024 && t.is_power_of_two());
        }
    }

    #[test]
    fn fast_geometry_covers_every_row_and_tile() {
        for (n, m) in [(1, 1), (1, 4096), (7, 576), (512, 14336), (9, 5)] {
            let (x, y) = fast_grid(n, m);
            // One warp per row, FAST_THREADS / 32 rows per block.
            assert!(x as usize * (FAST_THREADS as usize / 32) >= m, "{n} x {m}");
            assert!((1..=64).contains(&y));
            assert!(y as usize <= n.div_ceil(FAST_TILE).max(1));
        }
        // The norm fused into its consumer: one row, whole 32-value blocks, at most
        // NORM_FUSED_MAX; the block holds norm_threads(g) threads (the fused norm's own block,
        // four values a thread at most) and at most 256 (norm_fused_block may double it).
        assert!(norm_fuses(1, 576) && norm_fuses(1, 640) && norm_fuses(1, 1024));
        assert!(!norm_fuses(2, 576) && !norm_fuses(1, 2048) && !norm_fuses(1, 100));
        // Longer rows take the long kernels, up to 4096 values, one row, whole 32-value blocks.
        assert!(norm_fuses_long(1, 2048) && norm_fuses_long(1, 4096) && norm_fuses_long(1, 1056));
        assert!(
            !norm_fuses_long(1, 1024) && !norm_fuses_long(1, 8192) && !norm_fuses_long(2, 4096)
        );
        assert!(!norm_fuses_long(1, 2050));
        // Every such row's norm fits the fused weights' four values a thread.
        for g in (1056..=NORM_LONG_MAX).step_by(32) {
            assert!(g <= 4 * norm_threads(g) as usize && norm_threads(g) <= NORM_LONG_THREADS);
        }
        // A block an SM at most; fewer when the rows fill fewer (32 a block).
        assert_eq!(norm_long_grid(14336, 132), 132);
        assert_eq!(norm_long_grid(6144, 132), 132);
        assert_eq!(norm_long_grid(64, 132), 2);
        assert_eq!(norm_long_grid(0, 132), 1);
        for g in (32..=NORM_FUSED_MAX).step_by(32) {
            let t = norm_fused_threads(g);
            assert!(
                t >= norm_threads(g) && t <= 256 && t.is_multiple_of(32),
                "{g}"
            );
            assert!(norm_threads(g) as usize * 4 >= g, "{g}");
        }
        assert_eq!(norm_fused_threads(576), 256);
        // Blocks doubled while the grid has more blocks than SMs, up to the launch bounds:
        // Gemma-3's q/k/v and gate/up on 132 SMs take 512, SmolLM2's q/k/v (960 rows) keeps
        // 256, its gate/up (1536) takes 512; a long layer stops at the bound.
        assert_eq!(norm_fused_block(640, 1536, 132), 512);
        assert_eq!(norm_fused_block(640, 2048, 132), 512);
        assert_eq!(norm_fused_block(576, 960, 132), 256);
        assert_eq!(norm_fused_block(576, 1536, 132), 512);
        assert_eq!(norm_fused_block(1024, 100_000, 132), NORM_FUSED_BLOCK_MAX);
        assert_eq!(norm_fused_block(64, 100, 132), FAST_THREADS);
        for (g, rows, sms) in [(640, 1536, 78), (576, 4000, 16), (1024, 8192, 0)] {
            let t = norm_fused_block(g, rows, sms);
            assert!(t >= norm_fused_threads(g) && t <= NORM_FUSED_BLOCK_MAX);
            assert!(t.is_power_of_two());
        }
        assert!(norm_gate_up_quantizes(GgmlType::Q4_1.id() as i32));
        assert!(!norm_gate_up_quantizes(GgmlType::Q4K.id() as i32));
        // SmolLM2's feed-forward quantizes in its fused gate/up; Gemma-3's (a post norm in the
        // prologue) and a K-quant one do not, nor one of more than a wave of 32-row blocks.
        let (q41, q50) = (GgmlType::Q4_1.id() as i32, GgmlType::Q5_0.id() as i32);
        assert!(norm_fused_gate_up_quantizes(1536, 132, q41, false));
        assert!(norm_fused_gate_up_quantizes(2048, 132, q50, false));
        assert!(!norm_fused_gate_up_quantizes(2048, 132, q50, true));
        assert!(!norm_fused_gate_up_quantizes(
            1536,
            132,
            GgmlType::Q4K.id() as i32,
            false
        ));
        assert!(!norm_fused_gate_up_quantizes(8192, 132, q41, false));
        // 4096 rows: 1024 blocks of 4 warps, several per SM on 132 SMs.
        assert_eq!(fast_grid(1, 4096), (1024, 1));
        // SmolLM2 (1536) and Gemma-3-270M (2048) feed-forwards quantize in gate/up; Llama's
        // (8192, 14336) would need more than one wave of 32-row blocks on 132 SMs.
        assert!(gate_up_quantizes(1, 1536, 132));
        assert!(gate_up_quantizes(1, 2048, 132));
        assert!(!gate_up_quantizes(1, 8192, 132));
        assert!(!gate_up_quantizes(2, 1536, 132));
        assert!(!gate_up_quantizes(1, 1000, 132));
        assert!(!gate_up_quantizes(1, 0, 132));
        // Quants then 8-byte block records, the records 8-aligned.
        assert_eq!(q8_bytes(2, 64), 128 + 4 * 8);
        assert_eq!(q8_bytes(3, 96) % 8, 0);
        assert!(FAST.iter().all(|t| fast_quantizes(t.id() as i32)));
        for t in [GgmlType::F32, GgmlType::F16, GgmlType::Bf16] {
            assert!(!fast_quantizes(t.id() as i32), "{t}");
        }
        for t in [
            GgmlType::Q2K,
            GgmlType::Q3K,
            GgmlType::Iq4Nl,
            GgmlType::Iq4Xs,
        ] {
            assert!(fast_quantizes(t.id() as i32) && !FAST.contains(&t), "{t}");
        }
        // Every fast type is a supported type.
        assert!(FAST.iter().all(|t| SUPPORTED.contains(t)));
    }

    #[test]
    fn nucleus_words_parse() {
        let mut w = vec![0u32; 2 * nuc_words()];
        // Row 1: two candidates.
        let r1 = nuc_words();
        w[r1] = 2;
        w[r1 + 1] = 7;
        w[r1 + 2] = 3;
        w[r1 + 1 + NUC_CAP] = 2.5f32.to_bits();
        w[r1 + 2 + NUC_CAP] = (-1.0f32).to_bits();
        assert_eq!(nuc_prefix(&w, 0), None);
        assert_eq!(nuc_prefix(&w, 1), Some(vec![(7, 2.5), (3, -1.0)]));
        assert_eq!(nuc_prefix(&w, 2), None);
        assert_eq!(nuc_blocks(1), 1);
        assert_eq!(nuc_blocks(262144), 64);
        assert_eq!(nuc_blocks(49152), 12);
    }

    #[test]
    fn top_blocks_cover_the_row_within_the_kernels_limits() {
        for &v in &[
            1, 255, 256, 2048, 2049, 32000, 49152, 151936, 256000, 262144,
        ] {
            for &k in &[1, 2, 40, 63, 64] {
                let (nb, chunk) = top_blocks(v, k).unwrap_or_else(|| panic!("{v} {k}"));
                assert!(
                    nb * chunk >= v && (nb - 1) * chunk < v,
                    "{v} {k}: {nb} x {chunk}"
                );
                assert!(chunk <= TOP_THREADS * TOP_PER && chunk % TOP_THREADS == 0);
                assert!(nb * k <= TOP_THREADS * TOP_PER);
            }
        }
        assert_eq!(top_blocks(262144, 1), Some((128, 2048)));
        assert_eq!(top_blocks(262144, 64), Some((64, 4096)));
        assert_eq!(top_blocks(49152, 40), Some((24, 2048)));
        assert_eq!(top_blocks(1000, 65), None);
        assert_eq!(top_blocks(1000, 0), None);
        assert_eq!(top_blocks(4096 * 65, 64), None);
        // Larger vocabularies fit fewer candidates (the host reduces the rest).
        assert!(top_blocks(524288, 32).is_some());
        assert_eq!(top_blocks(524288, 40), None);
    }

    #[test]
    fn rope_fuses_only_into_built_decode_kernels() {
        // The host picks attention_decode_rope_<hd> only where it is built (64, 128): a head
        // whose short decode kernel exists, rope_store's kernel takes, and whose stage (the
        // block's query heads and the key, D values each) fits the scores' shared memory.
        for hd in [32, 64, 80, 96, 128, 192, 256, 512] {
            if rope_attention_fuses(hd) {
                let (threads, group) = decode_attention_shape(hd).expect("a decode kernel");
                assert!(hd <= ROPE_MAX_HEAD);
                assert!((group + 1) * hd <= 8192, "{hd}");
                assert!(norm_threads(hd) <= threads);
            }
        }
        assert!(rope_attention_fuses(64) && rope_attention_fuses(128));
        assert!(!rope_attention_fuses(256));
    }
    /// kernels.cu's `q6p_at`, written again from its own formulas: where byte `o` of
    /// super-block `s` lands in a planar tensor.
    fn q6p_at(s: usize, o: usize) -> usize {
        let (idx, g) = (s % 8, (s / 8) * Q6K_GROUP);
        if o < 128 {
            let (n, r) = (o >> 6, o & 63);
            g + 512 * (r >> 5) + 16 * (4 * idx + 2 * n + ((r >> 4) & 1)) + (r & 15)
        } else if o < 192 {
            let i = o - 128;
            g + 1024 + 16 * (4 * idx + 2 * (i >> 5) + ((i >> 4) & 1)) + (i & 15)
        } else if o < 208 {
            let i = o - 192;
            g + 1536 + 4 * (4 * idx + 2 * (i >> 3) + (i & 1)) + ((i >> 1) & 3)
        } else {
            g + 1664 + 2 * idx + (o - 208)
        }
    }

    #[test]
    fn q80_planes_hold_every_byte_where_the_kernels_look() {
        // kernels.cu q8p_at: byte o of block s lies in group s / 16, member b = s % 16, at
        // 32 b + o - 2 for the quants (o >= 2), at 512 + 2 b + o for d.
        for blocks in [1usize, 15, 16, 17, 20 * 7, 49] {
            let gguf: Vec<u8> = (0..blocks * Q80_BLOCK)
                .map(|i| (i * 31 % 251) as u8)
                .collect();
            let planar = q80_planar(&gguf).expect("whole blocks");
            assert_eq!(planar.len(), blocks.div_ceil(16) * Q80_GROUP);
            let mut seen = vec![false; planar.len()];
            for s in 0..blocks {
                let (g, b) = (s / 16 * Q80_GROUP, s % 16);
                for o in 0..Q80_BLOCK {
                    let at = if o < 2 {
                        g + 512 + 2 * b + o
                    } else {
                        g + 32 * b + o - 2
                    };
                    assert_eq!(planar[at], gguf[s * Q80_BLOCK + o], "block {s} byte {o}");
                    assert!(!seen[at], "block {s} byte {o} lands on another's");
                    seen[at] = true;
                }
            }
            // the padding is zero blocks
            assert!(planar.iter().zip(&seen).all(|(&v, &s)| s || v == 0));
        }
        assert!(q80_planar(&[0u8; 35]).is_none());
    }

    #[test]
    fn q6k_planes_hold_every_byte_where_the_kernels_look() {
        // 8, 13 (a partial last group) and 1 super-blocks of distinct-ish bytes.
        for blocks in [8usize, 13, 1] {
            let gguf: Vec<u8> = (0..blocks * Q6K_BLOCK)
                .map(|i| (i * 7 + i / 251) as u8)
                .collect();
            let planar = q6k_planar(&gguf).expect("whole blocks");
            assert_eq!(planar.len(), blocks.div_ceil(8) * Q6K_GROUP);
            let mut seen = vec![false; planar.len()];
            for s in 0..blocks {
                for o in 0..Q6K_BLOCK {
                    let at = q6p_at(s, o);
                    assert_eq!(planar[at], gguf[s * Q6K_BLOCK + o], "block {s} byte {o}");
                    assert!(!seen[at], "block {s} byte {o} shares {at}");
                    seen[at] = true;
                }
            }
            // The padding blocks are zeros.
            let filled = seen.iter().filter(|&&x| x).count();
            assert_eq!(filled, blocks * Q6K_BLOCK);
            assert!(planar.iter().zip(&seen).all(|(&b, &s)| s || b == 0));
        }
        // FastUnit<T_Q6_K>'s unit loads: unit u of a block reads planes A, B, H at 16 (4 b + u)
        // and S at 4 (4 b + u) of its group, the ql / qh / scale bytes GGUF's kernel read.
        let gguf: Vec<u8> = (0..16 * Q6K_BLOCK).map(|i| (i * 13 + 5) as u8).collect();
        let planar = q6k_planar(&gguf).expect("whole blocks");
        for s in 0..16 {
            let (b, g) = (s % 8, (s / 8) * Q6K_GROUP);
            for u in 0..4 {
                let (n, h, j) = (u >> 1, u & 1, 4 * b + u);
                let src = &gguf[s * Q6K_BLOCK..][..Q6K_BLOCK];
                assert_eq!(planar[g + 16 * j..][..16], src[64 * n + 16 * h..][..16]);
                assert_eq!(
                    planar[g + 512 + 16 * j..][..16],
                    src[64 * n + 32 + 16 * h..][..16]
                );
                assert_eq!(
                    planar[g + 1024 + 16 * j..][..16],
                    src[128 + 32 * n + 16 * h..][..16]
                );
                for k in 0..4 {
                    assert_eq!(planar[g + 1536 + 4 * j + k], src[192 + 8 * n + 2 * k + h]);
                }
                assert_eq!(planar[g + 1664 + 2 * b..][..2], src[208..210]);
            }
        }
        assert!(q6k_planar(&[0u8; 211]).is_none());
    }

    #[test]
    fn q50_blocks_on_the_device_hold_every_value() {
        // Every element's 5-bit integer and d read from the device block (as kernels.cu's deq
        // reads it) equal GGUF's, for blocks of varied bytes, and the permutation is one.
        let mut seen = [false; 32];
        for e in 0..32 {
            assert!(!seen[q50_hbit(e)], "element {e} shares bit {}", q50_hbit(e));
            seen[q50_hbit(e)] = true;
        }
        for b in [1usize, 4, 8] {
            let mut g = b * 31 + 7;
            let gguf: Vec<u8> = (0..b * Q50_BLOCK)
                .map(|_| {
                    g = (g * 1103515245 + 12345) % 2147483648;
                    (g >> 16) as u8
                })
                .collect();
            let dev = q50_repacked(&gguf).expect("whole blocks");
            assert_eq!(dev.len(), b * Q50_DEVICE_BLOCK);
            for (src, dst) in gguf.chunks_exact(22).zip(dev.chunks_exact(24)) {
                assert_eq!(src[..2], dst[..2], "d");
                assert_eq!(dst[2..4], [0, 0], "padding");
                let qh = u32::from_le_bytes([src[2], src[3], src[4], src[5]]);
                let qh_dev = u32::from_le_bytes([dst[4], dst[5], dst[6], dst[7]]);
                for e in 0..32 {
                    let nib = |qs: &[u8]| if e < 16 { qs[e] & 15 } else { qs[e - 16] >> 4 };
                    let want = nib(&src[6..]) | (((qh >> e) & 1) as u8) << 4;
                    let got = nib(&dst[8..]) | (((qh_dev >> q50_hbit(e)) & 1) as u8) << 4;
                    assert_eq!(got, want, "element {e}");
                }
                // FastUnit<T_Q5_0>'s word decode: word i's bytes b hold elements 4i + b and 16 + 4i + b.
                for i in 0..4 {
                    let lo = (qh_dev >> i) & 0x1010_1010;
                    let hi = (qh_dev << (4 - i)) & 0x1010_1010;
                    for b in 0..4 {
                        assert_eq!((lo >> (8 * b + 4)) & 1, (qh >> (4 * i + b)) & 1);
                        assert_eq!((hi >> (8 * b + 4)) & 1, (qh >> (16 + 4 * i + b)) & 1);
                    }
                }
            }
        }
        assert!(q50_repacked(&[0u8; 23]).is_none());
        // The row kernels step by the uploaded block's bytes.
        let desc = |ty, on| device_desc(ty, on).expect("supported").bytes;
        assert_eq!(desc(GgmlType::Q5_0, true), 24);
        assert_eq!(desc(GgmlType::Q5_0, false), 22);
        assert_eq!(desc(GgmlType::Q8_0, true), 34);
        assert_eq!(desc(GgmlType::Q6K, true), 210);
        // The values through lockstep-quant's dequantizer: the device blocks' decode agrees.
        let gguf: Vec<u8> = (0..4 * Q50_BLOCK)
            .map(|i| {
                if i % 22 == 1 {
                    0x2c
                } else {
                    (i * 37 + 11) as u8
                }
            })
            .collect();
        let want = lockstep_quant::dequantize(GgmlType::Q5_0, &gguf, 128).expect("Q5_0");
        let dev = q50_repacked(&gguf).expect("whole blocks");
        for (k, blk) in dev.chunks_exact(24).enumerate() {
            let d = half::f16::from_le_bytes([blk[0], blk[1]]).to_f32();
            let qh = u32::from_le_bytes([blk[4], blk[5], blk[6], blk[7]]);
            for e in 0..32 {
                let lo = if e < 16 {
                    blk[8 + e] & 15
                } else {
                    blk[8 + e - 16] >> 4
                };
                let q = i32::from(lo | (((qh >> q50_hbit(e)) & 1) as u8) << 4);
                let v = (q - 16) as f32 * d;
                assert_eq!(
                    v.to_bits(),
                    want[32 * k + e].to_bits(),
                    "block {k} element {e}"
                );
            }
        }
    }

    #[test]
    fn residual_parts_follow_the_values_a_thread_holds() {
        // 2048 values on 512 threads, 4096 on 1024: four values a thread, four blocks.
        assert_eq!(residual_parts(1, 2048, true), 4);
        assert_eq!(residual_parts(1, 4096, true), 4);
        // 8192 on 1024: eight; 1536 on 512: three (the last partly empty).
        assert_eq!(residual_parts(1, 8192, true), 8);
        assert_eq!(residual_parts(1, 1536, true), 3);
        // Rows a fused norm takes (SmolLM2's 576, Gemma-3's 640): one block.
        assert_eq!(residual_parts(1, 576, true), 1);
        assert_eq!(residual_parts(1, 1024, true), 1);
        // Prefill rows, the knob off, an empty row: one block.
        assert_eq!(residual_parts(2, 4096, true), 1);
        assert_eq!(residual_parts(1, 4096, false), 1);
        assert_eq!(residual_parts(1, 0, true), 1);
        for g in (1056..=8192).step_by(32) {
            let p = residual_parts(1, g, true) as usize;
            // Every value a thread holds belongs to a part that exists.
            assert!(
                p >= g.div_ceil(norm_threads(g) as usize) && p <= NORM_MAXV,
                "{g}"
            );
        }
    }
}
