// Can a small model's decode layer live inside one thread-block cluster?
//
// Sessions 14-33 found the small models' steps bound by chains of dependent round trips: each
// of a layer's six kernels is released 1.3-3 us after its producer's last useful work, and a
// grid-wide barrier in a persistent kernel costs what a programmatic boundary does (session 25's
// grid_barrier lab). A Hopper thread-block cluster (up to 8 blocks portably, 16 with the
// non-portable opt-in) has a hardware barrier and distributed shared memory (DSMEM): blocks
// store into each other's shared memory. SmolLM2's layer is 2.2 MB of Q4_1 weights; a cluster
// of 16 blocks holds 3.6 MB of shared memory. If the cluster's barrier and an all-gather through
// DSMEM cost a fraction of a kernel boundary, and 16 SMs can stream a layer's weights in about
// the layer's compute chain, a layer could run as one cluster with weights copied ahead of use.
//
// This lab measures the primitives such a design rests on:
//  1. `barrier`: back-to-back cluster barriers (barrier.cluster.arrive.release +
//     wait.acquire), us each, for cluster sizes 2..16;
//  2. `allgather`: a dependent all-gather of an N-float vector: every block computes its slice
//     from the vector of the round before, stores it into every block's shared memory (DSMEM),
//     then the cluster barrier; us a round, checked against the host;
//  3. `stream`: read bandwidth of B blocks (one an SM) streaming disjoint parts of a 2 GiB
//     buffer, (a) 16-byte loads eight in flight per thread, (b) the bulk copy engine
//     (cp.async.bulk into a ring of shared-memory stages, completing on mbarriers).
//  2b/2c. the same all-gather vectorized (push or pull, then the barrier), and one-way: st.async
//     stores or bulk copies into the receivers' shared memory, completing on their mbarriers.
// nvcc -gencode=arch=compute_90a,code=sm_90a -O3 --fmad=false -std=c++17 -o /tmp/cluster_prims cluster_prims.cu
// (bench/cluster_lab/run.sh runs it on the device.) What it showed (BENCHMARKS.md, session 34,
// H200): the barrier alone 0.19 us, but an exchange through stores and the barrier 0.75-1.15
// us, about a programmatic kernel boundary; one-way st.async 0.48-0.55 us for 576 floats. One
// SM streams 141 GB/s with plain loads, 56 GB/s with bulk copies of 16 KB.
#include <cooperative_groups.h>
#include <cuda_runtime.h>
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>
namespace cg = cooperative_groups;

#define CK(x)                                                                       \
    do {                                                                            \
        cudaError_t e_ = (x);                                                       \
        if (e_ != cudaSuccess) {                                                    \
            fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x,               \
                    cudaGetErrorString(e_));                                        \
            exit(1);                                                                \
        }                                                                           \
    } while (0)

__device__ __forceinline__ unsigned long long gtime() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

__device__ __forceinline__ unsigned smem_addr(const void* p) {
    return (unsigned)__cvta_generic_to_shared(p);
}

// ---------------------------------------------------------------- 1. barrier
__global__ void barrier_kernel(int iters, unsigned long long* ns) {
    cg::cluster_group cl = cg::this_cluster();
    cl.sync();
    unsigned long long t0 = gtime();
    for (int i = 0; i < iters; i++) cl.sync();
    unsigned long long t1 = gtime();
    if (threadIdx.x == 0 && blockIdx.x == 0) *ns = t1 - t0;
}

// ---------------------------------------------------------------- 2. all-gather
// Round r: element j of the new vector is f(old[j], old[(j * 7 + 1) % n]), computed by the
// block that owns j's slice and stored into every block's copy. Double-buffered so a fast
// block's stores of round r+1 never land in the buffer a slow block still reads for round r.
__device__ __host__ __forceinline__ float step_fn(float a, float b) { return a * 0.75f + b * 0.25f + 1.0f; }

