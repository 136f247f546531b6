// Does a decode step leave memory idle, and would a weight streamer beside the step fill it?
//
// A decode step is a chain of kernels: mat-vecs that stream weights, and between them kernels
// that read none (attention, norms, quantizers). The weights do not depend on the activations,
// so nothing but the chain's order keeps memory from reading the next weights while a
// weight-free kernel runs. This lab builds such a chain with the production mat-vecs
// (kernels.cu, included as NVRTC compiles it) and stand-ins for the weight-free kernels (a
// wait, then a fixed spin, then the next launch let go, as residual_norm does), in the shapes
// of the 8B and of SmolLM2, each layer's weights its own. It times the chain's graph (median
// of 7 replays) alone, and with a streamer: warps on a parallel branch of the same graph that
// ask L2 for the weights ahead of the chain (`cp.async.bulk.prefetch.L2`), at most a window
// past the start of the mat-vec the chain has reached (a counter the stand-ins set).
// Modes (the first argument), each a question of session 27 (BENCHMARKS.md):
//   (none)  the streamer, and a probe of the bulk prefetch (not built: no gain on the 8B)
//   q6      Q6_K mat-vecs in GGUF's blocks against planes, alone and in the 8B chain (kept:
//           plan::q6k_planar)
//   q4      the same for Q4_K (gained here, not in the step: not kept)
//   p32     the same for Q4_1, Q5_0, Q8_0 (no gain: not built)
// Compiled on the development machine (nvcc from pip, static runtime) and carried:
//   nvcc -arch=sm_90 -O3 --fmad=false -std=c++17 -diag-suppress 128,177,550 \
//       -o .device/lab/l2_stream bench/stream_lab/l2_stream.cu
// (bench/session27_gpu.sh runs it: LAB_ARGS=q6 bash bench/session27_gpu.sh.)
__device__ unsigned emu_tf32_rna(float);
__device__ void emu_mma_tf32(float*, const unsigned*, const unsigned*);
#include "../../crates/backend-cuda/src/kernels.cu"
#include "../gemv_lab/lab_common.cuh"
#include <string>

__device__ __forceinline__ unsigned long long gtime() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)::"memory");
    return t;
}

// A weight-free kernel's stand-in: waits for the kernel before, records which mat-vec the chain
// has reached, lets the next kernel launch, and holds its blocks for `ns`.
__global__ void __launch_bounds__(128) stand_in(unsigned long long ns, unsigned* progress, unsigned next) {
    GRID_WAIT();
    if (progress && blockIdx.x == 0 && threadIdx.x == 0) atomicExch(progress, next);
    GRID_LAUNCH();
    unsigned long long t0 = gtime();
    while (gtime() - t0 < ns) {
    }
}

struct Seg {
    const u8* p;
    unsigned long long bytes;
};

// gridDim.x warps, one a block (a TMA unit an SM). The step's weights are one byte stream
// (cum[i]: the bytes of the segments before i) cut into chunks of `chunk` bytes; worker w (block
// g, lane l: w = 32 g + l) asks L2 for chunks w, w + W, ... (W workers) in turn, each once the
// chain's mat-vec *progress has come close enough: a chunk is issued once it starts below
// cum[cur] + window, and skipped if it ends at or below cum[cur] + skip (skip: 0, or the
// current mat-vec's size with from_next).
__global__ void streamer(const Seg* segs, const unsigned long long* cum, int nseg, const volatile unsigned* progress,
                         unsigned long long window, int from_next, unsigned chunk) {
    unsigned long long w = (unsigned long long)blockIdx.x * 32 + (threadIdx.x & 31);
    unsigned long long nw = (unsigned long long)gridDim.x * 32;
    unsigned long long total = cum[nseg];
    int s = 0;
    for (unsigned long long j = w; j * chunk < total; j += nw) {
        unsigned long long a = j * chunk, e = min(a + chunk, total);
        for (;;) {
            unsigned cur = *progress;
            if (cur >= (unsigned)nseg) return;
            unsigned long long lo = cum[cur] + (from_next ? segs[cur].bytes : 0);
            if (e <= lo) break;  // the chain is past it: skip
            if (a < cum[cur] + window) {
                // issue [a, e) segment by segment
                while (s < nseg && cum[s + 1] <= a) s++;
                for (int t = s; t < nseg && cum[t] < e; t++) {
                    unsigned long long x = max(a, cum[t]) - cum[t], y = min(e, cum[t + 1]) - cum[t];
                    if (y > x)
                        asm volatile(
                            "{\n\t.reg .u64 g;\n\tcvta.to.global.u64 g, %0;\n\t"
                            "cp.async.bulk.prefetch.L2.global [g], %1;\n\t}" ::"l"(segs[t].p + x),
                            "r"((u32)(y - x))
                            : "memory");
                }
                break;
            }
            __nanosleep(200);
        }
    }
}

// Asks L2 for [p, p + n): worker w takes chunks w, w + workers, ...
__global__ void prefetch_all(const u8* p, unsigned long long n, unsigned chunk) {
    unsigned long long w = (unsigned long long)blockIdx.x * 32 + (threadIdx.x & 31);
    for (unsigned long long a = w * chunk; a < n; a += (unsigned long long)gridDim.x * 32 * chunk) {
        unsigned long long e = min(a + chunk, n);
        asm volatile(
            "{\n\t.reg .u64 g;\n\tcvta.to.global.u64 g, %0;\n\t"
            "cp.async.bulk.prefetch.L2.global [g], %1;\n\t}" ::"l"(p + a),
            "r"((u32)(e - a))
            : "memory");
    }
}

__global__ void hold(unsigned long long ns) {
    unsigned long long t0 = gtime();
    while (gtime() - t0 < ns) {
    }
}

