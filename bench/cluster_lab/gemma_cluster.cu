// Gemma-3-270M's 18 decode layers as one 16-block cluster kernel (session 40, lab): can a
// cluster run a Gemma-3 layer in the ~15 us that 3x llama.cpp's tg128 needs (BENCHMARKS.md,
// session 39: the step graph spends 21.7 us a layer over seven kernels)?
//
// Gemma-3's layer differs from SmolLM2's (step_cluster.cu, decode_layers_cluster) where the
// cluster design is concerned:
//  - 4 query heads of 256 and one KV head: an SM-per-head layout leaves 12 of 16 blocks idle in
//    the attention, and a head's K/V rows (1 KiB a key each) do not fit shared memory. Here the
//    16 blocks are 4 heads x 4 quarters of the keys: each block reads a quarter of the keys from
//    L2, and the head's four blocks exchange their partial softmax sums (m, l, acc[256]);
//  - q and k RMS norms over the head before RoPE (NEOX pairs i, i + 128), and sandwich norms
//    (post-attention and post-feed-forward norms over the whole row): the o projection's and the
//    down projection's outputs go to every block, which each norm the whole row;
//  - the o projection split by input head: block (h, quarter) multiplies its head's 256 outputs
//    by 160 rows of W_o's columns of that head (one Q4_K super-block a row), and every block
//    sums the four heads' partials; so the head's output never crosses blocks;
//  - about 4 MB of weights a layer: a block's share (about 250 KB) does not fit its shared
//    memory, so one slot is refilled three times a layer: the q/k/v rows, then the o rows (once
//    the q/k/v rows are read), then the up rows (once the o rows are), then the next layer's
//    q/k/v rows (once the up rows are);
//  - GELU (tanh) instead of SiLU.
// Five exchanges a layer (q/k/v rows to all; softmax partials within a head's four blocks; o
// partials to all; the quantized activation to all; down rows to all), each st.async into the
// receivers' shared memory, completing on their mbarriers (step_cluster.cu's scheme).
//
// Second version (the first, 644fab8: Q4_1 weights, 3.68 MB a layer: 12.06 / 12.93 us a layer at
// pos 64 / 127): the real file's types and bytes, each row decoded by the backend's FastUnit<T>
// (kernels.cu, included; generic loads, so they read shared memory): q, k, gate and up Q5_0, v
// Q8_0, o Q4_K, down Q6_K (the heavier of the file's two kinds of layer), 3.98 MB a layer. A lane
// folds units p, p + LPR, ... of its row (not the backend's lane order: the values are checked
// against a host model with dequantized weights, not bitwise against the backend's kernels).
//
// What it measured (session 40, H200; bench/session40/runs.txt, calls 5-9), us a layer at pos
// 64 / 127, against the step graph's 21.7 (tg128):
//   the backend's decoders as they are (Q6_K in GGUF's layout), unrolled 8 / 1: 21.2 / 18.2;
//   Q5_0 repacked (LAB_Q5P, Q5P below): 15.7 / 17.0;
//   and Q6_K in the backend's planes (LAB_Q6P): 14.2 / 15.5 (LAB_UNROLL=2), 14.4 / 15.7 (1);
//   and the PV loop four keys a round (the default; LAB_PV_ONE for the loop before): 14.3 / 15.2.
// Session 53 (bench/session53/gemma_cluster.txt, today's kernels.cu, v's Q8_0 rows read in GGUF's
// layout): 14.34 / 15.17 / 22.30 us a layer at pos 64 / 127 / 511, against the step graph's
// kernels run as a graph in the same conditions (gemma_step.cu) 16.6-16.7 / 16.9-17.1.
// On 16 SMs the layer is bound by the decoders' instructions, not by bytes or exchanges: with the
// Q4_1 weights of the first version the gate/up phase took 3.3 us, with Q5_0 through
// FastUnit<T_Q5_0> 5.8 (its high bits spread by hb4, its words by funnel shifts), repacked 3.9.
//
// nvcc -gencode=arch=compute_90a,code=sm_90a -O3 --fmad=false -std=c++17 \
//   -diag-suppress 128,177,550,549,20169 -DLAB_UNROLL=1 -DLAB_Q5P -DLAB_Q6P \
//   -o gemma_cluster gemma_cluster.cu
#define LOCKSTEP_FAST_F32
#define LOCKSTEP_WEIGHTS_EVICT_NORMAL  // FastUnit's loads as plain loads: they read shared memory here
#define LOCKSTEP_Q6K_GGUF
// v's Q8_0 rows in GGUF's blocks (the backend has stored Q8_0 in planes since session 48).
#define LOCKSTEP_Q80_GGUF
#ifndef LAB_Q5P
#define LOCKSTEP_Q50_GGUF  // FastUnit<T_Q5_0> on GGUF's blocks (LAB_Q5P: the repacked, Q5P below)
#endif
__device__ unsigned emu_tf32_rna(float);
__device__ void emu_mma_tf32(float*, const unsigned*, const unsigned*);
#include "../../crates/backend-cuda/src/kernels.cu"
#include <cooperative_groups.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>
namespace cg = cooperative_groups;

#define CK(x)                                                                                       \
    do {                                                                                            \
        cudaError_t e_ = (x);                                                                       \
        if (e_ != cudaSuccess) {                                                                    \
            fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));      \
            exit(1);                                                                                \
        }                                                                                           \
    } while (0)