__global__ void allgather_kernel(int iters, int n, float* out, unsigned long long* ns) {
    extern __shared__ float vec[];  // 2 * n
    cg::cluster_group cl = cg::this_cluster();
    int rank = cl.block_rank(), cs = cl.num_blocks();
    int slice = (n + cs - 1) / cs;
    for (int j = threadIdx.x; j < n; j += blockDim.x) vec[j] = (float)(j % 17);
    cl.sync();
    unsigned long long t0 = gtime();
    for (int r = 0; r < iters; r++) {
        const float* cur = vec + (r & 1) * n;
        int nxt_off = ((r + 1) & 1) * n;
        for (int t = threadIdx.x; t < slice * cs; t += blockDim.x) {
            // thread t: element rank*slice + t % slice, destination block t / slice, so the
            // stores to the cs copies are spread over threads.
            int j = rank * slice + t % slice;
            int dst = t / slice;
            if (j < n) {
                float v = step_fn(cur[j], cur[(j * 7 + 1) % n]);
                float* remote = cl.map_shared_rank(vec + nxt_off, dst);
                remote[j] = v;
            }
        }
        cl.sync();
    }
    unsigned long long t1 = gtime();
    if (blockIdx.x == 0) {
        const float* fin = vec + (iters & 1) * n;
        for (int j = threadIdx.x; j < n; j += blockDim.x) out[j] = fin[j];
        if (threadIdx.x == 0) *ns = t1 - t0;
    }
}

// The same rounds, vectorized: the block first computes its slice into a local staging area
// (then a block barrier); PUSH: float4 stores of the slice into every block's copy, then the
// cluster barrier; PULL: the cluster barrier, then float4 loads of every block's slice from its
// owner's shared memory (DSMEM loads), then a block barrier.
template <bool PUSH>
__global__ void allgather4_kernel(int iters, int n, float* out, unsigned long long* ns) {
    extern __shared__ __align__(16) float vec[];  // 2 * n, then the staging slice
    cg::cluster_group cl = cg::this_cluster();
    int rank = cl.block_rank(), cs = cl.num_blocks();
    int slice = n / cs;  // multiple of 4 (checked on the host)
    float* stage = vec + 2 * n;
    for (int j = threadIdx.x; j < n; j += blockDim.x) vec[j] = (float)(j % 17);
    cl.sync();
    unsigned long long t0 = gtime();
    for (int r = 0; r < iters; r++) {
        float* cur = vec + (r & 1) * n;
        float* nxt = vec + ((r + 1) & 1) * n;
        for (int t = threadIdx.x; t < slice; t += blockDim.x) {
            int j = rank * slice + t;
            stage[t] = step_fn(cur[j], cur[(j * 7 + 1) % n]);
        }
        if (PUSH) {
            __syncthreads();
            int q = slice / 4;
            for (int t = threadIdx.x; t < q * cs; t += blockDim.x) {
                int dst = t / q, i = t % q;
                float4 v = reinterpret_cast<const float4*>(stage)[i];
                float4* remote = reinterpret_cast<float4*>(cl.map_shared_rank(nxt, dst));
                remote[rank * q + i] = v;
            }
            cl.sync();
        } else {
            cl.sync();  // every block's stage is written
            int q = slice / 4;
            for (int t = threadIdx.x; t < q * cs; t += blockDim.x) {
                int src = t / q, i = t % q;
                const float4* remote = reinterpret_cast<const float4*>(cl.map_shared_rank(stage, src));
                reinterpret_cast<float4*>(nxt)[src * q + i] = remote[i];
            }
            cl.sync();  // nobody rewrites a stage another block may still be reading
        }
    }
    unsigned long long t1 = gtime();
    if (blockIdx.x == 0) {
        const float* fin = vec + (iters & 1) * n;
        for (int j = threadIdx.x; j < n; j += blockDim.x) out[j] = fin[j];
        if (threadIdx.x == 0) *ns = t1 - t0;
    }
}