// Q6_K with each row's super-blocks stored as planes (lab): for the row's units (64 values,
// FastUnit<T_Q6_K>'s), plane A holds each unit's first 16 ql bytes, plane B its second 16, plane
// H its 16 qh bytes, plane S its 4 scales, then the super-blocks' d. Same bytes a row (210 a
// super-block), so row r starts where it did; a lane's loads are 3 x 16 + 4 + 2 bytes instead
// of 20 narrow loads, and consecutive lanes read consecutive bytes.
struct Q6Planar {
    float d;
    int sc[4];
    int q[16];
    __device__ __forceinline__ void load(const u8* row, int u, int units) {
        const u8* A = row;
        const u8* B = row + 16 * (size_t)units;
        const u8* H = row + 32 * (size_t)units;
        const u8* S = row + 48 * (size_t)units;
        const u8* D = row + 52 * (size_t)units;
        uint4 a = ldw16(A + 16 * (size_t)u), b = ldw16(B + 16 * (size_t)u), h = ldw16(H + 16 * (size_t)u);
        u32 sc4 = ldw4(S + 4 * (size_t)u);
        d = ldwh(D + 2 * (size_t)(u >> 2));
#pragma unroll
        for (int k = 0; k < 4; k++) sc[k] = (int)(signed char)((sc4 >> (8 * k)) & 0xFF);
        u32 wa[4] = {a.x, a.y, a.z, a.w}, wb[4] = {b.x, b.y, b.z, b.w}, wh[4] = {h.x, h.y, h.z, h.w};
#pragma unroll
        for (int i = 0; i < 4; i++) {
            u32 A_ = wa[i], B_ = wb[i], H_ = wh[i];
            q[i] = (int)__vsub4((A_ & 0x0F0F0F0Fu) | ((H_ << 4) & 0x30303030u), 0x20202020u);
            q[4 + i] = (int)__vsub4((B_ & 0x0F0F0F0Fu) | ((H_ << 2) & 0x30303030u), 0x20202020u);
            q[8 + i] = (int)__vsub4(((A_ >> 4) & 0x0F0F0F0Fu) | (H_ & 0x30303030u), 0x20202020u);
            q[12 + i] = (int)__vsub4(((B_ >> 4) & 0x0F0F0F0Fu) | ((H_ >> 2) & 0x30303030u), 0x20202020u);
        }
    }
    __device__ __forceinline__ float dot(const signed char* xq, const Q8Blk* xd, int u, float acc) const {
        int sb = u >> 2, n = (u >> 1) & 1, h = u & 1;
#pragma unroll
        for (int k = 0; k < 4; k++) {
            int ab = sb * 8 + 4 * n + k;
            int4 x = *(const int4*)(xq + (size_t)ab * 32 + 16 * h);
            int is = 0;
            is = __dp4a(q[4 * k], x.x, is);
            is = __dp4a(q[4 * k + 1], x.y, is);
            is = __dp4a(q[4 * k + 2], x.z, is);
            is = __dp4a(q[4 * k + 3], x.w, is);
            acc = __fmaf_rn(d * xd[ab].d, (float)(sc[k] * is), acc);
        }
        return acc;
    }
};

// fast_rows_nr's structure (NR rows a warp, the first unit's loads before the grid wait) on
// the planar Q6_K rows.
template <int NR>
__global__ void __launch_bounds__(128) mmv_q6planar(const u8* W, const signed char* xq, const Q8Blk* xd, float* y, int n, int k, int m) {
    GRID_LAUNCH();
    int r0 = (blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5)) * NR;
    if (r0 >= m) return;
    int lane = threadIdx.x & 31;
    int units = k / 64;
    size_t rb = (size_t)units * 52 + (size_t)(units >> 2) * 2;
    float acc[NR];
#pragma unroll
    for (int j = 0; j < NR; j++) acc[j] = 0.0f;
    auto unit = [&](int u, bool wait) {
        Q6Planar w[NR];
#pragma unroll
        for (int j = 0; j < NR; j++)
            if (r0 + j < m) w[j].load(W + (size_t)(r0 + j) * rb, u, units);
        if (wait) GRID_WAIT();
#pragma unroll
        for (int j = 0; j < NR; j++)
            if (r0 + j < m) acc[j] = w[j].dot(xq, xd, u, acc[j]);
    };
    if (lane < units) unit(lane, true);
    else GRID_WAIT();
    for (int u = lane + 32; u < units; u += 32) unit(u, false);
#pragma unroll
    for (int j = 0; j < NR; j++) {
        float v = warp_sum_fixed(acc[j]);
        if (lane == 0 && r0 + j < m) y[r0 + j] = v;
    }
}

