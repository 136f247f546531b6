// CPU emulation of the few CUDA features the attention kernels use: one std::thread per CUDA
// thread of a block, std::barrier for __syncthreads, per-warp barriers for shuffles.
#include <barrier>
#include <cmath>
#include <cstring>
#include <cstdint>
#include <cstddef>
#include <thread>
#include <vector>
#include <functional>
#include <memory>
struct dim3u { unsigned x, y, z; };
extern thread_local dim3u threadIdx, blockIdx;
extern dim3u blockDim, gridDim;
extern std::barrier<>* g_bar;
extern std::vector<std::unique_ptr<std::barrier<>>> g_warp_bar;
extern std::vector<double> g_shfl;
extern unsigned char* g_dyn_smem;
inline void __syncthreads() { g_bar->arrive_and_wait(); }
inline float __int_as_float(unsigned v) { float f; std::memcpy(&f, &v, 4); return f; }
inline int __double2hiint(double d) { long long v; std::memcpy(&v, &d, 8); return (int)(v >> 32); }
inline long long __double_as_longlong(double d) { long long v; std::memcpy(&v, &d, 8); return v; }
template <class T> inline T __shfl_xor_sync(unsigned, T v, int o) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    g_shfl[threadIdx.x] = (double)v;
    g_warp_bar[warp]->arrive_and_wait();
    T r = (T)g_shfl[(warp << 5) | (lane ^ o)];
    g_warp_bar[warp]->arrive_and_wait();
    return r;
}
inline float fminf(float a, float b) { return std::fmin(a, b); }
inline float rintf(float a) { return std::rint(a); }
inline float fabsf(float a) { return std::fabs(a); }
struct float4 { float x, y, z, w; };
template <class T> inline T min(T a, T b) { return a < b ? a : b; }
template <class T> inline T max(T a, T b) { return a > b ? a : b; }
using std::exp;
inline float fmaxf(float a, float b) { return std::fmax(a, b); }
#define __global__
// Programmatic dependent launch has nothing to wait for on the CPU.
#define GRID_ENTER()
#define __device__
#define __forceinline__
#define __launch_bounds__(...)
#define __shared__ static
#define __align__(x)
#define __restrict__
#define __syncwarp()
#pragma STDC FP_CONTRACT OFF
