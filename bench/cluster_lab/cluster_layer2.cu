// SmolLM2-135M's decode step as one 16-block cluster, second version (cluster_layer.cu was the
// first: 19-20 us a layer, its mat-vecs issue-bound on 16 SMs and five exchanges a layer).
//
// Changes:
//  - mat-vecs on q8 activations with dp4a (Q4_1 x q8: d*dx*sum(q*xq) + m*dx*sum(xq)), eight
//    lanes a row, a lane a whole weight block; every block quantizes the vector it needs after
//    the exchange (one warp a 32-value block);
//  - four exchanges a layer: each attention block (rank < 9, a query head) computes its own q
//    head and its group's k and v rows itself, so q/k/v need no exchange of their own;
//  - EX 0: an exchange is float4 stores into every block's shared memory and the cluster
//    barrier; EX 1: st.async stores that complete_tx on the receiver's mbarrier (one a buffer),
//    the receiver waiting on its own barrier only (no cluster barrier in the layer at all);
//  - the attention blocks ask L2 for the layer's K/V cache rows a layer ahead.
// Checked against a host model of the same arithmetic (q8 activations rounded the same way).
//  - FAST (v3): the norm folded into the quantizer (quant_fast), redux.sync reductions, and the
//    lanes a row chosen per projection (LQ, LO, LG, LD);
//  - FAST 2 (v4, pos < 128): v3 with the earlier keys' K/V rows loaded into registers before
//    the q/k/v phase (slower: they spill, and the spill stores wait for the loads).
// nvcc -gencode=arch=compute_90a,code=sm_90a -O3 --fmad=false -std=c++17 -o /tmp/cluster_layer2 cluster_layer2.cu
// (-DLAB_THREADS=1024 for blocks of 1024 threads.) What it showed (session 34, H200, pos 64):
// v2 16.35 us a layer with stores and the cluster barrier, 14.62 with st.async; v3 11.46 us,
// against 15.3 us for the production step's six kernels (BENCHMARKS.md, session 34).
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

#define CK(x)                                                                       \
    do {                                                                            \
        cudaError_t e_ = (x);                                                       \
        if (e_ != cudaSuccess) {                                                    \
            fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x,               \
                    cudaGetErrorString(e_));                                        \
            exit(1);                                                                \
        }                                                                           \
    } while (0)

constexpr int D = 576, NH = 9, NKV = 3, HD = 64, F = 1536, LAYERS = 30;
constexpr int GQ = NH / NKV;
constexpr int KBD = D / 32, KBF = F / 32;
constexpr int QB = 20;  // Q4_1 block: f16 d, f16 m, 16 bytes of nibbles
constexpr int MAXPOS = 1024;
#ifndef LAB_THREADS
#define LAB_THREADS 512
#endif
constexpr int THREADS = LAB_THREADS, WARPS = THREADS / 32;
constexpr int CS = 16;
constexpr int NMARK = 20;
constexpr int RA = 3 * HD;  // an attention block's rows: its q head, its group's k and v
constexpr int RO = D / CS, RF = F / CS, RD = D / CS;
constexpr int NORMS = 2 * D * 4;
constexpr int S0 = NORMS + RA * KBD * QB, S1 = RO * KBD * QB, S2 = 2 * RF * KBD * QB, S3 = RD * KBF * QB;
constexpr int OFF1 = S0, OFF2 = S0 + S1, OFF3 = S0 + S1 + S2, LAYER_BYTES = S0 + S1 + S2 + S3;
static_assert(S0 % 16 == 0 && S1 % 16 == 0 && S2 % 16 == 0 && S3 % 16 == 0 && NORMS % 16 == 0, "bulk sizes");
static_assert(RO % 4 == 0 && RF % 4 == 0 && RD % 4 == 0, "float4 exchanges");

struct Vecs {
    // the residual after the down projection (xe: read by the attention norm) and after the
    // output projection (xc: read by the feed-forward norm); two buffers, so that no address is
    // written twice in a layer
    float xe[D], xc[D], xn[D], attn[D], act[F];
    float qkv[RA];
    signed char xq[F];     // the quantized vector a mat-vec reads (up to F values)
    float2 xs[KBF];        // its blocks' (dx, dx * sum(xq))
    float ssp[KBF];        // FAST: its blocks' sums of squares (the norm's, before scaling)
    float scores[MAXPOS];
    float part[32][HD];
    float qr[HD], kr[HD];
    float stage[256];
    float red[WARPS];
    float bcast[2];
};

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
__device__ __forceinline__ void mbar_wait(unsigned bar, unsigned parity) {
    unsigned done = 0;
    while (!done)
        asm volatile(
            "{ .reg .pred p; mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
            : "=r"(done)
            : "r"(bar), "r"(parity)
            : "memory");
}
__device__ __forceinline__ void mbar_expect(unsigned bar, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}

// One warp quantizes 32 values per pass: blocks b = warp, warp + WARPS, ... of v (n values).
__device__ __forceinline__ void quantize(const float* v, int n, Vecs& s) {
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    for (int b = warp; b < n / 32; b += WARPS) {
        float x = v[b * 32 + lane];
        float a = fabsf(x);
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) a = fmaxf(a, __shfl_xor_sync(0xffffffffu, a, o));
        float dx = a / 127.f;
        float id = dx > 0.f ? 1.f / dx : 0.f;
        int q = (int)rintf(x * id);
        int sq = q;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) sq += __shfl_xor_sync(0xffffffffu, sq, o);
        s.xq[b * 32 + lane] = (signed char)q;
        if (lane == 0) s.xs[b] = make_float2(dx, dx * (float)sq);
    }
    __syncthreads();
}