// LAB_UNROLL: units a lane unrolls (loads in flight); LAB_DOWN_Q4K: the down rows in Q4_K (the
// file's other kind of layer) instead of Q6_K; LAB_Q6P: Q6_K in the backend's planes; LAB_Q5P:
// the Q5_0 rows repacked (Q5P below); LAB_Q5X: only their qh bits permuted (Q5X).
#ifndef LAB_UNROLL
#define LAB_UNROLL 8  // the first runs' default; 1 or 2 spill less (runs.txt)
#endif
namespace lab {
// Q5P (LAB_Q5P): Q5_0 repacked as the backend repacks it (plan::q50_repacked; kernels.cu
// Q50_BYTES, the backend's default since session 41): 24-byte blocks [d, two zero bytes, qh',
// qs[16]], qh's bits permuted so a dp4a word's high bits are one shift and one mask away. The
// lab's own copy of that decoder ran calls 7-10 (bench/session40/runs.txt); the backend's is the
// same code. FastUnit<T_Q5_0> then reads these blocks.
constexpr int T_Q5P = T_Q5_0;
// Q6P: Q6_K in the backend's planes (kernels.cu, plan::q6k_planar: a row of 2048 values is one
// group of 8 super-blocks, 1680 bytes), the group's start given by the row (the backend finds it
// from the address: q6p_member). FastUnit<T_Q6_K>'s planar load otherwise, and its dot.
constexpr int T_Q6P = 101;
struct Q6P : FastUnit<T_Q6_K> {
    __device__ __forceinline__ void load(const u8* row, int u) {
        int sb = u >> 2, j = 4 * sb + (u & 3);
        uint4 a = *(const uint4*)(row + 16 * j), c = *(const uint4*)(row + 512 + 16 * j),
              hh = *(const uint4*)(row + 1024 + 16 * j);
        u32 s4 = *(const u32*)(row + 1536 + 4 * j);
        d = h2f(*(const u16*)(row + 1664 + 2 * sb));
#pragma unroll
        for (int k = 0; k < 4; k++) sc[k] = (int)(signed char)(u8)(s4 >> (8 * k));
        u32 wa[4] = {a.x, a.y, a.z, a.w}, wb[4] = {c.x, c.y, c.z, c.w}, wh[4] = {hh.x, hh.y, hh.z, hh.w};
#pragma unroll
        for (int i = 0; i < 4; i++) {
            u32 A = wa[i], B = wb[i], H = wh[i];
            q[i] = (int)__vsub4((A & 0x0F0F0F0Fu) | ((H << 4) & 0x30303030u), 0x20202020u);
            q[4 + i] = (int)__vsub4((B & 0x0F0F0F0Fu) | ((H << 2) & 0x30303030u), 0x20202020u);
            q[8 + i] = (int)__vsub4(((A >> 4) & 0x0F0F0F0Fu) | (H & 0x30303030u), 0x20202020u);
            q[12 + i] = (int)__vsub4(((B >> 4) & 0x0F0F0F0Fu) | ((H >> 2) & 0x30303030u), 0x20202020u);
        }
    }
};
// Q5X: GGUF's 22-byte Q5_0 blocks with only qh's bits permuted as Q5P's (the words still read
// as FastUnit<T_Q5_0> reads them, aligned loads and funnel shifts): what the permutation alone
// gives, a layout that keeps every row's bytes.
constexpr int T_Q5X = 102;
struct Q5X : FastUnit<T_Q5_0> {
    __device__ __forceinline__ void load(const u8* row, int u) {
        const u8* b = row + (size_t)u * 22;
        d = ldwh(b);
        int w[5];
        ldw_words_a2<5>(b + 2, w);
        u32 qh = (u32)w[0];
#pragma unroll
        for (int i = 0; i < 4; i++) {
            u32 v = (u32)w[1 + i];
            q[i] = (int)((v & 0x0F0F0F0Fu) | ((qh >> i) & 0x10101010u));
            q[4 + i] = (int)(((v >> 4) & 0x0F0F0F0Fu) | ((qh << (4 - i)) & 0x10101010u));
        }
    }
};
template <int TY>
struct Unit {
    using T = FastUnit<TY>;
};
template <>
struct Unit<T_Q5X> {
    using T = Q5X;
};
template <>
struct Unit<T_Q6P> {
    using T = Q6P;
};
#ifdef LAB_Q5P
constexpr int T_Q5 = T_Q5P, Q5_BLOCK = 24;
#elif defined(LAB_Q5X)
constexpr int T_Q5 = T_Q5X, Q5_BLOCK = 22;
#else
constexpr int T_Q5 = T_Q5_0, Q5_BLOCK = 22;
#endif
#ifdef LAB_DOWN_Q4K
constexpr int T_DOWN = T_Q4_K, RB_DN_BLOCK = 144;
#elif defined(LAB_Q6P)
constexpr int T_DOWN = T_Q6P, RB_DN_BLOCK = 210;
#else
constexpr int T_DOWN = T_Q6_K, RB_DN_BLOCK = 210;
#endif
constexpr int UNROLL = LAB_UNROLL;
constexpr int D = 640, NH = 4, HD = 256, QD = NH * HD, KVD = HD, F = 2048, LAYERS = 18, CS = 16;
constexpr int THREADS = 512, WARPS = THREADS / 32;
// bytes of a row (or, o, of the head's super-block of a row)
constexpr int RB_Q50 = D / 32 * Q5_BLOCK, RB_Q80 = D / 32 * 34, RB_O = 144, RB_DN = F / 256 * RB_DN_BLOCK;
constexpr int RQ = QD / CS, RK = KVD / CS, RV = KVD / CS;  // 64 q, 16 k and 16 v rows a block
constexpr int RQKV = RQ + RK + RV;
constexpr int RO = D / 4;   // 160 o rows a block (of its head's 256 columns)
constexpr int RF = F / CS;  // 128 gate and 128 up rows a block
constexpr int RDN = D / CS; // 40 down rows a block
constexpr int KBD = D / 32, KBH = HD / 32, KBF = F / 32;
constexpr int MAXPOS = 512, MAXQ = MAXPOS / 4;
constexpr float EPS = 1e-6f;
constexpr int NMARK = 8;

// A block's weights for a layer, in global memory: five regions, each bulk-copied into a slot.
constexpr int A_ROWS = RQ * RB_Q50 + RK * RB_Q50 + RV * RB_Q80, A_BYTES = A_ROWS + 2 * HD * 4;  // + q, k norms
constexpr int O_BYTES = RO * RB_O;
constexpr int G_ROWS = RF * RB_Q50, G_BYTES = G_ROWS + 2 * D * 4;  // gate rows + post-attention, ffn norms
constexpr int U_BYTES = RF * RB_Q50;
constexpr int DN_ROWS = RDN * RB_DN, DN_BYTES = DN_ROWS + 2 * D * 4;  // + post-ffw, next attention norms
constexpr int GA = 0, GO = A_BYTES, GG = GO + O_BYTES, GU = GG + G_BYTES, GD = GU + U_BYTES,
              LAYER_BYTES = GD + DN_BYTES;
// The slots: SA holds the q/k/v region, then the o rows (the q and k norms stay: the o rows are
// shorter than the q/k/v rows), then the up rows, then the next layer's q/k/v region.
constexpr int SA_BYTES = A_BYTES > U_BYTES ? A_BYTES : U_BYTES;
constexpr int SA = 0, SG = SA_BYTES, SD = SG + G_BYTES, SLOT_BYTES = SD + DN_BYTES;
static_assert(O_BYTES <= A_ROWS, "the o rows leave the q and k norms in place");
static_assert(A_BYTES % 16 == 0 && O_BYTES % 16 == 0 && G_BYTES % 16 == 0 && U_BYTES % 16 == 0 &&
                  DN_BYTES % 16 == 0 && LAYER_BYTES % 16 == 0,
              "bulk sizes");

struct __align__(16) Vecs {
    // stage: a block's rows before they are sent (160 floats), in psend's room (psend's own uses
    // never overlap it; the quantized activation goes at byte 640)
    float xres[D];               // the residual
    float qkv_in[QD + 2 * KVD];  // exchange 1: every q/k/v row; then the PV partial sums
    float part_in[4][260];       // exchange 2: the head's four (m, l, -, -, acc[256])
    float opart_in[NH][D];       // exchange 3: the four heads' o partials; [0] also exchange 5
    float psend[260];
    __device__ float* stage_() { return psend; }
    float qh[HD], kh[HD], vh[HD];
    float scores[MAXQ];
    float red[WARPS];
    __align__(16) signed char xq[D];     // the normed residual, quantized
    __align__(16) signed char act_q[F];  // exchange 4: the activation, quantized
    __align__(16) signed char att_q[HD];
    __align__(16) Q8Blk xs[KBD];
    __align__(16) Q8Blk act_s[KBF];
    __align__(16) Q8Blk att_s[KBH];
    float ssp[KBF];
    unsigned long long bars[12];
};
constexpr size_t SMEM = SLOT_BYTES + sizeof(Vecs);
static_assert(SMEM <= 232448, "a block's shared memory");

__device__ __forceinline__ unsigned long long gtime() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
__device__ __forceinline__ unsigned smem_addr(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }
__device__ __forceinline__ unsigned mapa(unsigned addr, int rank) {
    unsigned r;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(addr), "r"(rank));
    return r;
}
__device__ __forceinline__ void mbar_wait(unsigned long long* bar, unsigned parity) {
    unsigned done = 0, b = smem_addr(bar);
    while (!done)
        asm volatile(
            "{ .reg .pred p; mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
            : "=r"(done)
            : "r"(b), "r"(parity)
            : "memory");
}
__device__ __forceinline__ void mbar_expect(unsigned long long* bar, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)), "r"(bytes) : "memory");
}
// 16 bytes from registers into block `to`'s shared memory at dst, completing on its barrier bar.
__device__ __forceinline__ void st_async16(void* dst, uint4 v, unsigned long long* bar, int to) {
    unsigned raddr = mapa(smem_addr(dst), to), rbar = mapa(smem_addr(bar), to);
    asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.b32 [%0], {%1, %2, %3, %4}, [%5];" ::"r"(
                     raddr),
                 "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w), "r"(rbar)
                 : "memory");
}
__device__ __forceinline__ void receive(unsigned long long* bar, unsigned bytes, unsigned parity) {
    if (threadIdx.x == 0) mbar_expect(bar, bytes);
    mbar_wait(bar, parity);
}
__device__ __forceinline__ void issue_copy(unsigned long long* bar, uint8_t* dst, const uint8_t* src, int bytes) {
    mbar_expect(bar, bytes);
    constexpr int CHUNK = 16384;
#pragma unroll 1
    for (int o = 0; o < bytes; o += CHUNK) {
        int n = bytes - o < CHUNK ? bytes - o : CHUNK;
        asm volatile(
            "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                smem_addr(dst + o)),
            "l"(src + o), "r"(n), "r"(smem_addr(bar))
            : "memory");
    }
}

