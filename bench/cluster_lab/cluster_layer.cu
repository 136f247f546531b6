// SmolLM2-135M's decode step (batch of one) as one thread-block cluster: a timing prototype.
//
// The question (cluster_prims.cu measured the primitives): how long does a layer of SmolLM2's
// shape take when its six stages are phases of one kernel whose CS blocks form a cluster, with
// the activations exchanged through distributed shared memory and the weights copied into
// shared memory a layer ahead, instead of six kernels behind programmatic boundaries (15.9 us a
// layer in session 28's step timeline)?
//
// Shape: d 576, 9 query heads and 3 KV heads of 64, feed-forward 1536, Q4_1 weights (SmolLM2's
// format), 30 layers, rope on pairs, RMS norms, SiLU-gated feed-forward. The arithmetic is f32
// activations times Q4_1 weights, not the production kernels' (dp4a on q8 activations): this is
// a timing prototype, checked against a host model of the same arithmetic to a tolerance.
//
// Each block of the cluster owns a slice of every projection's rows. Per layer, five phases,
// each ended by the cluster barrier:
//   A: RMS norm of the residual (every block, redundantly), q/k/v rows -> all-gather qkv
//   B: blocks 0..8 one query head each: rope, the KV cache row stored, scores over the cache,
//      softmax, P V -> all-gather the attention output
//   C: o rows, residual added -> all-gather x
//   D: RMS norm, gate/up rows, SiLU gate -> all-gather the activation
//   E: down rows, residual added -> all-gather x
// A block's weights for a phase (its rows, packed contiguously on the host) are one segment;
// segment p of layer l+1 is copied into its slot as soon as phase p of layer l is done.
// LOADER 0: bulk copies (cp.async.bulk on an mbarrier), LOADER 1: cp.async 16 bytes a thread.
//
// nvcc -gencode=arch=compute_90a,code=sm_90a -O3 --fmad=false -std=c++17 -o /tmp/cluster_layer cluster_layer.cu
// What it showed (session 34, H200): 19.2 us a layer at pos 64, slower than the six kernels
// (15.3 us): its f32 mat-vecs are issue-bound on 16 SMs and each of its five exchanges costs
// about a kernel boundary. cluster_layer2.cu is the next version.
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
constexpr int QKV = (NH + 2 * NKV) * HD;  // 960
constexpr int KBD = D / 32, KBF = F / 32;
constexpr int QB = 20;  // Q4_1 block: f16 d, f16 m, 16 bytes of nibbles
constexpr int MAXPOS = 1024;
constexpr int THREADS = 512, WARPS = THREADS / 32;

template <int CS>
struct Plan {
    static constexpr int RQ = QKV / CS, RO = D / CS, RF = F / CS, RD = D / CS;
    static constexpr int S0 = 2 * D * 4 + RQ * KBD * QB;  // both norms' weights, then q/k/v rows
    static constexpr int S1 = RO * KBD * QB;
    static constexpr int S2 = 2 * RF * KBD * QB;  // gate rows, then up rows
    static constexpr int S3 = RD * KBF * QB;
    __host__ __device__ static constexpr int seg(int p) { return p == 0 ? S0 : p == 1 ? S1 : p == 2 ? S2 : S3; }
    __host__ __device__ static constexpr int off(int p) {
        return p == 0 ? 0 : p == 1 ? S0 : p == 2 ? S0 + S1 : S0 + S1 + S2;
    }
    static constexpr int LAYER_BYTES = S0 + S1 + S2 + S3;  // a block's, a layer
    static_assert(QKV % CS == 0 && D % CS == 0 && F % CS == 0, "rows split evenly");
    static_assert(RQ % 4 == 0 && RO % 4 == 0 && RF % 4 == 0 && RD % 4 == 0, "float4 all-gathers");
    static_assert(S0 % 16 == 0 && S1 % 16 == 0 && S2 % 16 == 0 && S3 % 16 == 0, "bulk copy sizes");
};

