// What a decode step's kernel boundary would cost inside one persistent kernel.
//
// A decode step of the small models is a chain of 150-190 dependent kernels (session 14), each
// boundary a grid's completion and its successor's release under programmatic dependent launch
// (about 1.3 us between one kernel's last mark and the next one's release in the step
// timelines). A persistent kernel replaces the boundary by a barrier among resident blocks.
// This lab times one phase of the same work both ways:
//  - work of a phase: every block reads the whole vector the previous phase wrote (4096 floats
//    through L2, as a norm or a mat-vec reads its activation), reduces it, and writes its share
//    of the next vector;
//  - `pdl`: one kernel a phase, N kernels in a CUDA graph with programmatic launches (the
//    production pattern: griddepcontrol.wait, then launch_dependents);
//  - `barrier`: one cooperative kernel of N phases; between phases every block arrives at a
//    counter (thread 0: a release fence and an atomic add) and spins on it (acquire loads);
//  - `cg`: the same with cooperative groups' grid.sync();
// each at 1 and 2 blocks an SM. Median of 7 replays; the vector's value is checked against the
// host's so a variant that races is reported. nvcc -arch=sm_90 -O3 -std=c++17.
#include <cooperative_groups.h>
#include <cuda_runtime.h>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>
namespace cg = cooperative_groups;

constexpr int N = 4096;
constexpr int THREADS = 256;

__device__ __forceinline__ float block_sum(float v, float* red) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    int w = threadIdx.x >> 5, l = threadIdx.x & 31;
    if (l == 0) red[w] = v;
    __syncthreads();
    float s = 0.f;
    for (int i = 0; i < THREADS / 32; i++) s += red[i];
    __syncthreads();
    return s;
}

// One phase: sum of `in` (all N), then this block's share of `out`.
__device__ __forceinline__ void phase(const float* in, float* out, float* red) {
    float v = 0.f;
#pragma unroll
    for (int i = 0; i < N / THREADS; i++) v += __ldcg(in + threadIdx.x + i * THREADS);
    float s = block_sum(v, red);
    for (int j = blockIdx.x * THREADS + threadIdx.x; j < N; j += gridDim.x * THREADS)
        out[j] = __ldcg(in + j) * 0.5f + s * (1.0f / N);
}

__global__ void __launch_bounds__(THREADS) pdl_phase(const float* in, float* out) {
    __shared__ float red[THREADS / 32];
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    phase(in, out, red);
}

__device__ __forceinline__ void arrive_and_wait(unsigned* count, unsigned target) {
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence();
        atomicAdd(count, 1u);
        unsigned v;
        do {
            asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(count) : "memory");
        } while (v < target);
    }
    __syncthreads();
}

__global__ void __launch_bounds__(THREADS) persistent(float* a, float* b, int phases, unsigned* count,
                                                      int use_cg) {
    __shared__ float red[THREADS / 32];
    cg::grid_group grid = cg::this_grid();
    for (int p = 0; p < phases; p++) {
        const float* in = (p & 1) ? b : a;
        float* out = (p & 1) ? a : b;
        phase(in, out, red);
        if (use_cg)
            grid.sync();
        else
            arrive_and_wait(count, (unsigned)(p + 1) * gridDim.x);
    }
}

// The host's value of the vector after `phases` phases from `x` (the same f32 operations in
// the same order as a block: lanes' partial sums, butterflies, warps in order).
static std::vector<float> host(std::vector<float> x, int phases) {
    for (int p = 0; p < phases; p++) {
        float red[THREADS / 32];
        for (int w = 0; w < THREADS / 32; w++) {
            float lane[32];
            for (int l = 0; l < 32; l++) {
                float v = 0.f;
                for (int i = 0; i < N / THREADS; i++) v += x[w * 32 + l + i * THREADS];
                lane[l] = v;
            }
            for (int o = 16; o > 0; o >>= 1) {
                float t[32];
                for (int l = 0; l < 32; l++) t[l] = lane[l] + lane[l ^ o];
                for (int l = 0; l < 32; l++) lane[l] = t[l];
            }
            red[w] = lane[0];
        }
        float s = 0.f;
        for (int i = 0; i < THREADS / 32; i++) s += red[i];
        std::vector<float> y(N);
        for (int j = 0; j < N; j++) y[j] = x[j] * 0.5f + s * (1.0f / N);
        x = y;
    }
    return x;
}

