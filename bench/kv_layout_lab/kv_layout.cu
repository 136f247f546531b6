// KV layout lab (session 32; L2 flushed by a 256 MB read before every run): does the split-key attention's read pattern, a KV head's 512-byte
// slice of each 4 KB slot row (the cache's [slot][kv head][dim] layout, the 8B's 8 heads of
// 128 f32), reach the bandwidth a head-major layout ([kv head][slot][dim]) would? The kernel
// reads what attention_split reads: a block per (head, span), chunks of `keys` keys, each key's
// K and V rows by 8 threads x 4 float4, one round trip a chunk (a barrier between chunks).
#include <cstdio>
#include <cuda_runtime.h>
#include <vector>
#include <algorithm>

__global__ void read_kv(const float4* k, const float4* v, float* out, int n_keys, int n_heads,
                        int row_f4, int head_major, int keys_chunk, int per) {
    int head = blockIdx.y, span = blockIdx.x;
    int tpk = row_f4 / 4;  // threads a key (4 float4 each)
    int jj = threadIdx.x / tpk, part = threadIdx.x % tpk;
    float acc = 0.f;
    int s0 = span * per, s1 = min(n_keys, s0 + per);
    for (int c0 = s0; c0 < s1; c0 += keys_chunk) {
        int j = c0 + jj;
        float4 kx[4], vx[4];
        if (j < s1) {
            size_t base = head_major ? ((size_t)head * n_keys + j) * row_f4 : ((size_t)j * n_heads + head) * row_f4;
#pragma unroll
            for (int i = 0; i < 4; i++) { kx[i] = k[base + part + tpk * i]; vx[i] = v[base + part + tpk * i]; }
        } else {
#pragma unroll
            for (int i = 0; i < 4; i++) { kx[i] = make_float4(0, 0, 0, 0); vx[i] = kx[i]; }
        }
#pragma unroll
        for (int i = 0; i < 4; i++) acc += kx[i].x * vx[i].y + kx[i].z * vx[i].w;
        __syncthreads();
    }
    if (acc == 12345.f) out[0] = acc;
}

// The L2 flush: a 256 MB read (clean lines; a memset would leave dirty lines whose write-backs
// the next run would pay for).
__global__ void flush_read(const float4* p, size_t n, float* out) {
    float acc = 0.f;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float4 x = p[i];
        acc += x.x + x.w;
    }
    if (acc == 12345.f) out[0] = acc;
}

int main() {
    int n_heads = 8, row_f4 = 32;  // heads of 128 f32
    cudaEvent_t a, b;
    cudaEventCreate(&a); cudaEventCreate(&b);
    float* out; cudaMalloc(&out, 4);
    // Between runs, 256 MB read, so that the next run reads from DRAM, not the 50 MB L2.
    size_t flush_bytes = (size_t)256 << 20;
    void* flush; cudaMalloc(&flush, flush_bytes);
    cudaMemset(flush, 0, flush_bytes);
    // Caches: 4224 keys used of 8192 slots (a layer of a larger cache), and 32 layers apart.
    for (int n_keys : {1024, 4224}) {
        size_t bytes = (size_t)8192 * n_heads * row_f4 * 16;
        float4 *k, *v;
        cudaMalloc(&k, bytes); cudaMalloc(&v, bytes);
        cudaMemset(k, 0, bytes); cudaMemset(v, 0, bytes);
        for (int hm = 0; hm < 2; hm++)
            for (int chunk_keys : {16, 32}) for (int spans : {33, 66, 132}) {
                int threads = chunk_keys * (row_f4 / 4);
                if (threads > 1024) continue;
                int per = (n_keys + spans - 1) / spans;
                per = (per + chunk_keys - 1) / chunk_keys * chunk_keys;
                int used = (n_keys + per - 1) / per;
                dim3 grid(used, n_heads);
                std::vector<float> t;
                for (int r = 0; r < 21; r++) {
                    flush_read<<<1056, 256>>>((const float4*)flush, flush_bytes / 16, out);
                    cudaEventRecord(a);
                    read_kv<<<grid, threads>>>(k, v, out, n_keys, n_heads, row_f4, hm, chunk_keys, per);
                    cudaEventRecord(b);
                    cudaEventSynchronize(b);
                    float ms; cudaEventElapsedTime(&ms, a, b); t.push_back(ms * 1000.f);
                }
                std::sort(t.begin(), t.end());
                double mb = 2.0 * n_keys * n_heads * row_f4 * 16 / 1e6;
                printf("keys %5d %-11s chunk %2d keys (%4d threads) spans %3d x %d heads (%4d blocks): %7.2f us median, %.2f TB/s\n",
                       n_keys, hm ? "head-major" : "slot-major", chunk_keys, threads, used, n_heads, used * n_heads, t[10], mb / t[10]);
            }
        cudaFree(k); cudaFree(v);
    }
    cudaError_t e = cudaGetLastError();
    printf("%s\n", cudaGetErrorString(e));
}
