// Every float through kernels.cu's q8_scale and q8_inverse (the quantizer's scale d = a / 127
// and inverse 1 / d without nvcc's division branches) against nvcc's correctly rounded
// a / 127.0f and 1.0f / d, bit for bit (NaN against NaN counts as equal for the inverse, which
// is never stored). Built with the backend's flags (--fmad=false, fast numerics); run.sh builds
// and runs it on the device. Session 43.
#define LOCKSTEP_FAST_F32
__device__ unsigned emu_tf32_rna(float);
__device__ void emu_mma_tf32(float*, const unsigned*, const unsigned*);
#include "../../crates/backend-cuda/src/kernels.cu"
#include <cstdio>
#include <cstring>

__device__ unsigned long long n_bad[3];
__device__ unsigned first_bad[3][4];

__device__ void bad(int k, unsigned i) {
    unsigned long long n = atomicAdd(&n_bad[k], 1ull);
    if (n < 4) first_bad[k][n] = i;
}

__global__ void sweep(unsigned long long base) {
    unsigned long long i = base + (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= 0x80000000ull) return;  // non-negative patterns: a = max |v|, d = a / 127
    float x = __uint_as_float((unsigned)i);
    float rd = x / 127.0f, gd = q8_scale(x);
    if (__float_as_uint(rd) != __float_as_uint(gd)) bad(0, (unsigned)i);
    float ri = rd != 0.0f ? 1.0f / rd : 0.0f, gi = q8_inverse(gd);
    if (__float_as_uint(ri) != __float_as_uint(gi) && !(ri != ri && gi != gi)) bad(1, (unsigned)i);
    ri = x != 0.0f ? 1.0f / x : 0.0f;
    gi = q8_inverse(x);
    if (i < 0x7e800000ull && __float_as_uint(ri) != __float_as_uint(gi) && !(ri != ri && gi != gi))
        bad(2, (unsigned)i);
}

int main() {
    unsigned long long zero[3] = {0, 0, 0};
    cudaMemcpyToSymbol(n_bad, zero, sizeof zero);
    const unsigned threads = 256;
    const unsigned long long chunk = 1ull << 28;
    for (unsigned long long base = 0; base < 0x80000000ull; base += chunk)
        sweep<<<(unsigned)(chunk / threads), threads>>>(base);
    cudaError_t e = cudaDeviceSynchronize();
    if (e != cudaSuccess) {
        printf("cuda error: %s\n", cudaGetErrorString(e));
        return 2;
    }
    unsigned long long nb[3];
    unsigned first[3][4];
    cudaMemcpyFromSymbol(nb, n_bad, sizeof nb);
    cudaMemcpyFromSymbol(first, first_bad, sizeof first);
    const char* what[3] = {"q8_scale vs a / 127.0f, all 2^31 non-negative a",
                           "q8_inverse(q8_scale(a)) vs 1.0f / (a / 127.0f), all a",
                           "q8_inverse(d) vs 1.0f / d, all d < 2^126"};
    for (int k = 0; k < 3; k++) {
        printf("%s: %llu differ (device)\n", what[k], nb[k]);
        for (int j = 0; j < 4 && (unsigned long long)j < nb[k]; j++) printf("  0x%08x\n", first[k][j]);
    }
    return nb[0] || nb[1] || nb[2] ? 1 : 0;
}