// One warp quantizes a 32-value block (to the backend's Q8Blk: d = max|v| / 127, s = sum q).
__device__ __forceinline__ void q8_warp(float v, signed char* q, Q8Blk* ds, int b) {
    int lane = threadIdx.x & 31;
    float a = __int_as_float(__reduce_max_sync(0xffffffffu, __float_as_int(fabsf(v))));
    float id = a > 0.f ? 127.f / a : 0.f;
    int qi = (int)rintf(v * id);
    int sq = __reduce_add_sync(0xffffffffu, qi);
    q[b * 32 + lane] = (signed char)qi;
    if (lane == 0) ds[b] = Q8Blk{a * (1.f / 127.f), sq};
}

// n values of x (times w when NORM) quantized, one warp a block; the norm folded in (a common
// positive factor does not change a block's integers): returns inv, by which the caller scales
// each dot (1 without a norm).
template <bool NORM>
__device__ __forceinline__ float quant_fast(const float* x, const float* w, int n, signed char* xq, Q8Blk* xs,
                                            Vecs& s) {
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    for (int b = warp; b < n / 32; b += WARPS) {
        float xv = x[b * 32 + lane];
        q8_warp(NORM ? xv * w[b * 32 + lane] : xv, xq, xs, b);
        if (NORM) {
            float ss = xv * xv;
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
            if (lane == 0) s.ssp[b] = ss;
        }
    }
    __syncthreads();
    if (!NORM) return 1.f;
    float tot = 0.f;
    for (int b = lane; b < n / 32; b += 32) tot += s.ssp[b];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) tot += __shfl_xor_sync(0xffffffffu, tot, o);
    return rsqrtf(tot / n + EPS);
}

// A row of type TY (UNITS of FastUnit<TY>) against q8 blocks: LPR lanes a row, lane p folds
// units p, p + LPR, ...
template <int TY, int UNITS, int LPR>
__device__ __forceinline__ float dot_row(const uint8_t* wrow, const signed char* xq, const Q8Blk* xd) {
    int p = threadIdx.x & (LPR - 1);
    float acc = 0.f;
#pragma unroll UNROLL
    for (int u0 = 0; u0 < UNITS; u0 += LPR) {
        int u = u0 + p;
        if (u < UNITS) {
            typename Unit<TY>::T w;
            w.load(wrow, u);
            acc = w.dot(xq, xd, u, acc);
        }
    }
#pragma unroll
    for (int m = LPR / 2; m > 0; m >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, m);
    return acc;
}
// Rows [0, n) of a slot, from warp w0 on, LPR lanes a row: f(row, value) on each row's lane 0.
template <int TY, int UNITS, int LPR, typename Fn>
__device__ __forceinline__ void rows(const uint8_t* W, int row_bytes, int n, int w0, const signed char* xq,
                                     const Q8Blk* xd, Fn f) {
    const int warp = (threadIdx.x >> 5) - w0, lane = threadIdx.x & 31;
    constexpr int RPW = 32 / LPR;
    if (warp < 0) return;
    for (int r0 = warp * RPW; r0 < n; r0 += WARPS * RPW) {
        int r = r0 + lane / LPR, rr = r < n ? r : n - 1;
        float v = dot_row<TY, UNITS, LPR>(W + (size_t)rr * row_bytes, xq, xd);
        if ((lane & (LPR - 1)) == 0 && r < n) f(r, v);
    }
}

__device__ __forceinline__ float block_sum(float v, Vecs& s) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    int w = threadIdx.x >> 5, l = threadIdx.x & 31;
    if (l == 0) s.red[w] = v;
    __syncthreads();
    float r = l < WARPS ? s.red[l] : 0.f;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) r += __shfl_xor_sync(0xffffffffu, r, o);
    return r;  // every thread has the sum; s.red is reused only after the caller's next barrier
}

__device__ __forceinline__ float gelu_tanh(float g) {
    return 0.5f * g * (1.f + tanhf(0.7978845608028654f * (g + 0.044715f * g * g * g)));
}

// The sum of the four heads' o partials, in a fixed order.
__device__ __forceinline__ float o_sum(const Vecs& s, int i) {
    return ((s.opart_in[0][i] + s.opart_in[1][i]) + s.opart_in[2][i]) + s.opart_in[3][i];
}

