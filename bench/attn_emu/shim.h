// CPU emulation of the few CUDA features the attention kernels use: one std::thread per CUDA
// thread of a block, std::barrier for __syncthreads, per-warp barriers for shuffles; a cluster's
// blocks at once, each with its own copy of the cluster kernel's shared memory (AttClSmem).
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
// A block's barriers and exchange slots (run.h's launches give each thread its block's).
struct EmuBlock {
    std::barrier<> bar;
    std::vector<std::unique_ptr<std::barrier<>>> warps;
    std::vector<double> shfl;
    std::vector<float> mma;
    explicit EmuBlock(unsigned threads) : bar(threads), shfl(threads, 0.0), mma(threads * 6, 0.f) {
        for (unsigned w = 0; w < (threads + 31) / 32; w++) warps.emplace_back(new std::barrier<>(32));
    }
};
extern thread_local EmuBlock* g_blk;
#define g_warp_bar (g_blk->warps)
#define g_shfl (g_blk->shfl)
#define g_mma (g_blk->mma)
extern unsigned char* g_dyn_smem;
inline void __syncthreads() { g_blk->bar.arrive_and_wait(); }
// Clusters (kernels.cu's cluster primitives, ATT_CL_EMULATED): one cluster runs at a time, its
// blocks' copies of the shared memory side by side (run.h launch_cluster).
#define __cluster_dims__(...)
#define ATT_CL_EMULATED
extern thread_local unsigned g_cl_rank;
extern std::barrier<>* g_cl_bar;
extern unsigned char* g_cl_smem;
extern size_t g_cl_smem_bytes;
template <int CQ> struct AttClSmem;
template <int CQ> inline AttClSmem<CQ>& att_cl_smem() {
    return *reinterpret_cast<AttClSmem<CQ>*>(g_cl_smem + g_cl_rank * g_cl_smem_bytes);
}
inline unsigned att_cl_rank() { return g_cl_rank; }
inline float att_cl_peer(const float* p, unsigned r) {
    size_t off = (size_t)((const unsigned char*)p - (g_cl_smem + g_cl_rank * g_cl_smem_bytes));
    float v;
    std::memcpy(&v, g_cl_smem + r * g_cl_smem_bytes + off, 4);
    return v;
}
inline void att_cl_put(float* p, unsigned r, float v) {
    size_t off = (size_t)((unsigned char*)p - (g_cl_smem + g_cl_rank * g_cl_smem_bytes));
    std::memcpy(g_cl_smem + r * g_cl_smem_bytes + off, &v, 4);
}
inline void att_cl_sync() { g_cl_bar->arrive_and_wait(); }
// The split barrier as one: every emulated block has started before any stores.
inline void att_cl_arrive() {}
inline void att_cl_wait() { g_cl_bar->arrive_and_wait(); }
inline float __fmaf_rn(float a, float b, float c) { return std::fma(a, b, c); }
inline float __int_as_float(unsigned v) { float f; std::memcpy(&f, &v, 4); return f; }
inline int __double2hiint(double d) { long long v; std::memcpy(&v, &d, 8); return (int)(v >> 32); }
inline long long __double_as_longlong(double d) { long long v; std::memcpy(&v, &d, 8); return v; }
// The fast build's norms (-DLOCKSTEP_FAST_F32) scale by rsqrtf: here a correctly rounded
// 1 / sqrt, the same in the kernels compared with each other.
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
template <class T> inline T __shfl_xor_sync(unsigned, T v, int o) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    g_shfl[threadIdx.x] = (double)v;
    g_warp_bar[warp]->arrive_and_wait();
    T r = (T)g_shfl[(warp << 5) | (lane ^ o)];
    g_warp_bar[warp]->arrive_and_wait();
    return r;
}
// Warp-wide votes and reductions (__any_sync, redux.sync): every lane's value meets in g_shfl.
template <class T, class F> inline T emu_warp_reduce(T v, F f) {
    int warp = threadIdx.x >> 5;
    g_shfl[threadIdx.x] = (double)v;
    g_warp_bar[warp]->arrive_and_wait();
    T r = (T)g_shfl[warp << 5];
    for (int l = 1; l < 32; l++) r = f(r, (T)g_shfl[(warp << 5) | l]);
    g_warp_bar[warp]->arrive_and_wait();
    return r;
}
inline int __any_sync(unsigned, int p) {
    return emu_warp_reduce<int>(p != 0, [](int a, int b) { return a | b; });
}
inline int __all_sync(unsigned, int p) {
    return emu_warp_reduce<int>(p != 0, [](int a, int b) { return a & b; });
}
inline unsigned __reduce_max_sync(unsigned, unsigned v) {
    return emu_warp_reduce<unsigned>(v, [](unsigned a, unsigned b) { return a > b ? a : b; });
}
inline int __reduce_add_sync(unsigned, int v) {
    return emu_warp_reduce<int>(v, [](int a, int b) { return a + b; });
}
inline unsigned __float_as_uint(float f) { unsigned v; std::memcpy(&v, &f, 4); return v; }
// The step timeline's marks and stamps: nothing to stamp on the CPU.
#define TL_MARK(tag)
#define TL_ENTRY()
#define TL_PARAM0(x)
#define TL_PARAM_M(x)
#define TL_PARAM_K(x)
#define TL_SMID()
// fminf / fmaxf as the compiler's builtins: std::fmin / std::fmax would call these back (an
// emulated q8_block's clamp recursed until the stack overflowed, session 44).
inline float fminf(float a, float b) { return __builtin_fminf(a, b); }
inline float rintf(float a) { return std::rint(a); }
inline float fabsf(float a) { return std::fabs(a); }
struct float4 { float x, y, z, w; };
struct uint2 { unsigned x, y; };
// The f16 KV cache's conversions (kernels.cu's cvt.f32.f16 and cvt.rn.f16.f32): IEEE binary16
// with round to nearest even, as _Float16 converts.
typedef unsigned short u16;
inline float h2f(u16 h) { _Float16 v; std::memcpy(&v, &h, 2); return (float)v; }
inline u16 f2h(float f) { _Float16 v = (_Float16)f; u16 h; std::memcpy(&h, &v, 2); return h; }
template <class T> inline T min(T a, T b) { return a < b ? a : b; }
template <class T> inline T max(T a, T b) { return a > b ? a : b; }
using std::exp;
inline float fmaxf(float a, float b) { return __builtin_fmaxf(a, b); }
#define __global__
// Programmatic dependent launch has nothing to wait for on the CPU; an L2-only load is a load.
#define GRID_ENTER()
#define GRID_WAIT()
#define GRID_LAUNCH()
// kernels.cu's placements of the launch (LATE_LAUNCH): no grid dependencies on the CPU either.
#define LATE_ENTER()
#define LATE_LAUNCH()
#define EARLY_LAUNCH()
#define PLAIN_ATT_EARLY_LAUNCH()
#define PLAIN_ATT_LATE_LAUNCH()
template <class T> inline T __ldcg(const T* p) { return *p; }
// cp.async: the copy done at once (a copy may complete any time before its wait).
inline void cp_async16(void* s, const void* g) { std::memcpy(s, g, 16); }
inline void cp_async8(void* s, const void* g) { std::memcpy(s, g, 8); }
inline void cp_async_commit() {}
template <int N> inline void cp_async_wait() {}
#define __device__
#define __forceinline__
#define __launch_bounds__(...)
#define __shared__ static
#define __align__(x)
#define __restrict__
// A warp's lanes are threads here: __syncwarp is a real barrier (every lane of the warp calls it).
inline void __syncwarp() { g_warp_bar[threadIdx.x >> 5]->arrive_and_wait(); }
inline float __uint_as_float(unsigned v) { float f; std::memcpy(&f, &v, 4); return f; }
// cvt.rna.tf32.f32: the 10-bit mantissa, rounded to nearest, ties away from zero (finite x).
inline unsigned emu_tf32_rna(float x) {
    unsigned u; std::memcpy(&u, &x, 4);
    if ((u & 0x7f800000u) == 0x7f800000u) return u;
    return (u + 0x1000u) & 0xffffe000u;
}
// mma.m16n8k8 TF32 (a warp-wide operation): the lanes' fragments meet in g_mma, then each lane
// forms its four outputs. TF32 products are exact in double; the sum of the eight and c is
// rounded once (the hardware's accumulation order is its own: the harness checks bounds, not
// bits).
inline void emu_mma_tf32(float* c, const unsigned* a, const unsigned* b) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    float* mine = &g_mma[threadIdx.x * 6];
    for (int i = 0; i < 4; i++) mine[i] = __uint_as_float(a[i]);
    for (int i = 0; i < 2; i++) mine[4 + i] = __uint_as_float(b[i]);
    g_warp_bar[warp]->arrive_and_wait();
    const float* w = &g_mma[warp * 32 * 6];
    int g = lane >> 2, t = lane & 3;
    for (int e = 0; e < 4; e++) {
        int r = g + (e >= 2 ? 8 : 0), n = 2 * t + (e & 1);
        double acc = c[e];
        for (int k = 0; k < 8; k++) {
            double av = w[((r & 7) * 4 + (k & 3)) * 6 + (r >= 8 ? 1 : 0) + (k >= 4 ? 2 : 0)];
            double bv = w[(n * 4 + (k & 3)) * 6 + 4 + (k >= 4 ? 1 : 0)];
            acc += av * bv;
        }
        c[e] = (float)acc;
    }
    g_warp_bar[warp]->arrive_and_wait();
}
#pragma STDC FP_CONTRACT OFF
