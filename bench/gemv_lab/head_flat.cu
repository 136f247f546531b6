// Session 49: the Q8_0 LM heads of the small models (rows of 576 / 640 values: 18 / 20 units)
// with every lane of a warp busy. The production kernel (mmv_fast2r_8, two rows a warp: lanes
// 0..19 one unit of each row, 12 lanes idle) against "flat" warps: R consecutive rows are
// R * U consecutive units (Q8_0 planes: consecutive blocks, 16 to a 544-byte group), lane l
// takes units l, l + 32, ... of them, so every lane has NI units in flight and every load of a
// warp is 512 contiguous bytes. Each unit's value is the production dot (acc 0, one fma); the
// values go to shared memory at [row][unit], then each row's butterfly runs over them as the
// production warp's lanes held them (lanes past the row's units 0): every output bitwise the
// production kernel's (checked). Graphs of REPS programmatic launches, weights rotating
// through a 4 GiB pool (tensors at multiples of 544 bytes, as the backend uploads planes).
//   nvcc -arch=sm_90 -O3 --fmad=false -std=c++17 -o .device/lab/head_flat bench/gemv_lab/head_flat.cu
__device__ unsigned emu_tf32_rna(float);
__device__ void emu_mma_tf32(float*, const unsigned*, const unsigned*);
#include "../../crates/backend-cuda/src/kernels.cu"
#include "lab_common.cuh"

// R rows a warp, NI units a lane at most (NI * 32 >= R * U), THREADS a block.
template <int R, int NI, int THREADS>
__global__ void __launch_bounds__(THREADS) head_flat(const u8* W, const signed char* xq,
                                                     const Q8Blk* xd, float* y, int k, int m) {
    GRID_LAUNCH();
    __shared__ float part[THREADS / 32][R][32];
    int lane = threadIdx.x & 31, wi = threadIdx.x >> 5;
    int r0 = (blockIdx.x * (THREADS / 32) + wi) * R;
    int U = k / 32;
    int nr = min(R, m - r0);
    if (nr <= 0) { GRID_WAIT(); return; }
    int total = nr * U;
#pragma unroll
    for (int j = 0; j < R; j++) part[wi][j][lane] = 0.0f;
    const u8* base = W + (size_t)r0 * U * 34;
    GRID_WAIT();
    FastUnit<T_Q8_0> w[NI];
#pragma unroll
    for (int i = 0; i < NI; i++) {
        int f = lane + 32 * i;
        if (f < total) w[i].load(base, f);
    }
#pragma unroll
    for (int i = 0; i < NI; i++) {
        int f = lane + 32 * i;
        if (f < total) {
            int j = f / U, u = f - j * U;
            part[wi][j][u] = w[i].dot(xq, xd, u, 0.0f);
        }
    }
    __syncwarp();
#pragma unroll
    for (int j = 0; j < R; j++) {
        if (j >= nr) break;
        float v = warp_sum_fixed(part[wi][j][lane]);
        if (lane == 0) y[r0 + j] = v;
    }
}

int main() {
    const int REPS = 20;
    size_t pool_bytes = (size_t)4 << 30;
    u8* pool;
    CK(cudaMalloc(&pool, pool_bytes + 8192));
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
    const size_t AL = 4352;  // a multiple of the 544-byte groups and of 256
    for (auto& sh : shapes) {
        size_t wb = (size_t)(sh.k / 32) * 34 * sh.m;
        size_t step = (wb + AL - 1) / AL * AL;
        // Absolute addresses at multiples of AL: q8p_member locates a block by its address.
        u8* p0 = (u8*)(((size_t)pool + AL - 1) / AL * AL);
        auto base_at = [&](int i) { return p0 + ((size_t)i * step) % (pool_bytes - step - AL) / AL * AL; };
        auto real = [&](cudaStream_t s, int i, bool pdl, float* out) {
            launch_pdl(s, pdl, mmv_fast2r_8, dim3((sh.m + 7) / 8), dim3(128), (const u8*)base_at(i),
                       (const signed char*)xq, (const Q8Blk*)xd, out, 1, sh.k, sh.m);
        };
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
            printf("%-24s %-14s: %8.2f us  %7.0f GB/s  %s\n", sh.name, name, t, wb / (t * 1e-6) / 1e9, same ? "bitwise" : "DIFFERS");
        };
        for (int round = 0; round < 2; round++) {
            float us = time_graph(REPS, [&](cudaStream_t s, int i, bool pdl) { real(s, i, pdl, yr); });
            printf("%-24s %-14s: %8.2f us  %7.0f GB/s\n", sh.name, "fast2r (prod)", us, wb / (us * 1e-6) / 1e9);
            variant("flat r4 t128", head_flat<4, 3, 128>, 128, 4);
            variant("flat r8 t128", head_flat<8, 5, 128>, 128, 8);
            variant("flat r8 t256", head_flat<8, 5, 256>, 256, 8);
            variant("flat r16 t128", head_flat<16, 10, 128>, 128, 16);
            variant("flat r8 t64", head_flat<8, 5, 64>, 64, 8);
        }
    }
    return 0;
}
