// Can the 8B's decode layers stream their weights at the card's bandwidth through the
// dependencies between their ops?
//
// Sessions 18-29 found the 8B's decode step at about half its floor: the one-row mat-vecs reach
// 2-3.5 TB/s alone, and every op boundary (a programmatic kernel launch, session 28's lab: about
// 1 us, more with the work's tails) leaves DRAM idle while the weight-free ops (the norms, the
// activation quantizers, the attention: a third of the step) run. Session 34's stream lab found
// bulk copies (cp.async.bulk) into rings of shared memory reach the full 4.6 TB/s at 132 SMs.
//
// This lab is the design that question points at: ONE persistent kernel, one block an SM, for
// all 32 layers of an 8B-shaped model (Q4_K weights of the real shapes, random values):
//  - a producer warp streams the block's share of every op's weights, in order, into a ring of
//    shared-memory stages, never waiting on the model's data, only on free stages: the weights
//    of op k+1 arrive while op k's dependencies are still being met;
//  - the compute warps multiply each tile (8 rows of 4096 values, or 2 of 14336) with the q8
//    activation held in shared memory (dp4a, Q4_K's scales and mins);
//  - between ops, either per-op counters in global memory (ll = 0: a block adds itself once its
//    rows are written, after a fence; the consumer spins with acquire loads), or no counters at
//    all (ll = 1): every output value is stored with the launch's number beside it in one 8-byte
//    store (NCCL's LL idea), and a consumer polls the values it needs until they carry it;
//  - the weight-free work of each layer: the two RMS norms and every activation quantization run
//    redundantly in every block (no round trip), the decode attention (32 query heads over 64
//    cached keys and the step's own, head 128, 8 KV heads) on blocks 0-31 while the others wait
//    for it, their producers still streaming the o projection's weights.
// No RoPE (its cost is a few multiplies in the attention's blocks); v and every down are Q4_K
// here (the real file has Q6_K for v and half the downs).
//
// Checked against a reference chain of plain kernels (the same per-chunk arithmetic, other
// summation orders): the relative error of the last layer's output, printed.
// Timed: the persistent kernel (median of 7, events), a plain streaming read of the same bytes,
// and two bounds of the same kernel: no dependency waits (wrong values), no arithmetic.
//
// nvcc -gencode=arch=compute_90a,code=sm_90a -O3 -std=c++17 -o /tmp/stream_chain stream_chain.cu
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CK(x)                                                                                  \
    do {                                                                                       \
        cudaError_t e_ = (x);                                                                  \
        if (e_ != cudaSuccess) {                                                               \
            fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
            exit(1);                                                                           \
        }                                                                                      \
    } while (0)

constexpr int H = 4096, FF = 14336, NH = 32, NKV = 8, HD = 128;
constexpr int QKV_ROWS = H + 2 * NKV * HD;  // 6144
constexpr int SB = 144;                      // a Q4_K super-block of 256 weights
constexpr int RB_H = H / 256 * SB;           // 2304 bytes a row of 4096
constexpr int RB_F = FF / 256 * SB;          // 8064 bytes a row of 14336
constexpr int STAGE = 8 * RB_H;              // 18432: 8 rows of 4096, or 2 of 14336 (16128)
#ifndef STAGES
#define STAGES 10
#endif
constexpr int S = STAGES;
#ifndef COMPUTE_WARPS
#define COMPUTE_WARPS 16
#endif
// Block 0's stamps (globaltimer), set by the chain kernel for the layer it is in.
__device__ unsigned long long* g_st;
#define STAMP(i) \
    if (blockIdx.x == 0 && threadIdx.x == 0 && g_st) g_st[i] = gtime()
constexpr int CW = COMPUTE_WARPS, CT = CW * 32, THREADS = CT + 32;
static_assert(CW == 16, "a lane takes at most one chunk of a row: 64 chunks over 2 warps, 224 over 8");
constexpr int MAXPOS = 256;
constexpr int NSTAMP = 24;
enum { OP_QKV, OP_O, OP_GU, OP_DOWN, NOPS };
enum { C_QKV, C_ATT, C_O, C_GU, C_DOWN, NC };

struct OpShape {
    int rows_per_tile, ntiles, row_bytes;
    __host__ __device__ int tile_bytes() const { return rows_per_tile * row_bytes; }
};
__host__ __device__ inline OpShape op_shape(int op) {
    switch (op) {
        case OP_QKV: return {8, QKV_ROWS / 8, RB_H};
        case OP_O: return {8, H / 8, RB_H};
        case OP_GU: return {8, 2 * FF / 8, RB_H};
        default: return {2, H / 2, RB_F};
    }
}
__host__ __device__ inline size_t op_offset(int op) {
    size_t o = 0;
    for (int i = 0; i < op; i++) o += (size_t)op_shape(i).ntiles * op_shape(i).tile_bytes();
    return o;
}
__host__ __device__ inline size_t layer_bytes() { return op_offset(NOPS); }

struct Params {
    const uint8_t* w;        // layers x layer_bytes()
    const float* x0;         // the first layer's input
    const float *wn1, *wn2;  // norm weights, layers x H
    float *kc, *vc;          // layers x MAXPOS x NKV x HD
    // Every op's output, per layer, as (epoch << 32 | f32 bits): the epoch (ep, one a launch)
    // marks a value as this launch's, so a reader polls the values themselves (ll = 1) instead
    // of a counter the writers bump after a fence (ll = 0).
    unsigned long long *qkv, *att, *o, *hb, *down;
    unsigned* cnt;                // layers x NC (ll = 0)
    unsigned long long* stamps;   // block 0's phase times, layers x NSTAMP
    int layers, pos, nb, mode, ll;  // mode 1: no waits; 2: no arithmetic; 4: no weight-free work
    unsigned ep;
};
typedef unsigned long long u64;