// weights: [layer][block][LAYER_BYTES]; kc/vc: [layer][MAXPOS][HD]; rope: cos[128], sin[128];
// attn0: layer 0's attention norm.
__global__ void __launch_bounds__(THREADS, 1)
    gemma_layers(const uint8_t* __restrict__ weights, const float* attn0, float* kc, float* vc, const float* rope,
                 int pos, const float* x_in, float* x_out, unsigned long long* stamps, unsigned long long* marks,
                 int nl) {
    extern __shared__ __align__(128) uint8_t smem[];
    uint8_t* slots = smem;
    Vecs& s = *reinterpret_cast<Vecs*>(smem + SLOT_BYTES);
    unsigned long long* bar_a = &s.bars[0];   // slot A: q/k/v
    unsigned long long* bar_o = &s.bars[1];   // slot A: o rows
    unsigned long long* bar_u = &s.bars[2];   // slot A: up rows
    unsigned long long* bar_g = &s.bars[3];   // slot G: gate rows and two norms
    unsigned long long* bar_dn = &s.bars[4];  // slot D: down rows and two norms
    unsigned long long* bx = &s.bars[5];      // the five exchanges
    cg::cluster_group cl = cg::this_cluster();
    const int rank = cl.block_rank();
    const int h = rank >> 2, qt = rank & 3;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const bool issuer = tid == THREADS - 1;
#define MARK(i) \
    if (rank == 0 && tid == 0) marks[l * NMARK + (i)] = gtime();
    auto region = [&](int layer, int off) { return weights + ((size_t)layer * CS + rank) * LAYER_BYTES + off; };

    if (tid == 0) {
        for (int p = 0; p < 10; p++) asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_addr(&s.bars[p])));
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    if (issuer) {
        issue_copy(bar_a, slots + SA, region(0, GA), A_BYTES);
        issue_copy(bar_g, slots + SG, region(0, GG), G_BYTES);
        issue_copy(bar_dn, slots + SD, region(0, GD), DN_BYTES);
    }
    for (int i = tid; i < D; i += THREADS) s.xres[i] = x_in[i];
    __syncthreads();
    float inv = quant_fast<true>(s.xres, attn0, D, s.xq, s.xs, s);
    cl.sync();  // every block's barriers are initialized before anyone stores into them
    if (rank == 0 && tid == 0) stamps[0] = gtime();

    const int n = pos + 1;
    const int j0 = qt * n / 4, j1 = (qt + 1) * n / 4, nk = j1 - j0;
    for (int l = 0; l < nl; l++) {
        const bool more = l + 1 < nl;
        const unsigned par = l & 1;
        float* kcl = kc + (size_t)l * MAXPOS * HD;
        float* vcl = vc + (size_t)l * MAXPOS * HD;
        // ---- 1: q/k/v rows (warps 0-7 q, 8-9 k, 10-13 v), to every block
        MARK(0);
        mbar_wait(bar_a, par);
        {
            const uint8_t* wa = slots + SA;
            auto put = [&](int base) { return [&s, base, inv](int r, float v) { s.stage_()[base + r] = inv * v; }; };
            if (warp < 8) rows<T_Q5, KBD, 4>(wa, RB_Q50, RQ, 0, s.xq, s.xs, put(0));
            else if (warp < 10) rows<T_Q5, KBD, 4>(wa + RQ * RB_Q50, RB_Q50, RK, 8, s.xq, s.xs, put(RQ));
            else if (warp < 14)
                rows<T_Q8_0, KBD, 8>(wa + (RQ + RK) * RB_Q50, RB_Q80, RV, 10, s.xq, s.xs, put(RQ + RK));
        }
        __syncthreads();
        if (issuer) issue_copy(bar_o, slots + SA, region(l, GO), O_BYTES);
        for (int t = tid; t < (RQKV / 4) * CS; t += THREADS) {
            int to = t / (RQKV / 4), i = t % (RQKV / 4);
            float* dst = i < RQ / 4 ? s.qkv_in + rank * RQ + 4 * i
                         : i < (RQ + RK) / 4 ? s.qkv_in + QD + rank * RK + 4 * (i - RQ / 4)
                                             : s.qkv_in + QD + KVD + rank * RV + 4 * (i - (RQ + RK) / 4);
            st_async16(dst, reinterpret_cast<const uint4*>(s.stage_())[i], &bx[0], to);
        }
        receive(&bx[0], (QD + 2 * KVD) * 4, par);
        MARK(1);
        // ---- 2: q and k normed over the head and rotated; this block's quarter of the keys
        {
            const float* qn = reinterpret_cast<const float*>(slots + SA + A_ROWS);
            const float* kn = qn + HD;
            int half = tid >> 8, i = tid & 255;  // threads 0-255: q, 256-511: k
            float x = half ? s.qkv_in[QD + i] : s.qkv_in[h * HD + i];
            float ss = x * x;
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
            if (lane == 0) s.red[warp] = ss;
            s.vh[i] = s.qkv_in[QD + KVD + i];  // both halves write the same value
            __syncthreads();
            float tot = 0.f;
#pragma unroll
            for (int w = 0; w < 8; w++) tot += s.red[half * 8 + w];
            float nv = x * rsqrtf(tot / HD + EPS) * (half ? kn[i] : qn[i]);
            (half ? s.kh : s.qh)[i] = nv;
            __syncthreads();
            if (i < HD / 2) {  // NEOX pairs (i, i + 128)
                float* v = half ? s.kh : s.qh;
                float c = __ldg(rope + i), sn = __ldg(rope + 128 + i);
                float a = v[i], b = v[i + HD / 2];
                v[i] = a * c - b * sn;
                v[i + HD / 2] = a * sn + b * c;
            }
            __syncthreads();
            if (rank == 0) {
                if (half) vcl[(size_t)pos * HD + i] = s.vh[i];
                else kcl[(size_t)pos * HD + i] = s.kh[i];
            }
        }
        {
            const float scale = 1.f / 16.f;  // Gemma-3's query_pre_attn_scalar = 256
            const int g16 = tid & 15;
#ifndef LAB_PV_ONE
            float4 vfirst[4];
            if (tid < 256) {
                int c = tid & 63, g = tid >> 6;
#pragma unroll
                for (int u = 0; u < 4; u++) {
                    int k = g + 4 * u, j = j0 + k;
                    vfirst[u] = k >= nk ? make_float4(0.f, 0.f, 0.f, 0.f)
                                : j == pos ? reinterpret_cast<const float4*>(s.vh)[c]
                                           : __ldcg(reinterpret_cast<const float4*>(vcl + (size_t)j * HD) + c);
                }
            }
#endif
            float4 qq[4];
#pragma unroll
            for (int e = 0; e < 4; e++) qq[e] = reinterpret_cast<const float4*>(s.qh + g16 * 16)[e];
            for (int p = 0; 32 * p < nk; p++) {
                int jj = tid / 16 + 32 * p, j = j0 + jj;
                float d = 0.f;
                if (jj < nk) {
                    float4 kk[4];
                    if (j == pos) {
#pragma unroll
                        for (int e = 0; e < 4; e++) kk[e] = reinterpret_cast<const float4*>(s.kh + g16 * 16)[e];
                    } else {
#pragma unroll
                        for (int e = 0; e < 4; e++)
                            kk[e] = __ldcg(reinterpret_cast<const float4*>(kcl + (size_t)j * HD + g16 * 16) + e);
                    }
#pragma unroll
                    for (int e = 0; e < 4; e++)
                        d += kk[e].x * qq[e].x + kk[e].y * qq[e].y + kk[e].z * qq[e].z + kk[e].w * qq[e].w;
                }
#pragma unroll
                for (int o = 8; o > 0; o >>= 1) d += __shfl_xor_sync(0xffffffffu, d, o);
                if (g16 == 0 && jj < nk) s.scores[jj] = d * scale;
            }
            __syncthreads();
            if (warp == 0) {
                float m = -INFINITY;
                for (int jj = lane; jj < nk; jj += 32) m = fmaxf(m, s.scores[jj]);
#pragma unroll
                for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
                float lsum = 0.f;
                for (int jj = lane; jj < nk; jj += 32) {
                    float e = expf(s.scores[jj] - m);
                    s.scores[jj] = e;
                    lsum += e;
                }
#pragma unroll
                for (int o = 16; o > 0; o >>= 1) lsum += __shfl_xor_sync(0xffffffffu, lsum, o);
                if (lane == 0) {
                    s.psend[0] = m;
                    s.psend[1] = lsum;
                    s.psend[2] = s.psend[3] = 0.f;
                }
            }
            __syncthreads();
            float* scratch = s.qkv_in;  // every q/k/v value is in qh, kh, vh now
#ifdef LAB_PV_ONE
            if (tid < 256) {  // one key a round (calls 7-8's pp1 / pp2)
                int c = tid & 63, g = tid >> 6;
                float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
                for (int jj = g; jj < nk; jj += 4) {
                    int j = j0 + jj;
                    float pw = s.scores[jj];
                    float4 vv = j == pos ? reinterpret_cast<const float4*>(s.vh)[c]
                                         : __ldcg(reinterpret_cast<const float4*>(vcl + (size_t)j * HD) + c);
                    acc.x += pw * vv.x;
                    acc.y += pw * vv.y;
                    acc.z += pw * vv.z;
                    acc.w += pw * vv.w;
                }
                reinterpret_cast<float4*>(scratch + g * HD)[c] = acc;
            }
#else
            if (tid < 256) {
                // four keys a round, their V rows loaded together (the first round's before the
                // scores: vfirst)
                int c = tid & 63, g = tid >> 6;
                float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
                for (int jj = g; jj < nk; jj += 16) {
                    float4 vv[4];
#pragma unroll
                    for (int u = 0; u < 4; u++) {
                        int k = jj + 4 * u, j = j0 + k;
                        vv[u] = jj == g ? vfirst[u]
                                : k >= nk ? make_float4(0.f, 0.f, 0.f, 0.f)
                                : j == pos ? reinterpret_cast<const float4*>(s.vh)[c]
                                           : __ldcg(reinterpret_cast<const float4*>(vcl + (size_t)j * HD) + c);
                    }
#pragma unroll
                    for (int u = 0; u < 4; u++) {
                        int k = jj + 4 * u;
                        float pw = k < nk ? s.scores[k] : 0.f;
                        acc.x += pw * vv[u].x;
                        acc.y += pw * vv[u].y;
                        acc.z += pw * vv[u].z;
                        acc.w += pw * vv[u].w;
                    }
                }
                reinterpret_cast<float4*>(scratch + g * HD)[c] = acc;
            }
#endif
            __syncthreads();
            if (tid < HD)
                s.psend[4 + tid] = ((scratch[tid] + scratch[HD + tid]) + scratch[2 * HD + tid]) + scratch[3 * HD + tid];
            __syncthreads();
            if (tid < 65 * 4) {
                int to = tid / 65, i = tid % 65;
                st_async16(&s.part_in[qt][4 * i], reinterpret_cast<const uint4*>(s.psend)[i], &bx[1], h * 4 + to);
            }
        }
        // the next layer's keys of this quarter, into L2 while this layer finishes
        if (more)
            for (int t = tid; t < nk * 16; t += THREADS) {
                int jj = t >> 4, part = t & 15;
                const float* base = (part < 8 ? kc : vc) + ((size_t)(l + 1) * MAXPOS + j0 + jj) * HD + (part & 7) * 32;
                asm volatile("prefetch.global.L2 [%0];" ::"l"(base));
            }
        receive(&bx[1], 4 * 260 * 4, par);
        MARK(2);
        // ---- 3: the head's output (its four quarters combined), quantized; o partial to all
        {
            if (tid < HD) {
                float m = -INFINITY;
#pragma unroll
                for (int q = 0; q < 4; q++)
                    if (s.part_in[q][1] > 0.f) m = fmaxf(m, s.part_in[q][0]);
                float L = 0.f, a = 0.f;
#pragma unroll
                for (int q = 0; q < 4; q++) {
                    float w = s.part_in[q][1] > 0.f ? expf(s.part_in[q][0] - m) : 0.f;
                    L += w * s.part_in[q][1];
                    a += w * s.part_in[q][4 + tid];
                }
                s.kh[tid] = a / L;
            }
            __syncthreads();
            quant_fast<false>(s.kh, nullptr, HD, s.att_q, s.att_s, s);
            mbar_wait(bar_o, par);
            rows<T_Q4_K, HD / 64, 2>(slots + SA, RB_O, RO, 0, s.att_q, s.att_s, [&](int r, float v) { s.stage_()[r] = v; });
            __syncthreads();
            if (issuer) issue_copy(bar_u, slots + SA, region(l, GU), U_BYTES);
            for (int t = tid; t < (RO / 4) * CS; t += THREADS) {
                int to = t / (RO / 4), i = t % (RO / 4);
                st_async16(&s.opart_in[h][qt * RO + 4 * i], reinterpret_cast<const uint4*>(s.stage_())[i], &bx[2], to);
            }
            receive(&bx[2], NH * D * 4, par);
        }
        MARK(3);
        // ---- the post-attention norm and the residual; the feed-forward norm (both in slot G)
        mbar_wait(bar_g, par);
        {
            const float* wpa = reinterpret_cast<const float*>(slots + SG + G_ROWS);
            const float* wffn = wpa + D;
            float ss = 0.f;
            for (int i = tid; i < D; i += THREADS) {
                float o = o_sum(s, i);
                ss += o * o;
            }
            float inv2 = rsqrtf(block_sum(ss, s) / D + EPS);
            for (int i = tid; i < D; i += THREADS) s.xres[i] += o_sum(s, i) * inv2 * wpa[i];
            __syncthreads();
            inv = quant_fast<true>(s.xres, wffn, D, s.xq, s.xs, s);
        }
        // ---- 4: gate rows (slot G), then up rows (slot A), GELU, the activation quantized, to all
        rows<T_Q5, KBD, 4>(slots + SG, RB_Q50, RF, 0, s.xq, s.xs, [&](int r, float v) { s.stage_()[r] = inv * v; });
        __syncthreads();
        if (more && issuer) issue_copy(bar_g, slots + SG, region(l + 1, GG), G_BYTES);
        mbar_wait(bar_u, par);
        rows<T_Q5, KBD, 4>(slots + SA, RB_Q50, RF, 0, s.xq, s.xs,
                             [&](int r, float v) { s.stage_()[r] = gelu_tanh(s.stage_()[r]) * (inv * v); });
        __syncthreads();
        if (more && issuer) issue_copy(bar_a, slots + SA, region(l + 1, GA), A_BYTES);
        {
            signed char* aq = reinterpret_cast<signed char*>(s.psend + 160);
            Q8Blk* as = reinterpret_cast<Q8Blk*>(s.psend + 192);
            if (warp < RF / 32) q8_warp(s.stage_()[warp * 32 + lane], aq, as, warp);
            __syncthreads();
            if (tid < 10 * CS) {
                int to = tid / 10, i = tid % 10;
                uint4 v = reinterpret_cast<const uint4*>(s.psend + 160)[i];
                void* dst = i < 8 ? (void*)(s.act_q + rank * RF + 16 * i) : (void*)(s.act_s + rank * 4 + 2 * (i - 8));
                st_async16(dst, v, &bx[3], to);
            }
        }
        receive(&bx[3], F + KBF * 8, par);
        MARK(4);
        // ---- 5: down rows, to every block
        mbar_wait(bar_dn, par);
        rows<T_DOWN, F / 64, 8>(slots + SD, RB_DN, RDN, 0, s.act_q, s.act_s, [&](int r, float v) { s.stage_()[r] = v; });
        __syncthreads();
        float* dn_in = s.opart_in[0];
        if (tid < (RDN / 4) * CS) {
            int to = tid / (RDN / 4), i = tid % (RDN / 4);
            st_async16(dn_in + rank * RDN + 4 * i, reinterpret_cast<const uint4*>(s.stage_())[i], &bx[4], to);
        }
        receive(&bx[4], D * 4, par);
        MARK(5);
        // ---- the post-feed-forward norm and the residual; the next layer's attention norm
        {
            const float* wpf = reinterpret_cast<const float*>(slots + SD + DN_ROWS);
            const float* wan = wpf + D;
            float ss = 0.f;
            for (int i = tid; i < D; i += THREADS) ss += dn_in[i] * dn_in[i];
            float inv3 = rsqrtf(block_sum(ss, s) / D + EPS);
            for (int i = tid; i < D; i += THREADS) s.xres[i] += dn_in[i] * inv3 * wpf[i];
            __syncthreads();
            inv = quant_fast<true>(s.xres, wan, D, s.xq, s.xs, s);
            if (more && issuer) issue_copy(bar_dn, slots + SD, region(l + 1, GD), DN_BYTES);
        }
        if (rank == 0 && tid == 0) stamps[1 + l] = gtime();
    }
    cl.sync();  // no block leaves while others may still store into it
    if (rank == 0)
        for (int i = tid; i < D; i += THREADS) x_out[i] = s.xres[i];