// Eight lanes a row (octet = lane / 8), a lane a weight block (b = lane % 8, +8, ...).
__device__ __forceinline__ float dot_q41_q8(const uint8_t* wrow, const Vecs& s, int KB) {
    int o = threadIdx.x & 7;
    float acc = 0.f;
    for (int b = o; b < KB; b += 8) {
        const uint8_t* blk = wrow + b * QB;
        __half2 dm = *reinterpret_cast<const __half2*>(blk);
        const uint32_t* qw = reinterpret_cast<const uint32_t*>(blk + 4);
        const int4* xw = reinterpret_cast<const int4*>(s.xq + b * 32);
        int4 xl = xw[0], xh = xw[1];
        uint32_t q0 = qw[0], q1 = qw[1], q2 = qw[2], q3 = qw[3];
        int i = 0;
        i = __dp4a((int)(q0 & 0x0F0F0F0Fu), xl.x, i);
        i = __dp4a((int)(q1 & 0x0F0F0F0Fu), xl.y, i);
        i = __dp4a((int)(q2 & 0x0F0F0F0Fu), xl.z, i);
        i = __dp4a((int)(q3 & 0x0F0F0F0Fu), xl.w, i);
        i = __dp4a((int)((q0 >> 4) & 0x0F0F0F0Fu), xh.x, i);
        i = __dp4a((int)((q1 >> 4) & 0x0F0F0F0Fu), xh.y, i);
        i = __dp4a((int)((q2 >> 4) & 0x0F0F0F0Fu), xh.z, i);
        i = __dp4a((int)((q3 >> 4) & 0x0F0F0F0Fu), xh.w, i);
        float2 xs = s.xs[b];
        acc += __low2float(dm) * xs.x * (float)i + __high2float(dm) * xs.y;
    }
    acc += __shfl_xor_sync(0xffffffffu, acc, 4);
    acc += __shfl_xor_sync(0xffffffffu, acc, 2);
    acc += __shfl_xor_sync(0xffffffffu, acc, 1);
    return acc;
}

// FAST (third version): the norm folded into the quantizer. A block of v = x * w quantizes to
// the same integers as a block of x * inv * w (inv is a common positive factor), so the
// quantizer runs on x * w with redux.sync reductions, collects x's sums of squares a block, and
// a row's dot is scaled by inv at the end. Returns inv (1 without a norm).
template <bool NORM>
__device__ __forceinline__ float quant_fast(const float* x, const float* w, int n, Vecs& s) {
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    for (int b = warp; b < n / 32; b += WARPS) {
        float xv = x[b * 32 + lane];
        float v = NORM ? xv * w[b * 32 + lane] : xv;
        float a = __int_as_float(__reduce_max_sync(0xffffffffu, __float_as_int(fabsf(v))));
        float dx = a * (1.f / 127.f);
        float id = a > 0.f ? 127.f / a : 0.f;
        int q = (int)rintf(v * id);
        int sq = __reduce_add_sync(0xffffffffu, q);
        s.xq[b * 32 + lane] = (signed char)q;
        if (NORM) {
            float ss = xv * xv;
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
            if (lane == 0) s.ssp[b] = ss;
        }
        if (lane == 0) s.xs[b] = make_float2(dx, dx * (float)sq);
    }
    __syncthreads();
    if (!NORM) return 1.f;
    // every warp sums the blocks' partials itself (no second block barrier)
    float tot = 0.f;
    for (int b = lane; b < n / 32; b += 32) tot += s.ssp[b];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) tot += __shfl_xor_sync(0xffffffffu, tot, o);
    return rsqrtf(tot / n + 1e-5f);
}

// LPR lanes a row, a lane weight blocks o, o + LPR, ... (KB known at compile time, unrolled so
// a lane's loads issue together).
template <int KB, int LPR>
__device__ __forceinline__ float dot_fast(const uint8_t* wrow, const Vecs& s) {
    int o = threadIdx.x & (LPR - 1);
    float acc = 0.f;
#pragma unroll
    for (int b0 = 0; b0 < KB; b0 += LPR) {
        int b = b0 + o;
        if (b < KB) {
            const uint8_t* blk = wrow + b * QB;
            __half2 dm = *reinterpret_cast<const __half2*>(blk);
            const uint32_t* qw = reinterpret_cast<const uint32_t*>(blk + 4);
            const int4* xw = reinterpret_cast<const int4*>(s.xq + b * 32);
            int4 xl = xw[0], xh = xw[1];
            uint32_t q0 = qw[0], q1 = qw[1], q2 = qw[2], q3 = qw[3];
            int i = 0;
            i = __dp4a((int)(q0 & 0x0F0F0F0Fu), xl.x, i);
            i = __dp4a((int)(q1 & 0x0F0F0F0Fu), xl.y, i);
            i = __dp4a((int)(q2 & 0x0F0F0F0Fu), xl.z, i);
            i = __dp4a((int)(q3 & 0x0F0F0F0Fu), xl.w, i);
            i = __dp4a((int)((q0 >> 4) & 0x0F0F0F0Fu), xh.x, i);
            i = __dp4a((int)((q1 >> 4) & 0x0F0F0F0Fu), xh.y, i);
            i = __dp4a((int)((q2 >> 4) & 0x0F0F0F0Fu), xh.z, i);
            i = __dp4a((int)((q3 >> 4) & 0x0F0F0F0Fu), xh.w, i);
            float2 xs = s.xs[b];
            acc += __low2float(dm) * xs.x * (float)i + __high2float(dm) * xs.y;
        }
    }
#pragma unroll
    for (int m = LPR / 2; m > 0; m >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, m);
    return acc;
}

template <int KB, int FAST, int LPR>
__device__ __forceinline__ float row_dot(const uint8_t* wrow, const Vecs& s) {
    if constexpr (FAST) return dot_fast<KB, LPR>(wrow, s);
    else return dot_q41_q8(wrow, s, KB);
}

__device__ __forceinline__ float block_reduce(float v, bool is_max, Vecs& s) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        float t = __shfl_xor_sync(0xffffffffu, v, o);
        v = is_max ? fmaxf(v, t) : v + t;
    }
    int w = threadIdx.x >> 5, l = threadIdx.x & 31;
    if (l == 0) s.red[w] = v;
    __syncthreads();
    if (w == 0) {
        float r = l < WARPS ? s.red[l] : (is_max ? -INFINITY : 0.f);
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            float t = __shfl_xor_sync(0xffffffffu, r, o);
            r = is_max ? fmaxf(r, t) : r + t;
        }
        if (l == 0) s.bcast[0] = r;
    }
    __syncthreads();
    return s.bcast[0];
}

