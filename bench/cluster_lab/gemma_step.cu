// Gemma-3-270M's decode layers as the step graph runs them today, kernel by kernel, in the
// conditions of the cluster labs (session 53): the reference for a Gemma-3 cluster step kernel
// that is to be bitwise these kernels (as decode_layers_cluster is SmolLM2's six kernels), and
// the op-by-op chain timed as a graph beside gemma_cluster.cu's 14.3 / 15.2 us a layer at
// pos 64 / 127 (a design of its own arithmetic: BENCHMARKS.md, sessions 40 and 53).
//
// A layer is the seven kernels a replayed Gemma-3 step launches (BENCHMARKS.md session 49's
// timeline; the same kernels, grids and arguments as the backend's, lib.rs / plan.rs):
//   norm_mmv3_fast1_6_8 (layer 0: scale_norm_mmv3_fast1_6_8, the embedding times sqrt(640)):
//     the post-feed-forward norm of the last down output, the residual add, the attention
//     norm, quantized in each of 96 blocks of 512 threads, then q and k (Q5_0) and v (Q8_0)
//     rows a warp each; odd layers v in Q5_0 (norm_mmv3_fast1_6), as the file alternates;
//   rope_store: q and k normed over each head of 256, NEOX rotation, K and V into the paged
//     f32 cache (6 blocks: 4 query heads, the KV head's k and v);
//   attention_decode_cl8_256: a cluster of 8 blocks a head, each a chunk of the keys, the
//     output quantized for the o projection;
//   mmv_pre1r_12: the o projection (Q4_K), its weights loaded before its grid wait;
//   norm_gate_up_fast1_6: the post-attention norm, the residual add, the feed-forward norm,
//     gate and up (Q5_0) and GELU;
//   quantize_q8_32; mmv_fast1_14 (Q6_K down; odd layers mmv_fast1_12, Q4_K);
// and after the last layer residual_norm (the output norm). Random weights in GGUF's layouts for
// Q6_K and Q8_0 (the backend uploads planes: the same bytes through the same arithmetic) and
// the backend's repacked Q5_0.
//
// Then the first pieces of a cluster step kernel (seg_ffn_qkv, below): layer l's feed-forward
// and layer l + 1's q/k/v on a cluster of 16 blocks, through the chain's own device functions,
// checked bitwise against the chain's vectors of every layer (the eager pass keeps a copy of
// each) and timed against the chain's four kernels for the same work.
//
// Measured (session 53, H200, bench/session53/gemma_step.txt; graphs, medians of 7):
//   the chain: 16.60-16.72 us a layer at pos 64, 16.93-17.07 at 127 (tg128's step, 352.7 us,
//     less the head and the step's ends, is about 16.7 us a layer);
//   its feed-forward and next q/k/v (4 kernels): 9.74-9.86 us;
//   v0 (row a warp, weights from DRAM): BITWISE, 21.10-21.42 us;
//   v1 (the block's rows asked into L2 first, two rows a warp): BITWISE, 20.05-20.11 us;
//   v2 (every row's 32 lanes played by 8 or 4 lanes: kernels.cu played_rows, played_gate_up,
//     bitwise fast_rows in tests/mmv_emulation.rs): built, not yet run on the device.
// gemma_cluster.cu's design (its own arithmetic, weights staged in shared memory, exchanges
// through it) does the same work in about 8.9 us (block 0's phases), so the row arithmetic on
// 16 SMs, not the barriers, is what v0 / v1 lack.
//
// The way to a bitwise cluster step (session 53's plan; each piece checked here against the
// chain before it moves to kernels.cu, as decode_layers_cluster did):
//  1. rows: played_row (v2) from weights staged in shared memory a phase or a layer ahead
//     (cp.async.bulk on an mbarrier, as decode_layers_cluster; about 250 KB of a layer's weights
//     a block does not fit its shared memory at once: gate/up 123 KB, down 67 KB, q/k/v about
//     50 KB, o 23 KB, so the gate/up slot is refilled with the next layer's q/k/v);
//  2. vectors one way through shared memory (st.async on the receivers' mbarriers) instead of
//     global memory and the cluster barrier;
//  3. rope_store's work on 6 blocks (a query head each, k, v), its arithmetic through the same
//     device functions (norm_regs_w on 64 of the block's threads, rope_elem), K and V rows into
//     the cache and to the attention blocks;
//  4. attention_decode_cl8_256's arithmetic: a head's 8 chunks on 4 blocks, two chunks a block
//     on its two halves of 256 threads (the kernel's body with named barriers for __syncthreads),
//     the 8 partials (m, l, O) combined in the kernel's order by the head's 4 blocks;
//  5. the o projection's rows (mmv_pre1r_12: a warp a row, so played_rows<T_Q4_K>) after the
//     attention's quantized output reaches every block;
//  6. the layers and the output norm in one kernel, then cluster.rs's plan for Gemma-3's chain
//     and the graph rewrite, with check's replayed-vs-tapped invariance on the device.
// The goal it serves: 2.3 us a layer less at pos 64 (gemma_cluster.cu against this chain), about
// +11% tg128, Gemma-3 at 3x llama.cpp.
//   nvcc -gencode=arch=compute_90a,code=sm_90a -O3 --fmad=false -std=c++17 \
//     -diag-suppress 128,177,550,549,20169 -o .device/lab/gemma_step bench/cluster_lab/gemma_step.cu
// (local nvcc needs the cccl headers for cooperative_groups: pip's nvidia-cuda-cccl). Run with
// LAB_CHECK=1 to synchronize after every kernel of the eager pass and name the first that fails.
#define LOCKSTEP_FAST_F32
#define LOCKSTEP_Q6K_GGUF
#define LOCKSTEP_Q80_GGUF
__device__ unsigned emu_tf32_rna(float);
__device__ void emu_mma_tf32(float*, const unsigned*, const unsigned*);
#include "../../crates/backend-cuda/src/kernels.cu"
#include "../gemv_lab/lab_common.cuh"