#undef MARK
}

// ------------------------------------------------------------------ host model
// Weights dequantized by GGUF's definitions; activations quantized as the kernel does; sums in
// double. The kernel differs by float rounding (its dots are float fma chains).
static float h2f_host(uint16_t h) {
    __half hh;
    memcpy(&hh, &h, 2);
    return __half2float(hh);
}
static uint16_t f2h_host(float f) {
    __half hh = __float2half(f);
    uint16_t h;
    memcpy(&h, &hh, 2);
    return h;
}
// One block of type ty at b into out (32 or 256 values).
static void dequant_block(int ty, const uint8_t* b, float* out) {
    if (ty == T_Q8_0) {
        float d = h2f_host(b[0] | b[1] << 8);
        for (int i = 0; i < 32; i++) out[i] = d * (float)(int8_t)b[2 + i];
    } else if (ty == T_Q5_0) {
        float d = h2f_host(b[0] | b[1] << 8);
        uint32_t qh;
        memcpy(&qh, b + 2, 4);
        for (int j = 0; j < 16; j++) {
            int x0 = (b[6 + j] & 15) | (((qh >> j) & 1) << 4);
            int x1 = (b[6 + j] >> 4) | (((qh >> (j + 16)) & 1) << 4);
            out[j] = (float)(x0 - 16) * d;
            out[j + 16] = (float)(x1 - 16) * d;
        }
    } else if (ty == T_Q4_K) {
        float d = h2f_host(b[0] | b[1] << 8), dmin = h2f_host(b[2] | b[3] << 8);
        const uint8_t* sc = b + 4;
        const uint8_t* qs = b + 16;
        for (int j = 0; j < 8; j++) {
            int s, m;
            if (j < 4) {
                s = sc[j] & 63;
                m = sc[j + 4] & 63;
            } else {
                s = (sc[j + 4] & 15) | ((sc[j - 4] >> 6) << 4);
                m = (sc[j + 4] >> 4) | ((sc[j] >> 6) << 4);
            }
            for (int i = 0; i < 32; i++) {
                int q = j & 1 ? qs[32 * (j / 2) + i] >> 4 : qs[32 * (j / 2) + i] & 15;
                out[32 * j + i] = d * (float)s * (float)q - dmin * (float)m;
            }
        }
    } else if (ty == T_Q6_K) {
        const uint8_t* ql = b;
        const uint8_t* qh = b + 128;
        const int8_t* sc = (const int8_t*)(b + 192);
        float d = h2f_host(b[208] | b[209] << 8);
        for (int n = 0; n < 2; n++) {
            for (int l = 0; l < 32; l++) {
                int is = l / 16;
                int q1 = ((ql[l] & 15) | (((qh[l] >> 0) & 3) << 4)) - 32;
                int q2 = ((ql[l + 32] & 15) | (((qh[l] >> 2) & 3) << 4)) - 32;
                int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                out[128 * n + l] = d * sc[is] * q1;
                out[128 * n + l + 32] = d * sc[is + 2] * q2;
                out[128 * n + l + 64] = d * sc[is + 4] * q3;
                out[128 * n + l + 96] = d * sc[is + 6] * q4;
            }
            ql += 64;
            qh += 32;
            sc += 8;
        }
    }
}
static int block_values(int ty) { return ty == T_Q4_K || ty == T_Q6_K ? 256 : 32; }
static int block_bytes(int ty) { return ty == T_Q8_0 ? 34 : ty == T_Q5_0 ? 22 : ty == T_Q4_K ? 144 : 210; }