__device__ __forceinline__ void rms_norm(Vecs& s, const float* x, const float* w) {
    float ss = 0.f;
    for (int i = threadIdx.x; i < D; i += THREADS) ss += x[i] * x[i];
    float tot = block_reduce(ss, false, s);
    float inv = rsqrtf(tot / D + 1e-5f);
    for (int i = threadIdx.x; i < D; i += THREADS) s.xn[i] = x[i] * inv * w[i];
    __syncthreads();
}

// The block's R staged values (s.stage) into every block's dst[base..base+R).
// EX 0: stores, then the cluster barrier. EX 1: st.async on the receivers' barrier `bar`.
template <int EX>
__device__ __forceinline__ void push_all(cg::cluster_group& cl, Vecs& s, float* dst, int base, int R,
                                         unsigned long long* bar) {
    __syncthreads();
    int q = R / 4;
    for (int t = threadIdx.x; t < q * CS; t += THREADS) {
        int to = t / q, i = t % q;
        float4 v = reinterpret_cast<const float4*>(s.stage)[i];
        if (EX == 0) {
            reinterpret_cast<float4*>(cl.map_shared_rank(dst + base, to))[i] = v;
        } else {
            unsigned raddr = mapa(smem_addr(dst + base + 4 * i), to);
            unsigned rbar = mapa(smem_addr(bar), to);
            asm volatile(
                "st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.f32 [%0], {%1, %2, %3, %4}, [%5];" ::"r"(
                    raddr),
                "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w), "r"(rbar)
                : "memory");
        }
    }
}

// EX 0: the cluster barrier; EX 1: this block's barrier for `bytes` (the arrival of thread 0).
template <int EX>
__device__ __forceinline__ void receive(cg::cluster_group& cl, unsigned long long* bar, unsigned bytes, int layer) {
    if (EX == 0) {
        cl.sync();
    } else {
        if (threadIdx.x == 0) mbar_expect(smem_addr(bar), bytes);
        mbar_wait(smem_addr(bar), layer & 1);
    }
}

__device__ __forceinline__ void issue_copy(unsigned long long* bar, uint8_t* dst, const uint8_t* src, int bytes) {
    unsigned b = smem_addr(bar);
    mbar_expect(b, bytes);
    constexpr int CHUNK = 16384;
    for (int o = 0; o < bytes; o += CHUNK) {
        int n = bytes - o < CHUNK ? bytes - o : CHUNK;
        asm volatile(
            "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                smem_addr(dst + o)),
            "l"(src + o), "r"(n), "r"(b)
            : "memory");
    }
}

