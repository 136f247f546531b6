// Session 51: nvcc 13.5 mishandles `#pragma unroll` inside
// the unbraced `else` of an `if constexpr` whose condition is true: here it stops with "expected a
// '}'" while instantiating rows<false>; in kernels.cu the same form compiled without an error
// and dropped the statements after the `else` (mmv_head2r_14 without its mat-vec: 10 registers,
// one load). Braced branches compile right. `nvcc -cubin -arch=sm_90 -std=c++17 pragma_else.cu`.
template <bool PIPE>
__device__ __forceinline__ void rows(const float* __restrict__ W, float* y, int units) {
    int lane = threadIdx.x & 31;
    float acc[2] = {0.0f, 0.0f};
    auto unit = [&](int u) { acc[0] += W[u] * 2.0f; };
    if constexpr (!PIPE) {
        for (int u = lane; u < units; u += 32) unit(u);
    } else
        for (int u = lane; u < units; u += 64) {
            float a[2];
#pragma unroll
            for (int j = 0; j < 2; j++) a[j] = W[u + j];
#pragma unroll
            for (int j = 0; j < 2; j++) acc[j] += a[j];
        }
#pragma unroll
    for (int j = 0; j < 2; j++) {
        float v = acc[j];
        for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
        if (lane == 0) y[blockIdx.x * 2 + j] = v;
    }
}
extern "C" __global__ void plain(const float* W, float* y, int units) { rows<false>(W, y, units); }
extern "C" __global__ void piped(const float* W, float* y, int units) { rows<true>(W, y, units); }
