// The 8B shape's big decode mat-vecs, alone, in the conditions of a replayed step graph: the
// real kernels (kernels.cu, included as NVRTC compiles it) and variants, each in a CUDA graph
// of REPS programmatic launches whose weights rotate through a pool far larger than L2, timed
// by events (median of 7 replays), against a streaming read of the same pool (the ceiling).
// Variants must give the baseline's outputs bitwise (checked).
//   nvcc -arch=sm_90 -O3 --fmad=false -std=c++17 -o /tmp/gemv_lab bench/gemv_lab/gemv_lab.cu && /tmp/gemv_lab
// (bench/session18_gpu.sh runs it on the device.) What it showed (BENCHMARKS.md, session 18): a
// chain of one kernel alone is no model of a decode step. Variants that keep the first weight
// loads above the grid wait and a unit's loads together ran these shapes 15-35% faster here,
// and made every model's tg128 slower in the step graph (bench/session18/*.patch).
// kernels.cu's host-pass fallbacks (its CPU emulation provides them; never called here).
__device__ unsigned emu_tf32_rna(float);
__device__ void emu_mma_tf32(float*, const unsigned*, const unsigned*);
#include "../../crates/backend-cuda/src/kernels.cu"
#include "lab_common.cuh"

// U units loaded before their dots, the dots in the one-unit order (bitwise the real kernel's
// result). The wait sits in the loop behind a flag, which keeps the first loads above it.
template <int TY, int U, bool PAIR>
__device__ __forceinline__ void lab_row(const u8* __restrict__ W, const u8* __restrict__ W2,
                                        const signed char* __restrict__ xq,
                                        const Q8Blk* __restrict__ xd, float* y, float* y2,
                                        int k, int m, int r) {
    constexpr int E = FastUnit<TY>::E;
    int lane = threadIdx.x & 31;
    const u8* row = fast_row_ptr<TY>(W, r, k);
    const u8* row2 = PAIR ? fast_row_ptr<TY>(W2, r, k) : nullptr;
    int units = k / E;
    float acc = 0.0f, acc2 = 0.0f;
    int u = lane;
    bool waited = false;
    for (; u + 32 * (U - 1) < units; u += 32 * U) {
        FastUnit<TY> w[U], w2[PAIR ? U : 1];
#pragma unroll
        for (int j = 0; j < U; j++) {
            w[j].load(row, u + 32 * j);
            if constexpr (PAIR) w2[j].load(row2, u + 32 * j);
        }
        if (!waited) { GRID_WAIT(); waited = true; }
#pragma unroll
        for (int j = 0; j < U; j++) {
            acc = w[j].dot(xq, xd, u + 32 * j, acc);
            if constexpr (PAIR) acc2 = w2[j].dot(xq, xd, u + 32 * j, acc2);
        }
    }
    if (!waited) GRID_WAIT();
    for (; u < units; u += 32) {
        FastUnit<TY> w, w2;
        w.load(row, u);
        if constexpr (PAIR) w2.load(row2, u);
        acc = w.dot(xq, xd, u, acc);
        if constexpr (PAIR) acc2 = w2.dot(xq, xd, u, acc2);
    }
    float v = warp_sum_fixed(acc);
    float v2 = PAIR ? warp_sum_fixed(acc2) : 0.0f;
    if (lane == 0) {
        y[r] = v;
        if constexpr (PAIR) y2[r] = v2;
    }
}

template <int TY, int U, bool PAIR, int THREADS>
__global__ void __launch_bounds__(THREADS) lab_mmv(const u8* W, const u8* W2, const signed char* xq,
                                                  const Q8Blk* xd, float* y, float* y2, int k, int m) {
    GRID_LAUNCH();
    int r = blockIdx.x * (THREADS / 32) + (threadIdx.x >> 5);
    if (r >= m) { GRID_WAIT(); return; }
    lab_row<TY, U, PAIR>(W, W2, xq, xd, y, y2, k, m, r);
}

static size_t row_bytes(int ty, int k) { return ty == T_Q4_K ? (size_t)k / 256 * 144 : (size_t)k / 256 * 210; }

