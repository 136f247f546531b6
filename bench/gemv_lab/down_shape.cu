// Session 52: is the 8B's down projection slow for its shape? Alone (Nsight Compute, eager) the
// 8B's Q6_K down (4096 rows of 14336 values, mmv_fast2r_14: 512 blocks, 15 warps an SM, each
// lane 7 units a row) streams at 2.7 TB/s, its LM head (128256 rows of 4096 values, the same
// kernel, 15 waves) at 4.2; neither two units a lane in flight (session 51) nor twice the warps
// (session 52's split probe) gained in tg128. Here the production mat-vecs read the same bytes
// as the down's shape and as its transpose (14336 rows of 4096), and the head's, weights
// rotating through a 4 GiB pool so that L2 holds none of them; each row its us and GB/s, the
// median replay of a graph of REPS programmatic launches; and session 52's split probe beside
// them (alone faster than in the step would point at the step's context, not the kernel).
//   nvcc -arch=sm_90 -O3 --fmad=false -std=c++17 -DLOCKSTEP_FAST_F32 -o .device/lab/down_shape bench/gemv_lab/down_shape.cu
__device__ unsigned emu_tf32_rna(float);
__device__ void emu_mma_tf32(float*, const unsigned*, const unsigned*);
#include "../../crates/backend-cuda/src/kernels.cu"
#include "lab_common.cuh"

// Session 52 call 6's probe (bench/session52/experiments.patch, mmv_split2r): the same grid as
// mmv_fast2r on blocks of 8 warps, each row pair's units split between two warps (warps 0-3
// the first half of a lane's units, 4-7 the rest), the partial sums added through shared
// memory: twice the warps an SM, another order of the sums. In the step it lost 1.6% (the 8B).
template <int TY>
__global__ void __launch_bounds__(256, 4) split2r(const u8* W, const signed char* xq,
                                                  const Q8Blk* xd, float* y, int n, int k, int m) {
    constexpr int E = FastUnit<TY>::E;
    __shared__ float part[4][2][32];
    GRID_LAUNCH();
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int w = warp & 3, second = warp >> 2;
    int r0 = (blockIdx.x * 4 + w) * 2;
    int units = k / E;
    int mid = (((units + 31) / 32 + 1) / 2) * 32;
    bool live = r0 < m, two = r0 + 1 < m;
    float acc0 = 0.0f, acc1 = 0.0f;
    GRID_WAIT();
    if (live) {
        int ue = second ? units : min(mid, units);
        for (int u = second ? mid + lane : lane; u < ue; u += 32) {
            FastUnit<TY> a, b;
            a.load(fast_row_ptr<TY>(W, r0, k), u);
            if (two) b.load(fast_row_ptr<TY>(W, r0 + 1, k), u);
            acc0 = a.dot(xq, xd, u, acc0);
            if (two) acc1 = b.dot(xq, xd, u, acc1);
        }
    }
    if (second) {
        part[w][0][lane] = acc0;
        part[w][1][lane] = acc1;
    }
    __syncthreads();
    if (second || !live) return;
    float v0 = warp_sum_fixed(acc0 + part[w][0][lane]);
    float v1 = warp_sum_fixed(acc1 + part[w][1][lane]);
    if (lane == 0) {
        y[r0] = v0;
        if (two) y[r0 + 1] = v1;
    }
}

int main() {
    const int REPS = 20;
    size_t pool_bytes = (size_t)4 << 30;
    u8* pool;
    CK(cudaMalloc(&pool, pool_bytes + (1 << 20)));
    fill_weights(pool, pool_bytes);
    signed char* xq;
    Q8Blk* xd;
    quantized_activation(14336, &xq, &xd);
    int mmax = 131072;
    float* y;
    CK(cudaMalloc(&y, mmax * 4));
    print_device_and_ceilings(pool, pool_bytes, {33, 48, 431}, y, REPS);
    struct Shape { const char* name; int ty; int m; int k; };
    Shape shapes[] = {
        {"down Q6_K 4096x14336", 14, 4096, 14336}, {"transposed Q6_K 14336x4096", 14, 14336, 4096},
        {"head Q6_K 128256x4096", 14, 128256, 4096}, {"down Q4_K 4096x14336", 12, 4096, 14336},
        {"transposed Q4_K 14336x4096", 12, 14336, 4096}, {"L1B down Q4_K 2048x8192", 12, 2048, 8192},
    };
    // A multiple of the Q6_K plane group (1680 bytes: q6p_member locates a block by its
    // address) and of 256.
    const size_t AL = 26880;
    u8* p0 = (u8*)(((size_t)pool + AL - 1) / AL * AL);
    for (int round = 0; round < 2; round++) {
        for (auto& sh : shapes) {
            size_t wb = (size_t)(sh.k / 256) * (sh.ty == 14 ? 210 : 144) * sh.m;
            size_t step = (wb + AL - 1) / AL * AL;
            auto base_at = [&](int i) { return p0 + ((size_t)i * step) % (pool_bytes - step - 2 * AL) / AL * AL; };
            auto run = [&](const char* name, auto kern, int rows_per_block, int threads = 128) {
                float t = time_graph(REPS, [&](cudaStream_t s, int i, bool pdl) {
                    launch_pdl(s, pdl, kern, dim3((sh.m + rows_per_block - 1) / rows_per_block), dim3(threads),
                               (const u8*)base_at(i), (const signed char*)xq, (const Q8Blk*)xd, y, 1, sh.k, sh.m);
                });
                printf("%-28s %-12s: %8.2f us  %7.0f GB/s\n", sh.name, name, t, wb / (t * 1e-6) / 1e9);
            };
            if (sh.ty == 14) {
                run("fast2r", mmv_fast2r_14, 8);
                run("fast1", mmv_fast1_14, 4);
                run("split2r", split2r<14>, 8, 256);
            } else {
                run("fast2r", mmv_fast2r_12, 8);
                run("fast1", mmv_fast1_12, 4);
                run("split2r", split2r<12>, 8, 256);
            }
        }
    }
    return 0;
}