__device__ __forceinline__ unsigned smem_addr(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }
__device__ __forceinline__ unsigned long long gtime() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
__device__ __forceinline__ void cbar() { asm volatile("bar.sync 1, %0;" ::"n"(CT) : "memory"); }
__device__ __forceinline__ unsigned ld_acquire(const unsigned* p) {
    unsigned v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ u64 ld_rel(const u64* p) {
    u64 v;
    asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ void put(u64* p, float v, unsigned ep) {
    u64 x = ((u64)ep << 32) | __float_as_uint(v);
    asm volatile("st.relaxed.gpu.global.u64 [%0], %1;" ::"l"(p), "l"(x) : "memory");
}
// N values at p, p + stride, ...: every load issued first, then each polled until its epoch is
// this launch's (poll: the values are the flags).
template <int N>
__device__ __forceinline__ void get_n(const u64* p, int stride, float* out, unsigned ep, bool poll) {
    u64 x[N];
#pragma unroll
    for (int i = 0; i < N; i++) x[i] = ld_rel(p + (size_t)i * stride);
    if (poll) {
#pragma unroll
        for (int i = 0; i < N; i++)
            while ((unsigned)(x[i] >> 32) != ep) x[i] = ld_rel(p + (size_t)i * stride);
    }
#pragma unroll
    for (int i = 0; i < N; i++) out[i] = __uint_as_float((unsigned)x[i]);
}
__device__ __forceinline__ void mbar_wait(unsigned bar, unsigned parity) {
    unsigned done = 0;
    while (!done)
        asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                     : "=r"(done)
                     : "r"(bar), "r"(parity)
                     : "memory");
}

// One Q4_K chunk: 32 bytes of quants (64 weights, sub-blocks 2p and 2p+1 of super-block sbp)
// against the q8 activation blocks blk, blk+1 (xds: scale, scale * sum of the block's quants).
__device__ __forceinline__ float chunk_dot(const uint8_t* sbp, int p, const int8_t* xq, const float2* xds, int blk) {
    __half2 dm = *(const __half2*)sbp;
    float d = __low2float(dm), dmin = __high2float(dm);
    const uint8_t* sc = sbp + 4;
    int j0 = 2 * p, j1 = j0 + 1;
    int s0, m0, s1, m1;
    if (j0 < 4) { s0 = sc[j0] & 63; m0 = sc[j0 + 4] & 63; }
    else { s0 = (sc[j0 + 4] & 0xF) | ((sc[j0 - 4] >> 6) << 4); m0 = (sc[j0 + 4] >> 4) | ((sc[j0] >> 6) << 4); }
    if (j1 < 4) { s1 = sc[j1] & 63; m1 = sc[j1 + 4] & 63; }
    else { s1 = (sc[j1 + 4] & 0xF) | ((sc[j1 - 4] >> 6) << 4); m1 = (sc[j1 + 4] >> 4) | ((sc[j1] >> 6) << 4); }
    const uint4* wq = (const uint4*)(sbp + 16 + 32 * p);
    uint4 w0 = wq[0], w1 = wq[1];
    const int4* xa = (const int4*)(xq + 32 * blk);
    int4 a0 = xa[0], a1 = xa[1], b0 = xa[2], b1 = xa[3];
    const unsigned M = 0x0F0F0F0Fu;
    int sl = 0, sh = 0;
    sl = __dp4a((int)(w0.x & M), a0.x, sl); sh = __dp4a((int)((w0.x >> 4) & M), b0.x, sh);
    sl = __dp4a((int)(w0.y & M), a0.y, sl); sh = __dp4a((int)((w0.y >> 4) & M), b0.y, sh);
    sl = __dp4a((int)(w0.z & M), a0.z, sl); sh = __dp4a((int)((w0.z >> 4) & M), b0.z, sh);
    sl = __dp4a((int)(w0.w & M), a0.w, sl); sh = __dp4a((int)((w0.w >> 4) & M), b0.w, sh);
    sl = __dp4a((int)(w1.x & M), a1.x, sl); sh = __dp4a((int)((w1.x >> 4) & M), b1.x, sh);
    sl = __dp4a((int)(w1.y & M), a1.y, sl); sh = __dp4a((int)((w1.y >> 4) & M), b1.y, sh);
    sl = __dp4a((int)(w1.z & M), a1.z, sl); sh = __dp4a((int)((w1.z >> 4) & M), b1.z, sh);
    sl = __dp4a((int)(w1.w & M), a1.w, sl); sh = __dp4a((int)((w1.w >> 4) & M), b1.w, sh);
    float2 da = xds[blk], db = xds[blk + 1];
    return d * ((float)s0 * da.x * (float)sl + (float)s1 * db.x * (float)sh) - dmin * ((float)m0 * da.y + (float)m1 * db.y);
}

// 32 values (in registers) into one q8 block.
__device__ __forceinline__ void quant32(const float* x, int8_t* q, float2* ds) {
    float amax = 0.f;
#pragma unroll
    for (int i = 0; i < 32; i++) amax = fmaxf(amax, fabsf(x[i]));
    float d = amax / 127.f, inv = amax > 0.f ? 127.f / amax : 0.f;
    int sum = 0;
#pragma unroll
    for (int i = 0; i < 8; i++) {
        int b[4];
#pragma unroll
        for (int j = 0; j < 4; j++) { b[j] = __float2int_rn(x[4 * i + j] * inv); sum += b[j]; }
        ((int*)q)[i] = (b[0] & 0xFF) | ((b[1] & 0xFF) << 8) | ((b[2] & 0xFF) << 16) | ((unsigned)(b[3] & 0xFF) << 24);
    }
    *ds = make_float2(d, d * (float)sum);
}
__device__ __forceinline__ void quant32_at(const float* v, int8_t* q, float2* ds) {
    float x[32];
#pragma unroll
    for (int i = 0; i < 32; i++) x[i] = v[i];
    quant32(x, q, ds);
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// The CT compute threads' sum of v, through red (CW floats of shared memory).
__device__ float block_sum(float v, float* red) {
    int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    v = warp_sum(v);
    if (lane == 0) red[warp] = v;
    cbar();
    float s = 0.f;
    for (int i = 0; i < CW; i++) s += red[i];
    cbar();
    return s;
}

// x (H values, H / CT a thread in vals) normed with weights wv (the thread's, in registers) into
// xf, then quantized into xq/xds.
__device__ void norm_quant(const float* vals, const float* wv, float* xf, int8_t* xq, float2* xds, float* red, int sbase = -1) {
    int tid = threadIdx.x;
    float ss = 0.f;
#pragma unroll
    for (int i = 0; i < H / CT; i++) ss += vals[i] * vals[i];
    if (sbase >= 0) STAMP(sbase);
    ss = block_sum(ss, red);
    if (sbase >= 0) STAMP(sbase + 1);
    float scale = rsqrtf(ss / H + 1e-5f);
#pragma unroll
    for (int i = 0; i < H / CT; i++) xf[tid + i * CT] = vals[i] * scale * wv[i];
    cbar();
    if (sbase >= 0) STAMP(sbase + 2);
    for (int x = tid; x < H / 32; x += CT) quant32_at(xf + 32 * x, xq + 32 * x, xds + x);
    cbar();
}

// One query head (kv head g) of a decode attention at position pos: keys 0..pos-1 from the
// cache, the step's own (knew, vnew: the lane's 4 values) last; q the lane's 4 values. A warp a
// key at a time, loads of several keys issued together; the CT compute threads; scratch:
// MAXPOS + CW * HD floats. out(d, value) for d < HD.
template <class Out>
__device__ void attention_core(const float* kc, const float* vc, int g, int pos, float4 q, float4 knew, float4 vnew,
                               float* scr, float* red, Out out) {
    int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    float* sp = scr;            // MAXPOS
    float* sv = sp + MAXPOS;    // CW x HD partial sums
    const float sc = rsqrtf((float)HD);
    constexpr int KB = 4;
    for (int j0 = warp; j0 <= pos; j0 += KB * CW) {
        float4 k[KB];
#pragma unroll
        for (int u = 0; u < KB; u++) {
            int j = j0 + u * CW;
            k[u] = j < pos ? __ldcg((const float4*)(kc + ((size_t)j * NKV + g) * HD) + lane)
                           : (j == pos ? knew : make_float4(0.f, 0.f, 0.f, 0.f));
        }
#pragma unroll
        for (int u = 0; u < KB; u++) {
            int j = j0 + u * CW;
            float a = warp_sum(q.x * k[u].x + q.y * k[u].y + q.z * k[u].z + q.w * k[u].w);
            if (lane == 0 && j <= pos) sp[j] = a * sc;
        }
    }
    cbar();
    float m = -INFINITY;
    for (int j = tid; j <= pos; j += CT) m = fmaxf(m, sp[j]);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    if (lane == 0) red[warp] = m;
    cbar();
    m = red[0];
    for (int i = 1; i < CW; i++) m = fmaxf(m, red[i]);
    cbar();
    float ls = 0.f;
    for (int j = tid; j <= pos; j += CT) {
        float p = __expf(sp[j] - m);
        sp[j] = p;
        ls += p;
    }
    float l_sum = block_sum(ls, red);
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
    for (int j0 = warp; j0 <= pos; j0 += KB * CW) {
        float4 v[KB];
#pragma unroll
        for (int u = 0; u < KB; u++) {
            int j = j0 + u * CW;
            v[u] = j < pos ? __ldcg((const float4*)(vc + ((size_t)j * NKV + g) * HD) + lane)
                           : (j == pos ? vnew : make_float4(0.f, 0.f, 0.f, 0.f));
        }
#pragma unroll
        for (int u = 0; u < KB; u++) {
            int j = j0 + u * CW;
            float p = j <= pos ? sp[j] : 0.f;
            acc.x += p * v[u].x; acc.y += p * v[u].y; acc.z += p * v[u].z; acc.w += p * v[u].w;
        }
    }
    ((float4*)(sv + warp * HD))[lane] = acc;
    cbar();
    for (int d = tid; d < HD; d += CT) {
        float a = 0.f;
        for (int w = 0; w < CW; w++) a += sv[w * HD + d];
        out(d, a / l_sum);
    }
    cbar();
}

__device__ __forceinline__ void signal(unsigned* c) {
    cbar();
    if (threadIdx.x == 0) {
        __threadfence();
        atomicAdd(c, 1u);
    }
}
__device__ __forceinline__ void wait_for(const unsigned* c, unsigned target) {
    if (threadIdx.x == 0)
        while (ld_acquire(c) < target) {
        }
    cbar();
}

__global__ void __launch_bounds__(THREADS, 1) chain(Params P) {
    extern __shared__ __align__(128) uint8_t smem[];
    __shared__ __align__(8) unsigned long long full[S], empty[S];
    uint8_t* ring = smem;
    int8_t* xq = (int8_t*)(smem + (size_t)S * STAGE);
    float2* xds = (float2*)(xq + FF);
    float* xf = (float*)(xds + FF / 32);
    float* res = xf + H;      // 32 tiles x CW partial sums
    float* scr = xf;          // the attention's scratch (xf is free then): MAXPOS + CW * HD
    float* red = res + 32 * CW;
    int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, b = blockIdx.x, nb = P.nb;
    const unsigned ep = P.ep;
    const bool counters = !P.ll && !(P.mode & 1), poll = P.ll && !(P.mode & 1);
    if (tid == 0) {
        for (int s = 0; s < S; s++) {
            asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_addr(&full[s])));
            asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(&empty[s])), "r"(CW));
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    if (warp == CW) {
        // The producer: the block's tiles of every op of every layer, in the consumers' order.
        if (lane != 0) return;
        unsigned k = 0;
        for (int l = 0; l < P.layers; l++)
            for (int op = 0; op < NOPS; op++) {
                OpShape sh = op_shape(op);
                const uint8_t* base = P.w + (size_t)l * layer_bytes() + op_offset(op);
                for (int t = b; t < sh.ntiles; t += nb, k++) {
                    int s = k % S;
                    if (k >= (unsigned)S) mbar_wait(smem_addr(&empty[s]), ((k / S) - 1) & 1);
                    unsigned bar = smem_addr(&full[s]);
                    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(sh.tile_bytes()) : "memory");
                    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                                     smem_addr(ring + (size_t)s * STAGE)),
                                 "l"(base + (size_t)t * sh.tile_bytes()), "r"(sh.tile_bytes()), "r"(bar)
                                 : "memory");
                }
            }
        return;
    }
    unsigned k = 0;
    // The block's tiles of one op: a row's chunks split over CW / rows_per_tile warps, a lane
    // taking at most one chunk a row, the same column in every tile of the op: its activation
    // blocks are loaded into registers once an op. A lane's partial sums of four tiles are
    // reduced together (6 shuffles for 4 rows instead of 20); the warps' partial sums land in
    // res[tile][warp], summed in a fixed order once the op's tiles are done, and put.
    auto run_op = [&](int op, u64* out, int sfirst) {
        OpShape sh = op_shape(op);
        const int wpr = CW / sh.rows_per_tile, chunks = sh.row_bytes / SB * 4, per = chunks / wpr;
        const int r = warp / wpr, c = (warp % wpr) * per + lane;
        const bool on = lane < per && !(P.mode & 2);
        const int p = c & 3, j0 = 2 * p, j1 = j0 + 1;
        const size_t off = (size_t)r * sh.row_bytes + (size_t)(c >> 2) * SB;
        int4 a0 = {0, 0, 0, 0}, a1 = a0, b0 = a0, b1 = a0;
        float2 da = {0.f, 0.f}, db = da;
        if (on) {
            const int4* xa = (const int4*)(xq + 64 * c);
            a0 = xa[0]; a1 = xa[1]; b0 = xa[2]; b1 = xa[3];
            da = xds[2 * c]; db = xds[2 * c + 1];
        }
        float part[4];
        int i = 0, nq = 0;
        auto flush = [&]() {
            // rows i - nq .. i - 1 of this warp's part: lanes 0, 8, 16, 24 end with rows 0..3.
            bool h16 = lane & 16, h8 = lane & 8;
            float k0 = h16 ? part[2] : part[0], k1 = h16 ? part[3] : part[1];
            float s0 = h16 ? part[0] : part[2], s1 = h16 ? part[1] : part[3];
            k0 += __shfl_xor_sync(0xffffffffu, s0, 16);
            k1 += __shfl_xor_sync(0xffffffffu, s1, 16);
            float kk = h8 ? k1 : k0, ss = h8 ? k0 : k1;
            kk += __shfl_xor_sync(0xffffffffu, ss, 8);
            kk += __shfl_xor_sync(0xffffffffu, kk, 4);
            kk += __shfl_xor_sync(0xffffffffu, kk, 2);
            kk += __shfl_xor_sync(0xffffffffu, kk, 1);
            int q = lane >> 3;
            if ((lane & 7) == 0 && q < nq) res[(i - nq + q) * CW + warp] = kk;
            nq = 0;
        };
        for (int t0 = b; t0 < sh.ntiles; t0 += 4 * nb) {
#pragma unroll
            for (int q4 = 0; q4 < 4; q4++) {
                int t = t0 + q4 * nb;
                part[q4] = 0.f;
                if (t >= sh.ntiles) continue;
                int s = k % S;
                mbar_wait(smem_addr(&full[s]), (k / S) & 1);
                if (i == 0) STAMP(sfirst);
                float a = 0.f;
                if (on) {
                    const uint8_t* sbp = ring + (size_t)s * STAGE + off;
                    __half2 dm = *(const __half2*)sbp;
                    const uint8_t* sc = sbp + 4;
                    int s0, m0, s1, m1;
                    if (j0 < 4) { s0 = sc[j0] & 63; m0 = sc[j0 + 4] & 63; }
                    else { s0 = (sc[j0 + 4] & 0xF) | ((sc[j0 - 4] >> 6) << 4); m0 = (sc[j0 + 4] >> 4) | ((sc[j0] >> 6) << 4); }
                    if (j1 < 4) { s1 = sc[j1] & 63; m1 = sc[j1 + 4] & 63; }
                    else { s1 = (sc[j1 + 4] & 0xF) | ((sc[j1 - 4] >> 6) << 4); m1 = (sc[j1 + 4] >> 4) | ((sc[j1] >> 6) << 4); }
                    const uint4* wq = (const uint4*)(sbp + 16 + 32 * p);
                    uint4 w0 = wq[0], w1 = wq[1];
                    const unsigned M = 0x0F0F0F0Fu;
                    int sl = 0, sh2 = 0;
                    sl = __dp4a((int)(w0.x & M), a0.x, sl); sh2 = __dp4a((int)((w0.x >> 4) & M), b0.x, sh2);
                    sl = __dp4a((int)(w0.y & M), a0.y, sl); sh2 = __dp4a((int)((w0.y >> 4) & M), b0.y, sh2);
                    sl = __dp4a((int)(w0.z & M), a0.z, sl); sh2 = __dp4a((int)((w0.z >> 4) & M), b0.z, sh2);
                    sl = __dp4a((int)(w0.w & M), a0.w, sl); sh2 = __dp4a((int)((w0.w >> 4) & M), b0.w, sh2);
                    sl = __dp4a((int)(w1.x & M), a1.x, sl); sh2 = __dp4a((int)((w1.x >> 4) & M), b1.x, sh2);
                    sl = __dp4a((int)(w1.y & M), a1.y, sl); sh2 = __dp4a((int)((w1.y >> 4) & M), b1.y, sh2);
                    sl = __dp4a((int)(w1.z & M), a1.z, sl); sh2 = __dp4a((int)((w1.z >> 4) & M), b1.z, sh2);
                    sl = __dp4a((int)(w1.w & M), a1.w, sl); sh2 = __dp4a((int)((w1.w >> 4) & M), b1.w, sh2);
                    float d = __low2float(dm), dmin = __high2float(dm);
                    a = d * ((float)s0 * da.x * (float)sl + (float)s1 * db.x * (float)sh2) - dmin * ((float)m0 * da.y + (float)m1 * db.y);
                }
                __syncwarp();
                if (lane == 0) asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_addr(&empty[s])) : "memory");
                part[q4] = a;
                i++;
                k++;
                nq++;
            }
            flush();
        }
        cbar();
        // Epilogues: rows summed from their parts; gate/up pairs into the activation.
        int R = sh.rows_per_tile;
        if (op == OP_GU) {
            for (int x = tid; x < i * 4; x += CT) {
                int ti = x >> 2, rr = x & 3, t = b + ti * nb;
                float g = 0.f, u = 0.f;
                for (int q = 0; q < wpr; q++) {
                    g += res[ti * CW + rr * wpr + q];
                    u += res[ti * CW + (rr + 4) * wpr + q];
                }
                put(out + t * 4 + rr, g / (1.f + __expf(-g)) * u, ep);
            }
        } else {
            for (int x = tid; x < i * R; x += CT) {
                int ti = x / R, rr = x % R, t = b + ti * nb;
                float v = 0.f;
                for (int q = 0; q < wpr; q++) v += res[ti * CW + rr * wpr + q];
                put(out + t * R + rr, v, ep);
            }
        }
    };
    float resid[H / CT], wv[H / CT];
    for (int i = 0; i < H / CT; i++) resid[i] = P.x0[tid + i * CT];
    for (int l = 0; l < P.layers; l++) {
        unsigned* cnt = P.cnt + l * NC;
        if (b == 0 && tid == 0) g_st = P.stamps + l * NSTAMP;
        STAMP(0);
        if (P.mode & 4) {
            // The ring and the mat-vecs alone: no weight-free work, no waits.
            run_op(OP_QKV, P.qkv + (size_t)l * QKV_ROWS, -1);
            run_op(OP_O, P.o + (size_t)l * H, -1);
            run_op(OP_GU, P.hb + (size_t)l * FF, -1);
            run_op(OP_DOWN, P.down + (size_t)l * H, -1);
            cbar();
            continue;
        }
        // The attention's norm on the layer's input: the residual (every block holds it) plus
        // the last layer's down.
#pragma unroll
        for (int i = 0; i < H / CT; i++) wv[i] = P.wn1[(size_t)l * H + tid + i * CT];
        if (l > 0) {
            if (counters) wait_for(P.cnt + (l - 1) * NC + C_DOWN, nb);
            STAMP(1);
            float d[H / CT];
            get_n<H / CT>(P.down + (size_t)(l - 1) * H + tid, CT, d, ep, poll);
#pragma unroll
            for (int i = 0; i < H / CT; i++) resid[i] += d[i];
        }
        norm_quant(resid, wv, xf, xq, xds, red, 13);
        STAMP(2);
        run_op(OP_QKV, P.qkv + (size_t)l * QKV_ROWS, 19);
        if (counters) signal(cnt + C_QKV);
        STAMP(3);
        if (b < NH) {
            if (counters) wait_for(cnt + C_QKV, nb);
            STAMP(4);
            int h = b, g = h / (NH / NKV);
            const u64* qkv = P.qkv + (size_t)l * QKV_ROWS;
            float qv[4], kv[4], vv[4];
            get_n<4>(qkv + h * HD + 4 * lane, 1, qv, ep, poll);
            get_n<4>(qkv + H + g * HD + 4 * lane, 1, kv, ep, poll);
            get_n<4>(qkv + H + NKV * HD + g * HD + 4 * lane, 1, vv, ep, poll);
            float4 q4 = make_float4(qv[0], qv[1], qv[2], qv[3]), k4 = make_float4(kv[0], kv[1], kv[2], kv[3]),
                   v4 = make_float4(vv[0], vv[1], vv[2], vv[3]);
            float* kc = P.kc + (size_t)l * MAXPOS * NKV * HD;
            float* vc = P.vc + (size_t)l * MAXPOS * NKV * HD;
            if (h % (NH / NKV) == 0 && warp == 0) {
                ((float4*)(kc + ((size_t)P.pos * NKV + g) * HD))[lane] = k4;
                ((float4*)(vc + ((size_t)P.pos * NKV + g) * HD))[lane] = v4;
            }
            u64* att = P.att + (size_t)l * H + h * HD;
            attention_core(kc, vc, g, P.pos, q4, k4, v4, scr, red, [&](int d, float v) { put(att + d, v, ep); });
            if (counters) signal(cnt + C_ATT);
        }
        if (counters) wait_for(cnt + C_ATT, NH);
        STAMP(5);
        for (int x = tid; x < H / 32; x += CT) {
            float v[32];
            get_n<32>(P.att + (size_t)l * H + 32 * x, 1, v, ep, poll);
            quant32(v, xq + 32 * x, xds + x);
        }
        cbar();
        STAMP(21);
        run_op(OP_O, P.o + (size_t)l * H, 20);
        if (counters) signal(cnt + C_O);
        STAMP(6);
#pragma unroll
        for (int i = 0; i < H / CT; i++) wv[i] = P.wn2[(size_t)l * H + tid + i * CT];
        if (counters) wait_for(cnt + C_O, nb);
        STAMP(7);
        {
            float o[H / CT];
            get_n<H / CT>(P.o + (size_t)l * H + tid, CT, o, ep, poll);
#pragma unroll
            for (int i = 0; i < H / CT; i++) resid[i] += o[i];
        }
        norm_quant(resid, wv, xf, xq, xds, red, 16);
        STAMP(8);
        run_op(OP_GU, P.hb + (size_t)l * FF, 22);
        if (counters) signal(cnt + C_GU);
        STAMP(9);
        if (counters) wait_for(cnt + C_GU, nb);
        STAMP(10);
        for (int x = tid; x < FF / 32; x += CT) {
            float v[32];
            get_n<32>(P.hb + (size_t)l * FF + 32 * x, 1, v, ep, poll);
            quant32(v, xq + 32 * x, xds + x);
        }
        cbar();
        STAMP(11);
        run_op(OP_DOWN, P.down + (size_t)l * H, 23);
        if (counters) signal(cnt + C_DOWN);
        STAMP(12);
    }
}