// Q4_K in planes (lab): every 8 super-blocks (1152 bytes) hold plane A (each 64-value unit's
// first 16 quant bytes), plane B (its second 16), then the 8 super-blocks' 16-byte headers (d,
// dmin, 12 scale bytes). The unit's arithmetic is FastUnitK45's. Needs the pool at a multiple of
// 1152 (the lab's pools are 256-aligned: member from (address - pool) would be exact; here the
// address is used as the kernels would, with the pool aligned to 1152 by the caller).
struct Q4Planar {
    float d, dmin;
    int sc[2], mn[2];
    int q[16];
    __device__ __forceinline__ void load(const u8* row, int u) {
        int sb = u >> 2, jp = u & 3;
        const u8* b = row + (size_t)sb * 144;
        int idx = (int)(((size_t)b / 144) & 7), j = 4 * idx + jp;
        const u8* g = b - idx * 144;
        uint4 h = ldw16(g + 1024 + 16 * idx);
        d = h2f((u16)(h.x & 0xFFFF));
        dmin = h2f((u16)(h.x >> 16));
#pragma unroll
        for (int s = 0; s < 2; s++) {
            int jj = 2 * jp + s, i = jj & 3;
            u32 a = (h.y >> (8 * i)) & 0xFF, c = (h.z >> (8 * i)) & 0xFF, e = (h.w >> (8 * i)) & 0xFF;
            sc[s] = jj < 4 ? (int)(a & 63) : (int)((e & 0xF) | ((a >> 6) << 4));
            mn[s] = jj < 4 ? (int)(c & 63) : (int)((e >> 4) | ((c >> 6) << 4));
        }
        uint4 q0 = ldw16(g + 16 * j), q1 = ldw16(g + 512 + 16 * j);
        u32 v[8] = {q0.x, q0.y, q0.z, q0.w, q1.x, q1.y, q1.z, q1.w};
#pragma unroll
        for (int i = 0; i < 8; i++) {
            q[i] = (int)(v[i] & 0x0F0F0F0Fu);
            q[8 + i] = (int)((v[i] >> 4) & 0x0F0F0F0Fu);
        }
    }
    __device__ __forceinline__ float dot(const signed char* xq, const Q8Blk* xd, int u, float acc) const {
        int sb = u >> 2, jp = u & 3;
#pragma unroll
        for (int s = 0; s < 2; s++) {
            int ab = sb * 8 + 2 * jp + s;
            const int4* xv = (const int4*)(xq + (size_t)ab * 32);
            int4 x0 = xv[0], x1 = xv[1];
            int xa[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
            int is = 0;
#pragma unroll
            for (int i = 0; i < 8; i++) is = __dp4a(q[8 * s + i], xa[i], is);
            Q8Blk a = xd[ab];
            acc = __fmaf_rn(d * a.d, (float)(sc[s] * is), acc);
            acc = __fmaf_rn(dmin * a.d, (float)(-(mn[s] * a.s)), acc);
        }
        return acc;
    }
};

template <int NR, bool PAIR>
__global__ void __launch_bounds__(128) mmv_q4planar(const u8* W, const u8* W2, const signed char* xq, const Q8Blk* xd, float* y, float* y2, int k, int m) {
    GRID_LAUNCH();
    int r0 = (blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5)) * NR;
    if (r0 >= m) return;
    int lane = threadIdx.x & 31;
    int units = k / 64;
    size_t rb = (size_t)(k / 256) * 144;
    float acc[NR], acc2[NR];
#pragma unroll
    for (int j = 0; j < NR; j++) acc[j] = acc2[j] = 0.0f;
    auto unit = [&](int u, bool wait) {
        Q4Planar w[NR], w2[PAIR ? NR : 1];
#pragma unroll
        for (int j = 0; j < NR; j++)
            if (r0 + j < m) {
                w[j].load(W + (size_t)(r0 + j) * rb, u);
                if constexpr (PAIR) w2[j].load(W2 + (size_t)(r0 + j) * rb, u);
            }
        if (wait) GRID_WAIT();
#pragma unroll
        for (int j = 0; j < NR; j++)
            if (r0 + j < m) {
                acc[j] = w[j].dot(xq, xd, u, acc[j]);
                if constexpr (PAIR) acc2[j] = w2[j].dot(xq, xd, u, acc2[j]);
            }
    };
    if (lane < units) unit(lane, true);
    else GRID_WAIT();
    for (int u = lane + 32; u < units; u += 32) unit(u, false);
#pragma unroll
    for (int j = 0; j < NR; j++) {
        float v = warp_sum_fixed(acc[j]);
        float v2 = PAIR ? warp_sum_fixed(acc2[j]) : 0.0f;
        if (lane == 0 && r0 + j < m) {
            y[r0 + j] = v;
            if constexpr (PAIR) y2[r0 + j] = v2;
        }
    }
}

// 32-value types in planes (lab): each 8 consecutive blocks hold their 16 (Q8_0: 2 x 16) quant
// bytes as planes, then the small fields (Q4_1: d and m; Q5_0: qh, then d; Q8_0: d). The unit's
// arithmetic is FastUnit's (the lab units derive from it and replace its load). The pool sits at
// a multiple of the group's bytes.
template <int TY>
struct P32;
template <>
struct P32<T_Q4_1> : FastUnit<T_Q4_1> {
    __device__ __forceinline__ void load(const u8* row, int u) {
        const u8* b = row + (size_t)u * 20;
        int idx = (int)(((size_t)b / 20) & 7);
        const u8* g = b - idx * 20;
        uint4 v = ldw16(g + 16 * idx);
        u32 dm = ldw4(g + 128 + 4 * idx);
        d = h2f((u16)(dm & 0xFFFF));
        m = h2f((u16)(dm >> 16));
        q[0] = (int)v.x; q[1] = (int)v.y; q[2] = (int)v.z; q[3] = (int)v.w;
    }
};
template <>
struct P32<T_Q5_0> : FastUnit<T_Q5_0> {
    __device__ __forceinline__ void load(const u8* row, int u) {
        const u8* b = row + (size_t)u * 22;
        int idx = (int)(((size_t)b / 22) & 7);
        const u8* g = b - idx * 22;
        uint4 v4 = ldw16(g + 16 * idx);
        u32 qh = ldw4(g + 128 + 4 * idx);
        d = ldwh(g + 160 + 2 * idx);
        int w[4] = {(int)v4.x, (int)v4.y, (int)v4.z, (int)v4.w};
#pragma unroll
        for (int i = 0; i < 4; i++) {
            int v = w[i];
            q[i] = (v & 0x0F0F0F0F) | hb4(qh >> (4 * i));
            q[4 + i] = ((v >> 4) & 0x0F0F0F0F) | hb4(qh >> (16 + 4 * i));
        }
    }
};
template <>
struct P32<T_Q8_0> : FastUnit<T_Q8_0> {
    __device__ __forceinline__ void load(const u8* row, int u) {
        const u8* b = row + (size_t)u * 34;
        int idx = (int)(((size_t)b / 34) & 7);
        const u8* g = b - idx * 34;
        uint4 a = ldw16(g + 16 * idx), c = ldw16(g + 128 + 16 * idx);
        d = ldwh(g + 256 + 2 * idx);
        q[0] = (int)a.x; q[1] = (int)a.y; q[2] = (int)a.z; q[3] = (int)a.w;
        q[4] = (int)c.x; q[5] = (int)c.y; q[6] = (int)c.z; q[7] = (int)c.w;
    }
};

// One loop for both units (UNIT = FastUnit<TY>: GGUF's blocks; P32<TY>: the planes): NR rows a
// warp, PAIR a gate/up pair, the first unit's loads before the grid wait.
template <class UNIT, int TY, int NR, bool PAIR>
__global__ void __launch_bounds__(128) mmv_unit(const u8* W, const u8* W2, const signed char* xq, const Q8Blk* xd, float* y, float* y2, int k, int m) {
    GRID_LAUNCH();
    int r0 = (blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5)) * NR;
    if (r0 >= m) return;
    int lane = threadIdx.x & 31;
    int units = k / 32;
    size_t rb = (size_t)units * block_bytes(TY);
    float acc[NR], acc2[NR];
#pragma unroll
    for (int j = 0; j < NR; j++) acc[j] = acc2[j] = 0.0f;
    auto unit = [&](int u, bool wait) {
        UNIT w[NR], w2[PAIR ? NR : 1];
#pragma unroll
        for (int j = 0; j < NR; j++)
            if (r0 + j < m) {
                w[j].load(W + (size_t)(r0 + j) * rb, u);
                if constexpr (PAIR) w2[j].load(W2 + (size_t)(r0 + j) * rb, u);
            }
        if (wait) GRID_WAIT();
#pragma unroll
        for (int j = 0; j < NR; j++)
            if (r0 + j < m) {
                acc[j] = w[j].dot(xq, xd, u, acc[j]);
                if constexpr (PAIR) acc2[j] = w2[j].dot(xq, xd, u, acc2[j]);
            }
    };
    if (lane < units) unit(lane, true);
    else GRID_WAIT();
    for (int u = lane + 32; u < units; u += 32) unit(u, false);
