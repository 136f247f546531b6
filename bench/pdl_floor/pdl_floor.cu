// The floor of a decode step's launches: a CUDA graph of N dependent kernels, each reading
// what the one before wrote (one block or 132 blocks of 128 threads), replayed; time a kernel
// with and without programmatic dependent launch (griddepcontrol). nvcc -arch=sm_90 -O2.
#include <cstdio>
#include <cuda_runtime.h>
#include <vector>
#include <algorithm>

__global__ void step(const float* in, float* out, int n) {
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = in[i] * 1.0001f + 1.0f;
}

static float run(int n_kernels, int blocks, bool pdl, int reps) {
    int n = blocks * 128;
    float *a, *b;
    cudaMalloc(&a, n * sizeof(float));
    cudaMalloc(&b, n * sizeof(float));
    cudaMemset(a, 0, n * sizeof(float));
    cudaStream_t s;
    cudaStreamCreate(&s);
    cudaGraph_t g;
    cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal);
    for (int k = 0; k < n_kernels; k++) {
        cudaLaunchConfig_t cfg = {};
        cfg.gridDim = dim3(blocks);
        cfg.blockDim = dim3(128);
        cfg.stream = s;
        cudaLaunchAttribute at[1];
        at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        at[0].val.programmaticStreamSerializationAllowed = 1;
        cfg.attrs = at;
        cfg.numAttrs = pdl ? 1 : 0;
        const float* in = (k & 1) ? b : a;
        float* out = (k & 1) ? a : b;
        cudaLaunchKernelEx(&cfg, step, in, out, n);
    }
    cudaStreamEndCapture(s, &g);
    cudaGraphExec_t e;
    if (cudaGraphInstantiate(&e, g, 0) != cudaSuccess) { printf("instantiate failed\n"); return -1; }
    cudaEvent_t t0, t1;
    cudaEventCreate(&t0);
    cudaEventCreate(&t1);
    std::vector<float> ms;
    for (int r = 0; r < reps; r++) {
        cudaEventRecord(t0, s);
        cudaGraphLaunch(e, s);
        cudaEventRecord(t1, s);
        cudaEventSynchronize(t1);
        float x;
        cudaEventElapsedTime(&x, t0, t1);
        ms.push_back(x);
    }
    std::sort(ms.begin(), ms.end());
    cudaFree(a); cudaFree(b);
    return ms[ms.size() / 2] * 1000.0f / n_kernels;  // us a kernel, median replay
}

int main() {
    for (int blocks : {1, 132, 1024})
        for (int pdl = 0; pdl < 2; pdl++)
            printf("300 kernels, %4d blocks of 128, pdl %d: %.2f us a kernel (median of 50 replays)\n",
                   blocks, pdl, run(300, blocks, pdl, 50));
    return 0;
}