// ---------------------------------------------------------------- the reference chain
// Plain kernels on plain f32 buffers, the same functions (other summation orders in the rows).
__global__ void ref_norm(const float* a, const float* b2, const float* wn, float* sum_out, int8_t* xq, float2* xds) {
    __shared__ float xf[H];
    __shared__ float red[CW];
    __shared__ __align__(16) int8_t sq[H];
    __shared__ float2 sds[H / 32];
    int tid = threadIdx.x;
    float vals[H / CT], wv[H / CT];
    for (int i = 0; i < H / CT; i++) {
        int j = tid + i * CT;
        vals[i] = a[j] + (b2 ? b2[j] : 0.f);
        wv[i] = wn[j];
        sum_out[j] = vals[i];
    }
    norm_quant(vals, wv, xf, sq, sds, red);
    for (int j = tid; j < H; j += CT) xq[j] = sq[j];
    for (int j = tid; j < H / 32; j += CT) xds[j] = sds[j];
}
__global__ void ref_quant(const float* v, int n, int8_t* xq, float2* xds) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n / 32) quant32_at(v + 32 * i, xq + 32 * i, xds + i);
}
// A warp a row, lanes over chunks in order; rows numbered as the tiles hold them.
__global__ void ref_matvec(const uint8_t* w, int op, const int8_t* xq, const float2* xds, float* out) {
    OpShape sh = op_shape(op);
    int r = blockIdx.x * 4 + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (r >= sh.ntiles * sh.rows_per_tile) return;
    const uint8_t* row = w + (size_t)(r / sh.rows_per_tile) * sh.tile_bytes() + (r % sh.rows_per_tile) * sh.row_bytes;
    int chunks = sh.row_bytes / SB * 4;
    float a = 0.f;
    for (int c = lane; c < chunks; c += 32) a += chunk_dot(row + (c >> 2) * SB, c & 3, xq, xds, 2 * c);
    a = warp_sum(a);
    if (lane == 0) out[r] = a;
}
__global__ void ref_act(const float* gu, float* h) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= FF) return;
    int t = i / 4, r = i % 4;
    float g = gu[t * 8 + r], u = gu[t * 8 + 4 + r];
    h[i] = g / (1.f + __expf(-g)) * u;
}
__global__ void ref_attention(float* kc, float* vc, int pos, const float* qkv, float* att) {
    extern __shared__ float scr[];
    __shared__ float red[CW];
    int h = blockIdx.x, g = h / (NH / NKV), lane = threadIdx.x & 31;
    float4 q4 = ((const float4*)(qkv + h * HD))[lane], k4 = ((const float4*)(qkv + H + g * HD))[lane],
           v4 = ((const float4*)(qkv + H + NKV * HD + g * HD))[lane];
    if (h % (NH / NKV) == 0 && threadIdx.x < 32) {
        ((float4*)(kc + ((size_t)pos * NKV + g) * HD))[lane] = k4;
        ((float4*)(vc + ((size_t)pos * NKV + g) * HD))[lane] = v4;
    }
    attention_core(kc, vc, g, pos, q4, k4, v4, scr, red, [&](int d, float v) { att[h * HD + d] = v; });
}
__global__ void ref_add(const float* a, const float* b2, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a[i] + b2[i];
}