#pragma unroll
    for (int j = 0; j < NR; j++) {
        float v = warp_sum_fixed(acc[j]);
        float v2 = PAIR ? warp_sum_fixed(acc2[j]) : 0.0f;
        if (lane == 0 && r0 + j < m) {
            y[r0 + j] = v;
            if constexpr (PAIR) y2[r0 + j] = v2;
        }
    }
}

struct Mv {
    int kind;  // 0: mmv3 (q/k/v), 1: mmv, 2: gate/up pair, 3: mmv of planar Q6_K
    int ty;
    int m, k, m1, m2;  // rows (mmv3: q, k, v rows)
    bool two;          // two rows a warp
};

static size_t rowb(int ty, int k) {
    switch (ty) {
        case T_Q4_K: return (size_t)k / 256 * 144;
        case T_Q6_K: return (size_t)k / 256 * 210;
        case T_Q4_1: return (size_t)k / 32 * 20;
        case T_Q5_0: return (size_t)k / 32 * 22;
        default: return (size_t)k / 32 * 34;  // Q8_0
    }
}
static size_t mv_bytes(const Mv& v) {
    size_t r = rowb(v.ty, v.k);
    if (v.kind == 0) return r * (v.m + v.m1 + v.m2);
    if (v.kind == 2 || v.kind == 5 || ((v.kind == 6 || v.kind == 7) && v.m1 == 1)) return r * v.m * 2;
    return r * v.m;
}

struct Chain {
    const char* name;
    std::vector<Mv> layer;            // the layer's mat-vecs in order
    std::vector<unsigned long long> spin_ns;  // the stand-in after each (0: none)
    std::vector<int> spin_blocks;
    int layers;
};

struct Bufs {
    const signed char* xq;
    const Q8Blk* xd;
    float *y0, *y1, *y2, *y3;
};

// The production launch for one mat-vec of the chain (the kernels plan.rs would pick).
static void launch_mv(cudaStream_t s, bool pdl, const Mv& v, const u8* W, const Bufs& b) {
    size_t r = rowb(v.ty, v.k);
    int n1 = 1;
    int rpb = v.two ? 8 : 4;  // rows a 128-thread block
    if (v.kind == 0) {
        int rows = v.m + v.m1 + v.m2;
        const u8 *W1 = W + r * v.m, *W2 = W1 + r * v.m1;
        auto k = v.ty == T_Q4_K ? (v.two ? mmv3_fast2r_12 : mmv3_fast1_12) : (v.two ? mmv3_fast2r_3 : mmv3_fast1_3);
        launch_pdl(s, pdl, k, dim3((rows + rpb - 1) / rpb), dim3(128), W, W1, W2, b.xq, b.xd, b.y0, b.y1, b.y2, n1, v.k, v.m, v.m1, v.m2);
    } else if (v.kind == 1) {
        auto k = v.ty == T_Q4_K ? (v.two ? mmv_fast2r_12 : mmv_fast1_12)
               : v.ty == T_Q6_K ? (v.two ? mmv_fast2r_14 : mmv_fast1_14)
                                : (v.two ? mmv_fast2r_3 : mmv_fast1_3);
        launch_pdl(s, pdl, k, dim3((v.m + rpb - 1) / rpb), dim3(128), W, b.xq, b.xd, b.y0, n1, v.k, v.m);
    } else if (v.kind == 6 || v.kind == 7) {
        bool pl = v.kind == 7, pair = v.m1 == 1;
        dim3 g(v.two ? (v.m + 7) / 8 : (v.m + 3) / 4), t(128);
        const u8* W2 = W + r * v.m;
#define LAB_UNIT(TY)                                                                                           \
        if (v.ty == TY) {                                                                                     \
            if (pair) {                                                                                       \
                if (pl) launch_pdl(s, pdl, mmv_unit<P32<TY>, TY, 1, true>, g, t, W, W2, b.xq, b.xd, b.y0, b.y1, v.k, v.m); \
                else launch_pdl(s, pdl, mmv_unit<FastUnit<TY>, TY, 1, true>, g, t, W, W2, b.xq, b.xd, b.y0, b.y1, v.k, v.m); \
            } else if (v.two) {                                                                               \
                if (pl) launch_pdl(s, pdl, mmv_unit<P32<TY>, TY, 2, false>, g, t, W, W2, b.xq, b.xd, b.y0, b.y1, v.k, v.m); \
                else launch_pdl(s, pdl, mmv_unit<FastUnit<TY>, TY, 2, false>, g, t, W, W2, b.xq, b.xd, b.y0, b.y1, v.k, v.m); \
            } else {                                                                                          \
                if (pl) launch_pdl(s, pdl, mmv_unit<P32<TY>, TY, 1, false>, g, t, W, W2, b.xq, b.xd, b.y0, b.y1, v.k, v.m); \
                else launch_pdl(s, pdl, mmv_unit<FastUnit<TY>, TY, 1, false>, g, t, W, W2, b.xq, b.xd, b.y0, b.y1, v.k, v.m); \
            }                                                                                                 \
        }
        LAB_UNIT(T_Q4_1)
        LAB_UNIT(T_Q5_0)
        LAB_UNIT(T_Q8_0)
#undef LAB_UNIT
    } else if (v.kind == 4) {
        if (v.two) launch_pdl(s, pdl, mmv_q4planar<2, false>, dim3((v.m + 7) / 8), dim3(128), W, W, b.xq, b.xd, b.y0, b.y1, v.k, v.m);
        else launch_pdl(s, pdl, mmv_q4planar<1, false>, dim3((v.m + 3) / 4), dim3(128), W, W, b.xq, b.xd, b.y0, b.y1, v.k, v.m);
    } else if (v.kind == 5) {
        launch_pdl(s, pdl, mmv_q4planar<1, true>, dim3((v.m + 3) / 4), dim3(128), W, W + r * v.m, b.xq, b.xd, b.y0, b.y1, v.k, v.m);
    } else if (v.kind == 3) {
        if (v.two) launch_pdl(s, pdl, mmv_q6planar<2>, dim3((v.m + 7) / 8), dim3(128), W, b.xq, b.xd, b.y0, n1, v.k, v.m);
        else launch_pdl(s, pdl, mmv_q6planar<1>, dim3((v.m + 3) / 4), dim3(128), W, b.xq, b.xd, b.y0, n1, v.k, v.m);
    } else {
        auto k = v.ty == T_Q4_K ? gate_up_fast1_12 : gate_up_fast1_3;
        launch_pdl(s, pdl, k, dim3((v.m + 3) / 4), dim3(128), W, W + r * v.m, b.xq, b.xd, b.y0, b.y1, b.y3, n1, v.k, v.m, 1, 0.0);
    }
}