static float median(std::vector<float> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

int main() {
    int sms = 0;
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    cudaDeviceProp prop;
    cudaGetDeviceProperties(&prop, 0);
    printf("%s, %d SMs\n", prop.name, sms);
    const int phases = 200, reps = 7;
    std::vector<float> x0(N);
    for (int i = 0; i < N; i++) x0[i] = std::sin(0.01f * i);
    std::vector<float> want = host(x0, phases);
    float *a, *b;
    unsigned* count;
    cudaMalloc(&a, N * 4);
    cudaMalloc(&b, N * 4);
    cudaMalloc(&count, 4);
    cudaStream_t s;
    cudaStreamCreate(&s);
    cudaEvent_t t0, t1;
    cudaEventCreate(&t0);
    cudaEventCreate(&t1);
    auto check = [&](const char* what) {
        std::vector<float> got(N);
        cudaMemcpy(got.data(), (phases & 1) ? b : a, N * 4, cudaMemcpyDeviceToHost);
        int bad = 0;
        for (int i = 0; i < N; i++) bad += got[i] != want[i];
        if (bad) printf("  %s: %d of %d values differ from the host's\n", what, bad, N);
        return bad == 0;
    };
    for (int per_sm : {1, 2}) {
        int blocks = sms * per_sm;
        // pdl: a graph of `phases` kernels.
        cudaGraph_t g;
        cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal);
        for (int p = 0; p < phases; p++) {
            cudaLaunchConfig_t cfg = {};
            cfg.gridDim = dim3(blocks);
            cfg.blockDim = dim3(THREADS);
            cfg.stream = s;
            cudaLaunchAttribute at[1];
            at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
            at[0].val.programmaticStreamSerializationAllowed = 1;
            cfg.attrs = at;
            cfg.numAttrs = 1;
            const float* in = (p & 1) ? b : a;
            float* out = (p & 1) ? a : b;
            cudaLaunchKernelEx(&cfg, pdl_phase, in, out);
        }
        cudaStreamEndCapture(s, &g);
        cudaGraphExec_t e;
        if (cudaGraphInstantiate(&e, g, 0) != cudaSuccess) {
            printf("instantiate failed\n");
            return 1;
        }
        std::vector<float> ms;
        bool ok = true;
        for (int r = 0; r < reps; r++) {
            cudaMemcpy(a, x0.data(), N * 4, cudaMemcpyHostToDevice);
            cudaEventRecord(t0, s);
            cudaGraphLaunch(e, s);
            cudaEventRecord(t1, s);
            cudaEventSynchronize(t1);
            float v;
            cudaEventElapsedTime(&v, t0, t1);
            ms.push_back(v);
            ok = check("pdl") && ok;
        }
        printf("blocks %4d  pdl       %.3f us a phase%s\n", blocks, median(ms) * 1000.f / phases,
               ok ? "" : "  WRONG");
        for (int use_cg : {0, 1}) {
            std::vector<float> mt;
            bool ok2 = true;
            for (int r = 0; r < reps; r++) {
                cudaMemcpy(a, x0.data(), N * 4, cudaMemcpyHostToDevice);
                cudaMemset(count, 0, 4);
                int ph = phases;
                void* args[] = {&a, &b, &ph, &count, &use_cg};
                cudaEventRecord(t0, s);
                cudaError_t err = cudaLaunchCooperativeKernel((void*)persistent, dim3(blocks), dim3(THREADS),
                                                              args, 0, s);
                cudaEventRecord(t1, s);
                cudaEventSynchronize(t1);
                if (err != cudaSuccess) {
                    printf("cooperative launch of %d blocks: %s\n", blocks, cudaGetErrorString(err));
                    ok2 = false;
                    break;
                }
                float v;
                cudaEventElapsedTime(&v, t0, t1);
                mt.push_back(v);
                ok2 = check(use_cg ? "cg" : "barrier") && ok2;
            }
            if (!mt.empty())
                printf("blocks %4d  %-9s %.3f us a phase%s\n", blocks, use_cg ? "cg" : "barrier",
                       median(mt) * 1000.f / phases, ok2 ? "" : "  WRONG");
        }
    }
    cudaError_t err = cudaDeviceSynchronize();
    printf("%s\n", err == cudaSuccess ? "done" : cudaGetErrorString(err));
    return 0;
}