// ---------------------------------------------------------------- init and streaming
__device__ __forceinline__ uint32_t hash32(uint64_t x) {
    x ^= x >> 33; x *= 0xff51afd7ed558ccdULL; x ^= x >> 33; x *= 0xc4ceb9fe1a85ec53ULL; x ^= x >> 33;
    return (uint32_t)x;
}
__global__ void init_bytes(uint32_t* p, size_t n, uint64_t seed) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        p[i] = hash32(i * 0x9E3779B97F4A7C15ULL + seed);
}
// Every super-block's d and dmin made small and sane.
__global__ void init_headers(uint8_t* w, size_t nsb) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < nsb; i += (size_t)gridDim.x * blockDim.x) {
        uint32_t h = hash32(i + 12345);
        float d = 1e-4f * (0.5f + (h & 0xFFFF) / 65536.f), dm = d * (6.5f + 2.f * ((h >> 16) / 65536.f));
        *(__half2*)(w + i * SB) = __floats2half2_rn(d, dm);
    }
}
__global__ void init_floats(float* p, size_t n, uint64_t seed, float lo, float hi) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        p[i] = lo + (hi - lo) * (hash32(i + seed) / 4294967296.f);
}
__global__ void stream_read(const uint4* p, size_t n, unsigned* sink) {
    unsigned acc = 0;
    size_t stride = (size_t)gridDim.x * blockDim.x;
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    for (; i + 3 * stride < n; i += 4 * stride) {
        uint4 a = __ldcs(p + i), b2 = __ldcs(p + i + stride), c = __ldcs(p + i + 2 * stride), d = __ldcs(p + i + 3 * stride);
        acc += a.x ^ b2.y ^ c.z ^ d.w;
    }
    for (; i < n; i += stride) acc += __ldcs(p + i).x;
    if (acc == 0x12345678u) sink[0] = acc;
}