// The same rounds with one-way signalling instead of the cluster barrier: each block's mbarrier
// (one a buffer) expects the n * 4 bytes of a round; producers store their slice into every
// block's buffer with st.async (MODE 0, float4 stores that complete_tx on the receiver's
// mbarrier) or with one bulk copy from their shared memory a receiver (MODE 1); a receiver
// waits on its own mbarrier only. A block reuses a buffer two rounds later: by then it has
// received round r+1 from every block, and each sent that only after reading round r. The bulk
// copies read the sender's stage after it is issued, so stages alternate too (a stage is
// rewritten two rounds later, when every receiver has shown, by sending, that it got it).
__device__ __forceinline__ void mbar_wait(unsigned bar, unsigned parity) {
    unsigned done = 0;
    while (!done)
        asm volatile(
            "{ .reg .pred p; mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
            : "=r"(done)
            : "r"(bar), "r"(parity)
            : "memory");
}
__device__ __forceinline__ unsigned mapa(unsigned addr, int rank) {
    unsigned r;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(addr), "r"(rank));
    return r;
}

template <int MODE>
__global__ void allgather_async_kernel(int iters, int n, float* out, unsigned long long* ns) {
    extern __shared__ __align__(16) float vec[];  // 2 * n, then the staging slice
    __shared__ __align__(8) unsigned long long bars[2];
    cg::cluster_group cl = cg::this_cluster();
    int rank = cl.block_rank(), cs = cl.num_blocks();
    int slice = n / cs;
    if (threadIdx.x == 0) {
        for (int b = 0; b < 2; b++) asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_addr(&bars[b])));
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    for (int j = threadIdx.x; j < n; j += blockDim.x) vec[j] = (float)(j % 17);
    cl.sync();
    unsigned long long t0 = gtime();
    for (int r = 0; r < iters; r++) {
        float* cur = vec + (r & 1) * n;
        int nb = (r + 1) & 1;
        float* nxt = vec + nb * n;
        float* stage = vec + 2 * n + (r & 1) * slice;  // two stages: see above
        // arm this block's barrier for the round's bytes (the arrival of its one expected thread)
        if (threadIdx.x == 0)
            asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(&bars[nb])), "r"(n * 4)
                         : "memory");
        for (int t = threadIdx.x; t < slice; t += blockDim.x) {
            int j = rank * slice + t;
            stage[t] = step_fn(cur[j], cur[(j * 7 + 1) % n]);
        }
        if (MODE == 1) asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
        __syncthreads();
        int q = slice / 4;
        if (MODE == 0) {
            for (int t = threadIdx.x; t < q * cs; t += blockDim.x) {
                int dst = t / q, i = t % q;
                float4 v = reinterpret_cast<const float4*>(stage)[i];
                unsigned raddr = mapa(smem_addr(nxt + rank * slice + 4 * i), dst);
                unsigned rbar = mapa(smem_addr(&bars[nb]), dst);
                asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.f32 [%0], {%1, %2, %3, %4}, [%5];" ::"r"(raddr),
                             "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w), "r"(rbar)
                             : "memory");
            }
        } else {
            for (int dst = threadIdx.x; dst < cs; dst += blockDim.x) {
                unsigned raddr = mapa(smem_addr(nxt + rank * slice), dst);
                unsigned rbar = mapa(smem_addr(&bars[nb]), dst);
                asm volatile("cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(raddr),
                             "r"(smem_addr(stage)), "r"(slice * 4), "r"(rbar)
                             : "memory");
            }
        }
        mbar_wait(smem_addr(&bars[nb]), (unsigned)((r >> 1) & 1));
    }
    unsigned long long t1 = gtime();
    cl.sync();
    if (blockIdx.x == 0) {
        const float* fin = vec + (iters & 1) * n;
        for (int j = threadIdx.x; j < n; j += blockDim.x) out[j] = fin[j];
        if (threadIdx.x == 0) *ns = t1 - t0;
    }
}

// ---------------------------------------------------------------- 3. streaming
__global__ void stream_ld(const uint4* __restrict__ src, size_t per_block16, float* sink) {
    const uint4* p = src + blockIdx.x * per_block16;
    unsigned acc = 0;
    size_t step = (size_t)blockDim.x * 8;
    for (size_t base = threadIdx.x; base + 7 * blockDim.x < per_block16; base += step) {
        uint4 v[8];
#pragma unroll
        for (int u = 0; u < 8; u++) {
            const uint4* q = p + base + (size_t)u * blockDim.x;
            asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
                         : "=r"(v[u].x), "=r"(v[u].y), "=r"(v[u].z), "=r"(v[u].w)
                         : "l"(q));
        }
#pragma unroll
        for (int u = 0; u < 8; u++) acc += v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
    }
    if (acc == 0x12345678u) sink[blockIdx.x] = (float)acc;
}