// weights: [layer][block][LAYER_BYTES]; kc/vc: [layer][kv head][MAXPOS][HD]; rope: cos[32], sin[32]
template <int EX, int FAST, int LQ, int LO, int LG, int LD>
__global__ void __launch_bounds__(THREADS, 1)
    cluster_step2(const uint8_t* __restrict__ weights, float* kc, float* vc, const float* rope, int pos,
                  const float* x_in, float* x_out, unsigned long long* stamps, unsigned long long* marks, int nl) {
    extern __shared__ __align__(128) uint8_t smem[];
    uint8_t* slots = smem;
    Vecs& s = *reinterpret_cast<Vecs*>(smem + LAYER_BYTES);
    // block 0's progress inside a layer (thread 0, after the block barrier that ends each step)
#define MARK(i) \
    if (cl.block_rank() == 0 && threadIdx.x == 0) marks[l * NMARK + (i)] = gtime();
    // 0-3: weight slots; 4: attn, 5: x after o, 6: act, 7: x after down
    __shared__ __align__(8) unsigned long long bars[8];
    cg::cluster_group cl = cg::this_cluster();
    const int rank = cl.block_rank();
    const bool attn_block = rank < NH;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int h = rank, g = rank / GQ;
    // lanes a row, per projection (q/k/v, o, gate/up, down); a warp takes 32 / L rows at once
    static_assert(FAST || (LQ == 8 && LO == 8 && LG == 8 && LD == 8), "the second version's dot is eight lanes a row");
    auto seg = [&](int layer, int off) { return weights + ((size_t)layer * CS + rank) * LAYER_BYTES + off; };
    auto issue_layer_seg = [&](int layer, int p) {
        if (threadIdx.x != 0) return;
        if (p == 0) issue_copy(&bars[0], slots, seg(layer, 0), attn_block ? S0 : NORMS);
        if (p == 1) issue_copy(&bars[1], slots + OFF1, seg(layer, OFF1), S1);
        if (p == 2) issue_copy(&bars[2], slots + OFF2, seg(layer, OFF2), S2);
        if (p == 3) issue_copy(&bars[3], slots + OFF3, seg(layer, OFF3), S3);
    };
    auto prefetch_kv = [&](int layer) {
        if (!attn_block) return;
        const float* kcl = kc + ((size_t)layer * NKV + g) * MAXPOS * HD;
        const float* vcl = vc + ((size_t)layer * NKV + g) * MAXPOS * HD;
        for (int p = threadIdx.x; p < pos; p += THREADS) {
            asm volatile("prefetch.global.L2 [%0];" ::"l"(kcl + (size_t)p * HD));
            asm volatile("prefetch.global.L2 [%0];" ::"l"(kcl + (size_t)p * HD + 32));
            asm volatile("prefetch.global.L2 [%0];" ::"l"(vcl + (size_t)p * HD));
            asm volatile("prefetch.global.L2 [%0];" ::"l"(vcl + (size_t)p * HD + 32));
        }
    };

    if (threadIdx.x == 0) {
        for (int p = 0; p < 8; p++) asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_addr(&bars[p])));
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    for (int p = 0; p < 4; p++) issue_layer_seg(0, p);
    prefetch_kv(0);
    for (int i = threadIdx.x; i < D; i += THREADS) s.xe[i] = x_in[i];
    cl.sync();  // every block's barriers are initialized before anyone stores into them
    if (rank == 0 && threadIdx.x == 0) stamps[0] = gtime();

    for (int l = 0; l < nl; l++) {
        const bool more = l + 1 < nl;
        const unsigned par = l & 1;
        // ---- AB: (attention blocks) norm, own q head and group k/v, rope, attention
        MARK(0);
        mbar_wait(smem_addr(&bars[0]), par);
        MARK(1);
        const float* attn_norm = reinterpret_cast<const float*>(slots);
        const float* ffn_norm = attn_norm + D;
        if (attn_block) {
            const uint8_t* wa = slots + NORMS;
            // FAST 2: the cache rows of earlier keys (they do not depend on this step) loaded
            // into registers now, under the q/k/v phase: a key's 64 values on two threads, and
            // each PV thread's V float4s (pos < 128)
            float4 kpre[8], vpre[4];
            const int kp2 = threadIdx.x >> 1, kh2 = threadIdx.x & 1;
            if constexpr (FAST == 2) {
                const float* kcl0 = kc + ((size_t)l * NKV + g) * MAXPOS * HD;
                const float* vcl0 = vc + ((size_t)l * NKV + g) * MAXPOS * HD;
                if (kp2 < pos)
#pragma unroll
                    for (int e = 0; e < 8; e++)
                        kpre[e] = __ldcg(reinterpret_cast<const float4*>(kcl0 + (size_t)kp2 * HD + kh2 * 32) + e);
                const int c = threadIdx.x & 15, kg = threadIdx.x >> 4;
#pragma unroll
                for (int u = 0; u < 4; u++) {
                    int p = kg + 32 * u;
                    if (p < pos) vpre[u] = __ldcg(reinterpret_cast<const float4*>(vcl0 + (size_t)p * HD) + c);
                }
            }
            float inv = 1.f;
            if constexpr (FAST) {
                MARK(2);
                inv = quant_fast<true>(s.xe, attn_norm, D, s);
            } else {
                rms_norm(s, s.xe, attn_norm);
                MARK(2);
                quantize(s.xn, D, s);
            }
            MARK(3);
            for (int r0 = warp * (32 / LQ); r0 < RA; r0 += WARPS * (32 / LQ)) {
                int r = r0 + lane / LQ, rr = r < RA ? r : RA - 1;
                float v = inv * row_dot<KBD, FAST, LQ>(wa + rr * KBD * QB, s);
                if (lane % LQ == 0 && r < RA) s.qkv[r] = v;
            }
            __syncthreads();
            MARK(4);
            float* kcl = kc + ((size_t)l * NKV + g) * MAXPOS * HD;
            float* vcl = vc + ((size_t)l * NKV + g) * MAXPOS * HD;
            const float* q = s.qkv;
            const float* k = s.qkv + HD;
            const float* v = s.qkv + 2 * HD;
            if (threadIdx.x < 32) {
                int i = threadIdx.x;
                float c = rope[i], sn = rope[32 + i];
                s.qr[2 * i] = q[2 * i] * c - q[2 * i + 1] * sn;
                s.qr[2 * i + 1] = q[2 * i] * sn + q[2 * i + 1] * c;
            } else if (threadIdx.x < 64) {
                int i = threadIdx.x - 32;
                float c = rope[i], sn = rope[32 + i];
                s.kr[2 * i] = k[2 * i] * c - k[2 * i + 1] * sn;
                s.kr[2 * i + 1] = k[2 * i] * sn + k[2 * i + 1] * c;
            }
            __syncthreads();
            if (h % GQ == 0 && threadIdx.x < HD) {
                kcl[(size_t)pos * HD + threadIdx.x] = s.kr[threadIdx.x];
                vcl[(size_t)pos * HD + threadIdx.x] = v[threadIdx.x];
            }
            if constexpr (FAST == 2) {
                float d = 0.f;
                if (kp2 < pos)
#pragma unroll
                    for (int e = 0; e < 8; e++) {
                        const float* qq = s.qr + kh2 * 32 + 4 * e;
                        d += kpre[e].x * qq[0] + kpre[e].y * qq[1] + kpre[e].z * qq[2] + kpre[e].w * qq[3];
                    }
                d += __shfl_xor_sync(0xffffffffu, d, 1);
                if (kh2 == 0 && kp2 < pos) s.scores[kp2] = d * 0.125f;
                if (warp == WARPS - 1) {  // this step's own key
                    float e2 = s.kr[2 * lane] * s.qr[2 * lane] + s.kr[2 * lane + 1] * s.qr[2 * lane + 1];
#pragma unroll
                    for (int o = 16; o > 0; o >>= 1) e2 += __shfl_xor_sync(0xffffffffu, e2, o);
                    if (lane == 0) s.scores[pos] = e2 * 0.125f;
                }
            } else
            for (int p = threadIdx.x; p <= pos; p += THREADS) {
                float d = 0.f;
                if (p == pos) {
#pragma unroll
                    for (int e = 0; e < HD; e++) d += s.kr[e] * s.qr[e];
                } else {
                    const float4* kp = reinterpret_cast<const float4*>(kcl + (size_t)p * HD);
                    float4 kk[HD / 4];
#pragma unroll
                    for (int e = 0; e < HD / 4; e++) kk[e] = __ldcg(kp + e);
#pragma unroll
                    for (int e = 0; e < HD / 4; e++)
                        d += kk[e].x * s.qr[4 * e] + kk[e].y * s.qr[4 * e + 1] + kk[e].z * s.qr[4 * e + 2] +
                             kk[e].w * s.qr[4 * e + 3];
                }
                s.scores[p] = d * 0.125f;
            }
            __syncthreads();
            MARK(5);
            float mx = -INFINITY;
            for (int p = threadIdx.x; p <= pos; p += THREADS) mx = fmaxf(mx, s.scores[p]);
            mx = block_reduce(mx, true, s);
            float sum = 0.f;
            for (int p = threadIdx.x; p <= pos; p += THREADS) {
                float e = expf(s.scores[p] - mx);
                s.scores[p] = e;
                sum += e;
            }
            sum = block_reduce(sum, false, s);
            MARK(6);
            if (FAST == 2 && threadIdx.x < 512) {
                const int c = threadIdx.x & 15, kg = threadIdx.x >> 4;
                float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
                for (int u = 0; u < 4; u++) {
                    int p = kg + 32 * u;
                    if (p < pos) {
                        float w = s.scores[p];
                        acc.x += w * vpre[u].x;
                        acc.y += w * vpre[u].y;
                        acc.z += w * vpre[u].z;
                        acc.w += w * vpre[u].w;
                    }
                }
                if (kg == (pos & 31)) {
                    float w = s.scores[pos];
                    float4 vv = reinterpret_cast<const float4*>(v)[c];
                    acc.x += w * vv.x;
                    acc.y += w * vv.y;
                    acc.z += w * vv.z;
                    acc.w += w * vv.w;
                }
                reinterpret_cast<float4*>(s.part[kg])[c] = acc;
            } else if (threadIdx.x < 512) {  // 32 key groups of 16 threads
                int c = threadIdx.x & 15, kg = threadIdx.x >> 4;
                float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
                int p = kg;
                for (; p + 96 < pos; p += 128) {
                    float4 vv[4];
#pragma unroll
                    for (int u = 0; u < 4; u++)
                        vv[u] = __ldcg(reinterpret_cast<const float4*>(vcl + (size_t)(p + 32 * u) * HD) + c);
#pragma unroll
                    for (int u = 0; u < 4; u++) {
                        float w = s.scores[p + 32 * u];
                        acc.x += w * vv[u].x;
                        acc.y += w * vv[u].y;
                        acc.z += w * vv[u].z;
                        acc.w += w * vv[u].w;
                    }
                }
                for (; p <= pos; p += 32) {
                    float4 vv = p == pos ? reinterpret_cast<const float4*>(v)[c]
                                         : __ldcg(reinterpret_cast<const float4*>(vcl + (size_t)p * HD) + c);
                    float w = s.scores[p];
                    acc.x += w * vv.x;
                    acc.y += w * vv.y;
                    acc.z += w * vv.z;
                    acc.w += w * vv.w;
                }
                reinterpret_cast<float4*>(s.part[kg])[c] = acc;
            }
            __syncthreads();
            if (threadIdx.x < HD) {
                float o = 0.f;
#pragma unroll
                for (int gi = 0; gi < 32; gi++) o += s.part[gi][threadIdx.x];
                s.stage[threadIdx.x] = o / sum;
            }
            MARK(7);
            push_all<EX>(cl, s, s.attn, h * HD, HD, &bars[4]);
            MARK(8);
        }
        if (more) prefetch_kv(l + 1);
        receive<EX>(cl, &bars[4], D * 4, l);
        if (rank == 0 && threadIdx.x == 0) stamps[1 + LAYERS + 4 * l] = gtime();

        // ---- C: o, residual
        mbar_wait(smem_addr(&bars[1]), par);
        if constexpr (FAST) quant_fast<false>(s.attn, nullptr, D, s);
        else quantize(s.attn, D, s);
        {
            const uint8_t* wo = slots + OFF1;
            for (int r0 = warp * (32 / LO); r0 < RO; r0 += WARPS * (32 / LO)) {
                int r = r0 + lane / LO, rr = r < RO ? r : RO - 1;
                float v = row_dot<KBD, FAST, LO>(wo + rr * KBD * QB, s);
                if (lane % LO == 0 && r < RO) s.stage[r] = s.xe[rank * RO + r] + v;
            }
            push_all<EX>(cl, s, s.xc, rank * RO, RO, &bars[5]);
        }
        receive<EX>(cl, &bars[5], D * 4, l);
        __syncthreads();
        if (more) issue_layer_seg(l + 1, 1);
        if (rank == 0 && threadIdx.x == 0) stamps[1 + LAYERS + 4 * l + 1] = gtime();

        // ---- D: norm, gate/up, SiLU
        MARK(10);
        mbar_wait(smem_addr(&bars[2]), par);
        MARK(11);
        float inv = 1.f;
        if constexpr (FAST) {
            MARK(12);
            inv = quant_fast<true>(s.xc, ffn_norm, D, s);
        } else {
            rms_norm(s, s.xc, ffn_norm);
            MARK(12);
            quantize(s.xn, D, s);
        }
        MARK(13);
        {
            const uint8_t* wg = slots + OFF2;
            const uint8_t* wu = wg + RF * KBD * QB;
            for (int r0 = warp * (32 / LG); r0 < RF; r0 += WARPS * (32 / LG)) {
                int r = r0 + lane / LG, rr = r < RF ? r : RF - 1;
                float gv = inv * row_dot<KBD, FAST, LG>(wg + rr * KBD * QB, s);
                float uv = inv * row_dot<KBD, FAST, LG>(wu + rr * KBD * QB, s);
                if (lane % LG == 0 && r < RF) s.stage[r] = gv / (1.f + expf(-gv)) * uv;
            }
            MARK(14);
            push_all<EX>(cl, s, s.act, rank * RF, RF, &bars[6]);
            MARK(15);
        }
        receive<EX>(cl, &bars[6], F * 4, l);
        MARK(16);
        __syncthreads();
        if (more) {
            issue_layer_seg(l + 1, 0);
            issue_layer_seg(l + 1, 2);
        }
        if (rank == 0 && threadIdx.x == 0) stamps[1 + LAYERS + 4 * l + 2] = gtime();

        // ---- E: down, residual
        mbar_wait(smem_addr(&bars[3]), par);
        if constexpr (FAST) quant_fast<false>(s.act, nullptr, F, s);
        else quantize(s.act, F, s);
        {
            const uint8_t* wd = slots + OFF3;
            for (int r0 = warp * (32 / LD); r0 < RD; r0 += WARPS * (32 / LD)) {
                int r = r0 + lane / LD, rr = r < RD ? r : RD - 1;
                float v = row_dot<KBF, FAST, LD>(wd + rr * KBF * QB, s);
                if (lane % LD == 0 && r < RD) s.stage[r] = s.xc[rank * RD + r] + v;
            }
            push_all<EX>(cl, s, s.xe, rank * RD, RD, &bars[7]);
        }
        receive<EX>(cl, &bars[7], D * 4, l);
        __syncthreads();
        if (more) issue_layer_seg(l + 1, 3);
        if (rank == 0 && threadIdx.x == 0) stamps[1 + l] = stamps[1 + LAYERS + 4 * l + 3] = gtime();
    }
    cl.sync();  // no block leaves while others may still store into it
    if (rank == 0)
        for (int i = threadIdx.x; i < D; i += THREADS) x_out[i] = s.xe[i];
}