struct Pool { u8* p; size_t bytes; };

int main(int argc, char** argv) {
    const int REPS = 40;
    Pool pool;
    pool.bytes = (size_t)2 << 30;  // 2 GiB: 40 launches of even the LM head never repeat a byte in L2
    CK(cudaMalloc(&pool.p, pool.bytes + 4096));
    fill_weights(pool.p, pool.bytes);
    int kmax = 14336;
    signed char* xq;
    Q8Blk* xd;
    quantized_activation(kmax, &xq, &xd);
    int mmax = 128256;
    float *y, *y2, *y3, *yr, *yr2;
    CK(cudaMalloc(&y, mmax * 4)); CK(cudaMalloc(&y2, mmax * 4)); CK(cudaMalloc(&y3, mmax * 4));
    CK(cudaMalloc(&yr, mmax * 4)); CK(cudaMalloc(&yr2, mmax * 4));

    int dev; cudaGetDevice(&dev); cudaDeviceProp pr; cudaGetDeviceProperties(&pr, dev);
    printf("device: %s, %d SMs, L2 %d MiB\n", pr.name, pr.multiProcessorCount, pr.l2CacheSize >> 20);

    // Ceiling 1: device-to-device copy (read + write counted).
    {
        size_t n = (size_t)512 << 20;
        cudaEvent_t a, b; cudaEventCreate(&a); cudaEventCreate(&b);
        std::vector<float> ms;
        for (int r = 0; r < 6; r++) {
            cudaEventRecord(a); CK(cudaMemcpy(pool.p + n * 2, pool.p, n, cudaMemcpyDeviceToDevice)); cudaEventRecord(b); cudaEventSynchronize(b);
            float t; cudaEventElapsedTime(&t, a, b); if (r) ms.push_back(t);
        }
        std::sort(ms.begin(), ms.end());
        printf("copy D2D 512 MiB: %.3f ms, %.0f GB/s (read + write)\n", ms[ms.size() / 2], 2.0 * n / (ms[ms.size() / 2] * 1e-3) / 1e9);
    }
    // Ceiling 2: streaming read in a graph, slices of the sizes below.
    for (size_t mb : {9, 33, 48, 66, 431}) {
        size_t bytes = mb << 20, n = bytes / 16;
        int blocks = pr.multiProcessorCount * 8;
        float us = time_graph(REPS, [&](cudaStream_t s, int i, bool pdl) {
            size_t off = ((size_t)i * bytes) % (pool.bytes - bytes);
            off &= ~(size_t)255;
            launch_pdl(s, pdl, stream_read, dim3(blocks), dim3(256), (const uint4*)(pool.p + off), n, y);
        });
        printf("stream_read %4zu MiB: %8.2f us  %7.0f GB/s\n", mb, us, bytes / (us * 1e-6) / 1e9);
    }

    struct Shape { const char* name; int ty; int m; int k; bool pair; };
    Shape shapes[] = {
        {"q/o 4096x4096 Q4_K", T_Q4_K, 4096, 4096, false},
        {"gate+up 2x14336x4096 Q4_K", T_Q4_K, 14336, 4096, true},
        {"down 4096x14336 Q4_K", T_Q4_K, 4096, 14336, false},
        {"down 4096x14336 Q6_K", T_Q6_K, 4096, 14336, false},
        {"v 1024x4096 Q6_K", T_Q6_K, 1024, 4096, false},
        {"head 128256x4096 Q6_K", T_Q6_K, 128256, 4096, false},
    };
    for (auto& sh : shapes) {
        size_t wb = row_bytes(sh.ty, sh.k) * sh.m;
        size_t step = ((wb * (sh.pair ? 2 : 1)) + 4095) & ~(size_t)4095;
        auto base_at = [&](int i) { return pool.p + ((size_t)i * step) % (pool.bytes - step); };
        double bytes = (double)wb * (sh.pair ? 2 : 1);
        // The real kernel.
        auto real = [&](cudaStream_t s, int i, bool pdl, float* out, float* out2) {
            const u8* W = base_at(i);
            dim3 grid((sh.m + 3) / 4), block(128);
            int n1 = 1;
            if (sh.pair) {
                auto kf = sh.ty == T_Q4_K ? gate_up_fast1_12 : gate_up_fast1_14;
                launch_pdl(s, pdl, kf, grid, block, W, W + wb, (const signed char*)xq, (const Q8Blk*)xd, out, out2, y3, n1, sh.k, sh.m, 0, 0.0);
            } else {
                auto kf = sh.ty == T_Q4_K ? mmv_fast1_12 : mmv_fast1_14;
                launch_pdl(s, pdl, kf, grid, block, W, (const signed char*)xq, (const Q8Blk*)xd, out, n1, sh.k, sh.m);
            }
        };
        float us = time_graph(REPS, [&](cudaStream_t s, int i, bool pdl) { real(s, i, pdl, yr, yr2); });
        printf("%-28s real   : %8.2f us  %7.0f GB/s\n", sh.name, us, bytes / (us * 1e-6) / 1e9);
        std::vector<float> ref(sh.m), ref2(sh.m), got(sh.m), got2(sh.m);
        // Reference outputs from launch 0's weights.
        {
            cudaStream_t s; cudaStreamCreate(&s);
            real(s, 0, false, yr, yr2);
            CK(cudaStreamSynchronize(s));
            CK(cudaMemcpy(ref.data(), yr, sh.m * 4, cudaMemcpyDeviceToHost));
            CK(cudaMemcpy(ref2.data(), yr2, sh.m * 4, cudaMemcpyDeviceToHost));
            cudaStreamDestroy(s);
        }
        auto variant = [&](const char* name, auto kern, int threads) {
            auto go = [&](cudaStream_t s, int i, bool pdl, float* o, float* o2) {
                const u8* W = base_at(i);
                dim3 grid((sh.m + threads / 32 - 1) / (threads / 32)), block(threads);
                launch_pdl(s, pdl, kern, grid, block, W, W + wb, (const signed char*)xq, (const Q8Blk*)xd, o, o2, sh.k, sh.m);
            };
            cudaMemset(y, 0xff, sh.m * 4); cudaMemset(y2, 0xff, sh.m * 4);
            { cudaStream_t s; cudaStreamCreate(&s); go(s, 0, false, y, y2); CK(cudaStreamSynchronize(s)); cudaStreamDestroy(s); }
            CK(cudaMemcpy(got.data(), y, sh.m * 4, cudaMemcpyDeviceToHost));
            CK(cudaMemcpy(got2.data(), y2, sh.m * 4, cudaMemcpyDeviceToHost));
            bool same = memcmp(got.data(), ref.data(), sh.m * 4) == 0 && (!sh.pair || memcmp(got2.data(), ref2.data(), sh.m * 4) == 0);
            float t = time_graph(REPS, [&](cudaStream_t s, int i, bool pdl) { go(s, i, pdl, y, y2); });
            printf("%-28s %-7s: %8.2f us  %7.0f GB/s  %s\n", sh.name, name, t, bytes / (t * 1e-6) / 1e9, same ? "bitwise" : "DIFFERS");
        };
#define VARIANTS(TY, PAIR)                                                   \
        variant("u1 t128", lab_mmv<TY, 1, PAIR, 128>, 128);                 \
        variant("u2 t128", lab_mmv<TY, 2, PAIR, 128>, 128);                 \
        variant("u4 t128", lab_mmv<TY, 4, PAIR, 128>, 128);                 \
        variant("u1 t256", lab_mmv<TY, 1, PAIR, 256>, 256);                 \
        variant("u2 t256", lab_mmv<TY, 2, PAIR, 256>, 256);                 \
        variant("u2 t64", lab_mmv<TY, 2, PAIR, 64>, 64);
        if (sh.ty == T_Q4_K && sh.pair) { VARIANTS(T_Q4_K, true) }
        else if (sh.ty == T_Q4_K) { VARIANTS(T_Q4_K, false) }
        else { VARIANTS(T_Q6_K, false) }
    }
    return 0;
}