// Shared memory after the weight slots.
struct Vecs {
    float x[D], xn[D], qkv[QKV], attn[D], act[F];
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
__device__ __forceinline__ unsigned smem_addr(const void* p) {
    return (unsigned)__cvta_generic_to_shared(p);
}

// One warp: the dot of a Q4_1 row of KB blocks (shared memory) with xv (shared memory, f32).
// Lane: block b0 + lane / 4 of eight, nibble word lane % 4 (elements 4w..4w+3 and 16+4w..).
__device__ __forceinline__ float dot_q41(const uint8_t* wrow, const float* xv, int KB) {
    int lane = threadIdx.x & 31;
    float acc = 0.f;
    for (int b0 = 0; b0 < KB; b0 += 8) {
        int b = b0 + (lane >> 2), w = lane & 3;
        if (b < KB) {
            const uint8_t* blk = wrow + b * QB;
            __half2 dm = *reinterpret_cast<const __half2*>(blk);
            uint32_t q = *reinterpret_cast<const uint32_t*>(blk + 4 + 4 * w);
            float d = __low2float(dm), m = __high2float(dm);
            const float* xs = xv + b * 32 + 4 * w;
            float4 xl = *reinterpret_cast<const float4*>(xs);
            float4 xh = *reinterpret_cast<const float4*>(xs + 16);
            float sl = (float)(q & 15) * xl.x + (float)((q >> 8) & 15) * xl.y +
                       (float)((q >> 16) & 15) * xl.z + (float)((q >> 24) & 15) * xl.w;
            float sh = (float)((q >> 4) & 15) * xh.x + (float)((q >> 12) & 15) * xh.y +
                       (float)((q >> 20) & 15) * xh.z + (float)((q >> 28) & 15) * xh.w;
            float sx = (xl.x + xl.y + xl.z + xl.w) + (xh.x + xh.y + xh.z + xh.w);
            acc += d * (sl + sh) + m * sx;
        }
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
    return acc;
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

// xn = x * rsqrt(mean(x^2) + eps) * w
__device__ __forceinline__ void rms_norm(Vecs& s, const float* w) {
    float ss = 0.f;
    for (int i = threadIdx.x; i < D; i += THREADS) ss += s.x[i] * s.x[i];
    float tot = block_reduce(ss, false, s);
    float inv = rsqrtf(tot / D + 1e-5f);
    for (int i = threadIdx.x; i < D; i += THREADS) s.xn[i] = s.x[i] * inv * w[i];
    __syncthreads();
}

// The block's R staged values (s.stage) into every block's dst[base..base+R), then the barrier.
template <int CS>
__device__ __forceinline__ void push_all(cg::cluster_group& cl, Vecs& s, float* dst, int base, int R) {
    __syncthreads();
    int q = R / 4;
    for (int t = threadIdx.x; t < q * CS; t += THREADS) {
        int to = t / q, i = t % q;
        float4 v = reinterpret_cast<const float4*>(s.stage)[i];
        float4* remote = reinterpret_cast<float4*>(cl.map_shared_rank(dst + base, to));
        remote[i] = v;
    }
    cl.sync();
}

// cp.async groups complete in the order they were committed: a slot's group is waited for with
// as many newer groups left pending as were committed after it.
struct Groups {
    int issued = 0;
    int seq[4] = {0, 0, 0, 0};
};

template <int CS, int LOADER>
__device__ __forceinline__ void issue_segment(uint8_t* slots, unsigned long long* bars, const uint8_t* src,
                                              int p, Groups& gr) {
    using P = Plan<CS>;
    uint8_t* dst = slots + P::off(p);
    int bytes = P::seg(p);
    if (LOADER == 0) {
        if (threadIdx.x == 0) {
            unsigned bar = smem_addr(&bars[p]);
            asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
            constexpr int CHUNK = 8192;
            for (int o = 0; o < bytes; o += CHUNK) {
                int n = bytes - o < CHUNK ? bytes - o : CHUNK;
                asm volatile(
                    "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                        smem_addr(dst + o)),
                    "l"(src + o), "r"(n), "r"(bar)
                    : "memory");
            }
        }
    } else {
        for (int o = threadIdx.x * 16; o < bytes; o += THREADS * 16)
            asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(smem_addr(dst + o)), "l"(src + o) : "memory");
        asm volatile("cp.async.commit_group;" ::: "memory");
        gr.seq[p] = gr.issued++;
    }
}

template <int LOADER>
__device__ __forceinline__ void wait_segment(unsigned long long* bars, int p, int layer, const Groups& gr) {
    if (LOADER == 0) {
        unsigned bar = smem_addr(&bars[p]);
        unsigned parity = layer & 1, done = 0;
        while (!done)
            asm volatile(
                "{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                : "=r"(done)
                : "r"(bar), "r"(parity)
                : "memory");
    } else {
        switch (gr.issued - 1 - gr.seq[p]) {
            case 0: asm volatile("cp.async.wait_group 0;" ::: "memory"); break;
            case 1: asm volatile("cp.async.wait_group 1;" ::: "memory"); break;
            case 2: asm volatile("cp.async.wait_group 2;" ::: "memory"); break;
            default: asm volatile("cp.async.wait_group 3;" ::: "memory"); break;
        }
        __syncthreads();
    }
}

// weights: [layer][block][LAYER_BYTES]; kc/vc: [layer][kv head][MAXPOS][HD]; rope: cos[32], sin[32]
template <int CS, int LOADER>
__global__ void __launch_bounds__(THREADS, 1)
    cluster_step(const uint8_t* __restrict__ weights, float* kc, float* vc, const float* rope, int pos,
                 const float* x_in, float* x_out, unsigned long long* stamps) {
    using P = Plan<CS>;
    extern __shared__ __align__(128) uint8_t smem[];
    uint8_t* slots = smem;
    Vecs& s = *reinterpret_cast<Vecs*>(smem + P::LAYER_BYTES);
    __shared__ __align__(8) unsigned long long bars[4];
    cg::cluster_group cl = cg::this_cluster();
    const int rank = cl.block_rank();
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    auto seg_src = [&](int layer, int p) {
        return weights + ((size_t)layer * CS + rank) * P::LAYER_BYTES + P::off(p);
    };

    if (LOADER == 0 && threadIdx.x == 0) {
        for (int p = 0; p < 4; p++) asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_addr(&bars[p])));
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    Groups gr;
    for (int p = 0; p < 4; p++) issue_segment<CS, LOADER>(slots, bars, seg_src(0, p), p, gr);
    for (int i = threadIdx.x; i < D; i += THREADS) s.x[i] = x_in[i];
    cl.sync();
    if (rank == 0 && threadIdx.x == 0) stamps[0] = gtime();

    for (int l = 0; l < LAYERS; l++) {
        const bool more = l + 1 < LAYERS;
        // ---- A: norm, q/k/v (the attention blocks first ask L2 for the cache rows phase B reads)
        if (rank < NH) {
            const int g = rank / (NH / NKV);
            const float* kcl = kc + ((size_t)l * NKV + g) * MAXPOS * HD;
            const float* vcl = vc + ((size_t)l * NKV + g) * MAXPOS * HD;
            for (int p = threadIdx.x; p < pos; p += THREADS) {
                asm volatile("prefetch.global.L2 [%0];" ::"l"(kcl + (size_t)p * HD));
                asm volatile("prefetch.global.L2 [%0];" ::"l"(kcl + (size_t)p * HD + 32));
                asm volatile("prefetch.global.L2 [%0];" ::"l"(vcl + (size_t)p * HD));
                asm volatile("prefetch.global.L2 [%0];" ::"l"(vcl + (size_t)p * HD + 32));
            }
        }
        wait_segment<LOADER>(bars, 0, l, gr);
        const float* attn_norm = reinterpret_cast<const float*>(slots + P::off(0));
        const float* ffn_norm = attn_norm + D;
        const uint8_t* wqkv = slots + P::off(0) + 2 * D * 4;
        rms_norm(s, attn_norm);
        for (int r = warp; r < P::RQ; r += WARPS) {
            float v = dot_q41(wqkv + r * KBD * QB, s.xn, KBD);
            if (lane == 0) s.stage[r] = v;
        }
        push_all<CS>(cl, s, s.qkv, rank * P::RQ, P::RQ);
        if (rank == 0 && threadIdx.x == 0) stamps[1 + LAYERS + 5 * l] = gtime();
        // (ffn_norm is read in D from the same slot: slot 0 is re-filled only after D)

        // ---- B: attention, a query head a block
        if (rank < NH) {
            const int h = rank, g = h / (NH / NKV);
            const float* q = s.qkv + h * HD;
            const float* k = s.qkv + NH * HD + g * HD;
            const float* v = s.qkv + (NH + NKV) * HD + g * HD;
            float* kcl = kc + ((size_t)l * NKV + g) * MAXPOS * HD;
            float* vcl = vc + ((size_t)l * NKV + g) * MAXPOS * HD;
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
            if (h % (NH / NKV) == 0 && threadIdx.x < HD) {
                kcl[(size_t)pos * HD + threadIdx.x] = s.kr[threadIdx.x];
                vcl[(size_t)pos * HD + threadIdx.x] = v[threadIdx.x];
            }
            // a key a thread: its 64 values as 16 independent float4 loads
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
            {
                // thread: dims 4c..4c+3 (c < 16) of keys kg, kg + 32, ...; loads four at a time
                int c = threadIdx.x & 15, kg = threadIdx.x >> 4;
                float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
                int p = kg;
                for (; p + 96 < pos; p += 128) {
                    float4 vv[4];
#pragma unroll
                    for (int u = 0; u < 4; u++) vv[u] = __ldcg(reinterpret_cast<const float4*>(vcl + (size_t)(p + 32 * u) * HD) + c);
#pragma unroll
                    for (int u = 0; u < 4; u++) {
                        float w = s.scores[p + 32 * u];
                        acc.x += w * vv[u].x; acc.y += w * vv[u].y; acc.z += w * vv[u].z; acc.w += w * vv[u].w;
                    }
                }
                for (; p <= pos; p += 32) {
                    float4 vv = p == pos ? reinterpret_cast<const float4*>(v)[c]
                                         : __ldcg(reinterpret_cast<const float4*>(vcl + (size_t)p * HD) + c);
                    float w = s.scores[p];
                    acc.x += w * vv.x; acc.y += w * vv.y; acc.z += w * vv.z; acc.w += w * vv.w;
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
            __syncthreads();
            int qd = HD / 4;
            for (int t = threadIdx.x; t < qd * CS; t += THREADS) {
                int to = t / qd, i = t % qd;
                float4 val = reinterpret_cast<const float4*>(s.stage)[i];
                reinterpret_cast<float4*>(cl.map_shared_rank(s.attn + h * HD, to))[i] = val;
            }
        }
        cl.sync();
        if (rank == 0 && threadIdx.x == 0) stamps[1 + LAYERS + 5 * l + 1] = gtime();

        // ---- C: o, residual
        wait_segment<LOADER>(bars, 1, l, gr);
        {
            const uint8_t* wo = slots + P::off(1);
            for (int r = warp; r < P::RO; r += WARPS) {
                float v = dot_q41(wo + r * KBD * QB, s.attn, KBD);
                if (lane == 0) s.stage[r] = s.x[rank * P::RO + r] + v;
            }
            push_all<CS>(cl, s, s.x, rank * P::RO, P::RO);
        }
        if (rank == 0 && threadIdx.x == 0) stamps[1 + LAYERS + 5 * l + 2] = gtime();
        if (more) issue_segment<CS, LOADER>(slots, bars, seg_src(l + 1, 1), 1, gr);

        // ---- D: norm, gate/up, SiLU
        wait_segment<LOADER>(bars, 2, l, gr);
        rms_norm(s, ffn_norm);
        {
            const uint8_t* wg = slots + P::off(2);
            const uint8_t* wu = wg + P::RF * KBD * QB;
            for (int r = warp; r < P::RF; r += WARPS) {
                float gv = dot_q41(wg + r * KBD * QB, s.xn, KBD);
                float uv = dot_q41(wu + r * KBD * QB, s.xn, KBD);
                if (lane == 0) s.stage[r] = gv / (1.f + expf(-gv)) * uv;
            }
            push_all<CS>(cl, s, s.act, rank * P::RF, P::RF);
        }
        if (rank == 0 && threadIdx.x == 0) stamps[1 + LAYERS + 5 * l + 3] = gtime();
        // slot 0 (norms, q/k/v) and slot 2 are free now
        if (more) {
            issue_segment<CS, LOADER>(slots, bars, seg_src(l + 1, 0), 0, gr);
            issue_segment<CS, LOADER>(slots, bars, seg_src(l + 1, 2), 2, gr);
        }

        // ---- E: down, residual
        wait_segment<LOADER>(bars, 3, l, gr);
        {
            const uint8_t* wd = slots + P::off(3);
            for (int r = warp; r < P::RD; r += WARPS) {
                float v = dot_q41(wd + r * KBF * QB, s.act, KBF);
                if (lane == 0) s.stage[r] = s.x[rank * P::RD + r] + v;
            }
            push_all<CS>(cl, s, s.x, rank * P::RD, P::RD);
        }
        if (more) issue_segment<CS, LOADER>(slots, bars, seg_src(l + 1, 3), 3, gr);
        if (rank == 0 && threadIdx.x == 0) stamps[1 + l] = stamps[1 + LAYERS + 5 * l + 4] = gtime();
    }
    if (rank == 0)
        for (int i = threadIdx.x; i < D; i += THREADS) x_out[i] = s.x[i];
}

// ------------------------------------------------------------------ host model
struct Model {
    // per layer: norms (f32), matrices as Q4_1 rows
    std::vector<float> attn_norm, ffn_norm;             // [L][D]
    std::vector<uint8_t> wqkv, wo, wg, wu, wd;           // [L][rows][KB*QB]
};

static float h2f(uint16_t h) {
    __half hh;
    memcpy(&hh, &h, 2);
    return __half2float(hh);
}

static float dot_row_host(const uint8_t* row, const float* x, int KB) {
    double acc = 0;
    for (int b = 0; b < KB; b++) {
        const uint8_t* blk = row + b * QB;
        uint16_t dh, mh;
        memcpy(&dh, blk, 2);
        memcpy(&mh, blk + 2, 2);
        float d = h2f(dh), m = h2f(mh);
        for (int i = 0; i < 16; i++) {
            acc += (double)(d * (blk[4 + i] & 15) + m) * x[b * 32 + i];
            acc += (double)(d * (blk[4 + i] >> 4) + m) * x[b * 32 + 16 + i];
        }
    }
    return (float)acc;
}

static void host_step(const Model& M, std::vector<float>& kc, std::vector<float>& vc, const float* rope, int pos,
                      std::vector<float>& x) {
    std::vector<float> xn(D), qkv(QKV), attn(D), act(F);
    auto norm = [&](const float* w) {
        double ss = 0;
        for (int i = 0; i < D; i++) ss += (double)x[i] * x[i];
        float inv = 1.f / sqrtf((float)(ss / D) + 1e-5f);
        for (int i = 0; i < D; i++) xn[i] = x[i] * inv * w[i];
    };
    for (int l = 0; l < LAYERS; l++) {
        norm(&M.attn_norm[l * D]);
        for (int r = 0; r < QKV; r++) qkv[r] = dot_row_host(&M.wqkv[((size_t)l * QKV + r) * KBD * QB], xn.data(), KBD);
        for (int h = 0; h < NH; h++) {
            int g = h / (NH / NKV);
            float qr[HD], kr[HD];
            const float* q = &qkv[h * HD];
            const float* k = &qkv[NH * HD + g * HD];
            const float* v = &qkv[(NH + NKV) * HD + g * HD];
            for (int i = 0; i < 32; i++) {
                float c = rope[i], sn = rope[32 + i];
                qr[2 * i] = q[2 * i] * c - q[2 * i + 1] * sn;
                qr[2 * i + 1] = q[2 * i] * sn + q[2 * i + 1] * c;
                kr[2 * i] = k[2 * i] * c - k[2 * i + 1] * sn;
                kr[2 * i + 1] = k[2 * i] * sn + k[2 * i + 1] * c;
            }
            float* kcl = &kc[((size_t)l * NKV + g) * MAXPOS * HD];
            float* vcl = &vc[((size_t)l * NKV + g) * MAXPOS * HD];
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
                attn[h * HD + d] = (float)(o / sum);
            }
        }
        for (int r = 0; r < D; r++) x[r] += dot_row_host(&M.wo[((size_t)l * D + r) * KBD * QB], attn.data(), KBD);
        norm(&M.ffn_norm[l * D]);
        for (int j = 0; j < F; j++) {
            float gv = dot_row_host(&M.wg[((size_t)l * F + j) * KBD * QB], xn.data(), KBD);
            float uv = dot_row_host(&M.wu[((size_t)l * F + j) * KBD * QB], xn.data(), KBD);
            act[j] = gv / (1.f + expf(-gv)) * uv;
        }
        for (int r = 0; r < D; r++) x[r] += dot_row_host(&M.wd[((size_t)l * D + r) * KBF * QB], act.data(), KBF);
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

// The blocks' segments: [layer][block][S0 S1 S2 S3].
template <int CS>
static std::vector<uint8_t> pack(const Model& M) {
    using P = Plan<CS>;
    std::vector<uint8_t> out((size_t)LAYERS * CS * P::LAYER_BYTES);
    const size_t rowD = KBD * QB, rowF = KBF * QB;
    for (int l = 0; l < LAYERS; l++)
        for (int b = 0; b < CS; b++) {
            uint8_t* base = &out[((size_t)l * CS + b) * P::LAYER_BYTES];
            memcpy(base, &M.attn_norm[l * D], D * 4);
            memcpy(base + D * 4, &M.ffn_norm[l * D], D * 4);
            memcpy(base + 2 * D * 4, &M.wqkv[((size_t)l * QKV + b * P::RQ) * rowD], P::RQ * rowD);
            memcpy(base + P::off(1), &M.wo[((size_t)l * D + b * P::RO) * rowD], P::RO * rowD);
            memcpy(base + P::off(2), &M.wg[((size_t)l * F + b * P::RF) * rowD], P::RF * rowD);
            memcpy(base + P::off(2) + P::RF * rowD, &M.wu[((size_t)l * F + b * P::RF) * rowD], P::RF * rowD);
            memcpy(base + P::off(3), &M.wd[((size_t)l * D + b * P::RD) * rowF], P::RD * rowF);
        }
    return out;
}

static double med(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

template <int CS, int LOADER>
static void run(const Model& M, const std::vector<float>& kc0, const std::vector<float>& vc0,
                const std::vector<float>& x0, int pos) {
    using P = Plan<CS>;
    const int NCOPY = 8;  // weights rotate through copies far larger than L2
    std::vector<uint8_t> packed = pack<CS>(M);
    uint8_t* dw;
    CK(cudaMalloc(&dw, packed.size() * NCOPY));
    for (int c = 0; c < NCOPY; c++) CK(cudaMemcpy(dw + c * packed.size(), packed.data(), packed.size(), cudaMemcpyHostToDevice));
    float *dkc, *dvc, *drope, *dx, *dxo;
    unsigned long long* dst;
    CK(cudaMalloc(&dkc, kc0.size() * 4));
    CK(cudaMalloc(&dvc, vc0.size() * 4));
    CK(cudaMalloc(&drope, 64 * 4));
    CK(cudaMalloc(&dx, D * 4));
    CK(cudaMalloc(&dxo, D * 4));
    CK(cudaMalloc(&dst, (1 + 6 * LAYERS) * 8));
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

    size_t smem = P::LAYER_BYTES + sizeof(Vecs);
    auto kern = cluster_step<CS, LOADER>;
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
        printf("cluster %d loader %d: cannot be resident (smem %zu)\n", CS, LOADER, smem);
        return;
    }
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    std::vector<double> span, wall, per_layer, phase[5];
    for (int r = 0; r < 21; r++) {
        const uint8_t* w = dw + (r % NCOPY) * packed.size();
        CK(cudaEventRecord(a));
        CK(cudaLaunchKernelEx(&cfg, kern, w, dkc, dvc, (const float*)drope, pos, (const float*)dx, dxo, dst));
        CK(cudaEventRecord(b));
        CK(cudaEventSynchronize(b));
        float ms;
        CK(cudaEventElapsedTime(&ms, a, b));
        unsigned long long st[1 + 6 * LAYERS];
        CK(cudaMemcpy(st, dst, sizeof(st), cudaMemcpyDeviceToHost));
        if (r == 0) continue;  // warm-up
        wall.push_back(ms * 1000);
        span.push_back((st[LAYERS] - st[0]) / 1000.0);
        for (int l = 1; l < LAYERS; l++) {
            per_layer.push_back((st[l + 1] - st[l]) / 1000.0);
            unsigned long long prev = st[l];
            for (int k = 0; k < 5; k++) {
                unsigned long long t = st[1 + LAYERS + 5 * l + k];
                phase[k].push_back((t - prev) / 1000.0);
                prev = t;
            }
        }
    }
    std::sort(span.begin(), span.end());
    std::sort(wall.begin(), wall.end());
    std::sort(per_layer.begin(), per_layer.end());
    // check against the host model
    std::vector<float> kc = kc0, vc = vc0, x = x0, xo(D);
    host_step(M, kc, vc, rope, pos, x);
    CK(cudaMemcpy(xo.data(), dxo, D * 4, cudaMemcpyDeviceToHost));
    double maxerr = 0, maxabs = 0;
    for (int i = 0; i < D; i++) {
        maxerr = std::max(maxerr, (double)fabsf(xo[i] - x[i]));
        maxabs = std::max(maxabs, (double)fabsf(x[i]));
    }
    double bytes = (double)P::LAYER_BYTES * CS;
    printf("cluster %2d x %d threads, %s, pos %4d: 30 layers %.1f us (wall %.1f), %.2f us a layer (median; "
           "min %.2f), weights %.2f MB a layer = %.0f GB/s; max |err| %.2e of max |x| %.2e %s\n",
           CS, THREADS, LOADER == 0 ? "bulk copies" : "cp.async   ", pos, span[span.size() / 2],
           wall[wall.size() / 2], per_layer[per_layer.size() / 2], per_layer[0], bytes / 1e6,
           bytes / (per_layer[per_layer.size() / 2] * 1e3), maxerr, maxabs,
           maxerr <= 1e-3 * maxabs ? "OK" : "MISMATCH");
    printf("    phases (median us, block 0's view, each to its cluster barrier): A norm+qkv %.2f, B attention %.2f, "
           "C o %.2f, D norm+gate/up %.2f, E down %.2f\n",
           med(phase[0]), med(phase[1]), med(phase[2]), med(phase[3]), med(phase[4]));
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
    fill_q41(M.wqkv, (size_t)LAYERS * QKV, KBD, rng, 0.02f);
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
    printf("device: %s, %d SMs\n", prop.name, prop.multiProcessorCount);
    printf("a layer's weights: %.2f MB of Q4_1 (+ norms); production step timeline (session 28): 15.9 us a layer\n",
           (double)(QKV + D + 2 * F) * KBD * QB / 1e6 + (double)D * KBF * QB / 1e6);
    for (int pos : {64, 127, 511}) {
        run<16, 0>(M, kc, vc, x0, pos);
        run<16, 1>(M, kc, vc, x0, pos);
        run<12, 0>(M, kc, vc, x0, pos);
        run<12, 1>(M, kc, vc, x0, pos);
    }
    return 0;
}