// ------------------------------------------------------------------ host model
struct Model {
    std::vector<float> attn_norm, ffn_norm;    // [L][D]
    std::vector<uint8_t> wq, wk, wv, wo, wg, wu, wd;  // [L][rows][KB*QB]
};

static float h2f(uint16_t h) {
    __half hh;
    memcpy(&hh, &h, 2);
    return __half2float(hh);
}

// The device's arithmetic: x quantized to q8 a 32-value block, integer dots, float scales.
struct Q8 {
    std::vector<signed char> q;
    std::vector<float> dx, dxs;
};
static Q8 quantize_host(const float* v, int n, bool fast) {
    Q8 r;
    r.q.resize(n);
    r.dx.resize(n / 32);
    r.dxs.resize(n / 32);
    for (int b = 0; b < n / 32; b++) {
        float a = 0.f;
        for (int i = 0; i < 32; i++) a = std::max(a, fabsf(v[b * 32 + i]));
        float dx = fast ? a * (1.f / 127.f) : a / 127.f;
        float id = fast ? (a > 0.f ? 127.f / a : 0.f) : (dx > 0.f ? 1.f / dx : 0.f);
        int sq = 0;
        for (int i = 0; i < 32; i++) {
            int q = (int)rintf(v[b * 32 + i] * id);
            r.q[b * 32 + i] = (signed char)q;
            sq += q;
        }
        r.dx[b] = dx;
        r.dxs[b] = dx * (float)sq;
    }
    return r;
}
static float dot_row_host(const uint8_t* row, const Q8& x, int KB) {
    double acc = 0;
    for (int b = 0; b < KB; b++) {
        const uint8_t* blk = row + b * QB;
        uint16_t dh, mh;
        memcpy(&dh, blk, 2);
        memcpy(&mh, blk + 2, 2);
        int i = 0;
        for (int j = 0; j < 16; j++) {
            i += (blk[4 + j] & 15) * x.q[b * 32 + j];
            i += (blk[4 + j] >> 4) * x.q[b * 32 + 16 + j];
        }
        acc += (double)h2f(dh) * x.dx[b] * i + (double)h2f(mh) * x.dxs[b];
    }
    return (float)acc;
}