// A weight: rows of `cols` values of type ty, and their dequantized values.
struct Weight {
    int ty = 0, rows = 0, cols = 0;
    std::vector<uint8_t> q;
    std::vector<float> f;
    size_t row_bytes() const { return (size_t)cols / block_values(ty) * block_bytes(ty); }
};
static Weight make_weight(int ty, int rows, int cols, std::mt19937& rng) {
    Weight w;
    w.ty = ty;
    w.rows = rows;
    w.cols = cols;
    w.q.resize(w.row_bytes() * rows + 16);
    for (auto& b : w.q) b = (uint8_t)(rng() & 0xff);
    std::uniform_real_distribution<float> ud(0.5f, 1.5f);
    const int bb = block_bytes(ty), nb = (int)(w.row_bytes() * rows / bb);
    for (int k = 0; k < nb; k++) {
        uint8_t* b = &w.q[(size_t)k * bb];
        auto put = [&](int off, float v) {
            uint16_t hv = f2h_host(v);
            b[off] = hv & 0xff;
            b[off + 1] = hv >> 8;
        };
        if (ty == T_Q5_0) put(0, 0.01f * ud(rng));
        if (ty == T_Q8_0) put(0, 0.001f * ud(rng));
        if (ty == T_Q4_K) put(0, 0.0005f * ud(rng)), put(2, 0.0005f * ud(rng));
        if (ty == T_Q6_K) {
            for (int i = 0; i < 16; i++) b[192 + i] = (uint8_t)(1 + rng() % 31);
            put(208, 0.0005f * ud(rng));
        }
    }
    w.f.resize((size_t)rows * cols);
    const int bv = block_values(ty);
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols / bv; c++)
            dequant_block(ty, &w.q[r * w.row_bytes() + (size_t)c * bb], &w.f[(size_t)r * cols + c * bv]);
    return w;
}

struct Layer {
    std::vector<float> attn, post_attn, ffn, post_ffw, qn, kn;
    Weight wq, wk, wv, wo, wg, wu, wd;
};
struct Model {
    std::vector<Layer> layers;
    std::vector<float> out_norm;
};

struct Q8 {
    std::vector<signed char> q;
    std::vector<float> d;
};
static Q8 quantize_host(const float* v, int n) {
    Q8 r;
    r.q.resize(n);
    r.d.resize(n / 32);
    for (int b = 0; b < n / 32; b++) {
        float a = 0.f;
        for (int i = 0; i < 32; i++) a = std::max(a, fabsf(v[b * 32 + i]));
        float id = a > 0.f ? 127.f / a : 0.f;
        for (int i = 0; i < 32; i++) r.q[b * 32 + i] = (signed char)(int)rintf(v[b * 32 + i] * id);
        r.d[b] = a * (1.f / 127.f);
    }
    return r;
}
// columns [c0, c0 + x's length) of row r against x
static double dot_host(const Weight& w, int r, const Q8& x, int c0 = 0) {
    double acc = 0;
    for (size_t b = 0; b < x.d.size(); b++) {
        double s = 0;
        for (int i = 0; i < 32; i++) s += (double)w.f[(size_t)r * w.cols + c0 + b * 32 + i] * x.q[b * 32 + i];
        acc += s * x.d[b];
    }
    return acc;
}
static float gelu_host(float g) { return 0.5f * g * (1.f + tanhf(0.7978845608028654f * (g + 0.044715f * g * g * g))); }

static void host_layers(const Model& M, std::vector<float>& kc, std::vector<float>& vc, const float* rope, int pos,
                        std::vector<float>& x, int nl) {
    auto normq = [&](const std::vector<float>& w, float& inv) {
        std::vector<float> v(D);
        double ss = 0;
        for (int i = 0; i < D; i++) ss += (double)x[i] * x[i], v[i] = x[i] * w[i];
        inv = (float)(1.0 / sqrt(ss / D + EPS));
        return quantize_host(v.data(), D);
    };
    float inv;
    for (int l = 0; l < nl; l++) {
        const Layer& L = M.layers[l];
        Q8 xq = normq(L.attn, inv);
        std::vector<float> q(QD), k(KVD), v(KVD);
        for (int r = 0; r < QD; r++) q[r] = inv * (float)dot_host(L.wq, r, xq);
        for (int r = 0; r < KVD; r++) k[r] = inv * (float)dot_host(L.wk, r, xq), v[r] = inv * (float)dot_host(L.wv, r, xq);
        auto headnorm = [&](float* hv, const std::vector<float>& w) {
            double ss = 0;
            for (int i = 0; i < HD; i++) ss += (double)hv[i] * hv[i];
            float iv = (float)(1.0 / sqrt(ss / HD + EPS));
            for (int i = 0; i < HD; i++) hv[i] = hv[i] * iv * w[i];
            for (int i = 0; i < HD / 2; i++) {
                float a = hv[i], b = hv[i + HD / 2], c = rope[i], sn = rope[128 + i];
                hv[i] = a * c - b * sn;
                hv[i + HD / 2] = a * sn + b * c;
            }
        };
        headnorm(k.data(), L.kn);
        float* kcl = &kc[(size_t)l * MAXPOS * HD];
        float* vcl = &vc[(size_t)l * MAXPOS * HD];
        for (int i = 0; i < HD; i++) kcl[(size_t)pos * HD + i] = k[i], vcl[(size_t)pos * HD + i] = v[i];
        std::vector<double> opart(D, 0.0);
        for (int hh = 0; hh < NH; hh++) {
            float* qh = &q[hh * HD];
            headnorm(qh, L.qn);
            std::vector<double> sc(pos + 1);
            double mx = -1e300;
            for (int p = 0; p <= pos; p++) {
                double d = 0;
                for (int e = 0; e < HD; e++) d += (double)kcl[(size_t)p * HD + e] * qh[e];
                sc[p] = d / 16.0;
                mx = std::max(mx, sc[p]);
            }
            double sum = 0;
            for (int p = 0; p <= pos; p++) sum += sc[p] = exp(sc[p] - mx);
            std::vector<float> o(HD);
            for (int e = 0; e < HD; e++) {
                double a = 0;
                for (int p = 0; p <= pos; p++) a += sc[p] * vcl[(size_t)p * HD + e];
                o[e] = (float)(a / sum);
            }
            Q8 oq = quantize_host(o.data(), HD);
            for (int r = 0; r < D; r++) opart[r] += dot_host(L.wo, r, oq, hh * HD);
        }
        double ss = 0;
        for (int i = 0; i < D; i++) ss += opart[i] * opart[i];
        float i2 = (float)(1.0 / sqrt(ss / D + EPS));
        for (int i = 0; i < D; i++) x[i] += (float)opart[i] * i2 * L.post_attn[i];
        Q8 nq = normq(L.ffn, inv);
        std::vector<float> act(F);
        for (int j = 0; j < F; j++) {
            float g = inv * (float)dot_host(L.wg, j, nq), u = inv * (float)dot_host(L.wu, j, nq);
            act[j] = gelu_host(g) * u;
        }
        Q8 aq = quantize_host(act.data(), F);
        std::vector<double> dn(D);
        ss = 0;
        for (int r = 0; r < D; r++) dn[r] = dot_host(L.wd, r, aq), ss += dn[r] * dn[r];
        float i3 = (float)(1.0 / sqrt(ss / D + EPS));
        for (int i = 0; i < D; i++) x[i] += (float)dn[i] * i3 * L.post_ffw[i];
    }
}