#include <cmath>
#include <cooperative_groups.h>
namespace cg = cooperative_groups;

constexpr int D = 640, NH = 4, NKV = 1, HD = 256, QD = NH * HD, KVD = NKV * HD, F = 2048, LAYERS = 18;
constexpr int HALF = HD / 2;
constexpr int SLOTS_PER_LAYER = 512;  // cache rows a layer (32 pages of 16)
constexpr float EPS = 1e-6f;
// Row bytes: Q5_0 repacked (24-byte blocks), Q8_0 (34), Q4_K (144 a 256), Q6_K (210 a 256)
constexpr int RB_Q50 = D / 32 * 24, RB_Q80 = D / 32 * 34, RB_O = QD / 256 * 144;
constexpr int RB_DN6 = F / 256 * 210, RB_DN4 = F / 256 * 144;
constexpr int NORM_T = 256;  // plan::norm_threads(640)
constexpr int FUSED_T = 512;  // plan::norm_fused_block(640, 1536 or 2048 rows, 132 SMs)

static float* dev_floats(size_t n, u32 seed, float lo, float hi) {
    std::vector<float> h(n);
    u32 x = seed;
    for (size_t i = 0; i < n; i++) {
        x = x * 1664525u + 1013904223u;
        h[i] = lo + (hi - lo) * (float)(x >> 8) / 16777216.0f;
    }
    float* d;
    CK(cudaMalloc(&d, n * 4));
    CK(cudaMemcpy(d, h.data(), n * 4, cudaMemcpyHostToDevice));
    return d;
}
template <typename T>
static T* dev_alloc(size_t n) {
    T* p;
    CK(cudaMalloc(&p, n * sizeof(T) + 256));
    CK(cudaMemset(p, 0, n * sizeof(T) + 256));
    return p;
}

struct Layer {
    u8 *wq, *wk, *wv, *wo, *wg, *wu, *wd;
    bool v_q80, down_q6;
    float *attn_norm, *post_attn_norm, *ffn_norm, *post_ffn_norm, *q_norm, *k_norm;
};

