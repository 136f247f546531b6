// What does a decode step pay at each kernel boundary, and what would a grid-wide barrier inside
// one persistent kernel pay instead? (Session 28: the question behind a step-level design, where
// consecutive latency-bound stages share one launch.)
//
// Both sides do the same dependent work per stage: every block reads a value another block wrote
// in the stage before and writes its own (ping-pong buffers), so each stage really waits for the
// last.
//   chain:   N kernels of G blocks x T threads in one CUDA graph, programmatic edges (PDL): each
//            waits (griddepcontrol.wait), does the stage, lets the next launch; `entry` lets the
//            next launch at its entry instead (as the mat-vecs do).
//   barrier: one kernel of G blocks x T threads doing N stages, a grid barrier between stages (a
//            release add on a global counter, an acquire spin until every block arrived).
// Median of 7 replays, us a stage. Compiled on the development machine (nvcc from pip) and
// carried:
//   nvcc -arch=sm_90 -O3 -std=c++17 -o .device/lab/barrier_lab bench/barrier_lab/barrier_lab.cu
#include <cuda_runtime.h>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { printf("%s: %s\n", #x, cudaGetErrorString(e_)); exit(1); } } while (0)

__device__ __forceinline__ void stage(const unsigned* in, unsigned* out) {
    if (threadIdx.x == 0) {
        unsigned v = __ldcg(in + (blockIdx.x + 1) % gridDim.x);
        out[blockIdx.x] = v + 1;
    }
}

template <bool ENTRY>
__global__ void chain_kernel(const unsigned* in, unsigned* out) {
    if (ENTRY) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    asm volatile("griddepcontrol.wait;" ::: "memory");
    stage(in, out);
    __syncthreads();
    if (!ENTRY) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}

__device__ __forceinline__ void grid_barrier(unsigned* ctr, unsigned target) {
    __syncthreads();
    if (threadIdx.x == 0) {
        asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(ctr) : "memory");
        unsigned v;
        do {
            asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(ctr) : "memory");
        } while (v < target);
    }
    __syncthreads();
}

__global__ void barrier_kernel(unsigned* a, unsigned* b, unsigned* ctr, int n, unsigned base) {
    for (int i = 0; i < n; i++) {
        stage(i % 2 ? b : a, i % 2 ? a : b);
        grid_barrier(ctr, base + (unsigned)(i + 1) * gridDim.x);
    }
}

template <typename K, typename... A>
static void launch_pdl(cudaStream_t s, bool pdl, K kern, dim3 grid, dim3 block, A... args) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.stream = s;
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = at;
    cfg.numAttrs = pdl ? 1 : 0;
    CK(cudaLaunchKernelEx(&cfg, kern, args...));
}

static float time_graph(int stages, std::function<void(cudaStream_t)> body) {
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    body(s);
    CK(cudaStreamSynchronize(s));
    cudaGraph_t g;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    body(s);
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
    return ms[ms.size() / 2] * 1000.0f / stages;
}

int main() {
    cudaDeviceProp p;
    CK(cudaGetDeviceProperties(&p, 0));
    printf("%s, %d SMs\n", p.name, p.multiProcessorCount);
    const int N = 256;
    unsigned *a, *b, *ctr;
    CK(cudaMalloc(&a, 4096 * 4));
    CK(cudaMalloc(&b, 4096 * 4));
    CK(cudaMalloc(&ctr, 4));
    CK(cudaMemset(a, 0, 4096 * 4));
    CK(cudaMemset(b, 0, 4096 * 4));
    printf("%6s %6s | %12s %12s %12s | %12s\n", "blocks", "thr", "chain plain", "chain pdl", "pdl entry", "grid barrier");
    int grids[] = {1, 4, 32, 48, 132, 264, 512};
    int threads[] = {128, 512, 1024};
    for (int T : threads) {
        for (int G : grids) {
            float c0 = time_graph(N, [&](cudaStream_t s) {
                for (int i = 0; i < N; i++)
                    launch_pdl(s, false, chain_kernel<false>, dim3(G), dim3(T), (const unsigned*)(i % 2 ? b : a), i % 2 ? a : b);
            });
            float c1 = time_graph(N, [&](cudaStream_t s) {
                for (int i = 0; i < N; i++)
                    launch_pdl(s, true, chain_kernel<false>, dim3(G), dim3(T), (const unsigned*)(i % 2 ? b : a), i % 2 ? a : b);
            });
            float c2 = time_graph(N, [&](cudaStream_t s) {
                for (int i = 0; i < N; i++)
                    launch_pdl(s, true, chain_kernel<true>, dim3(G), dim3(T), (const unsigned*)(i % 2 ? b : a), i % 2 ? a : b);
            });
            // Co-residency: at most one wave (occupancy decides; the barrier needs every block resident).
            int per_sm = 0;
            CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, barrier_kernel, T, 0));
            float bb = -1.f;
            if (G <= per_sm * p.multiProcessorCount) {
                unsigned base = 0;
                bb = time_graph(N, [&](cudaStream_t s) {
                    CK(cudaMemsetAsync(ctr, 0, 4, s));
                    barrier_kernel<<<G, T, 0, s>>>(a, b, ctr, N, base);
                });
            }
            printf("%6d %6d | %12.3f %12.3f %12.3f | %12.3f\n", G, T, c0, c1, c2, bb);
        }
    }
    unsigned h[4];
    CK(cudaMemcpy(h, a, 16, cudaMemcpyDeviceToHost));
    printf("check %u\n", h[0]);
    return 0;
}