static void host_step(const Model& M, std::vector<float>& kc, std::vector<float>& vc, const float* rope, int pos,
                      std::vector<float>& x, int nl, bool fast) {
    const size_t rD = KBD * QB, rF = KBF * QB;
    std::vector<float> xn(D), attn(D), act(F);
    auto norm = [&](const float* w) {
        double ss = 0;
        for (int i = 0; i < D; i++) ss += (double)x[i] * x[i];
        float inv = 1.f / sqrtf((float)(ss / D) + 1e-5f);
        for (int i = 0; i < D; i++) xn[i] = x[i] * inv * w[i];
    };
    // FAST: quantize x * w, scale the dots by inv
    float inv = 1.f;
    auto normq = [&](const float* w) {
        if (!fast) {
            norm(w);
            inv = 1.f;
            return quantize_host(xn.data(), D, false);
        }
        std::vector<float> v(D);
        float tot = 0.f;
        for (int b = 0; b < D / 32; b++) {
            float ss = 0.f;
            for (int i = 0; i < 32; i++) ss += x[b * 32 + i] * x[b * 32 + i];
            tot += ss;
        }
        for (int i = 0; i < D; i++) v[i] = x[i] * w[i];
        inv = 1.f / sqrtf(tot / D + 1e-5f);
        return quantize_host(v.data(), D, true);
    };
    for (int l = 0; l < nl; l++) {
        Q8 xq = normq(&M.attn_norm[l * D]);
        for (int hh = 0; hh < NH; hh++) {
            int gg = hh / GQ;
            float q[HD], k[HD], v[HD], qr[HD], kr[HD];
            for (int r = 0; r < HD; r++) {
                q[r] = inv * dot_row_host(&M.wq[((size_t)l * NH * HD + hh * HD + r) * rD], xq, KBD);
                k[r] = inv * dot_row_host(&M.wk[((size_t)l * NKV * HD + gg * HD + r) * rD], xq, KBD);
                v[r] = inv * dot_row_host(&M.wv[((size_t)l * NKV * HD + gg * HD + r) * rD], xq, KBD);
            }
            for (int i = 0; i < 32; i++) {
                float c = rope[i], sn = rope[32 + i];
                qr[2 * i] = q[2 * i] * c - q[2 * i + 1] * sn;
                qr[2 * i + 1] = q[2 * i] * sn + q[2 * i + 1] * c;
                kr[2 * i] = k[2 * i] * c - k[2 * i + 1] * sn;
                kr[2 * i + 1] = k[2 * i] * sn + k[2 * i + 1] * c;
            }
            float* kcl = &kc[((size_t)l * NKV + gg) * MAXPOS * HD];
            float* vcl = &vc[((size_t)l * NKV + gg) * MAXPOS * HD];
            for (int d = 0; d < HD; d++) {
                kcl[(size_t)pos * HD + d] = kr[d];
                vcl[(size_t)pos * HD + d] = v[d];
            }
            std::vector<double> sc(pos + 1);
            double mx = -1e30;
            for (int p = 0; p <= pos; p++) {
                double d = 0;
                for (int e = 0; e < HD; e++) d += (double)kcl[(size_t)p * HD + e] * qr[e];
                sc[p] = d * 0.125;
                mx = std::max(mx, sc[p]);
            }
            double sum = 0;
            for (int p = 0; p <= pos; p++) sum += sc[p] = exp(sc[p] - mx);
            for (int d = 0; d < HD; d++) {
                double o = 0;
                for (int p = 0; p <= pos; p++) o += sc[p] * vcl[(size_t)p * HD + d];
                attn[hh * HD + d] = (float)(o / sum);
            }
        }
        Q8 aq = quantize_host(attn.data(), D, fast);
        for (int r = 0; r < D; r++) x[r] += dot_row_host(&M.wo[((size_t)l * D + r) * rD], aq, KBD);
        Q8 nq = normq(&M.ffn_norm[l * D]);
        for (int j = 0; j < F; j++) {
            float gv = inv * dot_row_host(&M.wg[((size_t)l * F + j) * rD], nq, KBD);
            float uv = inv * dot_row_host(&M.wu[((size_t)l * F + j) * rD], nq, KBD);
            act[j] = gv / (1.f + expf(-gv)) * uv;
        }
        Q8 fq = quantize_host(act.data(), F, fast);
        for (int r = 0; r < D; r++) x[r] += dot_row_host(&M.wd[((size_t)l * D + r) * rF], fq, KBF);
    }
}

