// The small models' LM heads (Q8_0, rows of 576 / 640 values: 18 / 20 units of 32, so a warp a
// row leaves 12-14 lanes idle), alone, as in a decode step: the real kernel (kernels.cu's
// mmv_fast1_8) and variants, each in a CUDA graph of REPS programmatic launches whose weights
// rotate through a pool far larger than L2, median of 7 replays, against a streaming read.
// Every variant must give the real kernel's outputs bitwise (checked).
//   nvcc -arch=sm_90 -O3 --fmad=false -std=c++17 -o /tmp/head_lab bench/gemv_lab/head_lab.cu && /tmp/head_lab
__device__ unsigned emu_tf32_rna(float);
__device__ void emu_mma_tf32(float*, const unsigned*, const unsigned*);
#include "../../crates/backend-cuda/src/kernels.cu"
#include "lab_common.cuh"

// NR consecutive rows a warp: lane l takes unit l (and l + 32, ...) of each of its rows, the
// NR units' loads issued together; per row the same dots in the same order as the real kernel.
template <int NR, int THREADS>
__global__ void __launch_bounds__(THREADS) head_nr(const u8* W, const signed char* xq,
                                                   const Q8Blk* xd, float* y, int k, int m) {
    GRID_LAUNCH();
    int lane = threadIdx.x & 31;
    int r0 = (blockIdx.x * (THREADS / 32) + (threadIdx.x >> 5)) * NR;
    if (r0 >= m) { GRID_WAIT(); return; }
    size_t rb = (size_t)(k / 32) * 34;
    int units = k / 32;
    float acc[NR];
#pragma unroll
    for (int j = 0; j < NR; j++) acc[j] = 0.0f;
    bool waited = false;
    for (int u = lane; u < units; u += 32) {
        FastUnit<T_Q8_0> w[NR];
#pragma unroll
        for (int j = 0; j < NR; j++)
            if (r0 + j < m) w[j].load(W + (size_t)(r0 + j) * rb, u);
        if (!waited) { GRID_WAIT(); waited = true; }
#pragma unroll
        for (int j = 0; j < NR; j++)
            if (r0 + j < m) acc[j] = w[j].dot(xq, xd, u, acc[j]);
    }
    if (!waited) GRID_WAIT();
#pragma unroll
    for (int j = 0; j < NR; j++) {
        float v = warp_sum_fixed(acc[j]);
        if (lane == 0 && r0 + j < m) y[r0 + j] = v;
    }
}

// The same, the warp's NR rows (contiguous bytes) first copied to shared memory in 16-byte
// loads (NR * row bytes a multiple of 16), each lane then decoding its units from there.
template <int NR, int THREADS, int MAXRB>
__global__ void __launch_bounds__(THREADS) head_stage(const u8* W, const signed char* xq,
                                                      const Q8Blk* xd, float* y, int k, int m) {
    GRID_LAUNCH();
    __shared__ uint4 sm[THREADS / 32][NR * MAXRB / 16 + 1];
    int lane = threadIdx.x & 31, wi = threadIdx.x >> 5;
    int r0 = (blockIdx.x * (THREADS / 32) + wi) * NR;
    if (r0 >= m) { GRID_WAIT(); return; }
    size_t rb = (size_t)(k / 32) * 34;
    int units = k / 32, nr = min(NR, m - r0);
    int n16 = (int)((nr * rb) / 16);
    const uint4* src = (const uint4*)(W + (size_t)r0 * rb);
    for (int i = lane; i < n16; i += 32) sm[wi][i] = ldw16(src + i);
    __syncwarp();
    GRID_WAIT();
    const u8* base = (const u8*)sm[wi];
    float acc[NR];
#pragma unroll
    for (int j = 0; j < NR; j++) acc[j] = 0.0f;
    for (int u = lane; u < units; u += 32) {
#pragma unroll
        for (int j = 0; j < NR; j++) {
            if (j >= nr) break;
            const u8* b = base + j * rb + (size_t)u * 34;
            FastUnit<T_Q8_0> w;
            w.d = h2f(*(const u16*)b);
            const u32* a = (const u32*)((size_t)(b + 2) & ~(size_t)3);
            u32 sh = ((u32)(size_t)(b + 2) & 3u) * 8u;
            u32 ww[9];
#pragma unroll
            for (int i = 0; i < 9; i++) ww[i] = a[i];
#pragma unroll
            for (int i = 0; i < 8; i++) w.q[i] = (int)__funnelshift_r(ww[i], ww[i + 1], sh);
            acc[j] = w.dot(xq, xd, u, acc[j]);
        }
    }
#pragma unroll
    for (int j = 0; j < NR; j++) {
        float v = warp_sum_fixed(acc[j]);
        if (lane == 0 && j < nr) y[r0 + j] = v;
    }
}

