// The feed-forward half of a SmolLM2 decode layer as one 16-block cluster kernel, in the step
// graph's conditions, against the three kernels it would replace (BENCHMARKS.md, session 34).
//
// Production (kernels.cu, included as NVRTC compiles it): norm_gate_up_fast1_3 (the residual
// add and RMS norm, bitwise residual_norm's, in every block, then a warp a gate/up row),
// quantize_q8_32 (the activation), mmv_fast1_3 (the down projection, a warp a row).
// ffn_cluster_3: one cluster of 16 blocks of 512 threads. Each block
//  - before its grid wait, bulk-copies its 96 gate rows, 96 up rows and 36 down rows into
//    shared memory (weights are written only at upload) and joins the cluster barrier that
//    makes every block's mbarriers visible;
//  - runs NORM_GATE (the fused kernels' norm prologue, bitwise);
//  - computes its gate/up rows with fast_rows' arithmetic (units lane, lane + 32, ..., the
//    same FastUnit dots, warp_sum_fixed, act_apply), reading the weights from shared memory;
//  - sends each activation one way (st.async) into every block's shared memory;
//  - quantizes the activation row with q8_block (quantize_q8_32's arithmetic);
//  - computes its down rows with mmv_fast1's arithmetic.
// So every output must be bitwise the three kernels' (checked first, on a 30-layer chain).
// Then both chains are timed as CUDA graphs with programmatic edges, a layer being
// [norm_mmv3_fast1_3 (q/k/v), mmv_fast1_3 (o, standing for attention and o), FFN].
// nvcc -gencode=arch=compute_90a,code=sm_90a -O3 --fmad=false -std=c++17 -diag-suppress 128,177,550 \
//   [-DFFN_THREADS=1024] -o /tmp/ffn_cluster ffn_cluster.cu
// What it showed (session 34, H200): bitwise, and 4 us a layer slower (14.5-14.9 against
// 10.5-10.6 us for the layer above): the production arithmetic, a warp a row, takes 3.9 us for
// a block's 192 gate/up rows and 2.8 us for the quantization and 36 down rows on 16 SMs.
// Session 36: the rows' 32 lanes played by 4, 8 or 16 lanes (vl_rows, the variants below):
// still bitwise (every variant, 30 layers), and a block's 192 gate/up rows take 1.45 us instead
// of 4.0 (results/ffn_cluster_lanes.txt) -- the arithmetic of a whole-layer cluster kernel need
// not change to be fast (step_cluster.cu).
#define LOCKSTEP_FAST_F32
__device__ unsigned emu_tf32_rna(float);
__device__ void emu_mma_tf32(float*, const unsigned*, const unsigned*);
#include "../../crates/backend-cuda/src/kernels.cu"
#include "../gemv_lab/lab_common.cuh"

#define FFN_CS 16
#ifndef FFN_THREADS
#define FFN_THREADS 512
#endif

__device__ __forceinline__ unsigned smem_u32(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }
__device__ __forceinline__ unsigned mapa_u32(unsigned addr, int rank) {
    unsigned r;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(addr), "r"(rank));
    return r;
}
__device__ __forceinline__ void mbar_wait_parity(unsigned bar, unsigned parity) {
    unsigned done = 0;
    while (!done)
        asm volatile(
            "{ .reg .pred p; mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
            : "=r"(done)
            : "r"(bar), "r"(parity)
            : "memory");
}

// FastUnit<Q4_1>::load's bytes, from shared memory (FastUnit's loads are ld.global.nc).
__device__ __forceinline__ void load_q41_shared(FastUnit<T_Q4_1>& w, const u8* row, int u) {
    const u8* b = row + (size_t)u * 20;
    w.d = h2f(*(const u16*)b);
    w.m = h2f(*(const u16*)(b + 2));
#pragma unroll
    for (int i = 0; i < 4; i++) w.q[i] = *(const int*)(b + 4 + 4 * i);
}