struct Run {
    const char* label;
    bool spins;       // the stand-ins between mat-vecs
    bool stream;      // the streamer beside the chain
    unsigned long long window;
    int from_next;
    unsigned chunk;
    int blocks;
};

// The chain's graph, captured once; median us of 7 replays.
static float time_chain(const Chain& c, const Run& run, const std::vector<const u8*>& wts, const Bufs& b,
                        unsigned* progress, Seg* dsegs, unsigned long long* dcum, int nseg) {
    cudaStream_t s, s2;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
    cudaEvent_t fork, join;
    CK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
    CK(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));
    cudaGraph_t g;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    CK(cudaMemsetAsync(progress, 0, 4, s));
    if (run.stream) {
        CK(cudaEventRecord(fork, s));
        CK(cudaStreamWaitEvent(s2, fork, 0));
        streamer<<<run.blocks, 32, 0, s2>>>(dsegs, dcum, nseg, progress, run.window, run.from_next, run.chunk);
        CK(cudaGetLastError());
        CK(cudaEventRecord(join, s2));
    }
    int idx = 0;
    bool first = true;
    for (int l = 0; l < c.layers; l++) {
        for (size_t j = 0; j < c.layer.size(); j++, idx++) {
            launch_mv(s, !first, c.layer[j], wts[idx], b);
            first = false;
            // Without the stand-ins' spins, a streamer still needs the chain's progress:
            // stand-ins of one block that hold nothing.
            if (c.spin_ns[j] && (run.spins || run.stream))
                launch_pdl(s, true, stand_in, dim3(run.spins ? c.spin_blocks[j] : 1), dim3(128),
                           run.spins ? c.spin_ns[j] : 0ull, progress, (unsigned)(idx + 1));
        }
    }
    if (run.stream) CK(cudaStreamWaitEvent(s, join, 0));
    CK(cudaStreamEndCapture(s, &g));
    cudaGraphExec_t e;
    CK(cudaGraphInstantiate(&e, g, 0));
    cudaEvent_t t0, t1;
    cudaEventCreate(&t0);
    cudaEventCreate(&t1);
    std::vector<float> ms;
    for (int r = 0; r < 8; r++) {
        cudaEventRecord(t0, s);
        CK(cudaGraphLaunch(e, s));
        cudaEventRecord(t1, s);
        CK(cudaEventSynchronize(t1));
        float x;
        cudaEventElapsedTime(&x, t0, t1);
        if (r > 0) ms.push_back(x);
    }
    std::sort(ms.begin(), ms.end());
    cudaGraphExecDestroy(e);
    cudaGraphDestroy(g);
    cudaStreamDestroy(s);
    cudaStreamDestroy(s2);
    return ms[ms.size() / 2] * 1000.0f;
}