static void fill_q41(std::vector<uint8_t>& w, size_t rows, int KB, std::mt19937& rng, float scale) {
    w.resize(rows * KB * QB);
    std::uniform_real_distribution<float> ud(0.5f, 1.5f);
    for (size_t r = 0; r < rows; r++)
        for (int b = 0; b < KB; b++) {
            uint8_t* blk = &w[(r * KB + b) * QB];
            float d = scale * ud(rng);
            __half dh = __float2half(d), mh = __float2half(-7.5f * d);
            memcpy(blk, &dh, 2);
            memcpy(blk + 2, &mh, 2);
            for (int i = 0; i < 16; i++) blk[4 + i] = (uint8_t)(rng() & 0xff);
        }
}

static std::vector<uint8_t> pack(const Model& M) {
    std::vector<uint8_t> out((size_t)LAYERS * CS * LAYER_BYTES, 0);
    const size_t rD = KBD * QB, rF = KBF * QB;
    for (int l = 0; l < LAYERS; l++)
        for (int b = 0; b < CS; b++) {
            uint8_t* base = &out[((size_t)l * CS + b) * LAYER_BYTES];
            memcpy(base, &M.attn_norm[l * D], D * 4);
            memcpy(base + D * 4, &M.ffn_norm[l * D], D * 4);
            if (b < NH) {
                int gg = b / GQ;
                memcpy(base + NORMS, &M.wq[((size_t)l * NH * HD + b * HD) * rD], HD * rD);
                memcpy(base + NORMS + HD * rD, &M.wk[((size_t)l * NKV * HD + gg * HD) * rD], HD * rD);
                memcpy(base + NORMS + 2 * HD * rD, &M.wv[((size_t)l * NKV * HD + gg * HD) * rD], HD * rD);
            }
            memcpy(base + OFF1, &M.wo[((size_t)l * D + b * RO) * rD], RO * rD);
            memcpy(base + OFF2, &M.wg[((size_t)l * F + b * RF) * rD], RF * rD);
            memcpy(base + OFF2 + RF * rD, &M.wu[((size_t)l * F + b * RF) * rD], RF * rD);
            memcpy(base + OFF3, &M.wd[((size_t)l * D + b * RD) * rF], RD * rF);
        }
    return out;
}