// A row's 32 lanes played by LPR lanes (a group of LPR consecutive lanes a row): lane p of the
// group plays lanes p, p + LPR, ..., p + 32 - LPR. Each played lane folds its units (lane,
// lane + 32, ...) as fast_rows' lane does, from 0.0f; then warp_sum_fixed's butterfly: its steps
// o = 16 .. LPR pair played lanes inside one thread (lane i + o is the same thread's, as i ^ o
// keeps i mod LPR), each pair's sum the same bits whichever operand comes first; the steps below
// LPR are shuffles inside the group. So every row's value is bitwise fast_rows' (and
// warp_sum_fixed's at LPR = 32).
template <int LPR, bool PAIR>
__device__ __forceinline__ void vl_rows(const u8* wa, const u8* wb, const signed char* xq, const Q8Blk* xd,
                                        int units, int p, float& v, float& uv) {
    constexpr int K = 32 / LPR;
    float a[K], b[K];
#pragma unroll
    for (int k = 0; k < K; k++) {
        a[k] = 0.0f;
        b[k] = 0.0f;
        for (int u = p + LPR * k; u < units; u += 32) {
            FastUnit<T_Q4_1> w;
            load_q41_shared(w, wa, u);
            a[k] = w.dot(xq, xd, u, a[k]);
            if constexpr (PAIR) {
                FastUnit<T_Q4_1> w2;
                load_q41_shared(w2, wb, u);
                b[k] = w2.dot(xq, xd, u, b[k]);
            }
        }
    }
#pragma unroll
    for (int s = K / 2; s > 0; s >>= 1) {
        float ta[K], tb[K];
#pragma unroll
        for (int k = 0; k < K; k++) {
            ta[k] = a[k] + a[k ^ s];
            if constexpr (PAIR) tb[k] = b[k] + b[k ^ s];
        }
#pragma unroll
        for (int k = 0; k < K; k++) {
            a[k] = ta[k];
            if constexpr (PAIR) b[k] = tb[k];
        }
    }
    v = a[0];
    uv = b[0];
#pragma unroll
    for (int o = LPR / 2; o > 0; o >>= 1) {
        v = v + __shfl_xor_sync(0xffffffffu, v, o);
        if constexpr (PAIR) uv = uv + __shfl_xor_sync(0xffffffffu, uv, o);
    }
}

// dyn smem: [gate rows][up rows][down rows][act f32 m][act q8 m][act Q8Blk m/32]
// Block 0's progress (global timer, ns) for the last call: entry, the grid wait returned, the
// norm done, the weights landed, the gate/up rows sent, the activation received, the end.
__device__ unsigned long long ffn_marks[8];
__device__ __forceinline__ void ffn_mark(int i) {
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        unsigned long long t;
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t) :: "memory");
        ffn_marks[i] = t;
    }
}