int main(int argc, char** argv) {
    int dev;
    cudaGetDevice(&dev);
    cudaDeviceProp pr;
    cudaGetDeviceProperties(&pr, dev);
    printf("device: %s, %d SMs, L2 %d MiB\n", pr.name, pr.multiProcessorCount, pr.l2CacheSize >> 20);
    bool q6 = argc > 1 && strcmp(argv[1], "q6") == 0;
    int only = argc > 1 && !q6 ? atoi(argv[1]) : -1;

    // The 8B: q/k/v (Q4_K; v is Q6_K in the real file, Q4_K here), attention, o, residual_norm,
    // gate/up, quantize, down (Q6_K: half the real layers), residual_norm. SmolLM2: the same
    // chain in Q4_1 with its sizes. Stand-in times: what the timelines put after the release of
    // each weight-free kernel (session 22, 26).
    Chain chains[] = {
        {"8B-like (32 layers, Q4_K/Q6_K)",
         {{0, T_Q4_K, 4096, 4096, 1024, 1024, true}, {1, T_Q4_K, 4096, 4096, 0, 0, true},
          {2, T_Q4_K, 14336, 4096, 0, 0, false}, {1, T_Q6_K, 4096, 14336, 0, 0, true}},
         {4000, 3000, 1000, 3000}, {32, 4, 56, 4}, 32},
        {"SmolLM2-like (30 layers, Q4_1)",
         {{0, T_Q4_1, 576, 576, 192, 192, false}, {1, T_Q4_1, 576, 576, 0, 0, false},
          {2, T_Q4_1, 1536, 576, 0, 0, false}, {1, T_Q4_1, 576, 1536, 0, 0, false}},
         {2500, 1000, 500, 1000}, {9, 1, 48, 1}, 30},
    };
    size_t kmax = 14336, mmax = 16384;
    Bufs b;
    {
        signed char* xq;
        Q8Blk* xd;
        quantized_activation((int)kmax, &xq, &xd);
        b.xq = xq;
        b.xd = xd;
        CK(cudaMalloc(&b.y0, mmax * 4)); CK(cudaMalloc(&b.y1, mmax * 4));
        CK(cudaMalloc(&b.y2, mmax * 4)); CK(cudaMalloc(&b.y3, mmax * 4));
    }
    unsigned* progress;
    CK(cudaMalloc(&progress, 4));
    bool p32 = argc > 1 && strcmp(argv[1], "p32") == 0;
    if (p32) {
        const size_t AL = 29920;  // a multiple of every group: 160, 176, 272
        size_t poolb = (size_t)2 << 30;
        u8* pool0;
        CK(cudaMalloc(&pool0, poolb + 2 * AL));
        u8* pool = pool0 + (AL - (size_t)pool0 % AL) % AL;
        fill_weights(pool, poolb);
        // m1 == 1: a gate/up pair.
        struct Sh { const char* name; int ty; int m, k; bool two; int pair; } shs[] = {
            {"SmolLM2 q/k/v 960 x 576 Q4_1", T_Q4_1, 960, 576, false, 0},
            {"SmolLM2 o 576 x 576 Q4_1", T_Q4_1, 576, 576, false, 0},
            {"SmolLM2 gate+up 2 x 1536 x 576 Q4_1", T_Q4_1, 1536, 576, false, 1},
            {"SmolLM2 down 576 x 1536 Q4_1", T_Q4_1, 576, 1536, false, 0},
            {"SmolLM2 head 49152 x 576 Q8_0", T_Q8_0, 49152, 576, true, 0},
            {"Gemma-3 q 1024 x 640 Q5_0", T_Q5_0, 1024, 640, false, 0},
            {"Gemma-3 gate+up 2 x 2048 x 640 Q5_0", T_Q5_0, 2048, 640, false, 1},
            {"Gemma-3 v 256 x 640 Q8_0", T_Q8_0, 256, 640, false, 0},
            {"Gemma-3 head 262144 x 640 Q8_0", T_Q8_0, 262144, 640, true, 0},
        };
        for (auto& sh : shs) {
            Mv probe{6, sh.ty, sh.m, sh.k, sh.pair, 0, sh.two};
            size_t wb = mv_bytes(probe), step = ((wb + AL - 1) / AL) * AL;
            // Offsets whole groups apart (a wrapped offset rounded down to one).
            auto at = [&](int i) { size_t o = ((size_t)i * step) % (poolb - step); return pool + (o - o % AL); };
            for (int kind : {6, 7, 6, 7}) {
                float us = time_graph(40, [&](cudaStream_t st, int i, bool pdl) {
                    Mv v{kind, sh.ty, sh.m, sh.k, sh.pair, 0, sh.two};
                    launch_mv(st, pdl, v, at(i), b);
                });
                printf("%-38s %-7s %8.2f us %7.0f GB/s\n", sh.name, kind == 7 ? "planes" : "GGUF", us, wb / (us * 1e-6) / 1e9);
            }
        }
        cudaFree(pool0);
        // The chains: every mat-vec in the lab loop, GGUF's blocks against the planes.
        Chain cs = {"SmolLM2-like, GGUF",
                    {{6, T_Q4_1, 960, 576, 0, 0, false}, {6, T_Q4_1, 576, 576, 0, 0, false},
                     {6, T_Q4_1, 1536, 576, 1, 0, false}, {6, T_Q4_1, 576, 1536, 0, 0, false}},
                    {2500, 1000, 500, 1000}, {9, 1, 48, 1}, 30};
        Chain cg = {"Gemma-3-like, GGUF",
                    {{6, T_Q5_0, 1280, 640, 0, 0, false}, {6, T_Q8_0, 256, 640, 0, 0, false},
                     {6, T_Q5_0, 2048, 640, 1, 0, false}},
                    {3000, 1500, 1500}, {4, 1, 64}, 18};
        for (Chain* c : {&cs, &cg}) {
            Chain cp = *c;
            for (auto& v : cp.layer) v.kind = 7;
            std::string nm = std::string(c->name);
            nm = nm.substr(0, nm.find(',')) + ", planes";
            cp.name = strdup(nm.c_str());
            size_t total = 0;
            for (auto& v : c->layer) total += ((mv_bytes(v) + AL - 1) / AL) * AL;
            total *= c->layers;
            u8* wp0;
            CK(cudaMalloc(&wp0, total + 2 * AL));
            u8* wp = wp0 + (AL - (size_t)wp0 % AL) % AL;
            fill_weights(wp, total);
            std::vector<const u8*> wts;
            size_t off = 0;
            for (int l = 0; l < c->layers; l++)
                for (auto& v : c->layer) { wts.push_back(wp + off); off += ((mv_bytes(v) + AL - 1) / AL) * AL; }
            for (int round = 0; round < 2; round++)
                for (const Chain* x : {(const Chain*)c, (const Chain*)&cp}) {
                    for (bool spins : {false, true}) {
                        Run run{spins ? "chain" : "mat-vecs only", spins, false, 0, 0, 0, 0};
                        float us = time_chain(*x, run, wts, b, progress, nullptr, nullptr, 0);
                        printf("  %-26s %-14s %9.1f us  %6.2f us a layer\n", x->name, run.label, us, us / x->layers);
                    }
                }
            cudaFree(wp0);
        }
        return 0;
    }
    bool q4 = argc > 1 && strcmp(argv[1], "q4") == 0;
    if (q4) {
        size_t poolb = (size_t)4 << 30;
        u8* pool0;
        CK(cudaMalloc(&pool0, poolb + 8192));
        u8* pool = pool0 + (1152 - (size_t)pool0 % 1152) % 1152;
        fill_weights(pool, poolb);
        struct Sh { const char* name; int kind; int m, k; bool two; } shs[] = {
            {"8B q/o 4096 x 4096", 1, 4096, 4096, true},
            {"8B gate+up 2 x 14336 x 4096", 2, 14336, 4096, false},
            {"8B down 4096 x 14336", 1, 4096, 14336, true},
            {"1B gate+up 2 x 8192 x 2048", 2, 8192, 2048, false},
            {"1B o 2048 x 2048", 1, 2048, 2048, true},
            {"1B down 2048 x 8192", 1, 2048, 8192, false},
        };
        for (auto& sh : shs) {
            size_t wb = rowb(T_Q4_K, sh.k) * sh.m * (sh.kind == 2 ? 2 : 1), step = ((wb + 1151) / 1152) * 1152;
            auto at = [&](int i) { size_t o = ((size_t)i * step) % (poolb - step); return pool + (o - o % 1152); };
            for (int variant = 0; variant < 2; variant++) {
                bool planar = variant == 1;
                int kind = sh.kind == 2 ? (planar ? 5 : 2) : (planar ? 4 : 1);
                float us = time_graph(40, [&](cudaStream_t st, int i, bool pdl) {
                    Mv v{kind, T_Q4_K, sh.m, sh.k, 0, 0, sh.two};
                    launch_mv(st, pdl, v, at(i), b);
                });
                printf("%-28s %-10s %8.2f us %7.0f GB/s\n", sh.name, planar ? "planar" : "production", us, wb / (us * 1e-6) / 1e9);
            }
        }
        cudaFree(pool0);
        // The 8B chain: o and gate/up planar (q/k/v and the Q6_K down as built).
        Chain c8 = {"8B-like, o + gate/up production",
                    {{0, T_Q4_K, 4096, 4096, 1024, 1024, true}, {1, T_Q4_K, 4096, 4096, 0, 0, true},
                     {2, T_Q4_K, 14336, 4096, 0, 0, false}, {3, T_Q6_K, 4096, 14336, 0, 0, true}},
                    {4000, 3000, 1000, 3000}, {32, 4, 56, 4}, 32};
        Chain c8p = c8;
        c8p.layer[1].kind = 4;
        c8p.layer[2].kind = 5;
        c8p.name = "8B-like, o + gate/up planar";
        size_t total = 0;
        for (auto& v : c8.layer) total += ((mv_bytes(v) + 1151) / 1152) * 1152;
        total *= 32;
        u8* wp0;
        CK(cudaMalloc(&wp0, total + 8192));
        u8* wp = wp0 + (1152 - (size_t)wp0 % 1152) % 1152;
        fill_weights(wp, total);
        std::vector<const u8*> wts;
        size_t off = 0;
        for (int l = 0; l < 32; l++)
            for (auto& v : c8.layer) { wts.push_back(wp + off); off += ((mv_bytes(v) + 1151) / 1152) * 1152; }
        for (int round = 0; round < 2; round++)
            for (const Chain* c : {&c8, &c8p}) {
                for (bool spins : {false, true}) {
                    Run run{spins ? "chain" : "mat-vecs only", spins, false, 0, 0, 0, 0};
                    float us = time_chain(*c, run, wts, b, progress, nullptr, nullptr, 0);
                    printf("  %-34s %-14s %9.1f us  %6.2f us a layer  %6.0f GB/s\n", c->name, run.label, us, us / 32, total / (us * 1e-6) / 1e9);
                }
            }
        return 0;
    }
    if (q6) {
        // The Q6_K mat-vecs alone: production (two rows a warp where plan.rs says, else one)
        // against the planar rows, each in a graph of 40 launches over weights rotating through
        // 4 GiB.
        size_t poolb = (size_t)4 << 30;
        u8* pool;
        CK(cudaMalloc(&pool, poolb + 4096));
        fill_weights(pool, poolb);
        struct Sh { const char* name; int m, k; bool two; } shs[] = {
            {"down 4096 x 14336", 4096, 14336, true},
            {"head 128256 x 4096", 128256, 4096, true},
            {"v 1024 x 4096", 1024, 4096, false},
            {"1B head 128256 x 2048", 128256, 2048, true},
            {"1B down 2048 x 8192", 2048, 8192, true},
        };
        for (auto& sh : shs) {
            size_t wb = rowb(T_Q6_K, sh.k) * sh.m, step = (wb + 4095) & ~(size_t)4095;
            auto at = [&](int i) { return pool + ((size_t)i * step) % (poolb - step); };
            for (int variant = 0; variant < 4; variant++) {
                bool planar = variant & 1;
                bool two = variant < 2 ? sh.two : !sh.two;
                float us = time_graph(40, [&](cudaStream_t st, int i, bool pdl) {
                    Mv v{planar ? 3 : 1, T_Q6_K, sh.m, sh.k, 0, 0, two};
                    launch_mv(st, pdl, v, at(i), b);
                });
                printf("%-24s %-10s %-13s %8.2f us %7.0f GB/s\n", sh.name, planar ? "planar" : "production", two ? "2 rows a warp" : "1 row a warp", us, wb / (us * 1e-6) / 1e9);
            }
        }
        cudaFree(pool);
        // The 8B chain with its down projection planar.
        Chain c8 = {"8B-like, down Q6_K planar",
                    {{0, T_Q4_K, 4096, 4096, 1024, 1024, true}, {1, T_Q4_K, 4096, 4096, 0, 0, true},
                     {2, T_Q4_K, 14336, 4096, 0, 0, false}, {3, T_Q6_K, 4096, 14336, 0, 0, true}},
                    {4000, 3000, 1000, 3000}, {32, 4, 56, 4}, 32};
        Chain c8p = c8;
        c8p.layer[3].kind = 1;
        c8p.name = "8B-like, down Q6_K production";
        size_t total = 0;
        for (auto& v : c8.layer) total += (mv_bytes(v) + 255) & ~(size_t)255;
        total *= 32;
        u8* wp;
        CK(cudaMalloc(&wp, total + 4096));
        fill_weights(wp, total);
        std::vector<const u8*> wts;
        size_t off = 0;
        for (int l = 0; l < 32; l++)
            for (auto& v : c8.layer) { wts.push_back(wp + off); off += (mv_bytes(v) + 255) & ~(size_t)255; }
        for (int round = 0; round < 2; round++)
            for (const Chain* c : {&c8p, &c8}) {
                for (bool spins : {false, true}) {
                    Run run{spins ? "chain" : "mat-vecs only", spins, false, 0, 0, 0, 0};
                    float us = time_chain(*c, run, wts, b, progress, nullptr, nullptr, 0);
                    printf("  %-34s %-14s %9.1f us  %6.2f us a layer  %6.0f GB/s\n", c->name, run.label, us, us / 32, total / (us * 1e-6) / 1e9);
                }
            }
        return 0;
    }
    // Does a bulk prefetch put bytes in L2, and how fast? Read 32 MiB cold, and after asking L2
    // for it (then 200 us idle), timed by events.
    {
        size_t big = (size_t)1 << 30, n = (size_t)32 << 20;
        u8* pool;
        CK(cudaMalloc(&pool, big));
        fill_weights(pool, big);
        float* sink;
        CK(cudaMalloc(&sink, 4));
        cudaEvent_t a, z;
        cudaEventCreate(&a);
        cudaEventCreate(&z);
        auto flush = [&]() { stream_read<<<pr.multiProcessorCount * 8, 256>>>((const uint4*)(pool + ((size_t)512 << 20)), ((size_t)256 << 20) / 16, sink); };
        auto timed_read = [&]() {
            cudaEventRecord(a);
            stream_read<<<pr.multiProcessorCount * 8, 256>>>((const uint4*)pool, n / 16, sink);
            cudaEventRecord(z);
            CK(cudaEventSynchronize(z));
            float ms;
            cudaEventElapsedTime(&ms, a, z);
            return ms * 1000.0f;
        };
        for (int rep = 0; rep < 2; rep++) {
            flush();
            float cold = timed_read();
            float warm = timed_read();
            printf("32 MiB read: cold %.1f us, again %.1f us\n", cold, warm);
            for (int blocks : {1, 8, 32, 132, 264}) {
                for (unsigned chunk : {4096u, 16384u, 65536u}) {
                    flush();
                    cudaEventRecord(a);
                    prefetch_all<<<blocks, 32>>>(pool, n, chunk);
                    cudaEventRecord(z);
                    hold<<<1, 32>>>(200000);
                    CK(cudaDeviceSynchronize());
                    float ms;
                    cudaEventElapsedTime(&ms, a, z);
                    float after = timed_read();
                    printf("  prefetch %3d blocks, %5u-byte chunks: issued in %.1f us; read after %.1f us\n", blocks, chunk, ms * 1000.0f, after);
                }
            }
        }
        // How fast does a prefetch fill L2: prefetch, then read at once (the read waits for
        // what is still in flight).
        for (int blocks : {32, 132}) {
            flush();
            CK(cudaDeviceSynchronize());
            cudaEventRecord(a);
            prefetch_all<<<blocks, 32>>>(pool, n, 16384);
            stream_read<<<pr.multiProcessorCount * 8, 256>>>((const uint4*)pool, n / 16, sink);
            cudaEventRecord(z);
            CK(cudaEventSynchronize(z));
            float ms;
            cudaEventElapsedTime(&ms, a, z);
            printf("  prefetch %3d blocks then read at once: %.1f us both\n", blocks, ms * 1000.0f);
        }
        cudaFree(pool);
    }
    for (int ci = 0; ci < 2; ci++) {
        if (only >= 0 && only != ci) continue;
        const Chain& c = chains[ci];
        std::vector<size_t> sizes;
        size_t total = 0;
        for (int l = 0; l < c.layers; l++)
            for (auto& v : c.layer) {
                size_t n = (mv_bytes(v) + 255) & ~(size_t)255;
                sizes.push_back(n);
                total += n;
            }
        u8* pool;
        CK(cudaMalloc(&pool, total + 4096));
        fill_weights(pool, total);
        std::vector<const u8*> wts;
        std::vector<Seg> segs;
        std::vector<unsigned long long> cum(1, 0);
        size_t off = 0;
        for (size_t i = 0; i < sizes.size(); i++) {
            wts.push_back(pool + off);
            size_t real = mv_bytes(c.layer[i % c.layer.size()]);
            segs.push_back({pool + off, (unsigned long long)((real + 15) & ~(size_t)15)});
            cum.push_back(cum.back() + segs.back().bytes);
            off += sizes[i];
        }
        Seg* dsegs;
        unsigned long long* dcum;
        CK(cudaMalloc(&dsegs, segs.size() * sizeof(Seg)));
        CK(cudaMalloc(&dcum, cum.size() * 8));
        CK(cudaMemcpy(dsegs, segs.data(), segs.size() * sizeof(Seg), cudaMemcpyHostToDevice));
        CK(cudaMemcpy(dcum, cum.data(), cum.size() * 8, cudaMemcpyHostToDevice));
        int nseg = (int)segs.size();
        double gb = (double)cum.back() / 1e9;
        printf("\n%s: %.1f MB of weights a step, %d mat-vecs\n", c.name, cum.back() / 1e6, nseg);
        const unsigned long long MB = 1ull << 20;
        std::vector<Run> runs = {
            {"mat-vecs only", false, false, 0, 0, 0, 0},
            {"chain", true, false, 0, 0, 0, 0},
            {"streamer 1 block, 32 MiB next, 64 KiB", true, true, 32 * MB, 1, 65536, 1},
            {"streamer 16 blocks, 32 MiB next, 16 KiB", true, true, 32 * MB, 1, 16384, 16},
            {"streamer 66 blocks, 32 MiB next, 16 KiB", true, true, 32 * MB, 1, 16384, 66},
            {"streamer 132 blocks, 32 MiB next, 16 KiB", true, true, 32 * MB, 1, 16384, 132},
            {"streamer 132 blocks, 16 MiB next, 16 KiB", true, true, 16 * MB, 1, 16384, 132},
            {"streamer 132 blocks, 48 MiB next, 16 KiB", true, true, 48 * MB, 1, 16384, 132},
            {"streamer 132 blocks, 32 MiB current, 16 KiB", true, true, 32 * MB, 0, 16384, 132},
            {"streamer 132 blocks, 32 MiB next, 4 KiB", true, true, 32 * MB, 1, 4096, 132},
            {"streamer 264 blocks, 32 MiB next, 4 KiB", true, true, 32 * MB, 1, 4096, 264},
            {"chain", true, false, 0, 0, 0, 0},
            {"mat-vecs only + streamer 132, 32 MiB next", false, true, 32 * MB, 1, 16384, 132},
        };
        if (ci == 1) {
            runs = {
                {"mat-vecs only", false, false, 0, 0, 0, 0},
                {"chain", true, false, 0, 0, 0, 0},
                {"streamer 1 block, 4 MiB next, 16 KiB", true, true, 4 * MB, 1, 16384, 1},
                {"streamer 16 blocks, 4 MiB next, 4 KiB", true, true, 4 * MB, 1, 4096, 16},
                {"streamer 66 blocks, 4 MiB next, 4 KiB", true, true, 4 * MB, 1, 4096, 66},
                {"streamer 16 blocks, 8 MiB next, 4 KiB", true, true, 8 * MB, 1, 4096, 16},
                {"streamer 16 blocks, 16 MiB next, 4 KiB", true, true, 16 * MB, 1, 4096, 16},
                {"streamer 16 blocks, 4 MiB current, 4 KiB", true, true, 4 * MB, 0, 4096, 16},
                {"streamer 16 blocks, 4 MiB next, 1 KiB", true, true, 4 * MB, 1, 1024, 16},
                {"chain", true, false, 0, 0, 0, 0},
            };
        }
        for (auto& run : runs) {
            float us = time_chain(c, run, wts, b, progress, dsegs, dcum, nseg);
            printf("  %-46s %9.1f us  %6.2f us a layer  %6.0f GB/s\n", run.label, us, us / c.layers, gb / (us * 1e-6));
        }
        cudaFree(pool);
        cudaFree(dsegs);
        cudaFree(dcum);
    }
    return 0;
}