// A ring of STAGES chunks of CHUNK bytes; thread 0 issues bulk copies, every thread reads each
// landed chunk (as a mat-vec would consume its weights), then the stage is re-armed.
template <int CHUNK, int STAGES>
__global__ void stream_bulk(const uint8_t* __restrict__ src, size_t per_block, float* sink) {
    extern __shared__ __align__(128) uint8_t ring[];
    __shared__ __align__(8) unsigned long long bars[STAGES];
    const uint8_t* p = src + blockIdx.x * per_block;
    size_t nchunks = per_block / CHUNK;
    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; s++)
            asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_addr(&bars[s])));
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    auto issue = [&](size_t c) {
        int s = (int)(c % STAGES);
        unsigned bar = smem_addr(&bars[s]);
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(CHUNK)
                     : "memory");
        asm volatile(
            "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::
                "r"(smem_addr(ring + (size_t)s * CHUNK)),
            "l"(p + c * CHUNK), "r"(CHUNK), "r"(bar)
            : "memory");
    };
    if (threadIdx.x == 0)
        for (size_t c = 0; c < STAGES && c < nchunks; c++) issue(c);
    unsigned acc = 0;
    for (size_t c = 0; c < nchunks; c++) {
        int s = (int)(c % STAGES);
        unsigned parity = (unsigned)((c / STAGES) & 1);
        unsigned bar = smem_addr(&bars[s]);
        unsigned done = 0;
        while (!done) {
            asm volatile(
                "{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                : "=r"(done)
                : "r"(bar), "r"(parity)
                : "memory");
        }
        const uint4* q = (const uint4*)(ring + (size_t)s * CHUNK);
        for (int i = threadIdx.x; i < CHUNK / 16; i += blockDim.x) {
            uint4 v = q[i];
            acc += v.x ^ v.y ^ v.z ^ v.w;
        }
        __syncthreads();
        if (threadIdx.x == 0 && c + STAGES < nchunks) issue(c + STAGES);
    }
    if (acc == 0x12345678u) sink[blockIdx.x] = (float)acc;
}

// cp.async (16 bytes a thread) into a ring of STAGES chunks; every thread reads each landed
// chunk; commit groups keep STAGES-1 chunks in flight.
template <int CHUNK, int STAGES>
__global__ void stream_cpasync(const uint8_t* __restrict__ src, size_t per_block, float* sink) {
    extern __shared__ __align__(128) uint8_t ring[];
    const uint8_t* p = src + blockIdx.x * per_block;
    size_t nchunks = per_block / CHUNK;
    auto issue = [&](size_t c) {
        int s = (int)(c % STAGES);
        for (int i = threadIdx.x; i < CHUNK / 16; i += blockDim.x)
            asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(smem_addr(ring + (size_t)s * CHUNK + i * 16)),
                         "l"(p + c * CHUNK + i * 16)
                         : "memory");
        asm volatile("cp.async.commit_group;" ::: "memory");
    };
    for (size_t c = 0; c < STAGES - 1; c++) issue(c);
    unsigned acc = 0;
    for (size_t c = 0; c < nchunks; c++) {
        if (c + STAGES - 1 < nchunks) issue(c + STAGES - 1);
        else asm volatile("cp.async.commit_group;" ::: "memory");
        asm volatile("cp.async.wait_group %0;" ::"n"(STAGES - 1) : "memory");
        __syncthreads();
        const uint4* q = (const uint4*)(ring + (size_t)(c % STAGES) * CHUNK);
        for (int i = threadIdx.x; i < CHUNK / 16; i += blockDim.x) {
            uint4 v = q[i];
            acc += v.x ^ v.y ^ v.z ^ v.w;
        }
        __syncthreads();
    }
    if (acc == 0x12345678u) sink[blockIdx.x] = (float)acc;
}

