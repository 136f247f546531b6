// What a replayed decode step pays to move its inputs in and its logits out (session 38).
//
// The replay clock (session 37) put about 30 us of SmolLM2's 358 us step outside the graph's
// kernels: the host's restage (the step's tables: 8.0 us, 6.1 of it the batched upload call),
// the launch call (4.2), the engine between replays (8.7), and the 192 KiB logits' copy to
// page-locked memory after the LM head (9.8 us of device time). This lab measures, as whole
// steps (launch, then synchronize, host wall time per step, median of many):
//
//  1. the LM head (kernels.cu's mmv_fast2r_8, 49152 x 576 Q8_0) and then the copy engine's
//     D2H copy of its 192 KiB into page-locked memory (today), against the same head writing
//     each value also into mapped page-locked memory from the kernel: a warp's two rows as two
//     4-byte stores (`warp`), or a block's eight rows staged in shared memory and written as one
//     32-byte store (`block`), or sixteen rows of a 256-thread block (`block256`). Every
//     variant's device and host rows are checked bitwise against the real kernel's.
//  2. the step's tables in: today's one pageable copy per table (5 tables) or the batched copy
//     (cudaMemcpyBatchAsync), against the host writing them into mapped page-locked memory and
//     the graph's first node copying them to the device (a kernel, or a memcpy node).
//  3. the launch call of graphs of 1 and 4 kernel nodes.
//
// Weights rotate over 8 copies (232 MiB, past L2), one graph each. Results (H200):
// bench/session38/host_io.txt; the block stores cost the head 0.7 us where the copy cost 6.3,
// and became kernels.cu's mmv_head2r.
//   nvcc -gencode=arch=compute_90a,code=sm_90a -O3 --fmad=false -std=c++17 \
//     -diag-suppress 128,177,550,549 -o host_io host_io.cu
#define LOCKSTEP_FAST_F32
__device__ unsigned emu_tf32_rna(float);
__device__ void emu_mma_tf32(float*, const unsigned*, const unsigned*);
#include "../../crates/backend-cuda/src/kernels.cu"
#include "lab_common.cuh"

#include <chrono>

// mmv_fast2r_8 with every value also written to host memory. WAY 0: lane 0 stores each of its
// rows (two 4-byte stores a warp); WAY 1: the block's rows staged in shared memory, written by
// its first threads in one store (32 bytes for 4 warps, 64 for 8).
template <int WAY>
__global__ void __launch_bounds__(256) head_host(const u8* W, const signed char* xq, const Q8Blk* xd,
                                                 float* y, float* yh, int n, int k, int m) {
    GRID_LAUNCH();
    __shared__ float st[16];
    const int warps = blockDim.x >> 5, w = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int r0 = (blockIdx.x * warps + w) * 2;
    if (r0 < m) {
        constexpr int E = 32;
        int units = k / E;
        float acc[2] = {0.0f, 0.0f};
        auto unit = [&](int u, bool wait) {
            FastUnit<T_Q8_0> wu[2];
#pragma unroll
            for (int j = 0; j < 2; j++)
                if (r0 + j < m) wu[j].load(fast_row_ptr<T_Q8_0>(W, r0 + j, k), u);
            if (wait) GRID_WAIT();
#pragma unroll
            for (int j = 0; j < 2; j++)
                if (r0 + j < m) acc[j] = wu[j].dot(xq, xd, u, acc[j]);
        };
        if (lane < units) unit(lane, true);
        else GRID_WAIT();
        for (int u = lane + 32; u < units; u += 32) unit(u, false);
#pragma unroll
        for (int j = 0; j < 2; j++) {
            float v = warp_sum_fixed(acc[j]);
            if (lane == 0 && r0 + j < m) {
                y[r0 + j] = v;
                if (WAY == 0) yh[r0 + j] = v;
                else st[2 * w + j] = v;
            }
        }
    } else {
        GRID_WAIT();
    }
    if (WAY == 1) {
        __syncthreads();
        int b0 = blockIdx.x * warps * 2, t = threadIdx.x;
        if (t < 2 * warps && b0 + t < m) yh[b0 + t] = st[t];
    }
}

// The step's tables from mapped host memory to their device buffer (one block, 16 bytes a
// thread), as a graph's first node would.
__global__ void stage_tables(const uint4* __restrict__ src, uint4* __restrict__ dst, int n16) {
    for (int i = threadIdx.x; i < n16; i += blockDim.x) dst[i] = src[i];
    GRID_LAUNCH();
}
// A consumer that needs the tables (as the embedding needs the token).
__global__ void use_tables(const u32* t, float* out) {
    GRID_WAIT();
    if (threadIdx.x == 0) out[blockIdx.x] = (float)t[blockIdx.x];
}
__global__ void tiny(float* out) {
    GRID_ENTER();
    if (threadIdx.x == 0) out[blockIdx.x] += 1.0f;
}

using clk = std::chrono::steady_clock;
static double us_since(clk::time_point t) {
    return std::chrono::duration<double, std::micro>(clk::now() - t).count();
}
static double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