// LOAD 0: the block's weights by three bulk copies; LOAD 1: by every thread's 16-byte loads
// (8 in flight a thread), stored to shared memory, before the grid wait either way.
template <int LOAD, int LGU, int LD>
__device__ __forceinline__ void ffn_cluster_body(
    NORM_IN_ARGS, const u8* Wg, const u8* Wu, float* gg, float* uu, float* aa, int m, int act, double c,
    const u8* Wd, float* yd) {
    ffn_mark(0);
    NORM_GATE_SETUP
    extern __shared__ __align__(128) u8 dsm[];
    __shared__ __align__(8) unsigned long long bars[2];  // 0: the weights, 1: the activation
    unsigned rank;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int rf = m / FFN_CS, rd = g / FFN_CS;  // gate/up rows and down rows a block
    const int rbu = g / 32 * 20, rbd = m / 32 * 20;  // Q4_1 row bytes: gate/up, down
    u8* sg = dsm;
    u8* su = sg + (size_t)rf * rbu;
    u8* sdw = su + (size_t)rf * rbu;
    float* act_s = (float*)(sdw + (size_t)rd * rbd);
    signed char* aq_s = (signed char*)(act_s + m);
    Q8Blk* ad_s = (Q8Blk*)(aq_s + m);
    if (threadIdx.x == 0) {
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_u32(&bars[0])));
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_u32(&bars[1])));
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        if (LOAD == 0) {
            unsigned b0 = smem_u32(&bars[0]);
            unsigned bytes = (unsigned)(2 * rf * rbu + rd * rbd);
            asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(b0), "r"(bytes) : "memory");
            const u8* src[3] = {Wg + (size_t)rank * rf * rbu, Wu + (size_t)rank * rf * rbu, Wd + (size_t)rank * rd * rbd};
            u8* dst[3] = {sg, su, sdw};
            int len[3] = {rf * rbu, rf * rbu, rd * rbd};
            for (int i = 0; i < 3; i++)
                asm volatile(
                    "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                        smem_u32(dst[i])),
                    "l"(src[i]), "r"(len[i]), "r"(b0)
                    : "memory");
        }
    }
    if (LOAD == 1) {
        const u8* src[3] = {Wg + (size_t)rank * rf * rbu, Wu + (size_t)rank * rf * rbu, Wd + (size_t)rank * rd * rbd};
        u8* dst[3] = {sg, su, sdw};
        int len[3] = {rf * rbu, rf * rbu, rd * rbd};
#pragma unroll
        for (int i = 0; i < 3; i++) {
            const uint4* s4 = (const uint4*)src[i];
            uint4* d4 = (uint4*)dst[i];
            int n4 = len[i] / 16;
            for (int o = threadIdx.x; o < n4; o += FFN_THREADS * 4) {
                uint4 v[4];
#pragma unroll
                for (int k = 0; k < 4; k++)
                    if (o + k * FFN_THREADS < n4) v[k] = ldw16(s4 + o + k * FFN_THREADS);
#pragma unroll
                for (int k = 0; k < 4; k++)
                    if (o + k * FFN_THREADS < n4) d4[o + k * FFN_THREADS] = v[k];
            }
        }
    }
    // every block's barriers initialized before anyone stores into them
    asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
    GRID_WAIT();
    ffn_mark(1);
    norm_row_shared(a, b, pw, bn, sum, nwv, out, g, eps, nt, q, ds, sq, sd);
    __syncthreads();
    ffn_mark(2);
    if (threadIdx.x == 0)
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(&bars[1])),
                     "r"((unsigned)(m * 4))
                     : "memory");
    if (LOAD == 0) mbar_wait_parity(smem_u32(&bars[0]), 0);
    // (LOAD 1: NORM_GATE's block barrier already ordered every thread's stores)
    ffn_mark(3);
    // gate/up rows: fast_rows<3, 1, true, ..., FIRST>'s arithmetic, LGU lanes a row (vl_rows)
    const int units_g = g / 32;
    constexpr int RPW_G = 32 / LGU;  // rows a warp at once
    const int p_g = lane % LGU;
    for (int j0 = warp * RPW_G; j0 < rf; j0 += (FFN_THREADS / 32) * RPW_G) {
        int j = j0 + lane / LGU;
        bool on = j < rf;  // whole warps shuffle; a group past the rows computes nothing it keeps
        int jr = on ? j : rf - 1;
        int r = rank * rf + jr;
        float v, uv;
        vl_rows<LGU, true>(sg + (size_t)jr * rbu, su + (size_t)jr * rbu, sq, sd, units_g, p_g, v, uv);
        float a = act_apply(v, uv, act, c);
        if (on && p_g == 0) {
            gg[r] = v;
            uu[r] = uv;
            aa[r] = a;
        }
        if (on)
            for (int dst = p_g; dst < FFN_CS; dst += LGU) {
                unsigned raddr = mapa_u32(smem_u32(act_s + r), dst);
                unsigned rbar = mapa_u32(smem_u32(&bars[1]), dst);
                asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%0], %1, [%2];" ::"r"(raddr),
                             "r"(__float_as_uint(a)), "r"(rbar)
                             : "memory");
            }
    }
    ffn_mark(4);
    mbar_wait_parity(smem_u32(&bars[1]), 0);
    ffn_mark(5);
    // no block leaves while another may still read its shared memory: arrive now, wait at the end
    asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
    // the activation's quantization: quantize_q8_32's q8_block, a warp a 32-value block
    for (int b = warp; b < m / 32; b += FFN_THREADS / 32) q8_block(act_s[b * 32 + lane], aq_s, ad_s, (size_t)b);
    __syncthreads();
    // down rows: mmv_fast1's arithmetic, LD lanes a row
    const int units_d = m / 32;
    constexpr int RPW_D = 32 / LD;
    const int p_d = lane % LD;
    for (int j0 = warp * RPW_D; j0 < rd; j0 += (FFN_THREADS / 32) * RPW_D) {
        int j = j0 + lane / LD;
        bool on = j < rd;
        int jr = on ? j : rd - 1;
        float v, unused;
        vl_rows<LD, false>(sdw + (size_t)jr * rbd, nullptr, aq_s, ad_s, units_d, p_d, v, unused);
        if (on && p_d == 0) yd[rank * rd + jr] = v;
    }
    ffn_mark(6);
    asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
}
#define FFN_KERNEL(NAME, LOAD, LGU, LD)                                                                   \
    extern "C" __global__ void __launch_bounds__(FFN_THREADS, 1) NAME(                                       \
        NORM_IN_ARGS, const u8* Wg, const u8* Wu, float* gg, float* uu, float* aa, int m, int act, double c, \
        const u8* Wd, float* yd) {                                                                           \
        ffn_cluster_body<LOAD, LGU, LD>(a, b, pw, bn, sum, nw, out, g, eps, nt, q, ds, Wg, Wu, gg, uu, aa, m,  \
                                        act, c, Wd, yd);                                                     \
    }