int main() {
    const int REPS = 20;
    size_t pool_bytes = (size_t)4 << 30;
    u8* pool;
    CK(cudaMalloc(&pool, pool_bytes + 4096));
    fill_weights(pool, pool_bytes);
    int kmax = 640;
    signed char* xq;
    Q8Blk* xd;
    quantized_activation(kmax, &xq, &xd);
    int mmax = 262144;
    float *y, *yr;
    CK(cudaMalloc(&y, mmax * 4));
    CK(cudaMalloc(&yr, mmax * 4));
    print_device_and_ceilings(pool, pool_bytes, {29, 170}, y, REPS);
    struct Shape { const char* name; int m; int k; };
    Shape shapes[] = {{"head 49152x576 Q8_0", 49152, 576}, {"head 262144x640 Q8_0", 262144, 640}};
    for (auto& sh : shapes) {
        size_t wb = (size_t)(sh.k / 32) * 34 * sh.m;
        size_t step = (wb + 4095) & ~(size_t)4095;
        auto base_at = [&](int i) { return pool + ((size_t)i * step) % (pool_bytes - step); };
        auto real = [&](cudaStream_t s, int i, bool pdl, float* out) {
            launch_pdl(s, pdl, mmv_fast1_8, dim3((sh.m + 3) / 4), dim3(128), (const u8*)base_at(i),
                       (const signed char*)xq, (const Q8Blk*)xd, out, 1, sh.k, sh.m);
        };
        float us = time_graph(REPS, [&](cudaStream_t s, int i, bool pdl) { real(s, i, pdl, yr); });
        printf("%-24s real        : %8.2f us  %7.0f GB/s\n", sh.name, us, wb / (us * 1e-6) / 1e9);
        std::vector<float> ref(sh.m), got(sh.m);
        { cudaStream_t s; cudaStreamCreate(&s); real(s, 0, false, yr); CK(cudaStreamSynchronize(s)); cudaStreamDestroy(s); }
        CK(cudaMemcpy(ref.data(), yr, sh.m * 4, cudaMemcpyDeviceToHost));
        auto variant = [&](const char* name, auto kern, int threads, int nr) {
            int rows_per_block = threads / 32 * nr;
            auto go = [&](cudaStream_t s, int i, bool pdl, float* o) {
                launch_pdl(s, pdl, kern, dim3((sh.m + rows_per_block - 1) / rows_per_block), dim3(threads),
                           (const u8*)base_at(i), (const signed char*)xq, (const Q8Blk*)xd, o, sh.k, sh.m);
            };
            cudaMemset(y, 0xff, sh.m * 4);
            { cudaStream_t s; cudaStreamCreate(&s); go(s, 0, false, y); CK(cudaStreamSynchronize(s)); cudaStreamDestroy(s); }
            CK(cudaMemcpy(got.data(), y, sh.m * 4, cudaMemcpyDeviceToHost));
            bool same = memcmp(got.data(), ref.data(), sh.m * 4) == 0;
            float t = time_graph(REPS, [&](cudaStream_t s, int i, bool pdl) { go(s, i, pdl, y); });
            printf("%-24s %-12s: %8.2f us  %7.0f GB/s  %s\n", sh.name, name, t, wb / (t * 1e-6) / 1e9, same ? "bitwise" : "DIFFERS");
        };
        variant("nr1 t128", head_nr<1, 128>, 128, 1);
        variant("nr2 t128", head_nr<2, 128>, 128, 2);
        variant("nr4 t128", head_nr<4, 128>, 128, 4);
        variant("nr8 t128", head_nr<8, 128>, 128, 8);
        variant("nr2 t256", head_nr<2, 256>, 256, 2);
        variant("nr4 t256", head_nr<4, 256>, 256, 4);
        variant("st4 t128", head_stage<4, 128, 680>, 128, 4);
        variant("st8 t128", head_stage<8, 128, 680>, 128, 8);
        variant("st4 t256", head_stage<4, 256, 680>, 128 * 2, 4);
        variant("st8 t256", head_stage<8, 256, 680>, 256, 8);
    }
    return 0;
}