// A Q5_0 block (22 bytes) as Q5P (24 bytes).
static void q5p_block(const uint8_t* b, uint8_t* o) {
    uint32_t qh, p = 0;
    memcpy(&qh, b + 2, 4);
    for (int i = 0; i < 4; i++)
        for (int bb = 0; bb < 4; bb++) {
            p |= ((qh >> (4 * i + bb)) & 1u) << (8 * bb + 4 + i);
            p |= ((qh >> (16 + 4 * i + bb)) & 1u) << (8 * bb + i);
        }
    o[0] = b[0];
    o[1] = b[1];
    o[2] = o[3] = 0;
    memcpy(o + 4, &p, 4);
    memcpy(o + 8, b + 6, 16);
}

// A Q6_K row of 8 super-blocks (GGUF's 210-byte blocks) as one group of the backend's planes:
// unit j = 4 sb + 2 n + h: plane A its ql[64n + 16h, + 16), B ql[64n + 32 + 16h, + 16), H
// qh[32n + 16h, + 16), S scales[8n + 2k + h] (k = 0..3), then the 8 d.
static void q6p_row(const uint8_t* g, uint8_t* o) {
    for (int sb = 0; sb < 8; sb++) {
        const uint8_t* b = g + 210 * sb;
        for (int n = 0; n < 2; n++)
            for (int h = 0; h < 2; h++) {
                int j = 4 * sb + 2 * n + h;
                memcpy(o + 16 * j, b + 64 * n + 16 * h, 16);
                memcpy(o + 512 + 16 * j, b + 64 * n + 32 + 16 * h, 16);
                memcpy(o + 1024 + 16 * j, b + 128 + 32 * n + 16 * h, 16);
                for (int k = 0; k < 4; k++) o[1536 + 4 * j + k] = b[192 + 8 * n + 2 * k + h];
            }
        memcpy(o + 1664 + 2 * sb, b + 208, 2);
    }
}

static std::vector<uint8_t> pack(const Model& M) {
    std::vector<uint8_t> out((size_t)LAYERS * CS * LAYER_BYTES, 0);
    auto rows = [](uint8_t* dst, const Weight& w, int r0, int n) {
        if (w.ty == T_Q6_K && T_DOWN == T_Q6P) {
            for (int r = 0; r < n; r++) q6p_row(&w.q[(size_t)(r0 + r) * w.row_bytes()], dst + (size_t)r * 1680);
            return;
        }
        if (w.ty == T_Q5_0 && T_Q5 == T_Q5X) {
            for (size_t k = 0; k < (size_t)n * w.row_bytes() / 22; k++) {
                uint8_t tmp[24];
                q5p_block(&w.q[(size_t)r0 * w.row_bytes() + 22 * k], tmp);
                memcpy(dst + 22 * k, &w.q[(size_t)r0 * w.row_bytes() + 22 * k], 22);
                memcpy(dst + 22 * k + 2, tmp + 4, 4);  // the permuted qh
            }
            return;
        }
        if (w.ty == T_Q5_0 && Q5_BLOCK == 24) {
            for (size_t k = 0; k < (size_t)n * w.row_bytes() / 22; k++)
                q5p_block(&w.q[(size_t)r0 * w.row_bytes() + 22 * k], dst + 24 * k);
            return;
        }
        memcpy(dst, &w.q[(size_t)r0 * w.row_bytes()], (size_t)n * w.row_bytes());
    };
    for (int l = 0; l < LAYERS; l++) {
        const Layer& L = M.layers[l];
        for (int b = 0; b < CS; b++) {
            uint8_t* base = &out[((size_t)l * CS + b) * LAYER_BYTES];
            int hh = b >> 2, q = b & 3;
            rows(base + GA, L.wq, b * RQ, RQ);
            rows(base + GA + RQ * RB_Q50, L.wk, b * RK, RK);
            rows(base + GA + (RQ + RK) * RB_Q50, L.wv, b * RV, RV);
            memcpy(base + GA + A_ROWS, L.qn.data(), HD * 4);
            memcpy(base + GA + A_ROWS + HD * 4, L.kn.data(), HD * 4);
            for (int r = 0; r < RO; r++)
                memcpy(base + GO + r * RB_O, &L.wo.q[(size_t)(q * RO + r) * L.wo.row_bytes() + hh * RB_O], RB_O);
            rows(base + GG, L.wg, b * RF, RF);
            memcpy(base + GG + G_ROWS, L.post_attn.data(), D * 4);
            memcpy(base + GG + G_ROWS + D * 4, L.ffn.data(), D * 4);
            rows(base + GU, L.wu, b * RF, RF);
            rows(base + GD, L.wd, b * RDN, RDN);
            memcpy(base + GD + DN_ROWS, L.post_ffw.data(), D * 4);
            const std::vector<float>& next = l + 1 < LAYERS ? M.layers[l + 1].attn : M.out_norm;
            memcpy(base + GD + DN_ROWS + D * 4, next.data(), D * 4);
        }
    }
    return out;
}