static double med(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

template <int EX, int FAST, int LQ, int LO, int LG, int LD>
static void run(const Model& M, const std::vector<float>& kc0, const std::vector<float>& vc0,
                const std::vector<float>& x0, int pos) {
    const int NCOPY = 8;
    std::vector<uint8_t> packed = pack(M);
    uint8_t* dw;
    CK(cudaMalloc(&dw, packed.size() * NCOPY));
    for (int c = 0; c < NCOPY; c++)
        CK(cudaMemcpy(dw + c * packed.size(), packed.data(), packed.size(), cudaMemcpyHostToDevice));
    float *dkc, *dvc, *drope, *dx, *dxo;
    unsigned long long* dst;
    CK(cudaMalloc(&dkc, kc0.size() * 4));
    CK(cudaMalloc(&dvc, vc0.size() * 4));
    CK(cudaMalloc(&drope, 64 * 4));
    CK(cudaMalloc(&dx, D * 4));
    CK(cudaMalloc(&dxo, D * 4));
    CK(cudaMalloc(&dst, (1 + 5 * LAYERS) * 8));
    unsigned long long* dmk;
    CK(cudaMalloc(&dmk, LAYERS * NMARK * 8));
    CK(cudaMemset(dmk, 0, LAYERS * NMARK * 8));
    std::vector<double> mk[NMARK];
    CK(cudaMemcpy(dkc, kc0.data(), kc0.size() * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dvc, vc0.data(), vc0.size() * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dx, x0.data(), D * 4, cudaMemcpyHostToDevice));
    float rope[64];
    for (int i = 0; i < 32; i++) {
        double th = pos * pow(10000.0, -2.0 * i / HD);
        rope[i] = (float)cos(th);
        rope[32 + i] = (float)sin(th);
    }
    CK(cudaMemcpy(drope, rope, 64 * 4, cudaMemcpyHostToDevice));
    size_t smem = LAYER_BYTES + sizeof(Vecs);
    auto kern = cluster_step2<EX, FAST, LQ, LO, LG, LD>;
    CK(cudaFuncSetAttribute(kern, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
    CK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(CS);
    cfg.blockDim = dim3(THREADS);
    cfg.dynamicSmemBytes = smem;
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
        printf("EX %d: cannot be resident (smem %zu)\n", EX, smem);
        return;
    }
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    std::vector<double> span, wall, per_layer, phase[4];
    for (int r = 0; r < 21; r++) {
        const uint8_t* w = dw + (r % NCOPY) * packed.size();
        CK(cudaEventRecord(a));
        CK(cudaLaunchKernelEx(&cfg, kern, w, dkc, dvc, (const float*)drope, pos, (const float*)dx, dxo, dst, dmk, LAYERS));
        CK(cudaEventRecord(b));
        CK(cudaEventSynchronize(b));
        float ms;
        CK(cudaEventElapsedTime(&ms, a, b));
        unsigned long long st[1 + 5 * LAYERS];
        CK(cudaMemcpy(st, dst, sizeof(st), cudaMemcpyDeviceToHost));
        if (r == 0) continue;
        {
            std::vector<unsigned long long> m(LAYERS * NMARK);
            CK(cudaMemcpy(m.data(), dmk, m.size() * 8, cudaMemcpyDeviceToHost));
            for (int l = 1; l < LAYERS; l++)
                for (int i = 1; i < NMARK; i++)
                    if (m[l * NMARK + i] && m[l * NMARK + i - 1])
                        mk[i].push_back((m[l * NMARK + i] - m[l * NMARK + i - 1]) / 1000.0);
        }
        wall.push_back(ms * 1000);
        span.push_back((st[LAYERS] - st[0]) / 1000.0);
        for (int l = 1; l < LAYERS; l++) {
            per_layer.push_back((st[l + 1] - st[l]) / 1000.0);
            unsigned long long prev = st[l];
            for (int k = 0; k < 4; k++) {
                unsigned long long t = st[1 + LAYERS + 4 * l + k];
                phase[k].push_back((t - prev) / 1000.0);
                prev = t;
            }
        }
    }
    // one layer, then the 30: is the gap the arithmetic's or a fault's?
    {
        CK(cudaMemcpy(dkc, kc0.data(), kc0.size() * 4, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(dvc, vc0.data(), vc0.size() * 4, cudaMemcpyHostToDevice));
        CK(cudaLaunchKernelEx(&cfg, kern, (const uint8_t*)dw, dkc, dvc, (const float*)drope, pos, (const float*)dx, dxo, dst, dmk, 1));
        CK(cudaDeviceSynchronize());
        std::vector<float> kc = kc0, vc = vc0, x = x0, xo(D);
        host_step(M, kc, vc, rope, pos, x, 1, FAST != 0);
        CK(cudaMemcpy(xo.data(), dxo, D * 4, cudaMemcpyDeviceToHost));
        double e = 0, mxa = 0;
        for (int i = 0; i < D; i++) {
            e = std::max(e, (double)fabsf(xo[i] - x[i]));
            mxa = std::max(mxa, (double)fabsf(x[i]));
        }
        // One layer is the check: the arithmetic is the host model's up to the order of float
        // sums. Over 30 random layers the few q8 roundings that this order flips grow (the
        // random network is not contracting), so the 30-layer gap is reported, not bounded.
        printf("    check, one layer: max |err| %.2e of max |x| %.2e: %s\n", e, mxa, e <= 1e-5 * mxa ? "OK" : "MISMATCH");
        CK(cudaLaunchKernelEx(&cfg, kern, (const uint8_t*)dw, dkc, dvc, (const float*)drope, pos, (const float*)dx, dxo, dst, dmk, LAYERS));
        CK(cudaDeviceSynchronize());
    }
    std::vector<float> kc = kc0, vc = vc0, x = x0, xo(D);
    host_step(M, kc, vc, rope, pos, x, LAYERS, FAST != 0);
    CK(cudaMemcpy(xo.data(), dxo, D * 4, cudaMemcpyDeviceToHost));
    double maxerr = 0, maxabs = 0;
    for (int i = 0; i < D; i++) {
        maxerr = std::max(maxerr, (double)fabsf(xo[i] - x[i]));
        maxabs = std::max(maxabs, (double)fabsf(x[i]));
    }
    double bytes = (double)(NH * S0 + (CS - NH) * NORMS + CS * (S1 + S2 + S3));
    char label[64];
    snprintf(label, sizeof label, "%s lanes a row %2d/%2d/%2d/%2d", FAST == 2 ? "v4" : FAST ? "v3" : "v2", LQ, LO, LG,
             LD);
    printf("%s cluster %d x %d, %s, pos %4d: 30 layers %.1f us (wall %.1f), %.2f us a layer (median; min %.2f), "
           "%.2f MB copied a layer; after 30 layers max |err| %.2e of max |x| %.2e\n",
           label, CS, THREADS,
           EX == 0 ? "stores + cluster barrier" : "st.async + mbarriers     ", pos, med(span), med(wall),
           med(per_layer), *std::min_element(per_layer.begin(), per_layer.end()), bytes / 1e6, maxerr, maxabs);
    printf("    phases (block 0, us): AB norm+qkv+attention %.2f, C o %.2f, D norm+gate/up %.2f, E down %.2f\n",
           med(phase[0]), med(phase[1]), med(phase[2]), med(phase[3]));
    printf("    block 0, us from the mark before: ");
    const char* names[NMARK] = {"", "wait w", "norm", "quant", "qkv", "rope+scores", "softmax", "PV", "push", "",
                                "", "wait w", "norm", "quant", "gate/up", "push", "receive", "", "", ""};
    for (int i = 1; i < NMARK; i++)
        if (!mk[i].empty()) printf("%s %.2f, ", names[i], med(mk[i]));
    printf("\n");
    CK(cudaFree(dw));
    CK(cudaFree(dkc));
    CK(cudaFree(dvc));
    CK(cudaFree(drope));
    CK(cudaFree(dx));
    CK(cudaFree(dxo));
    CK(cudaFree(dst));
}

int main() {
    std::mt19937 rng(12345);
    Model M;
    std::normal_distribution<float> nd(0.f, 1.f);
    M.attn_norm.resize(LAYERS * D);
    M.ffn_norm.resize(LAYERS * D);
    for (auto& v : M.attn_norm) v = 1.f + 0.1f * nd(rng);
    for (auto& v : M.ffn_norm) v = 1.f + 0.1f * nd(rng);
    fill_q41(M.wq, (size_t)LAYERS * NH * HD, KBD, rng, 0.02f);
    fill_q41(M.wk, (size_t)LAYERS * NKV * HD, KBD, rng, 0.02f);
    fill_q41(M.wv, (size_t)LAYERS * NKV * HD, KBD, rng, 0.02f);
    fill_q41(M.wo, (size_t)LAYERS * D, KBD, rng, 0.01f);
    fill_q41(M.wg, (size_t)LAYERS * F, KBD, rng, 0.02f);
    fill_q41(M.wu, (size_t)LAYERS * F, KBD, rng, 0.02f);
    fill_q41(M.wd, (size_t)LAYERS * D, KBF, rng, 0.01f);
    std::vector<float> kc((size_t)LAYERS * NKV * MAXPOS * HD), vc(kc.size()), x0(D);
    for (auto& v : kc) v = nd(rng);
    for (auto& v : vc) v = nd(rng);
    for (auto& v : x0) v = nd(rng);
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    printf("device: %s, %d SMs; smem a block %zu bytes\n", prop.name, prop.multiProcessorCount,
           (size_t)LAYER_BYTES + sizeof(Vecs));
    for (int pos : {64, 127, 511}) {
        run<0, 0, 8, 8, 8, 8>(M, kc, vc, x0, pos);
        run<1, 0, 8, 8, 8, 8>(M, kc, vc, x0, pos);
        run<1, 1, 4, 16, 4, 16>(M, kc, vc, x0, pos);
        run<1, 1, 8, 16, 8, 32>(M, kc, vc, x0, pos);
        if (pos < 128) run<1, 2, 4, 16, 4, 16>(M, kc, vc, x0, pos);
    }
    return 0;
}