template <typename F>
float time_ms(F f, int reps) {
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    std::vector<float> v;
    for (int r = 0; r < reps; r++) {
        CK(cudaEventRecord(a));
        f();
        CK(cudaEventRecord(b));
        CK(cudaEventSynchronize(b));
        float ms;
        CK(cudaEventElapsedTime(&ms, a, b));
        v.push_back(ms);
    }
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

int main() {
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    int clock_khz = 0;
    CK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0));
    printf("device: %s, %d SMs, L2 %d MB, smem/block optin %zu KB, clock %d MHz\n", prop.name,
           prop.multiProcessorCount, prop.l2CacheSize >> 20, prop.sharedMemPerBlockOptin >> 10,
           clock_khz / 1000);
    unsigned long long* d_ns;
    CK(cudaMalloc(&d_ns, sizeof(unsigned long long)));
    float* d_out;
    CK(cudaMalloc(&d_out, 8192 * sizeof(float)));

    // ---- 1. barrier
    CK(cudaFuncSetAttribute(barrier_kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
    CK(cudaFuncSetAttribute(allgather_kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
    CK(cudaFuncSetAttribute(allgather_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 64 * 1024));
    const int iters = 2000;
    for (int threads : {256, 1024}) {
        for (int cs : {1, 2, 4, 8, 16}) {
            cudaLaunchConfig_t cfg = {};
            cfg.gridDim = dim3(cs);
            cfg.blockDim = dim3(threads);
            cudaLaunchAttribute at[1];
            at[0].id = cudaLaunchAttributeClusterDimension;
            at[0].val.clusterDim.x = cs;
            at[0].val.clusterDim.y = 1;
            at[0].val.clusterDim.z = 1;
            cfg.attrs = at;
            cfg.numAttrs = 1;
            int maxc = 0;
            cudaError_t oe = cudaOccupancyMaxActiveClusters(&maxc, (void*)barrier_kernel, &cfg);
            std::vector<double> us;
            for (int r = 0; r < 7; r++) {
                CK(cudaLaunchKernelEx(&cfg, barrier_kernel, iters, d_ns));
                CK(cudaDeviceSynchronize());
                unsigned long long ns;
                CK(cudaMemcpy(&ns, d_ns, 8, cudaMemcpyDeviceToHost));
                us.push_back(ns / 1000.0 / iters);
            }
            std::sort(us.begin(), us.end());
            printf("barrier    cluster %2d x %4d threads: %.3f us a barrier (max active clusters %d%s)\n",
                   cs, threads, us[3], maxc, oe == cudaSuccess ? "" : " ?");
        }
    }

    // ---- 2. all-gather
    for (int n : {576, 1536, 4096}) {
        for (int threads : {256, 1024}) {
            for (int cs : {2, 4, 8, 16}) {
                size_t smem = 2 * n * sizeof(float);
                cudaLaunchConfig_t cfg = {};
                cfg.gridDim = dim3(cs);
                cfg.blockDim = dim3(threads);
                cfg.dynamicSmemBytes = smem;
                cudaLaunchAttribute at[1];
                at[0].id = cudaLaunchAttributeClusterDimension;
                at[0].val.clusterDim.x = cs;
                at[0].val.clusterDim.y = 1;
                at[0].val.clusterDim.z = 1;
                cfg.attrs = at;
                cfg.numAttrs = 1;
                std::vector<double> us;
                for (int r = 0; r < 7; r++) {
                    CK(cudaLaunchKernelEx(&cfg, allgather_kernel, iters, n, d_out, d_ns));
                    CK(cudaDeviceSynchronize());
                    unsigned long long ns;
                    CK(cudaMemcpy(&ns, d_ns, 8, cudaMemcpyDeviceToHost));
                    us.push_back(ns / 1000.0 / iters);
                }
                std::sort(us.begin(), us.end());
                // host check
                std::vector<float> h(n), nx(n), dev(n);
                for (int j = 0; j < n; j++) h[j] = (float)(j % 17);
                for (int r = 0; r < iters; r++) {
                    for (int j = 0; j < n; j++) nx[j] = step_fn(h[j], h[(j * 7 + 1) % n]);
                    h.swap(nx);
                }
                CK(cudaMemcpy(dev.data(), d_out, n * 4, cudaMemcpyDeviceToHost));
                int bad = 0;
                for (int j = 0; j < n; j++) bad += dev[j] != h[j];
                printf("allgather  n %4d cluster %2d x %4d threads: %.3f us a round, %s\n", n, cs,
                       threads, us[3], bad ? "MISMATCH" : "bitwise the host's");
            }
        }
    }

    // ---- 2b. vectorized all-gathers
    CK(cudaFuncSetAttribute(allgather4_kernel<true>, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
    CK(cudaFuncSetAttribute(allgather4_kernel<false>, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
    CK(cudaFuncSetAttribute(allgather4_kernel<true>, cudaFuncAttributeMaxDynamicSharedMemorySize, 64 * 1024));
    CK(cudaFuncSetAttribute(allgather4_kernel<false>, cudaFuncAttributeMaxDynamicSharedMemorySize, 64 * 1024));
    for (int push = 1; push >= 0; push--) {
        for (int n : {576, 1536, 4096}) {
            for (int threads : {256, 512, 1024}) {
                for (int cs : {8, 16}) {
                    if ((n / cs) % 4 != 0 || n % cs != 0) continue;
                    size_t smem = (2 * n + n / cs) * sizeof(float);
                    cudaLaunchConfig_t cfg = {};
                    cfg.gridDim = dim3(cs);
                    cfg.blockDim = dim3(threads);
                    cfg.dynamicSmemBytes = smem;
                    cudaLaunchAttribute at[1];
                    at[0].id = cudaLaunchAttributeClusterDimension;
                    at[0].val.clusterDim.x = cs;
                    at[0].val.clusterDim.y = 1;
                    at[0].val.clusterDim.z = 1;
                    cfg.attrs = at;
                    cfg.numAttrs = 1;
                    std::vector<double> us;
                    for (int r = 0; r < 7; r++) {
                        if (push) CK(cudaLaunchKernelEx(&cfg, allgather4_kernel<true>, iters, n, d_out, d_ns));
                        else CK(cudaLaunchKernelEx(&cfg, allgather4_kernel<false>, iters, n, d_out, d_ns));
                        CK(cudaDeviceSynchronize());
                        unsigned long long ns;
                        CK(cudaMemcpy(&ns, d_ns, 8, cudaMemcpyDeviceToHost));
                        us.push_back(ns / 1000.0 / iters);
                    }
                    std::sort(us.begin(), us.end());
                    std::vector<float> h(n), nx(n), dev(n);
                    for (int j = 0; j < n; j++) h[j] = (float)(j % 17);
                    for (int r = 0; r < iters; r++) {
                        for (int j = 0; j < n; j++) nx[j] = step_fn(h[j], h[(j * 7 + 1) % n]);
                        h.swap(nx);
                    }
                    CK(cudaMemcpy(dev.data(), d_out, n * 4, cudaMemcpyDeviceToHost));
                    int bad = 0;
                    for (int j = 0; j < n; j++) bad += dev[j] != h[j];
                    printf("allgather4 %s n %4d cluster %2d x %4d threads: %.3f us a round, %s\n",
                           push ? "push" : "pull", n, cs, threads, us[3], bad ? "MISMATCH" : "bitwise the host's");
                }
            }
        }
    }

    // ---- 2c. one-way all-gathers (st.async / bulk copies into the receivers' shared memory)
    for (int mode = 0; mode < 2; mode++) {
        auto kern = mode == 0 ? allgather_async_kernel<0> : allgather_async_kernel<1>;
        CK(cudaFuncSetAttribute(kern, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
        CK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, 64 * 1024));
        for (int n : {576, 1536, 4096}) {
            for (int threads : {256, 512}) {
                for (int cs : {8, 16}) {
                    if ((n / cs) % 4 != 0 || n % cs != 0) continue;
                    size_t smem = (2 * n + 2 * (n / cs)) * sizeof(float);
                    cudaLaunchConfig_t cfg = {};
                    cfg.gridDim = dim3(cs);
                    cfg.blockDim = dim3(threads);
                    cfg.dynamicSmemBytes = smem;
                    cudaLaunchAttribute at[1];
                    at[0].id = cudaLaunchAttributeClusterDimension;
                    at[0].val.clusterDim.x = cs;
                    at[0].val.clusterDim.y = 1;
                    at[0].val.clusterDim.z = 1;
                    cfg.attrs = at;
                    cfg.numAttrs = 1;
                    std::vector<double> us;
                    for (int r = 0; r < 7; r++) {
                        CK(cudaLaunchKernelEx(&cfg, kern, iters, n, d_out, d_ns));
                        CK(cudaDeviceSynchronize());
                        unsigned long long ns;
                        CK(cudaMemcpy(&ns, d_ns, 8, cudaMemcpyDeviceToHost));
                        us.push_back(ns / 1000.0 / iters);
                    }
                    std::sort(us.begin(), us.end());
                    std::vector<float> h(n), nx(n), dev(n);
                    for (int j = 0; j < n; j++) h[j] = (float)(j % 17);
                    for (int r = 0; r < iters; r++) {
                        for (int j = 0; j < n; j++) nx[j] = step_fn(h[j], h[(j * 7 + 1) % n]);
                        h.swap(nx);
                    }
                    CK(cudaMemcpy(dev.data(), d_out, n * 4, cudaMemcpyDeviceToHost));
                    int bad = 0;
                    for (int j = 0; j < n; j++) bad += dev[j] != h[j];
                    printf("allgather1 %s n %4d cluster %2d x %4d threads: %.3f us a round, %s\n",
                           mode == 0 ? "st.async" : "bulk    ", n, cs, threads, us[3], bad ? "MISMATCH" : "bitwise the host's");
                }
            }
        }
    }

    // ---- 3. streaming
    size_t total = (size_t)2 << 30;
    uint8_t* buf;
    CK(cudaMalloc(&buf, total));
    CK(cudaMemset(buf, 1, total));
    constexpr int CH = 16384, ST = 8;
    CK(cudaFuncSetAttribute(stream_bulk<CH, ST>, cudaFuncAttributeMaxDynamicSharedMemorySize, CH * ST));
    CK(cudaFuncSetAttribute(stream_cpasync<CH, ST>, cudaFuncAttributeMaxDynamicSharedMemorySize, CH * ST));
    CK(cudaFuncSetAttribute(stream_bulk<4096, 32>, cudaFuncAttributeMaxDynamicSharedMemorySize, 4096 * 32));
    for (int blocks : {1, 2, 4, 8, 16, 32, 66, 132}) {
        size_t per = total / blocks / CH * CH;
        if (per > ((size_t)256 << 20)) per = (size_t)256 << 20;  // keep single-block runs short
        float ms_ld = time_ms([&] { stream_ld<<<blocks, 1024>>>((const uint4*)buf, per / 16, d_out); }, 5);
        CK(cudaGetLastError());
        float ms_bk = time_ms([&] { stream_bulk<CH, ST><<<blocks, 256, CH * ST>>>(buf, per, d_out); }, 5);
        CK(cudaGetLastError());

        float ms_ca = time_ms([&] { stream_cpasync<CH, ST><<<blocks, 256, CH * ST>>>(buf, per, d_out); }, 5);
        CK(cudaGetLastError());
        float ms_b4 = time_ms([&] { stream_bulk<4096, 32><<<blocks, 256, 4096 * 32>>>(buf, per, d_out); }, 5);
        CK(cudaGetLastError());
        double bytes = (double)per * blocks;
        printf("stream     %3d blocks: cp.async 16 KB x 8 %7.1f GB/s (%6.1f an SM), bulk 4 KB x 32 %7.1f GB/s (%6.1f an SM)\n",
               blocks, bytes / ms_ca / 1e6, bytes / ms_ca / 1e6 / blocks, bytes / ms_b4 / 1e6, bytes / ms_b4 / 1e6 / blocks);
        printf("stream     %3d blocks, %6.1f MB each: loads %7.1f GB/s (%6.1f an SM), bulk copies %7.1f GB/s (%6.1f an SM)\n",
               blocks, per / 1e6, bytes / ms_ld / 1e6, bytes / ms_ld / 1e6 / blocks, bytes / ms_bk / 1e6,
               bytes / ms_bk / 1e6 / blocks);
    }
    CK(cudaDeviceSynchronize());
    return 0;
}