static double med(std::vector<double> v) {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

static void run(const Model& M, const std::vector<float>& kc0, const std::vector<float>& vc0,
                const std::vector<float>& x0, int pos) {
    const int NCOPY = 6;  // the weights in six copies, one a launch: none in L2 from the launch before
    std::vector<uint8_t> packed = pack(M);
    uint8_t* dw;
    CK(cudaMalloc(&dw, packed.size() * NCOPY));
    for (int c = 0; c < NCOPY; c++)
        CK(cudaMemcpy(dw + c * packed.size(), packed.data(), packed.size(), cudaMemcpyHostToDevice));
    float *dkc, *dvc, *drope, *dx, *dxo, *dattn0;
    unsigned long long *dst, *dmk;
    CK(cudaMalloc(&dkc, kc0.size() * 4));
    CK(cudaMalloc(&dvc, vc0.size() * 4));
    CK(cudaMalloc(&drope, 256 * 4));
    CK(cudaMalloc(&dx, D * 4));
    CK(cudaMalloc(&dxo, D * 4));
    CK(cudaMalloc(&dattn0, D * 4));
    CK(cudaMalloc(&dst, (1 + LAYERS) * 8));
    CK(cudaMalloc(&dmk, LAYERS * NMARK * 8));
    CK(cudaMemcpy(dx, x0.data(), D * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dattn0, M.layers[0].attn.data(), D * 4, cudaMemcpyHostToDevice));
    float rope[256];
    for (int i = 0; i < 128; i++) {
        double th = pos * pow(1000000.0, -2.0 * i / HD);
        rope[i] = (float)cos(th);
        rope[128 + i] = (float)sin(th);
    }
    CK(cudaMemcpy(drope, rope, sizeof rope, cudaMemcpyHostToDevice));
    auto kern = gemma_layers;
    CK(cudaFuncSetAttribute(kern, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
    CK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)SMEM));
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(CS);
    cfg.blockDim = dim3(THREADS);
    cfg.dynamicSmemBytes = SMEM;
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeClusterDimension;
    at[0].val.clusterDim.x = CS;
    at[0].val.clusterDim.y = 1;
    at[0].val.clusterDim.z = 1;
    cfg.attrs = at;
    cfg.numAttrs = 1;
    int maxc = 0;
    CK(cudaOccupancyMaxActiveClusters(&maxc, (void*)kern, &cfg));
    if (maxc < 1) {
        printf("cannot be resident (smem %zu)\n", SMEM);
        exit(1);
    }
    // correctness first: one layer, then all, against the host model
    auto check = [&](int nl) {
        CK(cudaMemcpy(dkc, kc0.data(), kc0.size() * 4, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(dvc, vc0.data(), vc0.size() * 4, cudaMemcpyHostToDevice));
        CK(cudaLaunchKernelEx(&cfg, kern, (const uint8_t*)dw, (const float*)dattn0, dkc, dvc, (const float*)drope, pos,
                              (const float*)dx, dxo, dst, dmk, nl));
        CK(cudaDeviceSynchronize());
        std::vector<float> kc = kc0, vc = vc0, x = x0, xo(D);
        host_layers(M, kc, vc, rope, pos, x, nl);
        CK(cudaMemcpy(xo.data(), dxo, D * 4, cudaMemcpyDeviceToHost));
        double e = 0, mxa = 0;
        for (int i = 0; i < D; i++) {
            e = std::max(e, (double)fabsf(xo[i] - x[i]));
            mxa = std::max(mxa, (double)fabsf(x[i]));
        }
        std::vector<float> krow(HD);
        size_t at = ((size_t)(nl - 1) * MAXPOS + pos) * HD;
        CK(cudaMemcpy(krow.data(), dkc + at, HD * 4, cudaMemcpyDeviceToHost));
        double ek = 0, mk = 0;
        for (int i = 0; i < HD; i++) {
            ek = std::max(ek, (double)fabsf(krow[i] - kc[at + i]));
            mk = std::max(mk, (double)fabsf(kc[at + i]));
        }
        return std::make_pair(e / mxa, ek / mk);
    };
    auto c1 = check(1);
    auto cn = check(LAYERS);
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    std::vector<double> span, wall, per_layer, mk[NMARK];
    for (int r = 0; r < 31; r++) {
        const uint8_t* w = dw + (r % NCOPY) * packed.size();
        CK(cudaEventRecord(a));
        CK(cudaLaunchKernelEx(&cfg, kern, w, (const float*)dattn0, dkc, dvc, (const float*)drope, pos, (const float*)dx,
                              dxo, dst, dmk, LAYERS));
        CK(cudaEventRecord(b));
        CK(cudaEventSynchronize(b));
        if (r == 0) continue;
        float ms;
        CK(cudaEventElapsedTime(&ms, a, b));
        unsigned long long st[1 + LAYERS], m[LAYERS * NMARK];
        CK(cudaMemcpy(st, dst, sizeof st, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(m, dmk, sizeof m, cudaMemcpyDeviceToHost));
        wall.push_back(ms * 1000);
        span.push_back((st[LAYERS] - st[0]) / 1000.0);
        for (int l = 1; l < LAYERS; l++) {
            per_layer.push_back((st[l + 1] - st[l]) / 1000.0);
            for (int i = 1; i < 6; i++) mk[i].push_back((m[l * NMARK + i] - m[l * NMARK + i - 1]) / 1000.0);
            mk[6].push_back((st[l + 1] - m[l * NMARK + 5]) / 1000.0);
            mk[0].push_back((m[l * NMARK] - st[l]) / 1000.0);
        }
    }
    printf("pos %4d: 18 layers %.1f us (launch to end %.1f), %.2f us a layer (median; min %.2f); "
           "host model: one layer %.1e, 18 layers %.1e of max |x|, the cache row %.1e: %s\n",
           pos, med(span), med(wall), med(per_layer), *std::min_element(per_layer.begin(), per_layer.end()), c1.first,
           cn.first, cn.second, c1.first < 1e-3 && c1.second < 1e-4 ? "OK" : "MISMATCH");
    printf("    block 0 (us): q/k/v + exchange %.2f, norms + attention + partials %.2f, combine + o %.2f, "
           "norms + gate/up + exchange %.2f, down + exchange %.2f, norms %.2f (layer start %.2f)\n",
           med(mk[1]), med(mk[2]), med(mk[3]), med(mk[4]), med(mk[5]), med(mk[6]), med(mk[0]));
    CK(cudaFree(dw));
    CK(cudaFree(dkc));
    CK(cudaFree(dvc));
    CK(cudaFree(drope));
    CK(cudaFree(dx));
    CK(cudaFree(dxo));
    CK(cudaFree(dattn0));
    CK(cudaFree(dst));
    CK(cudaFree(dmk));
}
}  // namespace lab

int main() {
    using namespace lab;
    std::mt19937 rng(12345);
    Model M;
    std::normal_distribution<float> nd(0.f, 1.f);
    auto norms = [&](std::vector<float>& v, size_t n) {
        v.resize(n);
        for (auto& x : v) x = 1.f + 0.1f * nd(rng);
    };
    M.layers.resize(LAYERS);
    for (auto& L : M.layers) {
        norms(L.attn, D);
        norms(L.post_attn, D);
        norms(L.ffn, D);
        norms(L.post_ffw, D);
        norms(L.qn, HD);
        norms(L.kn, HD);
        L.wq = make_weight(T_Q5_0, QD, D, rng);
        L.wk = make_weight(T_Q5_0, KVD, D, rng);
        L.wv = make_weight(T_Q8_0, KVD, D, rng);
        L.wo = make_weight(T_Q4_K, D, QD, rng);
        L.wg = make_weight(T_Q5_0, F, D, rng);
        L.wu = make_weight(T_Q5_0, F, D, rng);
        L.wd = make_weight(T_DOWN == T_Q6P ? T_Q6_K : T_DOWN, D, F, rng);
    }
    norms(M.out_norm, D);
    std::vector<float> kc((size_t)LAYERS * MAXPOS * HD), vc(kc.size()), x0(D);
    for (auto& v : kc) v = nd(rng);
    for (auto& v : vc) v = nd(rng);
    for (auto& v : x0) v = nd(rng);
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    double wbytes = (double)(A_ROWS + O_BYTES + G_ROWS + U_BYTES + DN_ROWS) * CS;
    printf("device: %s, %d SMs; a cluster of %d blocks of %d threads, %zu bytes of shared memory a block; "
           "%.2f MB of weights a layer (%s q/k/gate/up, Q8_0 v, Q4_K o, %s down), %.2f MB with the norms' copies; "
           "units unrolled: %d\n",
           prop.name, prop.multiProcessorCount, CS, THREADS, SMEM, wbytes / 1e6, Q5_BLOCK == 24 ? "Q5_0 repacked (Q5P)" : T_Q5 == T_Q5X ? "Q5_0, qh permuted (Q5X)" : "Q5_0", T_DOWN == T_Q6_K ? "Q6_K" : T_DOWN == T_Q6P ? "Q6_K in planes" : "Q4_K",
           (double)LAYER_BYTES * CS / 1e6, LAB_UNROLL);
    for (int pos : {64, 127, 511}) run(M, kc, vc, x0, pos);
    return 0;
}