// ------------------------------------------------------------------ the cluster segment (v0)
// Session 53, the first step toward the cluster step: layer l's feed-forward and layer l + 1's
// q/k/v (the chain's norm_gate_up_fast1_6, quantize_q8_32, mmv_fast1_14 or _12 and
// norm_mmv3_fast1_6[_8]) as phases of one kernel on a cluster of 16 blocks of 512 threads,
// through the very device functions those kernels run (norm_row_shared, fast_rows, q8_block),
// the phases joined by the cluster's barrier and every vector through global memory (v0: no
// staging, no exchanges in shared memory). It must be bitwise the chain; its time says what
// the kernel boundaries alone cost against a barrier on 16 SMs.
struct SegArgs {
    const float *resid, *o;                     // layer l's residual and o projection (the chain's)
    const float *post_attn_norm, *ffn_norm;     // layer l's
    const u8 *wg, *wu, *wd;                     // layer l's
    const float *post_ffn_norm, *attn_norm;     // layer l's post norm, layer l + 1's attention norm
    const u8 *wq, *wk, *wv;                     // layer l + 1's
    float *bn, *resid2, *normed, *gg, *uu, *aa, *down, *bn2, *resid_next, *normed2, *q, *k, *v;
    signed char *nq, *aq, *nq2;
    Q8Blk *nd, *ad, *nd2;
    float eps;
    double cgelu;
};
// The block's bytes of a row range [r0, r1) of W (row_bytes each) asked into L2.
__device__ __forceinline__ void seg_prefetch(const u8* W, int row_bytes, int r0, int r1) {
    const u8* p = W + (size_t)r0 * row_bytes;
    size_t n = (size_t)(r1 - r0) * row_bytes;
    for (size_t o = (size_t)threadIdx.x * 128; o < n; o += (size_t)blockDim.x * 128)
        asm volatile("prefetch.global.L2 [%0];" ::"l"(p + o));
}
// V1 (template PF): every block first asks its rows of the layer's weights into L2, and the
// down and q/k/v rows go two a warp (fast_rows_nr, bitwise fast_rows' rows).
// V2 (MODE 2): V1's prefetch, and every row's 32 lanes played by 8 (gate/up, down) or 4 (q/k/v)
// lanes (kernels.cu played_rows, played_gate_up), so a warp takes 4 or 8 rows at once.
template <int TD, int TV, int MODE = 0>
__global__ void __cluster_dims__(16, 1, 1) __launch_bounds__(512, 1) seg_ffn_qkv(SegArgs A) {
    constexpr bool PF = MODE >= 1;
    cg::cluster_group cl = cg::this_cluster();
    const int b = (int)cl.block_rank(), warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if constexpr (PF) {
        constexpr int RB_D = TD == 14 ? RB_DN6 : RB_DN4, RB_V = TV == 8 ? RB_Q80 : RB_Q50;
        seg_prefetch(A.wg, RB_Q50, 128 * b, 128 * b + 128);
        seg_prefetch(A.wu, RB_Q50, 128 * b, 128 * b + 128);
        seg_prefetch(A.wd, RB_D, 40 * b, 40 * b + 40);
        int r0 = 96 * b, r1 = r0 + 96;
        if (r0 < QD) seg_prefetch(A.wq, RB_Q50, r0, min(r1, QD));
        if (r1 > QD && r0 < QD + KVD) seg_prefetch(A.wk, RB_Q50, max(r0, QD) - QD, min(r1, QD + KVD) - QD);
        if (r1 > QD + KVD) seg_prefetch(A.wv, RB_V, max(r0, QD + KVD) - QD - KVD, r1 - QD - KVD);
    }
    __shared__ __align__(16) signed char sq[NORM_FUSED_MAX];
    __shared__ Q8Blk sd[NORM_FUSED_MAX / 32];
    // F: the post-attention norm, the residual add, the feed-forward norm (block 0 writes them)
    NormFusedWeights nwv = norm_fused_weights(A.post_attn_norm, A.ffn_norm, D, NORM_T);
    norm_row_shared<false>(A.resid, A.o, A.post_attn_norm, A.bn, A.resid2, nwv, A.normed, D, A.eps, NORM_T,
                           A.nq, A.nd, sq, sd);
    __syncthreads();
    // G: gate and up, 128 rows a block, 8 a warp; then the block's 4 activation blocks quantized
    if constexpr (MODE == 2) {
        for (int j0 = 4 * warp; j0 < 128; j0 += 64)
            played_gate_up<6, 8>(A.wg, A.wu, sq, sd, A.gg, A.uu, A.aa, D, F, 128 * b + j0, 1, A.cgelu);
    } else {
        for (int j = 0; j < 8; j++) {
            int r = 128 * b + warp + 16 * j;
            fast_rows<6, 1, true>(A.wg, A.wu, sq, sd, A.gg, A.uu, A.aa, 0, D, F, r, 1, A.cgelu);
        }
    }
    __syncthreads();
    if (warp < 4) {
        int blk = 4 * b + warp;
        q8_block(__ldcg(A.aa + 32 * blk + lane), A.aq, A.ad, blk);
    }
    cl.sync();
    // I: the down projection, 40 rows a block
    if constexpr (MODE == 2) {
        if (warp < 10) played_rows<TD, 8>(A.wd, A.aq, A.ad, A.down, F, D, 40 * b + 4 * warp);
    } else if constexpr (PF) {
        for (int pr = warp; pr < 20; pr += 16) fast_rows_nr<TD, 2>(A.wd, A.aq, A.ad, A.down, F, D, 40 * b + 2 * pr);
    } else {
        for (int r = 40 * b + warp; r < 40 * b + 40; r += 16)
            fast_rows<TD, 1, false>(A.wd, nullptr, A.aq, A.ad, A.down, nullptr, nullptr, 0, F, D, r, 0, 0.0);
    }
    cl.sync();
    // A: layer l + 1's post-feed-forward norm, residual add, attention norm
    NormFusedWeights nwv2 = norm_fused_weights(A.post_ffn_norm, A.attn_norm, D, NORM_T);
    norm_row_shared<false>(A.resid2, A.down, A.post_ffn_norm, A.bn2, A.resid_next, nwv2, A.normed2, D, A.eps,
                           NORM_T, A.nq2, A.nd2, sq, sd);
    __syncthreads();
    // B: q, k, v, 96 rows a block
    if constexpr (MODE == 2) {
        if (warp < 12) {
            int r = 96 * b + 8 * warp;  // a warp's 8 rows lie in one of q, k, v (1024 and 1280 are multiples of 8)
            if (r < QD) played_rows<6, 4>(A.wq, sq, sd, A.q, D, QD, r);
            else if (r < QD + KVD) played_rows<6, 4>(A.wk, sq, sd, A.k, D, KVD, r - QD);
            else played_rows<TV, 4>(A.wv, sq, sd, A.v, D, KVD, r - QD - KVD);
        }
        return;
    }
    if constexpr (PF) {
        for (int pr = warp; pr < 48; pr += 16) {
            int r = 96 * b + 2 * pr;
            if (r < QD) fast_rows_nr<6, 2>(A.wq, sq, sd, A.q, D, QD, r);
            else if (r < QD + KVD) fast_rows_nr<6, 2>(A.wk, sq, sd, A.k, D, KVD, r - QD);
            else fast_rows_nr<TV, 2>(A.wv, sq, sd, A.v, D, KVD, r - QD - KVD);
        }
        return;
    }
    for (int j = 0; j < 6; j++) {
        int r = 96 * b + warp + 16 * j;
        if (r < QD)
            fast_rows<6, 1, false>(A.wq, nullptr, sq, sd, A.q, nullptr, nullptr, 0, D, QD, r, 0, 0.0);
        else if (r < QD + KVD)
            fast_rows<6, 1, false>(A.wk, nullptr, sq, sd, A.k, nullptr, nullptr, 0, D, KVD, r - QD, 0, 0.0);
        else
            fast_rows<TV, 1, false>(A.wv, nullptr, sq, sd, A.v, nullptr, nullptr, 0, D, KVD, r - QD - KVD, 0,
                                    0.0);
    }
}