template <class F>
float median_ms(F f, int reps) {
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    std::vector<float> v;
    for (int r = 0; r < reps; r++) {
        f(true);
        CK(cudaEventRecord(a));
        f(false);
        CK(cudaEventRecord(b));
        CK(cudaEventSynchronize(b));
        float ms;
        CK(cudaEventElapsedTime(&ms, a, b));
        v.push_back(ms);
    }
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

int main(int argc, char** argv) {
    int layers = argc > 1 ? atoi(argv[1]) : 32, pos = argc > 2 ? atoi(argv[2]) : 64;
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    int nb = prop.multiProcessorCount;
    size_t lb = layer_bytes(), wbytes = lb * layers;
    printf("device %s, %d SMs; %d layers of %.2f MB (Q4_K), pos %d, %d stages of %d bytes, %d threads a block\n", prop.name,
           nb, layers, lb / 1e6, pos, S, STAGE, THREADS);
    Params P{};
    uint8_t* w;
    CK(cudaMalloc(&w, wbytes));
    init_bytes<<<4096, 256>>>((uint32_t*)w, wbytes / 4, 7);
    init_headers<<<4096, 256>>>(w, wbytes / SB);
    auto fal = [](size_t n) { float* p; CK(cudaMalloc(&p, n * 4)); CK(cudaMemset(p, 0, n * 4)); return p; };
    auto ual = [](size_t n) { u64* p; CK(cudaMalloc(&p, n * 8)); CK(cudaMemset(p, 0, n * 8)); return p; };
    float* x0 = fal(H);
    float *wn1 = fal((size_t)layers * H), *wn2 = fal((size_t)layers * H);
    size_t kvn = (size_t)layers * MAXPOS * NKV * HD;
    float *kc = fal(kvn), *vc = fal(kvn);
    init_floats<<<256, 256>>>(x0, H, 1, -1.f, 1.f);
    init_floats<<<1024, 256>>>(wn1, (size_t)layers * H, 2, 0.5f, 1.5f);
    init_floats<<<1024, 256>>>(wn2, (size_t)layers * H, 3, 0.5f, 1.5f);
    init_floats<<<4096, 256>>>(kc, kvn, 4, -1.f, 1.f);
    init_floats<<<4096, 256>>>(vc, kvn, 5, -1.f, 1.f);
    P.w = w; P.x0 = x0; P.wn1 = wn1; P.wn2 = wn2; P.kc = kc; P.vc = vc;
    P.qkv = ual((size_t)layers * QKV_ROWS); P.att = ual((size_t)layers * H); P.o = ual((size_t)layers * H);
    P.hb = ual((size_t)layers * FF); P.down = ual((size_t)layers * H);
    CK(cudaMalloc(&P.cnt, layers * NC * 4));
    CK(cudaMalloc(&P.stamps, layers * NSTAMP * 8));
    P.layers = layers; P.pos = pos; P.nb = nb;
    size_t smem = (size_t)S * STAGE + FF + FF / 32 * 8 + H * 4 + 32 * CW * 4 + CW * 4;
    static_assert(MAXPOS + CW * HD <= H, "the attention's scratch fits xf");
    CK(cudaFuncSetAttribute(chain, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    CK(cudaDeviceSynchronize());

    // The reference chain first (its KV rows are the same writes).
    float *rqkv = fal(QKV_ROWS), *ratt = fal(H), *ro = fal(H), *rgu = fal(2 * FF), *rh = fal(FF), *rdown = fal(H);
    float *rra = fal(H), *rr2 = fal(H), *rin = fal(H);
    int8_t* rxq; float2* rxds;
    CK(cudaMalloc(&rxq, FF)); CK(cudaMalloc(&rxds, FF / 32 * 8));
    CK(cudaMemcpy(rin, x0, H * 4, cudaMemcpyDeviceToDevice));
    std::vector<float> ref_l0(QKV_ROWS), ref_d0(H), ref_dl(H);
    for (int l = 0; l < layers; l++) {
        const uint8_t* wl = w + (size_t)l * lb;
        ref_norm<<<1, CT>>>(rin, nullptr, wn1 + (size_t)l * H, rra, rxq, rxds);
        ref_matvec<<<QKV_ROWS / 4, 128>>>(wl + op_offset(OP_QKV), OP_QKV, rxq, rxds, rqkv);
        if (l == 0) CK(cudaMemcpy(ref_l0.data(), rqkv, QKV_ROWS * 4, cudaMemcpyDeviceToHost));
        ref_attention<<<NH, CT, (MAXPOS + CW * HD) * 4>>>(kc + (size_t)l * MAXPOS * NKV * HD, vc + (size_t)l * MAXPOS * NKV * HD,
                                                         pos, rqkv, ratt);
        ref_quant<<<1, 128>>>(ratt, H, rxq, rxds);
        ref_matvec<<<H / 4, 128>>>(wl + op_offset(OP_O), OP_O, rxq, rxds, ro);
        ref_norm<<<1, CT>>>(rra, ro, wn2 + (size_t)l * H, rr2, rxq, rxds);
        ref_matvec<<<2 * FF / 4, 128>>>(wl + op_offset(OP_GU), OP_GU, rxq, rxds, rgu);
        ref_act<<<FF / 256, 256>>>(rgu, rh);
        ref_quant<<<(FF / 32 + 127) / 128, 128>>>(rh, FF, rxq, rxds);
        ref_matvec<<<H / 4, 128>>>(wl + op_offset(OP_DOWN), OP_DOWN, rxq, rxds, rdown);
        if (l == 0) CK(cudaMemcpy(ref_d0.data(), rdown, H * 4, cudaMemcpyDeviceToHost));
        if (l == layers - 1) CK(cudaMemcpy(ref_dl.data(), rdown, H * 4, cudaMemcpyDeviceToHost));
        ref_add<<<H / 256, 256>>>(rr2, rdown, rin, H);
    }
    CK(cudaDeviceSynchronize());
    CK(cudaGetLastError());

    unsigned run = 0;
    auto launch = [&](int mode, int ll) {
        Params Q = P;
        Q.mode = mode; Q.ll = ll; Q.ep = ++run;
        if (!ll) CK(cudaMemsetAsync(P.cnt, 0, layers * NC * 4));
        chain<<<nb, THREADS, smem>>>(Q);
    };
    auto lo = [](const std::vector<u64>& v) {
        std::vector<float> f(v.size());
        for (size_t i = 0; i < v.size(); i++) f[i] = __builtin_bit_cast(float, (unsigned)v[i]);
        return f;
    };
    auto rel = [](const std::vector<float>& x, const std::vector<float>& y) {
        double e = 0, m = 0;
        for (size_t j = 0; j < x.size(); j++) { e = std::max(e, (double)fabsf(x[j] - y[j])); m = std::max(m, (double)fabsf(y[j])); }
        return std::isfinite(e) && m > 0 ? e / m : 1e9;
    };
    for (int ll = 0; ll < 2; ll++) {
        launch(0, ll);
        CK(cudaDeviceSynchronize());
        CK(cudaGetLastError());
        std::vector<u64> q0(QKV_ROWS), d0(H), dl(H);
        CK(cudaMemcpy(q0.data(), P.qkv, QKV_ROWS * 8, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(d0.data(), P.down, H * 8, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(dl.data(), P.down + (size_t)(layers - 1) * H, H * 8, cudaMemcpyDeviceToHost));
        double e0 = rel(lo(q0), ref_l0), ed0 = rel(lo(d0), ref_d0), edl = rel(lo(dl), ref_dl);
        printf("check (%s): against the reference chain, max |diff| / max: layer 0 q/k/v %.2e, down %.2e; layer %d down %.2e%s\n",
               ll ? "values as flags" : "counters", e0, ed0, layers - 1, edl, e0 < 1e-5 && ed0 < 1e-4 && edl < 0.2 ? "" : "  ** MISMATCH **");
    }

    unsigned* sink;
    CK(cudaMalloc(&sink, 4));
    std::vector<unsigned long long> stamps(layers * NSTAMP);
    float ms_stream = median_ms([&](bool pre) { if (!pre) stream_read<<<nb * 8, 512>>>((const uint4*)w, wbytes / 16, sink); }, 7);
    double gb = wbytes / 1e9;
    printf("streaming read (16-byte loads) of the %.3f GB: %.3f ms, %.1f GB/s\n", gb, ms_stream, gb / ms_stream * 1e3);
    auto report = [&](const char* what, int mode, int ll) {
        float ms = median_ms([&](bool pre) { if (!pre) launch(mode, ll); }, 7);
        CK(cudaGetLastError());
        printf("%-62s %.3f ms, %6.2f us a layer, %6.1f GB/s, %5.1f%% of the read\n", what, ms, ms * 1e3 / layers, gb / ms * 1e3,
               100.0 * ms_stream / ms);
    };
    const char* names[NSTAMP] = {"start",          "the last down's all",   "norm 1",
                                 "q/k/v rows",     "q/k/v all",             "attention all (+ own head)",
                                 "o rows",         "o all",                 "norm 2",
                                 "gate/up rows",   "gate/up all",           "h quantized",
                                 "down rows",
                                 "  norm 1: its sum of squares", "  norm 1: reduced", "  norm 1: normed (then quantized)",
                                 "  norm 2: its sum of squares", "  norm 2: reduced", "  norm 2: normed",
                                 "  q/k/v: first tile in", "  o: first tile in", "  attention output quantized",
                                 "  gate/up: first tile in", "  down: first tile in"};
    auto phases = [&](const char* what) {
        CK(cudaMemcpy(stamps.data(), P.stamps, stamps.size() * 8, cudaMemcpyDeviceToHost));
        printf("block 0, %s, a layer (mean of layers 1..%d), us from the layer's start:\n", what, layers - 2);
        int order[NSTAMP - 1] = {1, 13, 14, 15, 2, 19, 3, 4, 5, 21, 20, 6, 7, 16, 17, 18, 8, 22, 9, 10, 11, 23, 12};
        for (int p : order) {
            double s = 0;
            int n = 0;
            for (int l = 1; l < layers - 1; l++, n++) s += (stamps[l * NSTAMP + p] - stamps[l * NSTAMP]) / 1e3;
            printf("  %-34s %8.2f\n", names[p], n ? s / n : 0.0);
        }
        double s = 0;
        int n = 0;
        for (int l = 1; l < layers - 1; l++, n++) s += (stamps[(l + 1) * NSTAMP] - stamps[l * NSTAMP]) / 1e3;
        printf("  %-34s %8.2f\n", "next layer's start", n ? s / n : 0.0);
    };
    report("chain, counters between ops:", 0, 0);
    phases("counters");
    report("chain, values as flags:", 0, 1);
    phases("values as flags");
    report("  bound, no waits (wrong values):", 1, 1);
    report("  bound, no waits and no arithmetic:", 3, 1);
    report("  the ring and the mat-vecs alone (no weight-free work):", 4, 1);
    report("  the ring alone (no weight-free work, no arithmetic):", 6, 1);
    return 0;
}