int main() {
    int dev;
    cudaGetDevice(&dev);
    cudaDeviceProp pr;
    cudaGetDeviceProperties(&pr, dev);
    printf("device: %s, %d SMs\n", pr.name, pr.multiProcessorCount);
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    const int M = 49152, K = 576, COPIES = 8, STEPS = 400;
    const size_t wb = (size_t)(K / 32) * 34 * M, step = (wb + 4095) & ~(size_t)4095;
    u8* pool;
    CK(cudaMalloc(&pool, step * COPIES));
    fill_weights(pool, step * COPIES);
    signed char* xq;
    Q8Blk* xd;
    quantized_activation(K, &xq, &xd);
    float *y, *yref, *hcopy, *hmap;
    CK(cudaMalloc(&y, M * 4));
    CK(cudaMalloc(&yref, M * 4));
    CK(cudaHostAlloc(&hcopy, M * 4, cudaHostAllocDefault));
    CK(cudaHostAlloc(&hmap, M * 4, cudaHostAllocMapped));
    float* hmap_dev;
    CK(cudaHostGetDevicePointer((void**)&hmap_dev, hmap, 0));
    printf("mapped pointer %s the host pointer\n", (void*)hmap_dev == (void*)hmap ? "is" : "is not");

    // ---- 1. the head and its logits out
    std::vector<float> ref(M);
    mmv_fast2r_8<<<M / 8, 128, 0, s>>>(pool, xq, xd, yref, 1, K, M);
    CK(cudaStreamSynchronize(s));
    CK(cudaMemcpy(ref.data(), yref, M * 4, cudaMemcpyDeviceToHost));
    // way: -1 head alone, 0 head + copy engine, 1 warp stores, 2 block stores, 3 block256
    auto build = [&](int way, int c) {
        cudaGraph_t g;
        cudaGraphExec_t e;
        CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
        const u8* W = pool + (size_t)c * step;
        if (way <= 0) {
            mmv_fast2r_8<<<M / 8, 128, 0, s>>>(W, xq, xd, y, 1, K, M);
            if (way == 0) CK(cudaMemcpyAsync(hcopy, y, M * 4, cudaMemcpyDeviceToHost, s));
        } else if (way == 1) {
            head_host<0><<<M / 8, 128, 0, s>>>(W, xq, xd, y, hmap_dev, 1, K, M);
        } else if (way == 2) {
            head_host<1><<<M / 8, 128, 0, s>>>(W, xq, xd, y, hmap_dev, 1, K, M);
        } else {
            head_host<1><<<M / 16, 256, 0, s>>>(W, xq, xd, y, hmap_dev, 1, K, M);
        }
        CK(cudaStreamEndCapture(s, &g));
        CK(cudaGraphInstantiate(&e, g, 0));
        cudaGraphDestroy(g);
        return e;
    };
    const char* names[] = {"head alone", "head + copy engine D2H", "head, warp stores to host",
                           "head, block stores (32 B)", "head, block256 stores (64 B)"};
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    for (int round = 0; round < 2; round++) {
        for (int way = -1; way <= 3; way++) {
            std::vector<cudaGraphExec_t> ex;
            for (int c = 0; c < COPIES; c++) ex.push_back(build(way, c));
            memset(hmap, 0xff, M * 4);
            CK(cudaMemset(y, 0xff, M * 4));
            std::vector<double> wall, dev_us;
            for (int i = 0; i < STEPS; i++) {
                cudaEventRecord(e0, s);
                auto t = clk::now();
                CK(cudaGraphLaunch(ex[i % COPIES], s));
                cudaEventRecord(e1, s);
                CK(cudaStreamSynchronize(s));
                wall.push_back(us_since(t));
                float ms;
                cudaEventElapsedTime(&ms, e0, e1);
                dev_us.push_back(ms * 1000.0);
                // the host reads what it would lend (the first and last value)
                volatile float sink = way == 0 ? hcopy[0] + hcopy[M - 1] : hmap[0] + hmap[M - 1];
                (void)sink;
            }
            // check: the replay of copy 0 again, rows against the real kernel's (copy 0)
            CK(cudaGraphLaunch(ex[0], s));
            CK(cudaStreamSynchronize(s));
            std::vector<float> got(M);
            CK(cudaMemcpy(got.data(), y, M * 4, cudaMemcpyDeviceToHost));
            bool dev_ok = memcmp(got.data(), ref.data(), M * 4) == 0;
            bool host_ok = way < 0 || memcmp(way == 0 ? hcopy : hmap, ref.data(), M * 4) == 0;
            printf("round %d  %-30s: wall %7.2f us  events %7.2f us  device rows %s  host rows %s\n",
                   round, names[way + 1], median(wall), median(dev_us), dev_ok ? "bitwise" : "DIFFER",
                   way < 0 ? "-" : host_ok ? "bitwise" : "DIFFER");
            for (auto x : ex) cudaGraphExecDestroy(x);
        }
    }

    // ---- 2. the tables in (5 tables of 4, 512, 8, 512, 16 bytes as a SmolLM2 step's, 2 KiB
    // region)
    const int TB = 2048;
    u8* dtab;
    CK(cudaMalloc(&dtab, TB));
    u8 *hpage = (u8*)malloc(TB), *hpin;
    CK(cudaHostAlloc(&hpin, TB, cudaHostAllocMapped));
    u8* hpin_dev;
    CK(cudaHostGetDevicePointer((void**)&hpin_dev, hpin, 0));
    float* out;
    CK(cudaMalloc(&out, 1024 * 4));
    const size_t parts[5][2] = {{0, 4}, {64, 512}, {640, 8}, {704, 512}, {1280, 16}};
    auto tables_graph = [&](int way) {
        cudaGraph_t g;
        cudaGraphExec_t e;
        CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
        if (way == 2) stage_tables<<<1, 128, 0, s>>>((const uint4*)hpin_dev, (uint4*)dtab, TB / 16);
        if (way == 3) CK(cudaMemcpyAsync(dtab, hpin, TB, cudaMemcpyHostToDevice, s));
        use_tables<<<4, 32, 0, s>>>((const u32*)dtab, out);
        tiny<<<4, 32, 0, s>>>(out);
        CK(cudaStreamEndCapture(s, &g));
        CK(cudaGraphInstantiate(&e, g, 0));
        cudaGraphDestroy(g);
        return e;
    };
    const char* tnames[] = {"5 pageable copies, then graph", "batched copy, then graph",
                            "mapped tables, stage kernel node", "mapped tables, memcpy node",
                            "no tables (graph alone)"};
    for (int round = 0; round < 2; round++) {
        for (int way = 0; way < 5; way++) {
            cudaGraphExec_t e = tables_graph(way);
            std::vector<double> wall, host_part, dev_us;
            for (int i = 0; i < STEPS; i++) {
                for (int j = 0; j < TB; j++) hpage[j] = (u8)(i + j);
                auto t = clk::now();
                if (way == 0) {
                    for (auto& p : parts)
                        CK(cudaMemcpyAsync(dtab + p[0], hpage + p[0], p[1], cudaMemcpyHostToDevice, s));
                } else if (way == 1) {
                    void* dsts[5];
                    const void* srcs[5];
                    size_t sizes[5];
                    for (int q = 0; q < 5; q++) {
                        dsts[q] = dtab + parts[q][0];
                        srcs[q] = hpage + parts[q][0];
                        sizes[q] = parts[q][1];
                    }
                    cudaMemcpyAttributes at = {};
                    at.srcAccessOrder = cudaMemcpySrcAccessOrderDuringApiCall;
                    size_t idx = 0;
                    CK(cudaMemcpyBatchAsync(dsts, srcs, sizes, 5, &at, &idx, 1, s));
                } else if (way == 2 || way == 3) {
                    for (auto& p : parts) memcpy(hpin + p[0], hpage + p[0], p[1]);
                }
                double hp = us_since(t);
                cudaEventRecord(e0, s);
                CK(cudaGraphLaunch(e, s));
                cudaEventRecord(e1, s);
                CK(cudaStreamSynchronize(s));
                wall.push_back(us_since(t));
                host_part.push_back(hp);
                float ms;
                cudaEventElapsedTime(&ms, e0, e1);
                dev_us.push_back(ms * 1000.0);
            }
            // check: the device holds the last step's tables
            std::vector<u8> got(TB);
            CK(cudaMemcpy(got.data(), dtab, TB, cudaMemcpyDeviceToHost));
            bool ok = way == 4;
            if (way < 4) {
                ok = true;
                for (auto& p : parts) ok = ok && memcmp(got.data() + p[0], hpage + p[0], p[1]) == 0;
            }
            printf("round %d  %-34s: wall %6.2f us  (tables' host part %5.2f)  graph events %6.2f us  %s\n",
                   round, tnames[way], median(wall), median(host_part), median(dev_us),
                   way == 4 ? "-" : ok ? "tables arrived" : "TABLES WRONG");
            cudaGraphExecDestroy(e);
        }
    }

    // ---- 3. the launch call alone, graphs of 1 and 4 tiny kernels
    for (int nodes : {1, 4}) {
        cudaGraph_t g;
        cudaGraphExec_t e;
        CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
        for (int i = 0; i < nodes; i++) tiny<<<1, 32, 0, s>>>(out);
        CK(cudaStreamEndCapture(s, &g));
        CK(cudaGraphInstantiate(&e, g, 0));
        std::vector<double> call, wall;
        for (int i = 0; i < STEPS; i++) {
            auto t = clk::now();
            CK(cudaGraphLaunch(e, s));
            call.push_back(us_since(t));
            CK(cudaStreamSynchronize(s));
            wall.push_back(us_since(t));
        }
        printf("graph of %d tiny kernels: launch call %5.2f us, launch to synchronized %6.2f us\n", nodes,
               median(call), median(wall));
        cudaGraphExecDestroy(e);
        cudaGraphDestroy(g);
    }
    return 0;
}