int main() {
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    printf("device: %s, %d SMs; Gemma-3-270M's %d decode layers, the step graph's kernels\n", prop.name,
           prop.multiProcessorCount, LAYERS);
    std::vector<Layer> L(LAYERS);
    size_t weight_bytes = 0;
    for (int l = 0; l < LAYERS; l++) {
        Layer& y = L[l];
        // the file's two kinds of layer alternate (v Q8_0 with a Q6_K down, v Q5_0 with Q4_K)
        y.v_q80 = l % 2 == 0;
        y.down_q6 = l % 2 == 0;
        auto w = [&](size_t bytes, u32 seed) {
            u8* p = dev_alloc<u8>(bytes);
            fill_small(p, bytes, seed);
            weight_bytes += bytes;
            return p;
        };
        u32 s = 1000u * (u32)l;
        y.wq = w((size_t)QD * RB_Q50, s + 1);
        y.wk = w((size_t)KVD * RB_Q50, s + 2);
        y.wv = w((size_t)KVD * (y.v_q80 ? RB_Q80 : RB_Q50), s + 3);
        y.wo = w((size_t)D * RB_O, s + 4);
        y.wg = w((size_t)F * RB_Q50, s + 5);
        y.wu = w((size_t)F * RB_Q50, s + 6);
        y.wd = w((size_t)D * (y.down_q6 ? RB_DN6 : RB_DN4), s + 7);
        y.attn_norm = dev_floats(D, s + 11, 0.5f, 1.5f);
        y.post_attn_norm = dev_floats(D, s + 12, 0.5f, 1.5f);
        y.ffn_norm = dev_floats(D, s + 13, 0.5f, 1.5f);
        y.post_ffn_norm = dev_floats(D, s + 14, 0.5f, 1.5f);
        y.q_norm = dev_floats(HD, s + 15, 0.5f, 1.5f);
        y.k_norm = dev_floats(HD, s + 16, 0.5f, 1.5f);
    }
    float* out_norm = dev_floats(D, 77, 0.5f, 1.5f);
    // a cluster of 16 blocks is past the portable 8
    CK(cudaFuncSetAttribute(seg_ffn_qkv<14, 6>, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
    CK(cudaFuncSetAttribute(seg_ffn_qkv<12, 8>, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
    CK(cudaFuncSetAttribute(seg_ffn_qkv<14, 6, 1>, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
    CK(cudaFuncSetAttribute(seg_ffn_qkv<12, 8, 1>, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
    CK(cudaFuncSetAttribute(seg_ffn_qkv<14, 6, 2>, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
    CK(cudaFuncSetAttribute(seg_ffn_qkv<12, 8, 2>, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
    printf("%.2f MB of weights a layer on average (the lab's file: Q5_0 q/k/gate/up, Q8_0 or Q5_0 v, Q4_K o, "
           "Q6_K or Q4_K down)\n", weight_bytes / 1e6 / LAYERS);

    // the paged f32 cache, with random rows for the keys before the step's position
    const size_t cache_floats = (size_t)LAYERS * SLOTS_PER_LAYER * KVD;
    float* kc = dev_floats(cache_floats, 99, -1.0f, 1.0f);
    float* vc = dev_floats(cache_floats, 98, -1.0f, 1.0f);
    // position j's slot on page (j / 16 * 7 + 3) % 32
    std::vector<u32> hslots(SLOTS_PER_LAYER);
    for (int j = 0; j < SLOTS_PER_LAYER; j++) hslots[j] = (u32)(((j / 16) * 7 + 3) % 32 * 16 + j % 16);
    u32* slots = dev_alloc<u32>(SLOTS_PER_LAYER);
    CK(cudaMemcpy(slots, hslots.data(), hslots.size() * 4, cudaMemcpyHostToDevice));
    u32* new_slot = dev_alloc<u32>(1);
    int* info = dev_alloc<int>(ROW_INFO);
    double* cs = dev_alloc<double>(2 * HALF);

    float* x_in = dev_floats(D, 5, -0.05f, 0.05f);  // the embedding row
    // the chain's buffers
    float *resid = dev_alloc<float>(D), *resid2 = dev_alloc<float>(D), *normed = dev_alloc<float>(D);
    float *bn = dev_alloc<float>(D), *qv = dev_alloc<float>(QD), *kv = dev_alloc<float>(KVD), *vv = dev_alloc<float>(KVD);
    float *qr = dev_alloc<float>(QD), *kr = dev_alloc<float>(KVD), *att = dev_alloc<float>(QD);
    // rope_store writes the normed heads wherever the layer has q and k norms (the host's buffers)
    float *qn = dev_alloc<float>(QD), *kn = dev_alloc<float>(KVD);
    float *o_out = dev_alloc<float>(D), *gg = dev_alloc<float>(F), *uu = dev_alloc<float>(F), *aa = dev_alloc<float>(F);
    float *down_out = dev_alloc<float>(D), *final_sum = dev_alloc<float>(D), *final_out = dev_alloc<float>(D);
    signed char *nq = dev_alloc<signed char>(D), *attq = dev_alloc<signed char>(QD), *aq = dev_alloc<signed char>(F);
    Q8Blk *nd = dev_alloc<Q8Blk>(D / 32), *attd = dev_alloc<Q8Blk>(QD / 32), *ad = dev_alloc<Q8Blk>(F / 32);

    int pos = 64;
    auto set_pos = [&](int p) {
        pos = p;
        int hinfo[ROW_INFO] = {0, p + 1, p, 0, -1};
        CK(cudaMemcpy(info, hinfo, sizeof(hinfo), cudaMemcpyHostToDevice));
        u32 ns = hslots[p];
        CK(cudaMemcpy(new_slot, &ns, 4, cudaMemcpyHostToDevice));
        std::vector<double> h(2 * HALF);
        for (int i = 0; i < HALF; i++) {
            double th = p * std::pow(1000000.0, -2.0 * i / HD);
            h[2 * i] = std::cos(th);
            h[2 * i + 1] = std::sin(th);
        }
        CK(cudaMemcpy(cs, h.data(), h.size() * 8, cudaMemcpyHostToDevice));
    };

    // LAB_CHECK=1: the eager pass synchronizes after every kernel and names the first that fails
    const bool check_each = getenv("LAB_CHECK") != nullptr;
    auto ck = [&](cudaStream_t st, bool pdl, const char* what, int l) {
        if (pdl || !check_each) return;
        cudaError_t e = cudaStreamSynchronize(st);
        if (e == cudaSuccess) e = cudaGetLastError();
        if (e != cudaSuccess) {
            printf("layer %d, %s: %s\n", l, what, cudaGetErrorString(e));
            exit(1);
        }
    };
    const float scale = 0.0625f;  // 1 / sqrt(query_pre_attn_scalar = 256)
    const double cgelu = 0.7978845608028654;
    const float emb_scale = std::sqrt((float)D);
    // per-layer copies of the chain's vectors (the eager pass): what the segment must reproduce
    enum { S_RESID, S_O, S_RESID2, S_AA, S_DOWN, S_Q, S_K, S_V, S_N };
    const int snap_len[S_N] = {D, D, D, F, D, QD, KVD, KVD};
    float* snap[S_N];
    for (int i = 0; i < S_N; i++) snap[i] = dev_alloc<float>((size_t)LAYERS * snap_len[i]);
    bool snapping = false;
    auto take = [&](cudaStream_t st, int what, int l, const float* from) {
        if (snapping)
            CK(cudaMemcpyAsync(snap[what] + (size_t)l * snap_len[what], from, snap_len[what] * 4,
                               cudaMemcpyDeviceToDevice, st));
    };
    auto layer = [&](cudaStream_t st, int l, bool pdl) {
        const Layer& y = L[l];
        const float* nf = nullptr;
        float* nw = nullptr;
        int g = D, nt = NORM_T, m0 = QD, m1 = KVD, m2 = KVD;
        float eps = EPS;
        dim3 qkv_grid((QD + 2 * KVD) / (FUSED_T / 32)), fused(FUSED_T);
        // q/k/v: the residual (layer 0: the scaled embedding) and its attention norm
        if (l == 0) {
            float s = emb_scale;
            auto k = y.v_q80 ? scale_norm_mmv3_fast1_6_8 : scale_norm_mmv3_fast1_6;
            launch_pdl(st, pdl, k, qkv_grid, fused, (const float*)x_in, nf, nf, nw, resid,
                       (const float*)y.attn_norm, normed, g, eps, nt, nq, nd, (const u8*)y.wq,
                       (const u8*)y.wk, (const u8*)y.wv, qv, kv, vv, m0, m1, m2, s);
            ck(st, pdl, "q/k/v", l);
            take(st, S_RESID, l, resid);
        } else {
            auto k = y.v_q80 ? norm_mmv3_fast1_6_8 : norm_mmv3_fast1_6;
            launch_pdl(st, pdl, k, qkv_grid, fused, (const float*)resid2, (const float*)down_out,
                       (const float*)L[l - 1].post_ffn_norm, bn, resid, (const float*)y.attn_norm, normed, g, eps,
                       nt, nq, nd, (const u8*)y.wq, (const u8*)y.wk, (const u8*)y.wv, qv, kv, vv, m0, m1, m2);
            ck(st, pdl, "q/k/v", l);
            take(st, S_RESID, l, resid);
        }
        take(st, S_Q, l, qv);
        take(st, S_K, l, kv);
        take(st, S_V, l, vv);
        size_t base = (size_t)l * SLOTS_PER_LAYER;
        int nh = NH, nkh = NKV, hd = HD, half = HALF, style = 1, one = 1;
        launch_pdl(st, pdl, rope_store, dim3(1, NH + 2 * NKV), dim3(64), (const float*)qv, (const float*)kv,
                   (const float*)vv, (const float*)y.q_norm, (const float*)y.k_norm, eps, qn, kn, qr, kr, kc, vc,
                   (const u32*)new_slot, base, (const double*)cs, nh, nkh, hd, half, style, one);
        ck(st, pdl, "rope_store", l);
        int window = 0, hpb = 1;
        launch_pdl(st, pdl, attention_decode_cl8_256, dim3(1, NKV * NH, 8), dim3(ATT_CL_THREADS),
                   (const float*)qr, (const kv_t*)kc, (const kv_t*)vc, (const u32*)slots, (const int*)info,
                   (const u8*)nullptr, nw, att, base, nh, nkh, scale, window, hpb, attq, attd);
        ck(st, pdl, "attention", l);
        int kdim = QD, mo = D;
        launch_pdl(st, pdl, mmv_pre1r_12, dim3(D / 4), dim3(128), (const u8*)y.wo, (const signed char*)attq,
                   (const Q8Blk*)attd, o_out, one, kdim, mo);
        ck(st, pdl, "o", l);
        take(st, S_O, l, o_out);
        int mf = F, act = 1;
        launch_pdl(st, pdl, norm_gate_up_fast1_6, dim3(F / (FUSED_T / 32)), fused, (const float*)resid,
                   (const float*)o_out, (const float*)y.post_attn_norm, bn, resid2, (const float*)y.ffn_norm, normed,
                   g, eps, nt, nq, nd, (const u8*)y.wg, (const u8*)y.wu, gg, uu, aa, mf, act, cgelu);
        ck(st, pdl, "gate/up", l);
        take(st, S_RESID2, l, resid2);
        take(st, S_AA, l, aa);
        int nblk = F / 32;
        launch_pdl(st, pdl, quantize_q8_32, dim3((nblk + 7) / 8), dim3(256), (const float*)aa, aq, ad, nblk);
        ck(st, pdl, "quantize", l);
        int kd = F, md = D;
        launch_pdl(st, pdl, y.down_q6 ? mmv_fast1_14 : mmv_fast1_12, dim3(D / 4), dim3(128), (const u8*)y.wd,
                   (const signed char*)aq, (const Q8Blk*)ad, down_out, one, kd, md);
        ck(st, pdl, "down", l);
        take(st, S_DOWN, l, down_out);
        if (l == LAYERS - 1) {
            launch_pdl(st, pdl, residual_norm, dim3(1, 1), dim3(NORM_T), (const float*)resid2,
                       (const float*)down_out, (const float*)y.post_ffn_norm, bn, final_sum,
                       (const float*)out_norm, final_out, g, eps, nq, nd);
            ck(st, pdl, "output norm", l);
        }
    };

    for (int p : {64, 127}) {
        set_pos(p);
        cudaStream_t st;
        CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
        snapping = true;
        for (int l = 0; l < LAYERS; l++) layer(st, l, false);
        snapping = false;
        CK(cudaStreamSynchronize(st));
        CK(cudaGetLastError());
        // the segment for layers l, l + 1, from the chain's residual and o projection of layer l
        float *s_bn = dev_alloc<float>(D), *s_resid2 = dev_alloc<float>(D), *s_normed = dev_alloc<float>(D);
        float *s_gg = dev_alloc<float>(F), *s_uu = dev_alloc<float>(F), *s_aa = dev_alloc<float>(F);
        float *s_down = dev_alloc<float>(D), *s_bn2 = dev_alloc<float>(D), *s_next = dev_alloc<float>(D);
        float *s_normed2 = dev_alloc<float>(D), *s_q = dev_alloc<float>(QD), *s_k = dev_alloc<float>(KVD);
        float *s_v = dev_alloc<float>(KVD);
        signed char *s_nq = dev_alloc<signed char>(D), *s_aq = dev_alloc<signed char>(F), *s_nq2 = dev_alloc<signed char>(D);
        Q8Blk *s_nd = dev_alloc<Q8Blk>(D / 32), *s_ad = dev_alloc<Q8Blk>(F / 32), *s_nd2 = dev_alloc<Q8Blk>(D / 32);
        auto seg = [&](cudaStream_t s2, int l, int mode) {
            const Layer &y = L[l], &z = L[l + 1];
            SegArgs a{snap[S_RESID] + (size_t)l * D, snap[S_O] + (size_t)l * D, y.post_attn_norm, y.ffn_norm, y.wg,
                      y.wu, y.wd, y.post_ffn_norm, z.attn_norm, z.wq, z.wk, z.wv, s_bn, s_resid2, s_normed, s_gg,
                      s_uu, s_aa, s_down, s_bn2, s_next, s_normed2, s_q, s_k, s_v, s_nq, s_aq, s_nq2, s_nd, s_ad,
                      s_nd2, EPS, cgelu};
            if (mode == 2) {
                if (y.down_q6) launch_pdl(s2, false, seg_ffn_qkv<14, 6, 2>, dim3(16), dim3(512), a);
                else launch_pdl(s2, false, seg_ffn_qkv<12, 8, 2>, dim3(16), dim3(512), a);
            } else if (mode == 1) {
                if (y.down_q6) launch_pdl(s2, false, seg_ffn_qkv<14, 6, 1>, dim3(16), dim3(512), a);
                else launch_pdl(s2, false, seg_ffn_qkv<12, 8, 1>, dim3(16), dim3(512), a);
            } else {
                if (y.down_q6) launch_pdl(s2, false, seg_ffn_qkv<14, 6>, dim3(16), dim3(512), a);
                else launch_pdl(s2, false, seg_ffn_qkv<12, 8>, dim3(16), dim3(512), a);
            }
        };
        auto same = [&](const float* a, const float* b, int n) {
            std::vector<float> x(n), y(n);
            CK(cudaMemcpy(x.data(), a, n * 4, cudaMemcpyDeviceToHost));
            CK(cudaMemcpy(y.data(), b, n * 4, cudaMemcpyDeviceToHost));
            int bad = 0;
            for (int i = 0; i < n; i++) bad += memcmp(&x[i], &y[i], 4) != 0;
            return bad;
        };
        for (int pf = 0; pf < 3; pf++) {
        int bad_layers = 0;
        for (int l = 0; l + 1 < LAYERS; l++) {
            CK(cudaMemset(s_down, 0, D * 4));
            CK(cudaMemset(s_q, 0, QD * 4));
            seg(st, l, pf);
            CK(cudaStreamSynchronize(st));
            CK(cudaGetLastError());
            int b1 = same(s_resid2, snap[S_RESID2] + (size_t)l * D, D), b2 = same(s_aa, snap[S_AA] + (size_t)l * F, F);
            int b3 = same(s_down, snap[S_DOWN] + (size_t)l * D, D), b4 = same(s_next, snap[S_RESID] + (size_t)(l + 1) * D, D);
            int b5 = same(s_q, snap[S_Q] + (size_t)(l + 1) * QD, QD), b6 = same(s_k, snap[S_K] + (size_t)(l + 1) * KVD, KVD);
            int b7 = same(s_v, snap[S_V] + (size_t)(l + 1) * KVD, KVD);
            if (b1 + b2 + b3 + b4 + b5 + b6 + b7) {
                bad_layers++;
                printf("pos %d layer %d: values differing from the chain's: resid2 %d, act %d, down %d, next "
                       "residual %d, q %d, k %d, v %d\n", p, l, b1, b2, b3, b4, b5, b6, b7);
            }
        }
        printf("pos %d: the segment %s (feed-forward of layer l, q/k/v of l + 1) is %s the chain's, layers 0-%d\n", p,
               pf == 2 ? "v2" : pf ? "v1" : "v0", bad_layers ? "NOT bitwise" : "BITWISE", LAYERS - 2);
        }
        // its time against the chain's four kernels for the same work (graphs of 17 segments)
        auto chain_seg = [&](cudaStream_t s2, int l, bool pdl) {
            const Layer &y = L[l], &z = L[l + 1];
            int g = D, nt = NORM_T, mf = F, act = 1, nblk = F / 32, one = 1, kd = F, md = D, m0 = QD, m1 = KVD, m2 = KVD;
            float eps = EPS;
            dim3 fused(FUSED_T);
            launch_pdl(s2, pdl, norm_gate_up_fast1_6, dim3(F / (FUSED_T / 32)), fused,
                       (const float*)(snap[S_RESID] + (size_t)l * D), (const float*)(snap[S_O] + (size_t)l * D),
                       (const float*)y.post_attn_norm, s_bn, s_resid2, (const float*)y.ffn_norm, s_normed, g, eps, nt,
                       s_nq, s_nd, (const u8*)y.wg, (const u8*)y.wu, s_gg, s_uu, s_aa, mf, act, cgelu);
            launch_pdl(s2, pdl, quantize_q8_32, dim3((nblk + 7) / 8), dim3(256), (const float*)s_aa, s_aq, s_ad, nblk);
            launch_pdl(s2, pdl, y.down_q6 ? mmv_fast1_14 : mmv_fast1_12, dim3(D / 4), dim3(128), (const u8*)y.wd,
                       (const signed char*)s_aq, (const Q8Blk*)s_ad, s_down, one, kd, md);
            launch_pdl(s2, pdl, z.v_q80 ? norm_mmv3_fast1_6_8 : norm_mmv3_fast1_6, dim3((QD + 2 * KVD) / (FUSED_T / 32)),
                       fused, (const float*)s_resid2, (const float*)s_down, (const float*)y.post_ffn_norm, s_bn2,
                       s_next, (const float*)z.attn_norm, s_normed2, g, eps, nt, s_nq2, s_nd2, (const u8*)z.wq,
                       (const u8*)z.wk, (const u8*)z.wv, s_q, s_k, s_v, m0, m1, m2);
        };
        for (int round = 0; round < 2; round++) {
            float a = time_graph(LAYERS - 1, [&](cudaStream_t s2, int i, bool capture) {
                chain_seg(s2, i % (LAYERS - 1), capture);
            });
            float c = time_graph(LAYERS - 1, [&](cudaStream_t s2, int i, bool) { seg(s2, i % (LAYERS - 1), 0); });
            float c1 = time_graph(LAYERS - 1, [&](cudaStream_t s2, int i, bool) { seg(s2, i % (LAYERS - 1), 1); });
            float c2 = time_graph(LAYERS - 1, [&](cudaStream_t s2, int i, bool) { seg(s2, i % (LAYERS - 1), 2); });
            printf("pos %d round %d: feed-forward + next q/k/v: the chain's 4 kernels %.2f us, the cluster segment "
                   "v0 %.2f us, v1 %.2f us, v2 %.2f us\n", p, round, a, c, c1, c2);
        }
        std::vector<float> h(D);
        CK(cudaMemcpy(h.data(), final_out, D * 4, cudaMemcpyDeviceToHost));
        double ss = 0, mx = 0;
        bool finite = true;
        for (float v : h) {
            finite = finite && std::isfinite(v);
            ss += (double)v * v;
            mx = std::fmax(mx, std::fabs(v));
        }
        printf("pos %d: the output norm's row: %s, rms %.4g, max |x| %.4g\n", p, finite ? "finite" : "NOT FINITE",
               std::sqrt(ss / D), mx);
        for (int round = 0; round < 3; round++) {
            float us = time_graph(LAYERS, [&](cudaStream_t s2, int i, bool capture) { layer(s2, i % LAYERS, capture); });
            printf("pos %d round %d: the step graph's kernels, %.2f us a layer (graph of %d layers, median of 7)\n", p,
                   round, us, LAYERS);
        }
        CK(cudaStreamDestroy(st));
    }
    return 0;
}