// (bulk copies | loads), lanes a gate/up row, lanes a down row
FFN_KERNEL(ffn_cluster_3, 0, 32, 32)
FFN_KERNEL(ffn_cluster_ld_3, 1, 32, 32)
FFN_KERNEL(ffn_cluster_ld_4_16_3, 1, 4, 16)
FFN_KERNEL(ffn_cluster_ld_4_8_3, 1, 4, 8)
FFN_KERNEL(ffn_cluster_ld_8_8_3, 1, 8, 8)
FFN_KERNEL(ffn_cluster_ld_2_4_3, 1, 2, 4)

typedef void (*FfnKernel)(const float*, const float*, const float*, float*, float*, const float*, float*, int,
                          float, int, signed char*, Q8Blk*, const u8*, const u8*, float*, float*, float*, int, int,
                          double, const u8*, float*);
static const FfnKernel FFN_KERNELS[] = {ffn_cluster_3, ffn_cluster_ld_3, ffn_cluster_ld_4_16_3,
                                        ffn_cluster_ld_4_8_3, ffn_cluster_ld_8_8_3, ffn_cluster_ld_2_4_3};
static const char* FFN_NAMES[] = {"warp a row, bulk copies", "warp a row, loads", "4 / 16 lanes a row, loads",
                                  "4 / 8 lanes a row, loads", "8 / 8 lanes a row, loads", "2 / 4 lanes a row, loads"};
constexpr int NV_FFN = 6;

// ------------------------------------------------------------------ host
constexpr int D = 576, F = 1536, QKV = 960, LAYERS = 30;
constexpr int RB_D = D / 32 * 20, RB_F = F / 32 * 20;

struct Bufs {
    float *x1, *x2;            // residual: after attention, after the feed-forward (the next layer's input)
    float *normed, *qkv, *yo;  // q/k/v's norm output, q/k/v, o's output
    float *fnormed, *gg, *uu, *aa, *ffn;
    signed char *q, *aq;
    Q8Blk *ds, *ad;
    signed char* oq;  // o's (fixed) quantized input
    Q8Blk* od;
};

static void launch_cluster(cudaStream_t s, bool pdl, size_t smem, int variant, const float* a, const float* b, float* sum,
                           const float* nw, float* out, signed char* q, Q8Blk* ds, const u8* Wg, const u8* Wu,
                           float* gg, float* uu, float* aa, const u8* Wd, float* yd) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(FFN_CS);
    cfg.blockDim = dim3(FFN_THREADS);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = s;
    cudaLaunchAttribute at[2];
    at[0].id = cudaLaunchAttributeClusterDimension;
    at[0].val.clusterDim.x = FFN_CS;
    at[0].val.clusterDim.y = 1;
    at[0].val.clusterDim.z = 1;
    at[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[1].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = at;
    cfg.numAttrs = pdl ? 2 : 1;
    const float* pw = nullptr;
    float* bn = nullptr;
    int g = D, nt = 256, mm = F, act = 0;
    float eps = 1e-5f;
    double c = 0.7978845608028654;
    CK(cudaLaunchKernelEx(&cfg, FFN_KERNELS[variant], a, b, pw, bn, sum, nw, out, g, eps, nt, q,
                          ds, Wg, Wu, gg, uu, aa, mm, act, c, Wd, yd));
}

