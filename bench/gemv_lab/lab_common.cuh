// The labs' shared host side (gemv_lab.cu, head_lab.cu): included after kernels.cu.
#pragma once
#include <cuda_runtime.h>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <vector>

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { printf("%s: %s\n", #x, cudaGetErrorString(e_)); exit(1); } } while (0)

// The ceiling: every byte of the pool slice read once, 16 bytes a load, four in flight.
__global__ void __launch_bounds__(256) stream_read(const uint4* p, size_t n, float* out) {
    GRID_ENTER();
    u32 acc = 0;
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x, s = (size_t)gridDim.x * blockDim.x;
    for (; i + 3 * s < n; i += 4 * s) {
        uint4 a = p[i], b = p[i + s], c = p[i + 2 * s], d = p[i + 3 * s];
        acc ^= a.x ^ a.w ^ b.y ^ b.z ^ c.x ^ c.w ^ d.y ^ d.z;
    }
    for (; i < n; i += s) acc ^= p[i].x;
    if (acc == 0x12345678u) out[0] = 1.0f;
}

// A graph of `reps` launches, launch(i) enqueueing the i-th; returns the median replay's us a launch.
static float time_graph(int reps, std::function<void(cudaStream_t, int, bool)> launch) {
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    for (int i = 0; i < 3; i++) launch(s, i, false);  // warm-up, modules loaded
    CK(cudaStreamSynchronize(s));
    cudaGraph_t g;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    for (int i = 0; i < reps; i++) launch(s, i, true);
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
    return ms[ms.size() / 2] * 1000.0f / reps;
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

// Random bytes over a weight pool, with every f16 that could be a scale small and finite: every
// pair of bytes is a finite half (high byte 0x00..0x3B).
static void fill_weights(u8* p, size_t bytes) {
    std::vector<u8> h(64 << 20);
    u32 x = 12345;
    for (size_t i = 0; i < h.size(); i++) { x = x * 1664525u + 1013904223u; h[i] = (u8)(x >> 24); }
    for (size_t i = 1; i < h.size(); i += 2) h[i] = h[i] % 0x3B;
    for (size_t o = 0; o < bytes; o += h.size()) CK(cudaMemcpy(p + o, h.data(), std::min(h.size(), bytes - o), cudaMemcpyHostToDevice));
}

// Random bytes from `seed`, every odd one below 0x24: each f16 at an even offset (every block's
// scales in the cluster labs' weights) is small and finite (|x| < 2^-7), so many random layers
// stay finite.
static void fill_small(u8* p, size_t bytes, u32 seed) {
    std::vector<u8> h(bytes);
    u32 x = seed;
    for (size_t i = 0; i < bytes; i++) {
        x = x * 1664525u + 1013904223u;
        h[i] = (u8)(x >> 24);
    }
    for (size_t i = 1; i < bytes; i += 2) h[i] = h[i] % 0x24;
    CK(cudaMemcpy(p, h.data(), bytes, cudaMemcpyHostToDevice));
}

// One quantized activation row of kmax values (random int8, small block scales, the blocks'
// sums) on the device.
static void quantized_activation(int kmax, signed char** xq, Q8Blk** xd) {
    CK(cudaMalloc(xq, kmax));
    CK(cudaMalloc(xd, kmax / 32 * sizeof(Q8Blk)));
    std::vector<signed char> q(kmax);
    std::vector<Q8Blk> d(kmax / 32);
    u32 x = 777;
    for (auto& v : q) { x = x * 1664525u + 1013904223u; v = (signed char)(x >> 24); }
    for (int b = 0; b < kmax / 32; b++) { int s = 0; for (int i = 0; i < 32; i++) s += q[b * 32 + i]; d[b] = {0.01f + 0.001f * (b % 7), s}; }
    CK(cudaMemcpy(*xq, q.data(), q.size(), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(*xd, d.data(), d.size() * sizeof(Q8Blk), cudaMemcpyHostToDevice));
}

// The device's name, then the streaming ceiling for each size in `mibs`: stream_read over a
// slice moved through the pool every launch (so L2 holds none of it), its median us a launch.
static void print_device_and_ceilings(u8* pool, size_t pool_bytes, std::initializer_list<size_t> mibs,
                                      float* y, int reps) {
    int dev; cudaGetDevice(&dev); cudaDeviceProp pr; cudaGetDeviceProperties(&pr, dev);
    printf("device: %s, %d SMs, L2 %d MiB\n", pr.name, pr.multiProcessorCount, pr.l2CacheSize >> 20);
    for (size_t mb : mibs) {
        size_t bytes = mb << 20, n = bytes / 16;
        int blocks = pr.multiProcessorCount * 8;
        float us = time_graph(reps, [&](cudaStream_t s, int i, bool pdl) {
            size_t off = (((size_t)i * bytes) % (pool_bytes - bytes)) & ~(size_t)255;
            launch_pdl(s, pdl, stream_read, dim3(blocks), dim3(256), (const uint4*)(pool + off), n, y);
        });
        printf("stream_read %4zu MiB: %8.2f us  %7.0f GB/s\n", mb, us, bytes / (us * 1e-6) / 1e9);
    }
}