int main() {
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    printf("device: %s, %d SMs; cluster blocks of %d threads\n", prop.name, prop.multiProcessorCount, FFN_THREADS);
    // weights: per layer q, k, v (576, 192, 192 rows), o, gate, up, down; Q4_1
    size_t per_layer = (size_t)QKV * RB_D + (size_t)D * RB_D + 2 * (size_t)F * RB_D + (size_t)D * RB_F;
    u8* W;
    CK(cudaMalloc(&W, per_layer * LAYERS + 256));
    fill_weights(W, per_layer * LAYERS);
    auto wq = [&](int l) { return W + l * per_layer; };
    auto wk = [&](int l) { return wq(l) + (size_t)576 * RB_D; };
    auto wv = [&](int l) { return wk(l) + (size_t)192 * RB_D; };
    auto wo = [&](int l) { return wv(l) + (size_t)192 * RB_D; };
    auto wg = [&](int l) { return wo(l) + (size_t)D * RB_D; };
    auto wu = [&](int l) { return wg(l) + (size_t)F * RB_D; };
    auto wd = [&](int l) { return wu(l) + (size_t)F * RB_D; };
    float *attn_norm, *ffn_norm;
    CK(cudaMalloc(&attn_norm, D * 4));
    CK(cudaMalloc(&ffn_norm, D * 4));
    {
        std::vector<float> h(D);
        for (int i = 0; i < D; i++) h[i] = 1.0f + 0.001f * (i % 13);
        CK(cudaMemcpy(attn_norm, h.data(), D * 4, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(ffn_norm, h.data(), D * 4, cudaMemcpyHostToDevice));
    }
    Bufs B;
    auto fa = [](float** p, int n) { CK(cudaMalloc(p, n * 4)); CK(cudaMemset(*p, 0, n * 4)); };
    fa(&B.x1, D); fa(&B.x2, D); fa(&B.normed, D); fa(&B.qkv, QKV); fa(&B.yo, D);
    fa(&B.fnormed, D); fa(&B.gg, F); fa(&B.uu, F); fa(&B.aa, F); fa(&B.ffn, D);
    CK(cudaMalloc(&B.q, D)); CK(cudaMalloc(&B.ds, D / 32 * sizeof(Q8Blk)));
    CK(cudaMalloc(&B.aq, F)); CK(cudaMalloc(&B.ad, F / 32 * sizeof(Q8Blk)));
    quantized_activation(D, &B.oq, &B.od);
    std::vector<float> x_init(D);
    for (int i = 0; i < D; i++) x_init[i] = 0.01f * (float)((i * 37) % 101 - 50);

    size_t smem = (size_t)2 * (F / FFN_CS) * RB_D + (size_t)(D / FFN_CS) * RB_F + (size_t)F * 4 + F + (F / 32) * sizeof(Q8Blk);
    for (auto k : FFN_KERNELS) {
        CK(cudaFuncSetAttribute(k, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
        CK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    }
    {
        cudaLaunchConfig_t cfg = {};
        cfg.gridDim = dim3(FFN_CS);
        cfg.blockDim = dim3(FFN_THREADS);
        cfg.dynamicSmemBytes = smem;
        cudaLaunchAttribute at[1];
        at[0].id = cudaLaunchAttributeClusterDimension;
        at[0].val.clusterDim.x = FFN_CS;
        at[0].val.clusterDim.y = 1;
        at[0].val.clusterDim.z = 1;
        cfg.attrs = at;
        cfg.numAttrs = 1;
        int maxc = 0;
        CK(cudaOccupancyMaxActiveClusters(&maxc, (void*)ffn_cluster_3, &cfg));
        printf("ffn_cluster_3: %zu bytes of dynamic shared memory a block, %d clusters of 16 can be resident\n", smem, maxc);
    }

    // one layer; `fused` picks the feed-forward
    auto layer = [&](cudaStream_t s, int l, bool pdl, int fused) {
        const float* pw = nullptr;
        float* bn = nullptr;
        int g = D, nt = 256, m0 = 576, m1 = 192, m2 = 192;
        float eps = 1e-5f;
        // q/k/v: the previous layer's residual x2 plus its ffn_out, summed into x1
        launch_pdl(s, pdl, norm_mmv3_fast1_3, dim3(QKV / 8), dim3(256), (const float*)B.x2, (const float*)B.ffn, pw, bn,
                   B.x1, (const float*)attn_norm, B.normed, g, eps, nt, B.q, B.ds, (const u8*)wq(l), (const u8*)wk(l),
                   (const u8*)wv(l), B.qkv, B.qkv + 576, B.qkv + 768, m0, m1, m2);
        // o (a fixed quantized input: stands for attention, then o)
        int one = 1, k = D, mo = D;
        launch_pdl(s, pdl, mmv_fast1_3, dim3(D / 4), dim3(128), (const u8*)wo(l), (const signed char*)B.oq,
                   (const Q8Blk*)B.od, B.yo, one, k, mo);
        if (fused) {
            launch_cluster(s, pdl, smem, fused - 1, B.x1, B.yo, B.x2, ffn_norm, B.fnormed, B.q, B.ds, wg(l), wu(l), B.gg, B.uu,
                           B.aa, wd(l), B.ffn);
        } else {
            int mm = F, act = 0;
            double c = 0.7978845608028654;
            launch_pdl(s, pdl, norm_gate_up_fast1_3, dim3(F / 8), dim3(256), (const float*)B.x1, (const float*)B.yo, pw,
                       bn, B.x2, (const float*)ffn_norm, B.fnormed, g, eps, nt, B.q, B.ds, (const u8*)wg(l),
                       (const u8*)wu(l), B.gg, B.uu, B.aa, mm, act, c);
            int nblk = F / 32;
            launch_pdl(s, pdl, quantize_q8_32, dim3((nblk + 7) / 8), dim3(256), (const float*)B.aa, B.aq, B.ad, nblk);
            int kd = F, md = D;
            launch_pdl(s, pdl, mmv_fast1_3, dim3(D / 4), dim3(128), (const u8*)wd(l), (const signed char*)B.aq,
                       (const Q8Blk*)B.ad, B.ffn, one, kd, md);
        }
    };

    // 1. bitwise: 30 layers each way from the same start
    std::vector<float> out[NV_FFN + 1][4];
    for (int fused = 0; fused <= NV_FFN; fused++) {
        CK(cudaMemcpy(B.x2, x_init.data(), D * 4, cudaMemcpyHostToDevice));
        CK(cudaMemset(B.ffn, 0, D * 4));
        cudaStream_t s;
        CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
        for (int l = 0; l < LAYERS; l++) layer(s, l, false, fused);
        CK(cudaStreamSynchronize(s));
        float* srcs[4] = {B.x2, B.ffn, B.aa, B.fnormed};
        int ns[4] = {D, D, F, D};
        for (int i = 0; i < 4; i++) {
            out[fused][i].resize(ns[i]);
            CK(cudaMemcpy(out[fused][i].data(), srcs[i], ns[i] * 4, cudaMemcpyDeviceToHost));
        }
        CK(cudaStreamDestroy(s));
    }
    const char* names[4] = {"residual after 30 layers", "last ffn_out", "last act", "last ffn_norm"};
    for (int v = 1; v <= NV_FFN; v++) {
        bool all = true;
        for (int i = 0; i < 4; i++) {
            bool same = memcmp(out[0][i].data(), out[v][i].data(), out[0][i].size() * 4) == 0;
            all = all && same;
            float mx = 0;
            for (float x : out[0][i]) mx = fmaxf(mx, fabsf(x));
            printf("bitwise (%s): %-26s %s (max |v| %.3g)\n", FFN_NAMES[v - 1], names[i], same ? "same" : "DIFFERENT", mx);
        }
        printf("the cluster feed-forward (%s) is %s the three kernels'\n", FFN_NAMES[v - 1], all ? "bitwise" : "NOT bitwise");
    }

    // 2. timing: graphs of 30 layers with programmatic edges, alternating, 3 rounds
    for (int round = 0; round < 3; round++) {
        for (int fused = 0; fused <= NV_FFN; fused++) {
            float us = time_graph(LAYERS, [&](cudaStream_t s, int i, bool capture) { layer(s, i % LAYERS, capture, fused); });
            printf("round %d: %-40s %.2f us a layer\n", round, fused ? FFN_NAMES[fused - 1] : "three kernels", us);
            if (fused) {
                unsigned long long mk[8];
                CK(cudaMemcpyFromSymbol(mk, ffn_marks, sizeof(mk)));
                printf("    block 0 of the last call, us after its entry: grid wait returned %.2f, norm %.2f, weights %.2f, "
                       "gate/up sent %.2f, activation received %.2f, down done %.2f\n",
                       (mk[1] - mk[0]) / 1e3, (mk[2] - mk[0]) / 1e3, (mk[3] - mk[0]) / 1e3, (mk[4] - mk[0]) / 1e3,
                       (mk[5] - mk[0]) / 1e3, (mk[6] - mk[0]) / 1e3);
            }
        }
    }
    return 0;
}
