// lockstep CUDA kernels, compiled at run time by NVRTC (no headers: NVRTC needs none).
//
// Compiled with --fmad=false: `a * b + c` stays a multiply and an add, two roundings, as in the
// reference backend (Rust never contracts). Together with the reference's summation orders
// (eight interleaved partial sums per dot product, f64 where the reference widens) this makes
// most ops bitwise equal to the reference; only f64 transcendentals (exp, tanh) may differ by
// an ulp before their final rounding to f32.

typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;

// Programmatic dependent launch (sm_90 and later). In a replayed step graph every edge between
// two of these kernels is programmatic (graph_exec.rs): the next kernel is launched while this
// one still runs, and its blocks wait here until every block of this grid has finished and its
// writes are visible. Every kernel starts with GRID_ENTER, before its first global memory read
// or write, so an early launch can never read a value not yet written nor overwrite one still
// to be read. The second instruction lets the next kernel launch once all of this grid's blocks
// are running. Outside such a graph (eager steps, older GPUs) both do nothing.
//
// GRID_WAIT and GRID_LAUNCH are GRID_ENTER's two halves: the decode mat-vecs let the next kernel
// launch at their entry and wait before their first weight load (fast_rows); the norm-fused
// ones also load their warps' first weight units before the wait (weights are written once, at
// upload, never by a kernel, so reading them early is safe; see FusedFirst).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && defined(LOCKSTEP_TIMELINE)
// The step timeline (LOCKSTEP_CUDA_TIMELINE, timeline.rs; never in the default build): the first
// thread of a grid's first block stamps the global timer before and after its wait, in launch
// order (a kernel's wait returns only once the kernel before has finished, after that kernel's
// own stamp), so record i of a replay is its i-th kernel.
#define TL_CAP (1u << 19)
#define TL_TAGS 16
__device__ unsigned long long lockstep_timeline[TL_CAP * 2];
// The record count, as a float: a float atomic add is the one ptxas does not aggregate across
// a warp (tl_arrive); counts up to 2^24 are exact, far above TL_CAP.
__device__ float lockstep_timeline_n;
// Marks inside a kernel (TL_MARK(tag), first thread of the first block): the time from the
// kernel's release to the mark, in ns, at [record * TL_TAGS + tag] (0: not reached). Plain
// stores: no atomic on the kernel's own path. Tags 10 and 15 (and 2 and 3 in mmv_fast1) count
// the other way, from before the release (the stamps, below), and 12 is no time but the SM.
__device__ unsigned int lockstep_marks[TL_CAP * TL_TAGS];
__device__ __forceinline__ unsigned long long tl_now() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
// LOCKSTEP_TL_LAST (a diagnostic define, LOCKSTEP_CUDA_DEFINES=LOCKSTEP_TL_LAST): the grid's
// last block, the last one dispatched, stamps instead of the first, so a second timeline says
// how far a kernel's slowest-placed block trails its first (session 29: the 8B's decode
// attention, whose blocks find no SM room until the q/k/v mat-vec drains).
__device__ __forceinline__ bool tl_first() {
#ifdef LOCKSTEP_TL_LAST
    return (threadIdx.x | threadIdx.y | threadIdx.z) == 0 && blockIdx.x == gridDim.x - 1 &&
           blockIdx.y == gridDim.y - 1 && blockIdx.z == gridDim.z - 1;
#else
    return (threadIdx.x | threadIdx.y | threadIdx.z | blockIdx.x | blockIdx.y | blockIdx.z) == 0;
#endif
}
// The record index and release time of this block's kernel (first thread only), and the
// stamps taken before the release (session 45): slot s goes to mark tl_stamp_tag(s) as the
// release minus the stamp. Shared memory starts undefined, so a slot counts only with its
// flag set to a word no other use leaves there by chance; tl_record clears it.
//   slot 0, mark 15: the block's first instruction (TL_ENTRY: the one-row mat-vecs, the
//           norm-fused kernels, the decode attentions);
//   slot 1, mark 10: the first parameter ready, a few instructions in (TL_PARAM0, mmv_fast1);
//   slot 2, mark 3: the row count m in its register, before the exit test (TL_PARAM_M,
//           mmv_fast1; mark 3 is no mark of the mat-vecs);
//   slot 3, mark 2: the row length k in its register, after the exit test (TL_PARAM_K,
//           mmv_fast1; nor is mark 2).
// (Session 45's marks 11, 13 and 14, the one-row mat-vecs' first weight row's address, first
// weights and the code before them, went with those loads before the wait in session 46: a
// stamp on loaded weights pinned the loads there, an order the default build never ran.)
#define TL_STAMPS 4
#define TL_STAMP_SET 0x7e57e17bu
__device__ __forceinline__ constexpr unsigned int tl_stamp_tag(int sl) {
    return sl == 0 ? 15u : sl == 1 ? 10u : sl == 2 ? 3u : 2u;
}
struct TlSelf {
    unsigned int index;
    unsigned long long release;
    unsigned long long stamp[TL_STAMPS];
    unsigned int set[TL_STAMPS];
};
__device__ __forceinline__ TlSelf* tl_self() {
    __shared__ TlSelf self;
    return &self;
}
// The index is drawn before the wait and first used after the release stamp (the host sorts
// a replay's records by release time, so an index taken out of order cannot misplace a
// kernel). An integer atomicAdd (or atom.add in asm) is aggregated by ptxas across the warp's
// lanes with a shuffle of the result, which made the block wait for the atomic's round trip
// (0.2-1.2 us on the H200, session 45) before its arrival stamp and its wait, on the kernel's
// path; the float add is not, so the result is first read after the release stamp.
__device__ __forceinline__ float tl_arrive() {
    float i = 0.0f;
    if (tl_first())
        asm volatile("atom.global.add.f32 %0, [%1], 0f3F800000;" : "=f"(i) : "l"(&lockstep_timeline_n) : "memory");
    return i;
}
__device__ __forceinline__ void tl_record(unsigned long long t0, float fi) {
    if (tl_first()) {
        // Before anything reads the index: volatile asm keeps its order with the conversion's.
        unsigned long long t1;
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t1) : : "memory");
        unsigned int i;
        asm volatile("cvt.rzi.u32.f32 %0, %1;" : "=r"(i) : "f"(fi));
        TlSelf* me = tl_self();
        me->index = i;
        me->release = t1;
        if (i < TL_CAP) {
            lockstep_timeline[2 * (size_t)i] = t0;
            lockstep_timeline[2 * (size_t)i + 1] = t1;
        }
#pragma unroll
        for (int sl = 0; sl < TL_STAMPS; sl++) {
            if (me->set[sl] != TL_STAMP_SET) continue;
            me->set[sl] = 0u;
            if (i < TL_CAP)
                lockstep_marks[(size_t)i * TL_TAGS + tl_stamp_tag(sl)] = (unsigned int)(t1 - me->stamp[sl]) | 1u;
        }
    }
}
// A stamp into slot sl once dep is in its register (the store that depends on it is ordered
// before the timer read by the asm's memory clobber; the store itself never happens).
__device__ __forceinline__ void tl_stamp_after(unsigned int dep, int sl) {
    if (tl_first()) {
        TlSelf* me = tl_self();
        if (dep == 0x7fbadbadu) me->set[sl] = 0u;
        unsigned long long t;
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t) : : "memory");
        me->stamp[sl] = t;
        me->set[sl] = TL_STAMP_SET;
    }
}
#define TL_ENTRY() tl_stamp_after(0u, 0)
#define TL_PARAM0(x) tl_stamp_after((unsigned int)(x), 1)
#define TL_PARAM_M(x) tl_stamp_after((unsigned int)(x), 2)
#define TL_PARAM_K(x) tl_stamp_after((unsigned int)(x), 3)
// Mark 12 (after the grid wait): the SM the stamping block runs on, as smid * 1000 + 1 "ns".
__device__ __forceinline__ void tl_smid() {
    if (tl_first()) {
        unsigned int sm, i = tl_self()->index;
        asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
        if (i < TL_CAP) lockstep_marks[(size_t)i * TL_TAGS + 12] = sm * 1000u + 1u;
    }
}
#define TL_SMID() tl_smid()
__device__ __forceinline__ void tl_mark(unsigned int tag) {
    if (tl_first()) {
        // The memory clobber keeps every store before the mark before it, so a mark after a
        // store of loaded values comes after those loads arrived.
        unsigned long long t;
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t) : : "memory");
        unsigned int i = tl_self()->index;
        if (i < TL_CAP && tag < TL_TAGS)
            lockstep_marks[(size_t)i * TL_TAGS + tag] = (unsigned int)(t - tl_self()->release) | 1u;
    }
}
#define TL_MARK(tag) tl_mark(tag)
#define GRID_ENTER()                                                                             \
    do {                                                                                         \
        float tli_ = tl_arrive();                                                                \
        unsigned long long tl0_ = tl_now();                                                      \
        asm volatile("griddepcontrol.wait;" ::: "memory");                                       \
        tl_record(tl0_, tli_);                                                                   \
        asm volatile("griddepcontrol.launch_dependents;" ::: "memory");                          \
    } while (0)
#define GRID_WAIT()                                                                              \
    do {                                                                                         \
        float tli_ = tl_arrive();                                                                \
        unsigned long long tl0_ = tl_now();                                                      \
        asm volatile("griddepcontrol.wait;" ::: "memory");                                       \
        tl_record(tl0_, tli_);                                                                   \
    } while (0)
#define GRID_LAUNCH() asm volatile("griddepcontrol.launch_dependents;" ::: "memory")
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define GRID_ENTER() asm volatile("griddepcontrol.wait;\n\tgriddepcontrol.launch_dependents;" ::: "memory")
#define GRID_WAIT() asm volatile("griddepcontrol.wait;" ::: "memory")
#define GRID_LAUNCH() asm volatile("griddepcontrol.launch_dependents;" ::: "memory")
#else
#define GRID_ENTER()
#define GRID_WAIT()
#define GRID_LAUNCH()
#endif
#if !(defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && defined(LOCKSTEP_TIMELINE))
// Outside the timeline build, its marks and stamps are nothing.
#define TL_MARK(tag)
#define TL_ENTRY()
#define TL_SMID()
#define TL_PARAM0(x)
#define TL_PARAM_M(x)
#define TL_PARAM_K(x)
#endif

// Where residual_norm lets the next kernel launch: after its own loads (default), or at its
// entry (LOCKSTEP_LAUNCH_AT_ENTRY, set by LOCKSTEP_CUDA_LAUNCH_AT_ENTRY=1: the kernel before
// session 19). The norm is one short dependent chain (load the rows, reduce, scale, quantize)
// on the step's critical path; launched at its entry, the next kernel's blocks issue their
// early weight loads (fast_rows) at once, and session 19's timeline found the norm's own row
// loads queued behind them: Llama-8B's residual_norm took 4-5 us from its release to its first
// values (over several blocks). After the loads, those early loads overlap the norm's
// arithmetic instead. (The norms fused into their consumers keep the launch at entry: moved
// there too, SmolLM2 lost up to 1.3%.) Session 46 found that the plain mat-vecs' early loads
// never ran in the default build (ptxas issued their grid wait first; see fast_rows): what the
// launch point moved there was the next kernel's blocks, not its loads; the timeline that saw
// the loads was a build whose stamps kept them before the wait.
#ifdef LOCKSTEP_LAUNCH_AT_ENTRY
#define NORM_ENTER() GRID_ENTER()
#define NORM_LAUNCH_AFTER_LOADS()
#else
#define NORM_ENTER() GRID_WAIT()
#define NORM_LAUNCH_AFTER_LOADS() GRID_LAUNCH()
#endif
// The same for quantize_q8_32 (the next kernel launches once its block is written) and the
// short decode attention (once its scores are formed: every K row, the step's q, k and v,
// and, heads up to 128 values, every V row are in). Launched at their grid wait, the next
// mat-vec's blocks (their early weight loads, session 20 thought; session 46: never issued
// before the wait in the default build) compete with those loads; after them, tg128 went
// up on the four shapes' full benches (8B +1.6%, Llama-1B +1.3%, Gemma-3 +1.7%, SmolLM2
// +3.2%; session 20, BENCHMARKS.md; in the alternating rounds one of Gemma-3's two was lower).
// LOCKSTEP_EARLY_LAUNCH (LOCKSTEP_CUDA_LATE_LAUNCH=0) launches at the wait, for comparisons.
#ifndef LOCKSTEP_EARLY_LAUNCH
#define LATE_ENTER() GRID_WAIT()
#define LATE_LAUNCH() GRID_LAUNCH()
#define EARLY_LAUNCH()
#else
#define LATE_ENTER() GRID_ENTER()
#define LATE_LAUNCH()
#define EARLY_LAUNCH() GRID_LAUNCH()
#endif
// The decode attention without rope_store's work (`attention_decode_<D>`: by default only
// Gemma-3's heads of 256, which load no V before their wait) lets the next kernel launch at its
// grid wait: on the H200 (session 29e) Gemma-3 gained 2.1-2.4% tg128 that way, while the
// rope-fused kernels and the quantizer lost 1-3% on the other shapes. LOCKSTEP_ATTN_PLAIN_LATE
// (LOCKSTEP_CUDA_ATTN_PLAIN_LATE=1) launches it after the scores, as before.
#if defined(LOCKSTEP_ATTN_PLAIN_LATE) || defined(LOCKSTEP_EARLY_LAUNCH)
#define PLAIN_ATT_EARLY_LAUNCH() EARLY_LAUNCH()
#define PLAIN_ATT_LATE_LAUNCH() LATE_LAUNCH()
#else
#define PLAIN_ATT_EARLY_LAUNCH() GRID_LAUNCH()
#define PLAIN_ATT_LATE_LAUNCH()
#endif

// Type ids are GGUF's (ggml_type).
#define T_F32 0
#define T_F16 1
#define T_Q4_0 2
#define T_Q4_1 3
#define T_Q5_0 6
#define T_Q5_1 7
#define T_Q8_0 8
#define T_Q2_K 10
#define T_Q3_K 11
#define T_Q4_K 12
#define T_Q5_K 13
#define T_Q6_K 14
#define T_IQ4_NL 20
#define T_IQ4_XS 23
#define T_BF16 30

__device__ __forceinline__ float h2f(u16 h) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
}
__device__ __forceinline__ u16 f2h(float f) {
    u16 h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
}
__device__ __forceinline__ u16 ld16(const u8* p) { return (u16)p[0] | ((u16)p[1] << 8); }
__device__ __forceinline__ float ldh(const u8* p) { return h2f(ld16(p)); }

// One 32-value block of fast numerics' activation quantization (see FAST NUMERICS below), held
// one value per lane of a full warp: int8 q with the f32 scale d = max|x| / 127 and the integer
// sum of q. Every kernel that quantizes (quantize_q8_32, and the norms that quantize their own
// output) runs exactly this, so a fused quantization is bitwise the separate one.
struct Q8Blk {
    float d;
    int s;
};
// A block's scale d = a / 127 and its inverse id = (d != 0 ? 1 / d : 0), for a = max |v| >= 0,
// bit for bit what IEEE division gives (a / 127.0f, 1.0f / d), without its branches: nvcc's
// correctly rounded division and reciprocal check their operands (FCHK, an exponent test) and
// branch around a slow path, on every quantization's dependent chain, which sits on a decode
// step's critical path (with both approximated instead, wrong values, Gemma-3's tg128 went up
// 3.7%, BENCHMARKS.md session 43).
// - The scale: q0 = a * c with c = RN(1/127), then one FMA correction. For every finite a >= 0
//   (denormals included) this is exactly RN(a / 127): checked for all 2^31 such floats on the
//   CPU against IEEE division and on the device against nvcc's (bench/q8_exhaustive). a = inf
//   or NaN (a block with an infinity, or all NaN) takes a * c: inf, NaN.
// - The inverse: the hardware's reciprocal approximation then one Newton step by FMA, as nvcc's
//   own fast path does for divisors of a biased exponent in [1, 252]; d = a / 127 is below 2^126,
//   and a subnormal d is scaled by 2^64 first and the result by 2^64 after (both exact; an
//   inverse beyond FLT_MAX overflows to inf as IEEE rounding does). Checked for every d below
//   2^126 on the device against nvcc's 1.0f / d (bench/q8_exhaustive). d = 0 or inf gives 0.
// LOCKSTEP_Q8_IEEE_DIV (a diagnostic define) compiles the two IEEE operations instead.
// (Products are plain: --fmad=false keeps them out of any FMA.)
__device__ __forceinline__ float q8_scale(float a) {
    const float c = 0.0078740157186985015869f;  // RN(1 / 127), 0x3c010204
    float q0 = a * c;
    float d = __fmaf_rn(__fmaf_rn(-q0, 127.0f, a), c, q0);
    return a <= 3.40282346638528859812e+38f ? d : q0;
}
__device__ __forceinline__ float q8_inverse(float d) {
    float s = d < 1.17549435082228750797e-38f ? 18446744073709551616.0f : 1.0f;  // 2^64
    float x = d * s;
#ifdef __CUDACC__
    float y;
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
#else
    // The CPU emulations (bench/attn_emu, bench/mmv_emu): any start within an ulp of 1 / x
    // gives the Newton step's correctly rounded result; this one is the rounded quotient.
    float y = 1.0f / x;
#endif
    float r = __fmaf_rn(__fmaf_rn(-x, y, 1.0f), y, y) * s;
    return d != 0.0f && d <= 3.40282346638528859812e+38f ? r : (d != d ? d : 0.0f);
}

// q2 / ds2, when given, receive a copy (a fused norm's shared-memory row and the global buffer).
__device__ __forceinline__ void q8_block(float v, signed char* __restrict__ q, Q8Blk* __restrict__ ds,
                                         size_t blk, signed char* __restrict__ q2 = nullptr,
                                         Q8Blk* __restrict__ ds2 = nullptr) {
    int lane = threadIdx.x & 31;
    float a = fabsf(v);
#ifndef LOCKSTEP_Q8_SHUFFLE
    // The block's largest |v| by one integer reduction (redux.sync, sm_80 and later) on the
    // bits, instead of five dependent shuffles: non-negative floats order as their bit
    // patterns, so without a NaN the maximum is fmaxf's, bit for bit (NaN lanes: below). A
    // quantization sits on the decode step's critical path in every norm and activation
    // (session 19's timeline).
    // LOCKSTEP_Q8_SHUFFLE (LOCKSTEP_CUDA_Q8_SHUFFLE=1) keeps the shuffles, for comparisons.
#ifndef LOCKSTEP_Q8_NAN_BRANCH
    // NaN lanes count as 0 and a block of NaNs alone gives NaN: fmaxf's fold (it skips NaNs) as
    // selects, not a vote and a branch on the quantization's dependent chain (session 43; the
    // diagnostic LOCKSTEP_Q8_NAN_BRANCH keeps the branch to the shuffles). Any NaN gives the
    // same block: its scale is the canonical NaN a NaN's product is, every q 0.
    bool nan = a != a;
    unsigned m = __reduce_max_sync(0xffffffffu, nan ? 0u : __float_as_uint(a));
    a = __all_sync(0xffffffffu, nan) ? __uint_as_float(0x7fffffffu) : __uint_as_float(m);
#else
    if (__any_sync(0xffffffffu, a != a)) {
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) a = fmaxf(a, __shfl_xor_sync(0xffffffffu, a, o));
    } else {
        a = __uint_as_float(__reduce_max_sync(0xffffffffu, __float_as_uint(a)));
    }
#endif
#else
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) a = fmaxf(a, __shfl_xor_sync(0xffffffffu, a, o));
#endif
#ifndef LOCKSTEP_Q8_IEEE_DIV
    float d = q8_scale(a);
    float id = q8_inverse(d);
#else
    float d = a / 127.0f;
    float id = d != 0.0f ? 1.0f / d : 0.0f;
#endif
    float r = rintf(v * id);
    int qi = r != r ? 0 : (int)fminf(fmaxf(r, -127.0f), 127.0f);
    q[blk * 32 + lane] = (signed char)qi;
    if (q2 != nullptr) q2[blk * 32 + lane] = (signed char)qi;
#ifndef LOCKSTEP_Q8_SHUFFLE
    // Integer addition: any order gives the same sum.
    int s = __reduce_add_sync(0xffffffffu, qi);
#else
    int s = qi;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
#endif
    if (lane == 0) {
        ds[blk] = Q8Blk{d, s};
        if (ds2 != nullptr) ds2[blk] = Q8Blk{d, s};
    }
}

// The gated activation act(g) * u (act 0: SiLU, else GELU with tanh, c = sqrt(2 / pi)): every
// kernel that applies it runs this, so fused and separate ops agree bitwise. In f64 (the exact
// kernels, as the reference), or in f32 where the fast kernels are built (LOCKSTEP_FAST_F32,
// see norm_regs_w): expf / tanhf (2 ulp), a division, products; within verify's act_bound.
__device__ __forceinline__ float act_apply(float gv, float u, int act, double c) {
#ifdef LOCKSTEP_FAST_F32
    float f;
    if (act == 0) f = gv / (1.0f + expf(-gv));
    else f = 0.5f * gv * (1.0f + tanhf((float)c * (gv + 0.044715f * gv * gv * gv)));
    return f * u;
#else
    double g = (double)gv, f;
    if (act == 0) f = g / (1.0 + exp(-g));
    else f = 0.5 * g * (1.0 + tanh(c * (g + 0.044715 * g * g * g)));
    return (float)(f * (double)u);
#endif
}

__constant__ signed char KVALUES_IQ4NL[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                              1,    13,   25,  38,  53,  69,  89,  113};

// ggml's get_scale_min_k4 (Q4_K, Q5_K).
__device__ __forceinline__ void scale_min_k4(int j, const u8* q, int* sc, int* m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

// Q6_K weights on the device are stored in planes (plan::q6k_planar, done once at upload), not
// in GGUF's 210-byte blocks: every 8 consecutive super-blocks of a tensor (1680 bytes, the same
// size) hold, for their 32 units of 64 values (FastUnit<T_Q6_K>'s unit j = 4 * (super-block in
// the group) + 2 n + h), plane A: each unit's first 16 ql bytes (GGUF ql[64n + 16h ..]), plane B:
// its second 16 (ql[64n + 32 + 16h ..]), plane H: its 16 qh bytes (qh[32n + 16h ..]), plane S:
// its 4 scales (scales[8n + 2k + h], k = 0..3), then the 8 super-blocks' d. A unit is then three
// aligned 16-byte loads, one of 4 and one of 2, consecutive units at consecutive addresses;
// GGUF's layout took 20 narrow loads at a 52.5-byte stride (BENCHMARKS.md, session 27: the 8B's
// Q6_K LM head alone 156.7 -> 96.0 us on the H200). Every value is the same bytes through the
// same arithmetic, so results are bitwise unchanged. The host uploads a Q6_K tensor at an address
// that is a multiple of 1680 (so of 16), padded to whole groups: a block pointer b (tensor start
// + 210 s) then says where its group starts and which member it is from the address alone, so
// every decoder keeps its (block pointer, offset) interface. LOCKSTEP_Q6K_GGUF (knob
// LOCKSTEP_CUDA_Q6K_PLANAR=0, the host then uploads GGUF's bytes) reads GGUF's layout.
#define Q6P_GROUP 1680
__device__ __forceinline__ int q6p_member(const u8* b) { return (int)(((size_t)b / 210) & 7); }
// Where the byte at offset o (0..209) of GGUF's block at b lies.
__device__ __forceinline__ const u8* q6p_at(const u8* b, int o) {
#ifdef LOCKSTEP_Q6K_GGUF
    return b + o;
#else
    int idx = q6p_member(b);
    const u8* g = b - idx * 210;
    if (o < 128) {
        int n = o >> 6, r = o & 63;
        return g + 512 * (r >> 5) + 16 * (4 * idx + 2 * n + ((r >> 4) & 1)) + (r & 15);
    }
    if (o < 192) {
        int i = o - 128;
        return g + 1024 + 16 * (4 * idx + 2 * (i >> 5) + ((i >> 4) & 1)) + (i & 15);
    }
    if (o < 208) {
        int i = o - 192;
        return g + 1536 + 4 * (4 * idx + 2 * (i >> 3) + (i & 1)) + ((i >> 1) & 3);
    }
    return g + 1664 + 2 * idx + (o - 208);
#endif
}

// Q8_0 weights on the device are stored in planes too (plan::q80_planar, done once at upload):
// every 16 consecutive blocks of a tensor (544 bytes, the same size) hold their 16 x 32 quants,
// then their 16 d. A unit's quants are then two aligned 16-byte loads instead of GGUF's run of
// 32 bytes at a 2-byte alignment (nine 4-byte loads and funnel shifts); the Q8_0 LM heads of
// SmolLM2 and Gemma-3 (the tied embeddings) are a third and three quarters of their models'
// bytes. Same bytes, same arithmetic: bitwise unchanged. As for Q6_K, the host uploads the
// tensor at a multiple of 544, so a block pointer b says its group and member; every decoder
// keeps its (block pointer, offset) interface. LOCKSTEP_Q80_GGUF (knob
// LOCKSTEP_CUDA_Q80_PLANAR=0) reads GGUF's layout.
#define Q8P_GROUP 544
__device__ __forceinline__ int q8p_member(const u8* b) { return (int)(((size_t)b / 34) & 15); }
// Where the byte at offset o (0..33) of GGUF's block at b lies.
__device__ __forceinline__ const u8* q8p_at(const u8* b, int o) {
#ifdef LOCKSTEP_Q80_GGUF
    return b + o;
#else
    int idx = q8p_member(b);
    const u8* g = b - idx * 34;
    return o < 2 ? g + 512 + 2 * idx + o : g + 32 * idx + (o - 2);
#endif
}

// Q5_0 weights on the device: the host uploads plan::q50_repacked's 24-byte blocks
// [d (f16), two zero bytes, qh', qs[16]] (or, with LOCKSTEP_Q50_GGUF, knob
// LOCKSTEP_CUDA_Q50_REPACK=0, GGUF's 22-byte blocks as they are): a block's words are aligned loads (8 bytes; a row of
// 640 values 480 bytes), and qh's bits are permuted so that the high bits of a dp4a word's four
// values are one shift and one mask away instead of hb4's spreading: element 4i + b (the low
// nibbles of qs word i, byte b) has its high bit at bit 8b + 4 + i of qh', element 16 + 4i + b
// (the word's high nibbles) at bit 8b + i. The same integers and the same float operations, so
// every value is bitwise the same (tests/mmv_emulation.rs). The lab found GGUF's decode the bound
// of a Gemma-3 layer on 16 SMs (bench/cluster_lab/gemma_cluster.cu, BENCHMARKS.md, session 40;
// the default since session 41's device checks).
#ifndef LOCKSTEP_Q50_GGUF
#define Q50_BYTES 24
#define Q50_QH 4
#define Q50_QS 8
#else
#define Q50_BYTES 22
#define Q50_QH 2
#define Q50_QS 6
#endif
// The bit of element e's high bit in the block's qh word (GGUF: bit e).
__device__ __forceinline__ int q50_hbit(int e) {
#ifndef LOCKSTEP_Q50_GGUF
    int f = e & 15;
    return 8 * (f & 3) + (f >> 2) + (e < 16 ? 4 : 0);
#else
    return e;
#endif
}

// Element `e` of the block at `b`: the same f32 operations, in the same order, as
// crates/quant/src/dequant.rs (hence bitwise equal to it).
__device__ __forceinline__ float deq(int ty, const u8* b, int e) {
    switch (ty) {
    case T_F32: {
        u32 u = (u32)b[0] | ((u32)b[1] << 8) | ((u32)b[2] << 16) | ((u32)b[3] << 24);
        return __uint_as_float(u);
    }
    case T_F16:
#ifdef FAULT_F16_AS_F32
        // seeded fault: an f16 weight read as if it were f32 (4 bytes, this element and the next)
        return __uint_as_float((u32)b[0] | ((u32)b[1] << 8) | ((u32)b[2] << 16) | ((u32)b[3] << 24));
#endif
        return ldh(b);
    case T_BF16: return __uint_as_float(((u32)ld16(b)) << 16);
    case T_Q4_0: {
        float d = ldh(b);
        int q = e < 16 ? (b[2 + e] & 0xF) : (b[2 + e - 16] >> 4);
        return (float)(q - 8) * d;
    }
    case T_Q4_1: {
        float d = ldh(b), m = ldh(b + 2);
        int q = e < 16 ? (b[4 + e] & 0xF) : (b[4 + e - 16] >> 4);
        return (float)q * d + m;
    }
    case T_Q5_0: {
        float d = ldh(b);
        const u8* h = b + Q50_QH;
        u32 qh = (u32)h[0] | ((u32)h[1] << 8) | ((u32)h[2] << 16) | ((u32)h[3] << 24);
        int lo = e < 16 ? (b[Q50_QS + e] & 0xF) : (b[Q50_QS + e - 16] >> 4);
        int q = lo | (((qh >> q50_hbit(e)) & 1) << 4);
        return (float)(q - 16) * d;
    }
    case T_Q5_1: {
        float d = ldh(b), m = ldh(b + 2);
        u32 qh = (u32)b[4] | ((u32)b[5] << 8) | ((u32)b[6] << 16) | ((u32)b[7] << 24);
        int lo = e < 16 ? (b[8 + e] & 0xF) : (b[8 + e - 16] >> 4);
        int q = lo | (((qh >> e) & 1) << 4);
        return (float)q * d + m;
    }
    case T_Q8_0: return (float)(signed char)*q8p_at(b, 2 + e) * ldh(q8p_at(b, 0));
    case T_Q2_K: {
        float d = ldh(b + 80), mn = ldh(b + 82);
        int n = e >> 7, j = (e >> 5) & 3, l = e & 31;
        int q = (b[16 + 32 * n + l] >> (2 * j)) & 3;
        int sc = b[e >> 4];
        float dl = d * (float)(sc & 0xF), ml = mn * (float)(sc >> 4);
        return dl * (float)q - ml;
    }
    case T_Q3_K: {
        float d_all = ldh(b + 108);
        int n = e >> 7, j = (e >> 5) & 3, l = e & 31;
        int low = (b[32 + 32 * n + l] >> (2 * j)) & 3;
        int q = low - ((b[l] & (1 << (4 * n + j))) ? 0 : 4);
        int s = e >> 4;
        const u8* sp = b + 96;
        int lo = s < 8 ? (sp[s] & 0xF) : (sp[s - 8] >> 4);
        int hi = (sp[8 + (s & 3)] >> (2 * (s >> 2))) & 3;
        int sc = (int)(signed char)(u8)(lo | (hi << 4)) - 32;
        float dl = d_all * (float)sc;
        return dl * (float)q;
    }
    case T_Q4_K: {
        float d = ldh(b), mn = ldh(b + 2);
        int j = e >> 6, l = e & 63;
        int sc, m;
        int q = l < 32 ? (b[16 + 32 * j + l] & 0xF) : (b[16 + 32 * j + l - 32] >> 4);
        scale_min_k4(l < 32 ? 2 * j : 2 * j + 1, b + 4, &sc, &m);
        float d1 = d * (float)sc, m1 = mn * (float)m;
        return d1 * (float)q - m1;
    }
    case T_Q5_K: {
        float d = ldh(b), mn = ldh(b + 2);
        int j = e >> 6, l = e & 63;
        int q;
        if (l < 32) q = (b[48 + 32 * j + l] & 0xF) + ((b[16 + l] & (1 << (2 * j))) ? 16 : 0);
        else q = (b[48 + 32 * j + l - 32] >> 4) + ((b[16 + l - 32] & (2 << (2 * j))) ? 16 : 0);
        int sc, m;
        scale_min_k4(e >> 5, b + 4, &sc, &m);
        float dl = d * (float)sc, ml = mn * (float)m;
        return dl * (float)q - ml;
    }
    case T_Q6_K: {
        float d = ldh(q6p_at(b, 208));
        int n = e >> 7, k = (e >> 5) & 3, l = e & 31;
        int h = *q6p_at(b, 128 + 32 * n + l);
        int lo = *q6p_at(b, 64 * n + ((k & 1) ? 32 : 0) + l);
        lo = (k < 2) ? (lo & 0xF) : (lo >> 4);
        int q = (lo | (((h >> (2 * k)) & 3) << 4)) - 32;
        float dl = d * (float)(signed char)*q6p_at(b, 192 + (e >> 4));
        return dl * (float)q;
    }
    case T_IQ4_NL: {
        float d = ldh(b);
        int q = e < 16 ? (b[2 + e] & 0xF) : (b[2 + e - 16] >> 4);
        return d * (float)KVALUES_IQ4NL[q];
    }
    case T_IQ4_XS: {
        float d = ldh(b);
        int ib = e >> 5, j = e & 31;
        int scales_h = ld16(b + 2);
        int ls = ((b[4 + ib / 2] >> (4 * (ib % 2))) & 0xF) | (((scales_h >> (2 * ib)) & 3) << 4);
        float dl = d * (float)(ls - 32);
        int q = j < 16 ? (b[8 + 16 * ib + j] & 0xF) : (b[8 + 16 * ib + j - 16] >> 4);
        return dl * (float)KVALUES_IQ4NL[q];
    }
    }
    return __int_as_float(0x7fc00000);  // unknown type: NaN (the host never launches one)
}

struct QType {
    int ty, bs, ts;
};

__device__ __forceinline__ float deq_at(QType t, const u8* row, int j) {
    int blk = j / t.bs;
    return deq(t.ty, row + (size_t)blk * t.ts, j - blk * t.bs);
}

// Elements and bytes per block of each type (folded to constants in the per-type kernels).
__device__ __forceinline__ constexpr int block_elems(int ty) {
    return ty == T_F32 || ty == T_F16 || ty == T_BF16 ? 1
         : (ty == T_Q2_K || ty == T_Q3_K || ty == T_Q4_K || ty == T_Q5_K || ty == T_Q6_K || ty == T_IQ4_XS) ? 256
         : 32;
}
__device__ __forceinline__ constexpr int block_bytes(int ty) {
    return ty == T_F32 ? 4 : ty == T_F16 || ty == T_BF16 ? 2 : ty == T_Q4_0 ? 18 : ty == T_Q4_1 ? 20
         : ty == T_Q5_0 ? Q50_BYTES : ty == T_Q5_1 ? 24 : ty == T_Q8_0 ? 34 : ty == T_Q2_K ? 84
         : ty == T_Q3_K ? 110 : ty == T_Q4_K ? 144 : ty == T_Q5_K ? 176 : ty == T_Q6_K ? 210
         : ty == T_IQ4_NL ? 18 : 136;
}

template <int TY>
__device__ __forceinline__ float deq_t(const u8* row, int j) {
    constexpr int BS = block_elems(TY), TS = block_bytes(TY);
    int blk = j / BS;
    return deq(TY, row + (size_t)blk * TS, j - blk * BS);
}

// The reference's reduction of eight partial sums and a tail.
__device__ __forceinline__ float reduce8(const float* a, float tail) {
    return ((a[0] + a[4]) + (a[1] + a[5])) + ((a[2] + a[6]) + (a[3] + a[7])) + tail;
}

// The elements 8 * cc + l (cc = 0 .. BS/8) of one block, the ones lane l of a row's eight
// lanes sums: block scales are decoded once per block instead of once per element. Every
// value is formed by exactly the operations of `deq` (hence bitwise equal to it).
template <int TY>
__device__ __forceinline__ void decode_lane(const u8* b, int l, float* w) {
    constexpr int EPL = block_elems(TY) / 8;
    if constexpr (TY == T_Q4_K) {
        float d = ldh(b), mn = ldh(b + 2);
        float ds[8], ms[8];
#pragma unroll
        for (int s = 0; s < 8; s++) {
            int sc, m;
            scale_min_k4(s, b + 4, &sc, &m);
            ds[s] = d * (float)sc;
            ms[s] = mn * (float)m;
        }
#pragma unroll
        for (int cc = 0; cc < 32; cc++) {
            int j = cc >> 3, lp = 8 * (cc & 7) + l;
            int q = lp < 32 ? (b[16 + 32 * j + lp] & 0xF) : (b[16 + 32 * j + lp - 32] >> 4);
            int s = lp < 32 ? 2 * j : 2 * j + 1;
#ifdef FAULT_Q4K_WRONG_SCALE
            s ^= 1;  // seeded fault: the neighbouring sub-block's scale and min
#endif
            w[cc] = ds[s] * (float)q - ms[s];
        }
    } else if constexpr (TY == T_Q6_K) {
        float d = ldh(q6p_at(b, 208));
#pragma unroll
        for (int cc = 0; cc < 32; cc++) {
            int e = 8 * cc + l;
            int n = e >> 7, k = (e >> 5) & 3, lp = e & 31;
            int h = *q6p_at(b, 128 + 32 * n + lp);
            int lo = *q6p_at(b, 64 * n + ((k & 1) ? 32 : 0) + lp);
            lo = (k < 2) ? (lo & 0xF) : (lo >> 4);
            int q = (lo | (((h >> (2 * k)) & 3) << 4)) - 32;
            float dl = d * (float)(signed char)*q6p_at(b, 192 + (e >> 4));
            w[cc] = dl * (float)q;
        }
    } else if constexpr (TY == T_Q8_0) {
        float d = ldh(q8p_at(b, 0));
        const u8* qs = q8p_at(b, 2);  // a block's quants are contiguous in either layout
#pragma unroll
        for (int cc = 0; cc < 4; cc++) w[cc] = (float)(signed char)qs[8 * cc + l] * d;
    } else if constexpr (TY == T_Q4_1) {
        float d = ldh(b), m = ldh(b + 2);
#pragma unroll
        for (int cc = 0; cc < 4; cc++) {
            int e = 8 * cc + l;
            int q = e < 16 ? (b[4 + e] & 0xF) : (b[4 + e - 16] >> 4);
            w[cc] = (float)q * d + m;
        }
    } else if constexpr (TY == T_Q4_0) {
        float d = ldh(b);
#pragma unroll
        for (int cc = 0; cc < 4; cc++) {
            int e = 8 * cc + l;
            int q = e < 16 ? (b[2 + e] & 0xF) : (b[2 + e - 16] >> 4);
            w[cc] = (float)(q - 8) * d;
        }
    } else if constexpr (TY == T_Q5_0) {
        float d = ldh(b);
        const u8* h = b + Q50_QH;
        u32 qh = (u32)h[0] | ((u32)h[1] << 8) | ((u32)h[2] << 16) | ((u32)h[3] << 24);
#pragma unroll
        for (int cc = 0; cc < 4; cc++) {
            int e = 8 * cc + l;
            int lo = e < 16 ? (b[Q50_QS + e] & 0xF) : (b[Q50_QS + e - 16] >> 4);
            int q = lo | (((qh >> q50_hbit(e)) & 1) << 4);
            w[cc] = (float)(q - 16) * d;
        }
    } else {
#pragma unroll
        for (int cc = 0; cc < EPL; cc++) w[cc] = deq(TY, b, 8 * cc + l);
    }
}

// Bytes of each weight row staged in shared memory at a time (two buffers: the next segment
// is copied in, asynchronously, while the current one is decoded).
#define SEG_BYTES 1024
#define SEG_WORDS (SEG_BYTES / 16 + 2)
// Types whose blocks are not contiguous bytes on the device (q6p_at, q8p_at): the matmul
// decodes them from global memory instead of staging byte ranges.
#ifdef LOCKSTEP_Q80_GGUF
#define PLANAR_TY(TY) ((TY) == T_Q6_K)
#else
#define PLANAR_TY(TY) ((TY) == T_Q6_K || (TY) == T_Q8_0)
#endif

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
    unsigned long long s;
    asm("cvta.to.shared.u64 %0, %1;" : "=l"(s) : "l"(smem));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"((unsigned)s), "l"(gmem));
}
// 8 bytes (an f16 cache's four values), through L1 (`.cg` takes 16-byte copies only).
__device__ __forceinline__ void cp_async8(void* smem, const void* gmem) {
    unsigned long long s;
    asm("cvta.to.shared.u64 %0, %1;" : "=l"(s) : "l"(smem));
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8;" ::"r"((unsigned)s), "l"(gmem));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;"); }
template <int N>
// The "memory" clobber: the compiler must not move a shared memory read of the copied data
// above the wait (the callers' barriers after it order it today; this does not rely on them).
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory"); }

// y[i, r] = dot(x[i, :], W[r, :]) for x [n, k] f32 and W [m, k] quantized.
// Eight lanes per weight row: lane l holds the reference's partial sum l (elements 8c + l),
// so each output is bitwise the reference's dot. A warp covers 4 weight rows. Each row is
// staged into shared memory a segment at a time with 16-byte loads (all in flight at once),
// then decoded from there; each weight element is decoded once per tile of TILE activation
// rows. The weight buffer is padded so the last aligned load never leaves it.
// PAIR: the fused gated feed-forward input. A warp then covers 2 rows of W (gate) and the same
// 2 rows of W2 (up); it writes gate to y, up to y2 and act(gate) * up (f64, as act_mul) to y3.
template <int TY, int TILE, int UNROLL, bool PAIR>
__device__ __forceinline__ void matmul_body(const u8* __restrict__ W, const float* __restrict__ x,
                                            float* __restrict__ y, int n, int k, int m,
                                            const u8* __restrict__ W2, float* __restrict__ y2,
                                            float* __restrict__ y3, int act, double cgelu) {
    constexpr int BS = block_elems(TY), TS = block_bytes(TY);
    constexpr int SEG_BLOCKS = BS == 1 ? SEG_BYTES / TS : (SEG_BYTES / TS > 0 ? SEG_BYTES / TS : 1);
    extern __shared__ uint4 smem[];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int l = lane & 7, sel = lane >> 3;
    constexpr int ROWS = PAIR ? 2 : 4;
    int rbase = (blockIdx.x * (blockDim.x >> 5) + warp) * ROWS;
    size_t row_bytes = (size_t)(k / BS) * TS;
    // Weight row of staging slot q (0..3) and whether it exists.
    auto row_index = [&](int q) { return PAIR ? rbase + (q & 1) : rbase + q; };
    auto row_ptr = [&](int q) {
        const u8* base = (PAIR && q >= 2) ? W2 : W;
        return base + (size_t)row_index(q) * row_bytes;
    };
    int r = row_index(sel);
    bool live = r < m;
    const u8* wrow = live ? row_ptr(sel) : W;
    uint4* wsm = smem + (size_t)warp * 8 * SEG_WORDS;
    int chunks = k >> 3;
    int nblocks = k / BS;
    // Copies segment `sb` of the warp's 4 rows into buffer `buf` (asynchronously). Q6_K and
    // planar Q8_0 are decoded from global memory (below), so nothing is copied: the group is
    // committed empty and the waits keep their count.
    auto stage = [&](int sb, int buf) {
        if constexpr (PLANAR_TY(TY)) {
            cp_async_commit();
            return;
        }
        int nb = min(SEG_BLOCKS, nblocks - sb);
#pragma unroll
        for (int q = 0; q < 4; q++) {
            if (row_index(q) >= m) continue;
            size_t src = (size_t)(row_ptr(q) + (size_t)sb * TS);
            size_t a = src & ~(size_t)15, e = (src + (size_t)nb * TS + 15) & ~(size_t)15;
            int words = (int)((e - a) >> 4);
            for (int i = lane; i < words; i += 32)
                cp_async16(wsm + (buf * 4 + q) * SEG_WORDS + i, (const uint4*)a + i);
        }
        cp_async_commit();
    };
    for (int t0 = blockIdx.y * TILE; t0 < n; t0 += gridDim.y * TILE) {
        float acc[TILE];
#pragma unroll
        for (int i = 0; i < TILE; i++) acc[i] = 0.f;
        __syncwarp();
        stage(0, 0);
        int it = 0;
        for (int sb = 0; sb < nblocks; sb += SEG_BLOCKS, it++) {
            int nb = min(SEG_BLOCKS, nblocks - sb);
            int buf = it & 1;
            // Every lane is done with the buffer the next stage overwrites (read last round).
            __syncwarp();
            if (sb + SEG_BLOCKS < nblocks) {
                stage(sb + SEG_BLOCKS, buf ^ 1);
                cp_async_wait<1>();
            } else {
                cp_async_wait<0>();
            }
            __syncwarp();
            const u8* seg = (const u8*)(wsm + (buf * 4 + sel) * SEG_WORDS) + ((size_t)(wrow + (size_t)sb * TS) & 15);
            int e0 = sb * BS;
            if constexpr (BS >= 32) {
                // Whole blocks (k is a multiple of BS, so of 8: no tail).
                constexpr int EPL = BS / 8;
                for (int bi = 0; bi < nb; bi++) {
                    float w[EPL];
                    // The planes locate a block from its global address (q6p_at, q8p_at):
                    // decoded from the row in global memory, not the staged copy.
                    if (live) decode_lane<TY>(PLANAR_TY(TY) ? wrow + (size_t)(sb + bi) * TS : seg + bi * TS, l, w);
                    else {
#pragma unroll
                        for (int cc = 0; cc < EPL; cc++) w[cc] = 0.f;
                    }
                    int eb = e0 + bi * BS + l;
#pragma unroll
                    for (int cc = 0; cc < EPL; cc++) {
#pragma unroll
                        for (int i = 0; i < TILE; i++) {
                            int xi = min(t0 + i, n - 1);
                            acc[i] += x[(size_t)xi * k + eb + 8 * cc] * w[cc];
                        }
                    }
                }
                continue;
            }
            int c_end = min((sb + nb) * BS, chunks * 8) >> 3;
            int c = e0 >> 3;
            for (; c + UNROLL <= c_end; c += UNROLL) {
                float w[UNROLL];
#pragma unroll
                for (int u = 0; u < UNROLL; u++) w[u] = live ? deq_t<TY>(seg, 8 * (c + u) + l - e0) : 0.f;
#pragma unroll
                for (int u = 0; u < UNROLL; u++) {
#pragma unroll
                    for (int i = 0; i < TILE; i++) {
                        int xi = min(t0 + i, n - 1);
                        acc[i] += x[(size_t)xi * k + 8 * (c + u) + l] * w[u];
                    }
                }
            }
            for (; c < c_end; c++) {
                float w = live ? deq_t<TY>(seg, 8 * c + l - e0) : 0.f;
#pragma unroll
                for (int i = 0; i < TILE; i++) {
                    int xi = min(t0 + i, n - 1);
                    acc[i] += x[(size_t)xi * k + 8 * c + l] * w;
                }
            }
        }
#pragma unroll
        for (int i = 0; i < TILE; i++) {
            float p[8];
#pragma unroll
            for (int s = 0; s < 8; s++) p[s] = __shfl_sync(0xffffffffu, acc[i], (sel << 3) + s);
            bool out = l == 0 && live && t0 + i < n;
            int xi = t0 + i;
            float v = 0.f;
            if (out) {
                float tail = 0.f;
                for (int j = chunks * 8; j < k; j++) tail += x[(size_t)xi * k + j] * deq_t<TY>(wrow, j);
                v = reduce8(p, tail);
            }
            if constexpr (PAIR) {
                // Lanes 0 and 8 hold gate rows, lanes 16 and 24 the same up rows.
                float u = __shfl_down_sync(0xffffffffu, v, 16);
                if (out && sel < 2) {
                    y[(size_t)xi * m + r] = v;
                    y2[(size_t)xi * m + r] = u;
                    y3[(size_t)xi * m + r] = act_apply(v, u, act, cgelu);
                }
            } else {
                if (out) y[(size_t)xi * m + r] = v;
            }
        }
    }
}

// Per weight type: matmul_t1_<id> (one activation row, decode), matmul_t8_<id> (tiles of 8
// rows, prefill), and the fused gate/up/activation gate_up_t1_<id>, gate_up_t8_<id>.
#define MATMUL_FOR(TY)                                                                          \
    extern "C" __global__ void __launch_bounds__(128)                                           \
        matmul_t1_##TY(const u8* W, const float* x, float* y, int n, int k, int m) { GRID_ENTER();            \
        matmul_body<TY, 1, 4, false>(W, x, y, n, k, m, nullptr, nullptr, nullptr, 0, 0.0);      \
    }                                                                                           \
    extern "C" __global__ void __launch_bounds__(128)                                           \
        matmul_t8_##TY(const u8* W, const float* x, float* y, int n, int k, int m) { GRID_ENTER();            \
        matmul_body<TY, 8, 2, false>(W, x, y, n, k, m, nullptr, nullptr, nullptr, 0, 0.0);      \
    }                                                                                           \
    extern "C" __global__ void __launch_bounds__(128)                                           \
        gate_up_t1_##TY(const u8* Wg, const u8* Wu, const float* x, float* g, float* u,         \
                        float* a, int n, int k, int m, int act, double c) { GRID_ENTER();                     \
        matmul_body<TY, 1, 4, true>(Wg, x, g, n, k, m, Wu, u, a, act, c);                       \
    }                                                                                           \
    extern "C" __global__ void __launch_bounds__(128)                                           \
        gate_up_t8_##TY(const u8* Wg, const u8* Wu, const float* x, float* g, float* u,         \
                        float* a, int n, int k, int m, int act, double c) { GRID_ENTER();                     \
        matmul_body<TY, 8, 2, true>(Wg, x, g, n, k, m, Wu, u, a, act, c);                       \
    }
MATMUL_FOR(0)
MATMUL_FOR(1)
MATMUL_FOR(2)
MATMUL_FOR(3)
MATMUL_FOR(6)
MATMUL_FOR(7)
MATMUL_FOR(8)
MATMUL_FOR(10)
MATMUL_FOR(11)
MATMUL_FOR(12)
MATMUL_FOR(13)
MATMUL_FOR(14)
MATMUL_FOR(20)
MATMUL_FOR(23)
MATMUL_FOR(30)

// Rows `ids` of a quantized table [vocab, cols], dequantized.
extern "C" __global__ void embed_rows(const u8* table, const u32* ids, float* out, int cols,
                                      int ty, int bs, int ts) { GRID_ENTER();
    QType t{ty, bs, ts};
    size_t row_bytes = (size_t)(cols / bs) * ts;
    const u8* row = table + (size_t)ids[blockIdx.x] * row_bytes;
    for (int j = threadIdx.x; j < cols; j += blockDim.x)
        out[(size_t)blockIdx.x * cols + j] = deq_at(t, row, j);
}

// THE GATE (graph_exec::gate_rewrite): a replayed one-token step's embedding takes its token
// from a word in mapped page-locked memory instead of the staged table, so the step's graph
// can be launched before the host knows the token (while the step before it runs) and
// released by one host store. `gate` holds (ticket << 32) | token; this launch's ticket is
// one more than the last (`count`, in device memory: the graph's launches run in stream
// order). Thread 0 polls until the gate shows this ticket, or GATE_TIMEOUT_CYCLES have passed (a
// host that never came: the step runs on with token 0, its K/V land in the slot the host
// guessed, which the sequence owns and writes before it reads, and it sets `skip` so the LM
// head leaves the host's logits alone). `ack` tells the host which token was used: a
// launch it released that timed out is run again. A token past the table (the host's cancel)
// is treated as a timeout. One block, one token: `ids` is not read.
// About 20 ms (40M cycles of the SM's clock, 1.98 GHz at most on the H200; clock64, not the
// global timer, which only the timeline build reads). A define may shorten it
// (LOCKSTEP_CUDA_DEFINES=GATE_TIMEOUT_CYCLES=2000: nearly every launch ahead times out, so a
// check runs the host's run-again path).
#ifndef GATE_TIMEOUT_CYCLES
#define GATE_TIMEOUT_CYCLES 40000000ll
#endif
extern "C" __global__ void embed_rows_gated(const u8* table, const u32* ids, float* out, int cols,
                                            int ty, int bs, int ts,
                                            const unsigned long long* gate, unsigned* count,
                                            unsigned long long* ack, unsigned* skip, int vocab) {
    GRID_ENTER();
    __shared__ unsigned tok;
    if (threadIdx.x == 0) {
        unsigned ticket = *count + 1u;
        *count = ticket;
        unsigned long long v = 0;
        long long t0 = clock64();
        bool open = false;
        for (;;) {
            asm volatile("ld.relaxed.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(gate) : "memory");
            if ((unsigned)(v >> 32) == ticket) {
                open = true;
                break;
            }
            if (clock64() - t0 > GATE_TIMEOUT_CYCLES) break;
        }
        unsigned token = (unsigned)v;
        bool used = open && token < (unsigned)vocab;
        tok = used ? token : 0u;
        *skip = used ? 0u : 1u;
        unsigned long long a = ((unsigned long long)ticket << 32) | (used ? token : 0xffffffffu);
        asm volatile("st.relaxed.sys.global.u64 [%0], %1;" ::"l"(ack), "l"(a) : "memory");
    }
    __syncthreads();
    QType t{ty, bs, ts};
    size_t row_bytes = (size_t)(cols / bs) * ts;
    const u8* row = table + (size_t)tok * row_bytes;
    for (int j = threadIdx.x; j < cols; j += blockDim.x) out[j] = deq_at(t, row, j);
}

extern "C" __global__ void add_bias(const float* x, const float* bias, float* out, int rows,
                                    int cols) { GRID_ENTER();
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < (size_t)rows * cols) out[i] = x[i] + bias[i % cols];
}

extern "C" __global__ void add(const float* a, const float* b, float* out, int n) { GRID_ENTER();
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a[i] + b[i];
#ifdef FAULT_ADD_OVERRUN
    if (i == n - 1) out[n] = out[i];  // seeded fault: one value past the end of the output
#endif
}

extern "C" __global__ void scale(const float* x, float s, float* out, int n) { GRID_ENTER();
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = x[i] * s;
}

// act: 0 = SiLU, 1 = GELU (tanh); in f64 like the reference. `c` = sqrt(2/pi) as the host
// computed it.
extern "C" __global__ void act_mul(const float* g, const float* u, float* out, int n, int act,
                                   double c) { GRID_ENTER();
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    out[i] = act_apply(g[i], u[i], act, c);
}

// RMS norm of groups of `g` values, one block per group, blockDim.x = plan::norm_threads(g) (a
// function of g alone, so a group's result never depends on how many groups run): thread t
// sums the squares (norm_acc, below) of values t, t + blockDim.x, ... in that order, the warps'
// sums meet in a fixed butterfly, then the warps' in a second; scale = norm_scale(ss, g, eps);
// out = norm_apply(x, scale, w). Every norm kernel below runs this same code, so fused and
// separate norms are bitwise equal.
//
// The norms' accumulator: f64 (the exact kernels, as the reference), or f32 where the fast
// kernels are built (LOCKSTEP_FAST_F32: the sum of squares, its reduction and the scale
// (rsqrtf, 2 ulp) in f32, within verify's norm_bound; a decode step's norms sit on its critical
// path: in f32 alone they gave SmolLM2 +2.6 to +5.1% and Gemma-3 +4.0 to +7.9% tg128 on the
// H200, BENCHMARKS.md session 26).
//
// The fast norms' mean ss / g is IEEE's f32 quotient, bit for bit, formed in f64 as ss * (1 / g)
// (no f32 division's operand check and branch on the critical path, session 43): for integer
// 1 <= g <= 2^24 an f32 quotient is never a rounding midpoint, and lies at least 2^-25 / g of
// itself from one, while the two f64 roundings move it by less than 2^-52 (swept over every f32
// ss for several g, bench/q8_exhaustive/run_cpu.sh). LOCKSTEP_NORM_IEEE_DIV (diagnostic) divides.
#ifdef LOCKSTEP_FAST_F32
typedef float norm_acc;
__device__ __forceinline__ float norm_mean(float ss, int g) {
#ifndef LOCKSTEP_NORM_IEEE_DIV
    return (float)((double)ss * (1.0 / (double)g));
#else
    return ss / (float)g;
#endif
}
__device__ __forceinline__ float norm_scale(float ss, int g, float eps) {
    return rsqrtf(norm_mean(ss, g) + eps);
}
__device__ __forceinline__ float norm_apply(float v, float scale, float w) { return (v * scale) * w; }
#else
typedef double norm_acc;
__device__ __forceinline__ double norm_scale(double ss, int g, float eps) {
    return 1.0 / sqrt(ss / (double)g + (double)eps);
}
__device__ __forceinline__ float norm_apply(float v, double scale, float w) {
    return (float)((double)v * scale) * w;
}
#endif

// `nw` is the norm's warps: blockDim.x / 32, or fewer in a fused kernel whose larger block runs
// a norm as the first nw warps of a block of plan::norm_threads(g) would (the other warps
// contribute nothing, so the sum is bitwise that block's).
// `slot` 0 may follow an earlier call in the kernel (the barrier before its stores waits for
// that call's reads); slots 1 and 2 are the norm-fused prologue's two reductions, each the
// slot's only use in its kernel, so they skip that barrier (session 43; the diagnostic
// LOCKSTEP_NORM_LEAD_SYNC keeps it).
__device__ __forceinline__ norm_acc block_sum_norm(norm_acc v, int nw, int slot = 0) {
    __shared__ norm_acc warp_part[3][32];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = v + __shfl_xor_sync(0xffffffffu, v, o);
    int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
#ifndef LOCKSTEP_NORM_LEAD_SYNC
    if (slot == 0)
#endif
        __syncthreads();  // warp_part may still be read by an earlier call
    if (lane == 0) warp_part[slot][w] = v;
    __syncthreads();
    norm_acc t = lane < nw ? warp_part[slot][lane] : (norm_acc)0;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) t = t + __shfl_xor_sync(0xffffffffu, t, o);
    return t;
}

// Values per thread a norm holds in registers: every group up to NORM_MAXV * blockDim.x values
// (plan::norm_threads gives at most 4 a thread up to 4096 values, 8 up to 8192).
#define NORM_MAXV 8

// A norm's weights, w[t + i * bd] for thread t (0 past g, and, FUSED, for threads from bd on).
template <int NV, bool FUSED = false>
__device__ __forceinline__ void norm_weights(const float* __restrict__ w, int g, int bd, float* wv) {
    int t = threadIdx.x;
    bool on = !FUSED || t < bd;
#pragma unroll
    for (int i = 0; i < NV; i++) wv[i] = on && t + i * bd < g ? w[t + i * bd] : 0.0f;
}

template <int NV, bool FUSED = false>
__device__ __forceinline__ void norm_regs_w(const float* v, const float* wv,
                                            float* __restrict__ out, int g, float eps,
                                            signed char* __restrict__ q, Q8Blk* __restrict__ ds,
                                            size_t blk0, float* r, int bd,
                                            signed char* __restrict__ q2, Q8Blk* __restrict__ ds2,
                                            int part = 0, int parts = 1, int red_tag = 2,
                                            int slot = 0);

// The norm of one group whose values thread t holds in v[i] = x[t + i * blockDim.x] (i < NORM_MAXV,
// j < g): the f64 sum of squares in i order, the block's fixed reduction, then out[j] =
// (float)(x * scale) * w[j], also returned in r[i]. With q != null (fast numerics, a whole row of
// a multiple of 32 values) each warp quantizes the 32-value blocks it wrote, from the very
// registers it stored, as quantize_q8_32 would from `out`.
//
// `bd` is the norm's block size (blockDim.x, or plan::norm_threads(g) in a larger fused block:
// threads from bd on hold nothing and write nothing: norm_regs_w<NV, true>, where also `out`
// may be null, a fused kernel's blocks but one, and q2 / ds2 take a copy of the quantization,
// see q8_block). NV values a thread at most (NORM_MAXV; fewer where the host guarantees it, to
// spare registers).
template <int NV = NORM_MAXV>
__device__ __forceinline__ void norm_regs(const float* v, const float* __restrict__ w,
                                          float* __restrict__ out, int g, float eps,
                                          signed char* __restrict__ q, Q8Blk* __restrict__ ds,
                                          size_t blk0, float* r, int bd, int part = 0,
                                          int parts = 1) {
    float wv[NV];
    norm_weights<NV>(w, g, bd, wv);
    norm_regs_w<NV>(v, wv, out, g, eps, q, ds, blk0, r, bd, nullptr, nullptr, part, parts);
}

// norm_regs on weights already in registers (norm_weights: a fused kernel loads them before its
// grid wait, as they are written only at upload). Only FUSED callers (norm_row_shared) run a
// norm in part of a larger block, leave `out` null or take a copy of the quantization; the
// others compile without those paths.
template <int NV, bool FUSED>
__device__ __forceinline__ void norm_regs_w(const float* v, const float* wv,
                                            float* __restrict__ out, int g, float eps,
                                            signed char* __restrict__ q, Q8Blk* __restrict__ ds,
                                            size_t blk0, float* r, int bd,
                                            signed char* __restrict__ q2, Q8Blk* __restrict__ ds2,
                                            int part, int parts, int red_tag, int slot) {
    int t = threadIdx.x;
    bool on = !FUSED || t < bd;
    norm_acc ss = 0;
#pragma unroll
    for (int i = 0; i < NV; i++)
        if (on && t + i * bd < g) ss += (norm_acc)v[i] * (norm_acc)v[i];
    ss = block_sum_norm(ss, bd >> 5, slot);
    norm_acc scale = norm_scale(ss, g, eps);
    if (scale != scale) TL_MARK(0);  // never: keeps the mark below after the reduction
    TL_MARK(red_tag);
    // With parts > 1 (residual_norm's blocks of one row, grid.y = parts) this block writes only
    // its part's values (i % parts == part); every value is still computed (r), the same way.
#pragma unroll
    for (int i = 0; i < NV; i++) {
        int j = t + i * bd;
        r[i] = 0.0f;
        // Whole warps are on or off (bd is a multiple of 32).
        if (!on) break;
        bool mine = i % parts == part;
        if (q != nullptr) {
            // Whole warps step together (bd and g are multiples of 32).
            if (i * bd + (t & ~31) >= g) break;
            float o = norm_apply(v[i], scale, wv[i]);
            if (mine && (!FUSED || out != nullptr)) out[j] = o;
            r[i] = o;
            if (mine)
                q8_block(o, q, ds, blk0 + (size_t)(j >> 5), FUSED ? q2 : nullptr,
                         FUSED ? ds2 : nullptr);
            if (FUSED && o != o) TL_MARK(0);
            if (FUSED) TL_MARK(10 + i);
        } else if (j < g) {
            float o = norm_apply(v[i], scale, wv[i]);
            if (mine && (!FUSED || out != nullptr)) out[j] = o;
            r[i] = o;
        }
    }
}

// The norm of one group at `x` (g values) into `out` (see norm_regs); a group too long for the
// registers is read twice, with the same arithmetic in the same order.
__device__ __forceinline__ void norm_group(const float* __restrict__ x, const float* __restrict__ w,
                                           float* __restrict__ out, int g, float eps,
                                           signed char* __restrict__ q, Q8Blk* __restrict__ ds,
                                           size_t blk0) {
    int t = threadIdx.x, bd = blockDim.x;
    if (g <= NORM_MAXV * bd) {
        float v[NORM_MAXV], r[NORM_MAXV];
#pragma unroll
        for (int i = 0; i < NORM_MAXV; i++) v[i] = t + i * bd < g ? x[t + i * bd] : 0.0f;
        norm_regs(v, w, out, g, eps, q, ds, blk0, r, bd);
        return;
    }
    norm_acc ss = 0;
    for (int j = t; j < g; j += bd) ss += (norm_acc)x[j] * (norm_acc)x[j];
    ss = block_sum_norm(ss, bd >> 5);
    norm_acc scale = norm_scale(ss, g, eps);
    for (int j0 = 0; j0 < g; j0 += bd) {
        int j = j0 + t;
        if (q != nullptr) {
            if (j0 + (t & ~31) >= g) break;
            float o = norm_apply(x[j], scale, w[j]);
            out[j] = o;
            q8_block(o, q, ds, blk0 + (size_t)(j >> 5));
        } else if (j < g) {
            out[j] = norm_apply(x[j], scale, w[j]);
        }
    }
}

// Blocks of up to 1024 threads (plan::norm_threads): the bound keeps the registers within the
// register file at that size (tests/nvrtc_compiles.rs checks every kernel's count).
extern "C" __global__ void __launch_bounds__(1024) rms_norm(const float* x, const float* w, float* out, int g, float eps,
                                    signed char* q, Q8Blk* ds) { GRID_ENTER();
    size_t o = (size_t)blockIdx.x * g;
    norm_group(x + o, w, out + o, g, eps, q, ds, o >> 5);
}

// The end of a block, one block of threads per row (g = the row length, at most NORM_MAXV *
// blockDim.x: the host runs longer rows as separate ops): b's row post-normed into bn when pw
// is given, sum = a + (that or b) (the `add` kernel's one f32 add), and the sum's row normed
// into out when w is given. Every input is loaded once, up front; the stages pass their values
// in registers. With grid.y = parts > 1 (plan::residual_parts) a row has that many blocks:
// each computes everything, as the one block would, and writes the values i % parts == part
// of its threads: the per-value work (the quantization's shuffles above all) spread over
// parts SMs instead of one.
extern "C" __global__ void __launch_bounds__(1024) residual_norm(const float* a, const float* b, const float* pw, float* bn,
                                         float* sum, const float* w, float* out, int g, float eps,
                                         signed char* q, Q8Blk* ds) {
    size_t o = (size_t)blockIdx.x * g;
    int t = threadIdx.x, bd = blockDim.x, part = blockIdx.y, parts = gridDim.y;
    float av[NORM_MAXV], bv[NORM_MAXV], r[NORM_MAXV];
#ifndef LOCKSTEP_RN_WEIGHTS_LATE
    // The norms' weights before the grid wait (written only at upload), as the fused kernels
    // load theirs: the output norm's weights were read after the post norm's reductions, an
    // L2 round trip on the step's path between the last layer and the LM head.
    float pwv[NORM_MAXV], wv[NORM_MAXV];
    if (pw != nullptr) norm_weights<NORM_MAXV>(pw, g, bd, pwv);
    if (w != nullptr) norm_weights<NORM_MAXV>(w, g, bd, wv);
#endif
    NORM_ENTER();
#pragma unroll
    for (int i = 0; i < NORM_MAXV; i++) {
        bool in = t + i * bd < g;
        av[i] = in ? a[o + t + i * bd] : 0.0f;
        bv[i] = in ? b[o + t + i * bd] : 0.0f;
    }
    if (pw != nullptr) {
#ifndef LOCKSTEP_RN_WEIGHTS_LATE
        norm_regs_w<NORM_MAXV>(bv, pwv, bn + o, g, eps, nullptr, nullptr, 0, r, bd, nullptr,
                               nullptr, part, parts);
#else
        norm_regs(bv, pw, bn + o, g, eps, nullptr, nullptr, 0, r, bd, part, parts);
#endif
#pragma unroll
        for (int i = 0; i < NORM_MAXV; i++) bv[i] = r[i];
    }
#pragma unroll
    for (int i = 0; i < NORM_MAXV; i++) {
        av[i] = av[i] + bv[i];
        if (t + i * bd < g && i % parts == part) sum[o + t + i * bd] = av[i];
    }
    NORM_LAUNCH_AFTER_LOADS();
    TL_MARK(1);
#ifndef LOCKSTEP_RN_WEIGHTS_LATE
    if (w != nullptr)
        norm_regs_w<NORM_MAXV>(av, wv, out + o, g, eps, q, ds, o >> 5, r, bd, nullptr, nullptr,
                               part, parts);
#else
    if (w != nullptr) norm_regs(av, w, out + o, g, eps, q, ds, o >> 5, r, bd, part, parts);
#endif
    TL_MARK(9);
}

// Element d of one head rotated with its pair by (cos, sin) = cs[2i], cs[2i + 1] (f64, the
// host's table for the row's position, pair i), or passed through (d >= n_rot). style 0 =
// adjacent pairs (2i, 2i+1), 1 = halves (i, i + half). `rope` and `rope_store` both run this.
__device__ __forceinline__ float rope_elem(const float* head, const double* cs, int d, int half,
                                           int style) {
    int n_rot = 2 * half;
    if (d >= n_rot) return head[d];
    int i, a, b;
    bool first;
    if (style == 0) {
        i = d >> 1; a = 2 * i; b = a + 1; first = (d & 1) == 0;
    } else {
        i = d < half ? d : d - half; a = i; b = i + half; first = d < half;
    }
    double c = cs[2 * i], s = cs[2 * i + 1];
    double x0 = head[a], x1 = head[b];
    return first ? (float)(x0 * c - x1 * s) : (float)(x0 * s + x1 * c);
}

// out = rope(x): one thread per output element.
extern "C" __global__ void rope(const float* x, float* out, const double* cs, int rows, int cols,
                                int head_dim, int half, int style) { GRID_ENTER();
    size_t idx = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (idx >= (size_t)rows * cols) return;
    int r = idx / cols, col = idx % cols;
    int d = col % head_dim;
    out[idx] = rope_elem(x + idx - d, cs + (size_t)r * half * 2, d, half, style);
}

// The longest head rope_store takes (the host runs longer ones as separate ops).
// THE KV CACHE'S VALUES: f32 by default; f16 in a fast build with LOCKSTEP_KV_F16
// (`LOCKSTEP_CUDA_KV=f16`, as llama.cpp and the cpu backend keep them by default: half the
// memory, half the bytes a decode step's attention reads; session 30 measured it slower at
// tg128 on three of four shapes, so it is not the default).
// Writers round once (kv_of, round to nearest even); every reader converts on load (kv_f), so
// the attention's K and V are exactly the cache's values, which the k_read / v_read taps
// (kv_gather) copy out. kv4_t is four consecutive values as one load (8 or 16 bytes).
#ifdef LOCKSTEP_KV_F16
typedef u16 kv_t;
typedef uint2 kv4_t;
__device__ __forceinline__ float kv_f(kv_t h) { return h2f(h); }
__device__ __forceinline__ kv_t kv_of(float f) { return f2h(f); }
__device__ __forceinline__ float4 kv_f4(kv4_t u) {
    return float4{h2f((u16)(u.x & 0xffffu)), h2f((u16)(u.x >> 16)), h2f((u16)(u.y & 0xffffu)),
                  h2f((u16)(u.y >> 16))};
}
__device__ __forceinline__ kv4_t kv_of4(float4 f) {
    return kv4_t{(unsigned)f2h(f.x) | ((unsigned)f2h(f.y) << 16),
                 (unsigned)f2h(f.z) | ((unsigned)f2h(f.w) << 16)};
}
#else
typedef float kv_t;
typedef float4 kv4_t;
__device__ __forceinline__ float kv_f(kv_t v) { return v; }
__device__ __forceinline__ kv_t kv_of(float f) { return f; }
__device__ __forceinline__ float4 kv_f4(kv4_t v) { return v; }
__device__ __forceinline__ kv4_t kv_of4(float4 f) { return f; }
#endif
// Four consecutive values at p (a multiple of 4 elements from the cache's start).
__device__ __forceinline__ kv4_t kv_ld4(const kv_t* p) { return *(const kv4_t*)p; }
// The same through L2 (ld.global.cg), for what a kernel reads before its grid wait.
__device__ __forceinline__ kv4_t kv_ldcg4(const kv_t* p) { return __ldcg((const kv4_t*)p); }
// Four cache values copied to shared memory asynchronously (cp.async; the split-key attention's
// chunks).
__device__ __forceinline__ void kv_cp_async4(kv_t* smem, const kv_t* gmem) {
    if (sizeof(kv4_t) == 16)
        cp_async16(smem, gmem);
    else
        cp_async8(smem, gmem);
}
// Four values a kernel holds in registers between load and use: as loaded (RAW: half the
// registers of an f16 cache's values, converted at each use) or converted once on arrival.
template <bool RAW>
struct KvHeld {
    kv4_t r;
    __device__ __forceinline__ void set(kv4_t v) { r = v; }
    __device__ __forceinline__ float4 get() const { return kv_f4(r); }
};
template <>
struct KvHeld<false> {
    float4 f;
    __device__ __forceinline__ void set(kv4_t v) { f = kv_f4(v); }
    __device__ __forceinline__ float4 get() const { return f; }
};

#define ROPE_MAX_HEAD 512

// Per (row, head slot): slots [0, n_heads) are q heads, then n_kv_heads k heads, then
// n_kv_heads v heads. A q or k head is normed first when its weight is given (norm_group,
// written to qn / kn, which the rotation then reads), rotated (rope_elem) into qr / kr, and a
// k head's rotated values are also stored to the row's cache slot, from the same registers; a v
// head is copied to the cache. blockDim.x = plan::norm_threads(head_dim), as the separate
// rms_norm of a head, so every value is bitwise the separate ops'.
extern "C" __global__ void rope_store(const float* q, const float* k, const float* v,
                                      const float* qw, const float* kw, float eps, float* qn,
                                      float* kn, float* qr, float* kr, kv_t* kc, kv_t* vc,
                                      const u32* slots, size_t base, const double* cs, int n_heads,
                                      int n_kv_heads, int head_dim, int half, int style,
                                      int n_rows) {
    // Before the grid wait (session 48): the row's cache slot and (cos, sin) pairs (tables the
    // host stages before the step's kernels run) and the head's norm weights (written only at
    // upload), so that after the wait only q, k and v cross L2: with the pairs read after the
    // norm, a Gemma-3 layer's rope_store took one more round trip (2.6 us a block).
    TL_ENTRY();
    GRID_LAUNCH();
    int row = blockIdx.x, hs = blockIdx.y;
    int q_dim = n_heads * head_dim, kv_dim = n_kv_heads * head_dim;
    bool store = true;
#ifdef FAULT_KV_SKIP_PREFILL
    if (n_rows > 1) store = false;  // seeded fault: a prompt's K/V never reach the cache
#endif
    size_t dst = (base + slots[row]) * kv_dim;
    if (hs >= n_heads + n_kv_heads) {
        GRID_WAIT();
        int h = hs - n_heads - n_kv_heads;
        const float* src = v + (size_t)row * kv_dim + (size_t)h * head_dim;
        if (store)
            for (int d = threadIdx.x; d < head_dim; d += blockDim.x)
                vc[dst + (size_t)h * head_dim + d] = kv_of(__ldcg(src + d));
        return;
    }
    bool isq = hs < n_heads;
    int h = isq ? hs : hs - n_heads;
    size_t o = (size_t)row * (isq ? q_dim : kv_dim) + (size_t)h * head_dim;
    const float* src = (isq ? q : k) + o;
    const float* nw = isq ? qw : kw;
    // The head (normed, when it has a norm) in shared memory: the rotation reads each value's
    // pair, which another thread loaded or normed.
    __shared__ float head[ROPE_MAX_HEAD];
    __shared__ double s_cs[ROPE_MAX_HEAD];
    int t = threadIdx.x, bd = blockDim.x;
    const double* c = cs + (size_t)row * half * 2;
    // Not unrolled: the grid-wait audit counts the loads before the wait in the PTX and the
    // SASS (as attention_decode_rope_early's).
#pragma unroll 1
    for (int x = t; x < 2 * half; x += bd) s_cs[x] = c[x];
    float wv[NORM_MAXV];
    if (nw != nullptr) norm_weights<NORM_MAXV>(nw, head_dim, bd, wv);
    GRID_WAIT();
    float hv[NORM_MAXV], r[NORM_MAXV];
    // Through L2 (ld.global.cg): what the kernel before wrote, never hoisted above the wait.
#pragma unroll
    for (int i = 0; i < NORM_MAXV; i++) hv[i] = t + i * bd < head_dim ? __ldcg(src + t + i * bd) : 0.0f;
    if (nw != nullptr) {
        norm_regs_w<NORM_MAXV>(hv, wv, (isq ? qn : kn) + o, head_dim, eps, nullptr, nullptr, 0, r, bd,
                               nullptr, nullptr);
#pragma unroll
        for (int i = 0; i < NORM_MAXV; i++) hv[i] = r[i];
    }
#pragma unroll
    for (int i = 0; i < NORM_MAXV; i++)
        if (t + i * bd < head_dim) head[t + i * bd] = hv[i];
    __syncthreads();  // the head and the pairs
    float* out = (isq ? qr : kr) + o;
    for (int d = t; d < head_dim; d += bd) {
        float rv = rope_elem(head, s_cs, d, half, style);
        out[d] = rv;
        if (!isq && store) kc[dst + (size_t)h * head_dim + d] = kv_of(rv);
    }
    TL_MARK(9);
}

extern "C" __global__ void gather_rows(const float* x, const u32* rows, float* out, int cols) { GRID_ENTER();
    const float* src = x + (size_t)rows[blockIdx.x] * cols;
    for (int j = threadIdx.x; j < cols; j += blockDim.x) out[(size_t)blockIdx.x * cols + j] = src[j];
}

// Row i of k/v to slot slots[i] of the layer whose cache starts at `base` rows.
extern "C" __global__ void kv_store(const float* k, const float* v, kv_t* kc, kv_t* vc,
                                    const u32* slots, size_t base, int kv_dim) { GRID_ENTER();
#ifdef FAULT_KV_SKIP_PREFILL
    if (gridDim.x > 1) return;  // seeded fault: a prompt's K/V never reach the cache
#endif
    size_t dst = (base + slots[blockIdx.x]) * kv_dim;
    for (int j = threadIdx.x; j < kv_dim; j += blockDim.x) {
        kc[dst + j] = kv_of(k[(size_t)blockIdx.x * kv_dim + j]);
        vc[dst + j] = kv_of(v[(size_t)blockIdx.x * kv_dim + j]);
    }
}

// Cache rows at `slots` of one layer, copied out (the k_read / v_read taps).
extern "C" __global__ void kv_gather(const kv_t* c, const u32* slots, float* out, size_t base,
                                     int kv_dim) { GRID_ENTER();
    const kv_t* src = c + (base + slots[blockIdx.x]) * kv_dim;
    for (int j = threadIdx.x; j < kv_dim; j += blockDim.x) out[(size_t)blockIdx.x * kv_dim + j] = kv_f(src[j]);
}

// Per query row: [slots offset, n_kv, position, score offset, mask offset or -1].
#define ROW_INFO 5

// The seeded attention faults that every attention kernel carries, planted here once.
// The layer's first cache row; kv-view-offset ignores it (every layer reads layer 0).
__device__ __forceinline__ size_t att_layer_base(size_t base) {
#ifdef FAULT_KV_VIEW_OFFSET
    return 0;
#else
    return base;
#endif
}
// A short decode row's entry of the row table (ROW_INFO), read through L2 (the short decode
// kernels read it before their grid wait; the table is staged before the step's kernels run),
// and its visible keys [lo, hi], n of them (at most ATT_D_MAX_KEYS: the host runs longer rows
// elsewhere). attention_decode_body and attention_decode_cl_body start from it.
struct AttDecodeRow {
    int soff, n_kv, pos, moff, lo, hi, n;
    size_t soff_sc;
};
__device__ __forceinline__ AttDecodeRow att_decode_row(const int* info, int row, int window) {
    const int* ri = info + row * ROW_INFO;
    AttDecodeRow r;
    r.soff = __ldcg(ri);
    r.n_kv = __ldcg(ri + 1);
    r.pos = __ldcg(ri + 2);
    r.moff = __ldcg(ri + 4);
    r.soff_sc = (size_t)__ldcg(ri + 3);
    r.lo = window > 0 ? max(0, r.pos - window + 1) : 0;
    r.hi = min(r.pos, r.n_kv - 1);
    r.n = max(0, r.hi - r.lo + 1);
    return r;
}
// A visible key's scaled score as the kernels keep it; mask-drift sends a row with an explicit
// mask (moff >= 0) down another path, one ulp off.
__device__ __forceinline__ float att_score_path(float s, int moff) {
#ifdef FAULT_MASK_DRIFT
    if (moff >= 0) return s * 1.00000012f;
#endif
    return s;
}
// Keys staged in shared memory at a time by the attention's weighted sum, and the most output
// elements one of its 128 threads holds (head_dim <= 512; the host checks).
#define ATT_CHUNK 512
#define ATT_MAX_D 4

// One block per (query row, head). Scores (f32, as the reference's `dot * scale`, -inf where
// masked) go to `scores`; exp(s - max) (f64) to `exps`; probabilities (f64) to `probs`; the
// output is the f64 probability-weighted sum of V. Each stage reads the buffer the previous one
// wrote, so the kq / kq_softmax taps copied from `scores` / `probs` are the consumed values.
// With `q8q` (fast numerics, head_dim a multiple of 32), the output is also quantized for the
// next matmul by `q8_block` on the very floats written to `out` (a warp holds 32 consecutive
// values), bitwise what `quantize_q8_32` would make of `out`.
extern "C" __global__ void attention(const float* q, const kv_t* kc, const kv_t* vc,
                                     const u32* slots, const int* info, const u8* mask,
                                     float* scores, double* exps, double* probs, float* out,
                                     size_t base, int n_heads, int n_kv_heads, int head_dim,
                                     float scale, int window, signed char* q8q, Q8Blk* q8d) { GRID_ENTER();
    int row = blockIdx.x, h = blockIdx.y;
    const int* ri = info + row * ROW_INFO;
    int soff = ri[0], n_kv = ri[1], pos = ri[2], moff = ri[4];
    size_t off = (size_t)ri[3] + (size_t)h * n_kv;
    int group = n_heads / n_kv_heads, kh = h / group;
    base = att_layer_base(base);
#ifdef FAULT_WRONG_KV_HEAD
    kh = h % n_kv_heads;  // seeded fault: interleaved instead of grouped query heads
#endif
    int kv_dim = n_kv_heads * head_dim, q_dim = n_heads * head_dim;
    const float* qh = q + (size_t)row * q_dim + (size_t)h * head_dim;
    __shared__ float red[256];
    __shared__ double sum_sh;

    float mx = __int_as_float(0xff800000);
    for (int j = threadIdx.x; j < n_kv; j += blockDim.x) {
        bool vis = j <= pos && (window <= 0 || pos - j < window) && (moff < 0 || mask[moff + j]);
        float s = __int_as_float(0xff800000);
        if (vis) {
            const kv_t* kr = kc + (base + slots[soff + j]) * kv_dim + (size_t)kh * head_dim;
            float a[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
            int ch = head_dim >> 3;
            for (int c = 0; c < ch; c++)
#pragma unroll
                for (int t = 0; t < 8; t++) a[t] += qh[8 * c + t] * kv_f(kr[8 * c + t]);
            float tail = 0.f;
            for (int d = ch * 8; d < head_dim; d++) tail += qh[d] * kv_f(kr[d]);
            s = att_score_path(reduce8(a, tail) * scale, moff);
        }
        scores[off + j] = s;
        mx = fmaxf(mx, s);
    }
    red[threadIdx.x] = mx;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) red[threadIdx.x] = fmaxf(red[threadIdx.x], red[threadIdx.x + s]);
        __syncthreads();
    }
    float maxv = red[0];
    for (int j = threadIdx.x; j < n_kv; j += blockDim.x) {
        float s = scores[off + j];
        exps[off + j] = s == __int_as_float(0xff800000) ? 0.0 : exp((double)s - (double)maxv);
    }
    __syncthreads();
    // Keys outside [lo, hi] (after the row's position, or before its window) have a zero
    // exp: the sums below skip them, which changes nothing (adding +0.0, or skipping a zero
    // exp as the reference does) and halves a causal prefill's work.
    int lo = window > 0 ? max(0, pos - window + 1) : 0;
    int hi = min(pos, n_kv - 1);
    // The reference sums in key order; one thread does the same.
    if (threadIdx.x == 0) {
        double sum = 0.0;
        for (int j = lo; j <= hi; j++) sum += exps[off + j];
        sum_sh = sum;
    }
    __syncthreads();
    double sum = sum_sh;
    for (int j = threadIdx.x; j < n_kv; j += blockDim.x) probs[off + j] = exps[off + j] / sum;
    __syncthreads();
    // The weighted sum of V, in key order per output element. The keys' slots and
    // probabilities are staged in shared memory a chunk at a time, so each V load depends only
    // on a shared-memory read, not on two global ones; a zero exp is skipped as the reference
    // skips it.
    __shared__ unsigned s_slot[ATT_CHUNK];
    __shared__ double s_prob[ATT_CHUNK];
    __shared__ unsigned char s_zero[ATT_CHUNK];
    double acc[ATT_MAX_D];
#pragma unroll
    for (int i = 0; i < ATT_MAX_D; i++) acc[i] = 0.0;
    for (int c0 = lo; c0 <= hi; c0 += ATT_CHUNK) {
        int c1 = min(hi + 1, c0 + ATT_CHUNK);
        __syncthreads();
        for (int j = c0 + threadIdx.x; j < c1; j += blockDim.x) {
            s_slot[j - c0] = slots[soff + j];
            s_prob[j - c0] = probs[off + j];
            s_zero[j - c0] = exps[off + j] == 0.0;
        }
        __syncthreads();
#pragma unroll
        for (int i = 0; i < ATT_MAX_D; i++) {
            int d = threadIdx.x + i * blockDim.x;
            if (d >= head_dim) break;
            const kv_t* vb = vc + (size_t)kh * head_dim + d;
            double a = acc[i];
            int j = c0;
            for (; j + 8 <= c1; j += 8) {
                float vv[8];
#pragma unroll
                for (int u = 0; u < 8; u++) vv[u] = kv_f(vb[(base + s_slot[j + u - c0]) * kv_dim]);
#pragma unroll
                for (int u = 0; u < 8; u++)
                    if (!s_zero[j + u - c0]) a += s_prob[j + u - c0] * (double)vv[u];
            }
            for (; j < c1; j++)
                if (!s_zero[j - c0]) a += s_prob[j - c0] * (double)kv_f(vb[(base + s_slot[j - c0]) * kv_dim]);
            acc[i] = a;
        }
    }
#pragma unroll
    for (int i = 0; i < ATT_MAX_D; i++) {
        int d = threadIdx.x + i * blockDim.x;
        size_t o = (size_t)row * q_dim + (size_t)h * head_dim + d;
        float v = (float)acc[i];
        if (d < head_dim) out[o] = v;
        // Uniform per warp: blockDim.x and head_dim are multiples of 32.
        if (q8q != nullptr && d - (int)(threadIdx.x & 31) < head_dim) q8_block(v, q8q, q8d, o / 32);
    }
}

// ATTENTION OVER TILES (`attention_tile`): the same per-(row, head) arithmetic as `attention`,
// with one block per (tile of `tile_rows` batch rows, `heads` query heads sharing one KV head).
// A tile's rows split into runs of one sequence each (rows of a sequence are consecutive); a
// run stages each chunk of `chunk` keys' K rows, then V rows, in shared memory once for all of
// its row-heads, so K/V traffic falls by the run's row-head count. Per row-head:
//  - scores: one thread per (row-head, key), the f32 dot in reduce8 order from shared memory,
//    times scale, -inf where masked; written to `scores` (every key, as `attention`);
//  - max over the visible range [lo, hi] (every other score is -inf): one warp per row-head;
//  - exps: exp((double)s - (double)max) in f64 (0 for -inf), to `exps` in [lo, hi], a chunk at
//    a time also to shared memory;
//  - sum: one thread per row-head, serially in key order over [lo, hi], from shared memory;
//  - probs = exps / sum, written to `probs` (every key) while the weighted sum stages them;
//  - out[d]: one thread per (row-head, d) walks the staged keys in key order, adding
//    probs * (double)V; a key with a zero exp (or outside [lo, hi]) is staged as -0.0 and adds
//    -0.0, which leaves every value unchanged (x + -0.0 == x bitwise), exactly as skipping it.
// Nothing depends on the other rows of the tile, so a row's result is batch-invariant and the
// host may choose any tiling. Block: ATT_T_THREADS threads; dynamic shared memory (the host's
// `plan::attention_tile` sizes it): `chunk` K/V rows of `att_stride(head_dim)` floats, then a
// region holding either the run's q rows (pass 1) or its staged probabilities (pass 2), then
// two buffers of `chunk` slots.
// The i-th query head of KV head kh (grouped: heads kh * group .. kh * group + group - 1).
__device__ __forceinline__ int att_query_head(int kh, int i, int group, int n_kv_heads) {
#ifdef FAULT_WRONG_KV_HEAD
    return kh + i * n_kv_heads;  // seeded fault: interleaved instead of grouped query heads
#else
    return kh * group + i;
#endif
}

// The end of the run of batch rows from r0 (before r_end) that share r0's sequence (its key
// slots): rows of a sequence are consecutive.
__device__ __forceinline__ int att_run_end(const int* info, int r0, int r_end) {
    int soff = info[r0 * ROW_INFO], r1 = r0 + 1;
    while (r1 < r_end && info[r1 * ROW_INFO] == soff) r1++;
    return r1;
}

#define ATT_T_THREADS 256
#define ATT_T_MAX_RH 64
#define ATT_T_ACC 16

__device__ __forceinline__ int att_stride(int head_dim) { return ((head_dim + 3) & ~3) + 4; }

// Rows cs[0 .. nc) of one KV head of a cache layer to shared memory (rows of `stride` floats),
// 16 bytes a load where the head size allows.
__device__ __forceinline__ void att_stage_rows(float* dst, const kv_t* cache, const u32* cs, int nc,
                                               int head_dim, int stride, int kv_dim, int kh,
                                               size_t base) {
    const kv_t* src = cache + (size_t)kh * head_dim;
    if ((head_dim & 3) == 0) {
        int h4 = head_dim >> 2;
        for (int i = threadIdx.x; i < nc * h4; i += ATT_T_THREADS) {
            int j = i / h4, d = 4 * (i - j * h4);
            *(float4*)(dst + j * stride + d) = kv_f4(kv_ld4(src + (base + cs[j]) * kv_dim + d));
        }
    } else {
        for (int i = threadIdx.x; i < nc * head_dim; i += ATT_T_THREADS) {
            int j = i / head_dim, d = i - j * head_dim;
            dst[j * stride + d] = kv_f(src[(base + cs[j]) * kv_dim + d]);
        }
    }
}

// Pass 2's inner loop for NI row-heads of ND elements each: every key of the chunk, in order,
// for each of the thread's outputs; a staged -0.0 (a zero exp, a key outside the row's range,
// a padding row-head) adds -0.0 (no change). Unrolled over the outputs, without branches.
template <int ND, int NI>
__device__ __forceinline__ void att_accumulate(double* acc, const double* ps, const float* kvs,
                                               int nc, int chunk, int stride, int rg, int RG,
                                               int dl, int DW, int head_dim) {
    if constexpr (NI * ND <= ATT_T_ACC) {
        const double* pr[NI];
#pragma unroll
        for (int i = 0; i < NI; i++) pr[i] = ps + (rg + i * RG) * chunk;
#pragma unroll 2
        for (int jj = 0; jj < nc; jj++) {
            float v[ND];
#pragma unroll
            for (int n = 0; n < ND; n++) {
                int d = dl + n * DW;
                v[n] = d < head_dim ? kvs[jj * stride + d] : 0.f;
            }
#pragma unroll
            for (int i = 0; i < NI; i++) {
                double p = pr[i][jj];
                // -0.0 is the only staged value with this high word (probabilities are >= 0).
                bool skip = __double2hiint(p) == (int)0x80000000;
#pragma unroll
                for (int n = 0; n < ND; n++) {
                    double t = p * (double)v[n];
                    acc[i * ND + n] += skip ? -0.0 : t;
                }
            }
        }
    }
}

template <int ND>
__device__ __forceinline__ void attention_tile_body(
    const float* q, const kv_t* kc, const kv_t* vc, const u32* slots, const int* info,
    const u8* mask, float* scores, double* exps, double* probs, float* out, size_t base,
    int n_heads, int n_kv_heads, int head_dim, float scale, int window, int n_rows,
    int tile_rows, int heads_per_block, int chunk, signed char* q8q, Q8Blk* q8d) {
    extern __shared__ __align__(16) unsigned char att_smem[];
    __shared__ size_t m_off[ATT_T_MAX_RH];
    __shared__ int m_lo[ATT_T_MAX_RH], m_hi[ATT_T_MAX_RH], m_pos[ATT_T_MAX_RH],
        m_moff[ATT_T_MAX_RH], m_h[ATT_T_MAX_RH], m_row[ATT_T_MAX_RH];
    __shared__ float m_max[ATT_T_MAX_RH];
    __shared__ double m_sum[ATT_T_MAX_RH];
    const float NEG_INF = __int_as_float(0xff800000);
    int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    int group = n_heads / n_kv_heads;
    int n_sub = (group + heads_per_block - 1) / heads_per_block;
    int kh = blockIdx.y / n_sub;
    int g0 = (blockIdx.y % n_sub) * heads_per_block;
    int hb = min(heads_per_block, group - g0);
    base = att_layer_base(base);
    int kv_dim = n_kv_heads * head_dim, q_dim = n_heads * head_dim;
    int stride = att_stride(head_dim);
    float* kvs = (float*)att_smem;
    float* qs = (float*)(att_smem + (size_t)chunk * stride * 4);
    double* ps = (double*)qs;
    // Pass 2's outputs: thread -> (row-head group rg, element dl); DW elements a group; row-head
    // rg + i * RG of the group is its i-th (the staged probabilities are padded to a multiple
    // of RG row-heads).
    const int DW = ND == 1 ? head_dim : ATT_T_THREADS;
    int RG = ATT_T_THREADS / DW;
    int rg = tid / DW, dl = tid - rg * DW;
    int rh_cap = tile_rows * heads_per_block, rh_pad = (rh_cap + RG - 1) / RG * RG;
    size_t region = max((size_t)rh_cap * stride * 4, (size_t)rh_pad * chunk * 8);
    region = (region + 15) & ~(size_t)15;
    u32* s_slot = (u32*)(att_smem + (size_t)chunk * stride * 4 + region);
    int ch8 = head_dim >> 3;

    int r_end = min(n_rows, (int)(blockIdx.x + 1) * tile_rows);
    for (int r0 = blockIdx.x * tile_rows; r0 < r_end;) {
        // The run: rows r0 .. r1 - 1 of one sequence (the same key slots).
        int soff = info[r0 * ROW_INFO], n_kv = info[r0 * ROW_INFO + 1];
        int r1 = att_run_end(info, r0, r_end);
        int nrh = (r1 - r0) * hb;
        __syncthreads();  // the previous run is done with the shared tables
        for (int rh = tid; rh < nrh; rh += ATT_T_THREADS) {
            int r = r0 + rh / hb, g = g0 + rh % hb;
            const int* ri = info + r * ROW_INFO;
            int h = att_query_head(kh, g, group, n_kv_heads);
            int pos = ri[2];
            m_row[rh] = r;
            m_h[rh] = h;
            m_pos[rh] = pos;
            m_moff[rh] = ri[4];
            m_off[rh] = (size_t)ri[3] + (size_t)h * n_kv;
            m_lo[rh] = window > 0 ? max(0, pos - window + 1) : 0;
            m_hi[rh] = min(pos, n_kv - 1);
        }
        __syncthreads();
        int tlo = n_kv, thi = -1;
        for (int rh = 0; rh < nrh; rh += hb) {
            tlo = min(tlo, m_lo[rh]);
            thi = max(thi, m_hi[rh]);
        }
        // Scores outside the run's range [tlo, thi] are -inf for every row-head.
        for (int i = tid; i < nrh * n_kv; i += ATT_T_THREADS) {
            int rh = i / n_kv, j = i - rh * n_kv;
            if (j < tlo || j > thi) scores[m_off[rh] + j] = NEG_INF;
        }
        // The run's q rows.
        for (int i = tid; i < nrh * head_dim; i += ATT_T_THREADS) {
            int rh = i / head_dim, d = i - rh * head_dim;
            qs[rh * stride + d] = q[(size_t)m_row[rh] * q_dim + (size_t)m_h[rh] * head_dim + d];
        }
        // Pass 1: scores, a chunk of K rows at a time. The slots are double-buffered: a chunk's
        // K rows load together with the next chunk's slots (one memory round trip a chunk).
        for (int j = tid; j < min(thi + 1 - tlo, chunk); j += ATT_T_THREADS) s_slot[j] = slots[soff + tlo + j];
        __syncthreads();
        for (int c0 = tlo, buf = 0; c0 <= thi; c0 += chunk, buf ^= 1) {
            int nc = min(thi + 1 - c0, chunk);
            const u32* cs = s_slot + buf * chunk;
            att_stage_rows(kvs, kc, cs, nc, head_dim, stride, kv_dim, kh, base);
            for (int j = tid; j < min(thi + 1 - (c0 + chunk), chunk); j += ATT_T_THREADS)
                s_slot[(buf ^ 1) * chunk + j] = slots[soff + c0 + chunk + j];
            __syncthreads();
            for (int i = tid; i < nrh * nc; i += ATT_T_THREADS) {
                int rh = i / nc, jj = i - rh * nc, j = c0 + jj;
                int moff = m_moff[rh];
                bool vis = j >= m_lo[rh] && j <= m_pos[rh] && (moff < 0 || mask[moff + j]);
                float s = NEG_INF;
                if (vis) {
                    const float* qr = qs + rh * stride;
                    const float* kr = kvs + jj * stride;
                    float a[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
                    for (int c = 0; c < ch8; c++) {
                        float4 q0 = *(const float4*)(qr + 8 * c), q1 = *(const float4*)(qr + 8 * c + 4);
                        float4 k0 = *(const float4*)(kr + 8 * c), k1 = *(const float4*)(kr + 8 * c + 4);
                        a[0] += q0.x * k0.x;
                        a[1] += q0.y * k0.y;
                        a[2] += q0.z * k0.z;
                        a[3] += q0.w * k0.w;
                        a[4] += q1.x * k1.x;
                        a[5] += q1.y * k1.y;
                        a[6] += q1.z * k1.z;
                        a[7] += q1.w * k1.w;
                    }
                    float tail = 0.f;
                    for (int d = ch8 * 8; d < head_dim; d++) tail += qr[d] * kr[d];
                    s = att_score_path(reduce8(a, tail) * scale, moff);
                }
                scores[m_off[rh] + j] = s;
            }
            __syncthreads();  // the chunk's K rows are spent; after the last, every score is written
        }
        // Max over [lo, hi] (every other score is -inf): one warp per row-head.
        for (int rh = warp; rh < nrh; rh += ATT_T_THREADS / 32) {
            size_t off = m_off[rh];
            int lo = m_lo[rh], hi = m_hi[rh];
            float mx = NEG_INF;
            for (int j = lo + lane; j <= hi; j += 32) mx = fmaxf(mx, scores[off + j]);
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
            if (lane == 0) m_max[rh] = mx;
        }
        // Pass 2's first slots, loading while the exps and sums run.
        for (int j = tid; j < min(thi + 1 - tlo, chunk); j += ATT_T_THREADS) s_slot[j] = slots[soff + tlo + j];
        __syncthreads();
        // Exps a chunk at a time: every thread computes some (to `exps` and to shared memory),
        // then one thread per row-head adds the chunk's serially, in key order, from shared
        // memory.
        double sum = 0.0;
        for (int c0 = tlo; c0 <= thi; c0 += chunk) {
            int nc = min(thi + 1 - c0, chunk);
            for (int i = tid; i < nrh * nc; i += ATT_T_THREADS) {
                int rh = i / nc, jj = i - rh * nc, j = c0 + jj;
                double e = 0.0;
                if (j >= m_lo[rh] && j <= m_hi[rh]) {
                    size_t o = m_off[rh] + j;
                    float sc = scores[o];
                    e = sc == NEG_INF ? 0.0 : exp((double)sc - (double)m_max[rh]);
                    exps[o] = e;
                }
                ps[rh * chunk + jj] = e;
            }
            __syncthreads();
            if (tid < nrh) {
                const double* pe = ps + tid * chunk;
                int j = max(c0, m_lo[tid]) - c0, j1 = min(c0 + nc, m_hi[tid] + 1) - c0;
                for (; j + 8 <= j1; j += 8) {
                    double e[8];
#pragma unroll
                    for (int u = 0; u < 8; u++) e[u] = pe[j + u];
#pragma unroll
                    for (int u = 0; u < 8; u++) sum += e[u];
                }
                for (; j < j1; j++) sum += pe[j];
            }
            __syncthreads();
        }
        if (tid < nrh) m_sum[tid] = sum;
        __syncthreads();
        // Probabilities outside each row-head's [lo, hi]: 0 / sum (the exps there are 0).
        for (int i = tid; i < nrh * n_kv; i += ATT_T_THREADS) {
            int rh = i / n_kv, j = i - rh * n_kv;
            if (j < m_lo[rh] || j > m_hi[rh]) probs[m_off[rh] + j] = 0.0 / m_sum[rh];
        }
        // Pass 2: the weighted sum of V, a chunk of V rows (and probabilities) at a time.
        int ni = (nrh + RG - 1) / RG;
        double acc[ATT_T_ACC];
#pragma unroll
        for (int a = 0; a < ATT_T_ACC; a++) acc[a] = 0.0;
        for (int c0 = tlo, buf = 0; c0 <= thi; c0 += chunk, buf ^= 1) {
            int nc = min(thi + 1 - c0, chunk);
            const u32* cs = s_slot + buf * chunk;
            att_stage_rows(kvs, vc, cs, nc, head_dim, stride, kv_dim, kh, base);
            for (int j = tid; j < min(thi + 1 - (c0 + chunk), chunk); j += ATT_T_THREADS)
                s_slot[(buf ^ 1) * chunk + j] = slots[soff + c0 + chunk + j];
            for (int i = tid; i < ni * RG * nc; i += ATT_T_THREADS) {
                int rh = i / nc, jj = i - rh * nc, j = c0 + jj;
                double p = -0.0;
                if (rh < nrh && j >= m_lo[rh] && j <= m_hi[rh]) {
                    size_t o = m_off[rh] + j;
                    double e = exps[o];
                    double pr = e / m_sum[rh];
                    probs[o] = pr;
                    if (e != 0.0) p = pr;
                }
                ps[rh * chunk + jj] = p;
            }
            __syncthreads();
            if (rg < RG) {
#define ATT_ACC(NI)                                                                        \
    case NI:                                                                               \
        att_accumulate<ND, NI>(acc, ps, kvs, nc, chunk, stride, rg, RG, dl, DW, head_dim); \
        break;
                switch (ni) {
                    ATT_ACC(1) ATT_ACC(2) ATT_ACC(3) ATT_ACC(4) ATT_ACC(5) ATT_ACC(6) ATT_ACC(7)
                    ATT_ACC(8) ATT_ACC(9) ATT_ACC(10) ATT_ACC(11) ATT_ACC(12) ATT_ACC(13)
                    ATT_ACC(14) ATT_ACC(15) ATT_ACC(16)
                }
#undef ATT_ACC
            }
            __syncthreads();  // the chunk's V rows and probabilities are spent
        }
        if (rg < RG) {
#pragma unroll
            for (int a = 0; a < ATT_T_ACC; a++) {
                int i = a / ND, n = a % ND;
                int rh = rg + i * RG, d = dl + n * DW;
                // With `q8q` (head_dim a multiple of 32) the condition is uniform per warp, whose
                // lanes hold 32 consecutive values of one row-head: quantized as `attention` does.
                if (i < ni && rh < nrh && d < head_dim) {
                    size_t o = (size_t)m_row[rh] * q_dim + (size_t)m_h[rh] * head_dim + d;
                    float v = (float)acc[a];
                    out[o] = v;
                    if (q8q != nullptr) q8_block(v, q8q, q8d, o / 32);
                }
            }
        }
        r0 = r1;
    }
}

// Heads of up to ATT_T_THREADS values (one output element a thread per row-head group), and
// of up to 2 * ATT_T_THREADS (two a thread).
#define ATTENTION_TILE(NAME, ND)                                                                 \
    extern "C" __global__ void __launch_bounds__(ATT_T_THREADS) NAME(                            \
        const float* q, const kv_t* kc, const kv_t* vc, const u32* slots, const int* info,       \
        const u8* mask, float* scores, double* exps, double* probs, float* out, size_t base,     \
        int n_heads, int n_kv_heads, int head_dim, float scale, int window, int n_rows,          \
        int tile_rows, int heads_per_block, int chunk, signed char* q8q, Q8Blk* q8d) { GRID_ENTER();           \
        attention_tile_body<ND>(q, kc, vc, slots, info, mask, scores, exps, probs, out, base,    \
                                n_heads, n_kv_heads, head_dim, scale, window, n_rows, tile_rows, \
                                heads_per_block, chunk, q8q, q8d);                               \
    }
ATTENTION_TILE(attention_tile, 1)
ATTENTION_TILE(attention_tile_wide, 2)

// SPLIT-KEY DECODE ATTENTION (`attention_split`, then `attention_combine`): flash-decoding in
// f32, run by `cuda` (fast numerics, not deterministic) for decode steps, one row a sequence.
// A row's visible range [lo, hi] is cut into spans of whole chunks, the fewest chunks a span
// that cover the row in gridDim.z spans (at least `min_keys` keys; the host picks gridDim.z so
// the blocks fit one wave: `plan::attention_spans`); one block per (row, KV head, span) serves
// all the query heads of that KV head, so each K and V row is read once for all of them. A
// span is read a chunk of keys at a time (session 31; before, each warp read one key a round
// trip and the scores went through memory and back):
//  - a key's K and V rows are copied to shared memory by a team of `tpk` threads (the least
//    power of two with 16 tpk >= head_dim), four values at a time, ATT_S_KPT copies each
//    (cp.async), into one of two stages: the next chunk's copies are in flight while this one
//    is summed (session 32); the chunk is ATT_S_THREADS / tpk keys (32 for heads of 64);
//  - scores: each thread's f32 partial dots with the group's q rows (from shared memory),
//    summed over the team by shuffles, times scale, -inf where masked; written to `scores`
//    for every key of the row (-inf outside [lo, hi], shared out among the spans): the kq
//    tap is this buffer, which nothing reads back;
//  - an online softmax over the chunks, a warp a head: the chunk's max, m' = max(m, that),
//    e = expf(s - m') (0 for -inf), l' = l expf(m - m') + sum e; from the chunk's V rows in
//    their stage each thread keeps four elements of every head's sums over every
//    (128 / (head_dim / 4))-th key, acc' = acc expf(m - m') + sum e V (one V load serves the
//    group: session 31's Nsight Compute put the kernel at issue, not at memory); at the span's
//    end those key groups are added in order;
//  - (m, l, sum e V) per (row, head, span) to `part`, head_dim + ATT_S_PART_HEAD floats each
//    (the sums 16-byte aligned for the combine's loads).
// `attention_combine` (a block per (row, head)) rescales the spans to the largest m, M, with
// w = expf(m - M): L = sum w l and out = (sum w acc) / L, spans summed in ATT_C_THREADS /
// (head_dim / 4) interleaved groups, then the groups in order. Per-key probabilities are never
// formed, so this path does not expose kq_softmax (hidden_taps). The output is quantized for
// the next matmul as `attention` does. The spans' count depends on the step's shape, so results
// are not batch-invariant: `cuda-det` and `cuda-exact` never run this. Heads of a multiple of
// 4 values, at most ATT_S_MAX_D (`plan::use_split_attention`).
#define ATT_S_THREADS 128
#define ATT_S_MAX_G 8
// Heads of up to 256 values: a chunk then holds at least 8 keys, which verify's error bound
// for this arithmetic counts on (`attention_error_bounds`).
#define ATT_S_MAX_D 256
// The most spans (`plan::ATT_SPLIT_MAX_SPANS`; at most ATT_C_THREADS, a combine thread a span).
#define ATT_SPLIT_SPANS 512
// Four-value loads of K (and of V) a thread issues per chunk. (8, twice the keys a chunk, in
// session 31e: Gemma-3's heads of 256 +4-5%, SmolLM2 and the Llamas -1 to -15% at depth 1024.)
#ifndef ATT_S_KPT
#define ATT_S_KPT 4
#endif
// A chunk's keys at most (tpk = 1) and its V values at most (keys x head_dim <= threads x 16).
#define ATT_S_MAX_CHUNK ATT_S_THREADS
#define ATT_S_CHUNK_VALUES (ATT_S_THREADS * ATT_S_KPT * 4)
// A stage of shared memory, a chunk's K and V values as the cache holds them (f32 or f16), in
// floats.
#define ATT_S_STAGE_FLOATS (ATT_S_CHUNK_VALUES * 2 * (int)sizeof(kv_t) / 4)
// A block's query heads times head size at most.
#define ATT_S_MAX_GD (ATT_S_MAX_G * ATT_S_MAX_D)
// A partial's header (m, l and padding) before its sums (`plan::ATT_SPLIT_PART_HEAD`).
#define ATT_S_PART_HEAD 4
// Threads of an `attention_combine` block (`plan::ATT_COMBINE_THREADS`).
#define ATT_C_THREADS 512
// Spans' sums a combine thread loads with the maxima, before M is known.
#ifndef ATT_C_PRE
#define ATT_C_PRE 8
#endif

// A split-key chunk's key j: its cache slot and whether it is visible (0 and false past s1).
__device__ __forceinline__ void att_split_slot(const u32* slots, const u8* mask, int soff, int moff,
                                               int j, int s1, u32& slot, bool& vis) {
    slot = 0;
    vis = false;
    if (j < s1) {
        slot = slots[soff + j];
        vis = moff < 0 || mask[moff + j];
    }
}
// This thread's part of a key's K and V rows (kr, vr) copied into a chunk's stage (sk, sv: key
// jj at jj x head_dim): four values at 4 (part + tpk i), asynchronously; zeros for a key not
// live (masked, or past the span).
__device__ __forceinline__ void att_split_issue(kv_t* sk, kv_t* sv, const kv_t* kr, const kv_t* vr, int jj,
                                                int head_dim, int part, int tpk, int nf, bool live) {
#pragma unroll
    for (int i = 0; i < ATT_S_KPT; i++) {
        int f = part + tpk * i;
        if (f < nf) {
            int at = jj * head_dim + 4 * f;
            if (live) {
                kv_cp_async4(sk + at, kr + 4 * f);
                kv_cp_async4(sv + at, vr + 4 * f);
            } else {
                *(kv4_t*)(sk + at) = kv_of4(float4{0.f, 0.f, 0.f, 0.f});
                *(kv4_t*)(sv + at) = kv_of4(float4{0.f, 0.f, 0.f, 0.f});
            }
        }
    }
}

// Blocks an SM the registers must allow (`__launch_bounds__`'s second argument; the host reads
// the occupancy back for its spans). 5 in session 32 (96 registers and a small spill): no gain.
#ifndef ATT_S_MINB
#define ATT_S_MINB 1
#endif
extern "C" __global__ void __launch_bounds__(ATT_S_THREADS, ATT_S_MINB) attention_split(
    const float* q, const kv_t* kc, const kv_t* vc, const u32* slots, const int* info,
    const u8* mask, float* scores, float* part, size_t base, int n_heads, int n_kv_heads,
    int head_dim, float scale, int window, int min_keys) { GRID_ENTER();
    const float NEG_INF = __int_as_float(0xff800000);
    int row = blockIdx.x, kh = blockIdx.y, span = blockIdx.z, n_spans = gridDim.z;
    int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int* ri = info + row * ROW_INFO;
    int soff = ri[0], n_kv = ri[1], pos = ri[2], moff = ri[4];
    size_t soff_sc = (size_t)ri[3];
    int group = n_heads / n_kv_heads;
    base = att_layer_base(base);
    int kv_dim = n_kv_heads * head_dim, q_dim = n_heads * head_dim;
    int pst = head_dim + ATT_S_PART_HEAD;
    // q rows, a chunk's scores and two chunks' K and V rows as the cache holds them (the next
    // chunk's copies in flight while this one is summed); at the end, the o_groups' sums (at
    // most ATT_S_THREADS x 4 x group values).
    __shared__ __align__(16) float s_red[ATT_S_MAX_GD + ATT_S_MAX_G * ATT_S_MAX_CHUNK +
                                         ATT_S_STAGE_FLOATS * 2];
    float* s_q = s_red;
    float* s_s = s_red + ATT_S_MAX_GD;
    kv_t* s_kv = (kv_t*)(s_s + ATT_S_MAX_G * ATT_S_MAX_CHUNK);
    __shared__ float s_m[ATT_S_MAX_G], s_l[ATT_S_MAX_G], s_a[ATT_S_MAX_G];
    int lo = window > 0 ? max(0, pos - window + 1) : 0;
    int hi = min(pos, n_kv - 1);
    int n = hi - lo + 1;
    int tpk = 1;
    while (tpk * 4 * ATT_S_KPT < head_dim) tpk <<= 1;
    int ck = ATT_S_THREADS / tpk;
#ifdef ATT_S_SQRT_SPANS
    // Session 30's rule, for comparisons: at least min_keys and ceil(sqrt(n) / 2) keys a span.
    int rt = (int)sqrtf((float)max(n, 0));
    while (rt * rt > n) rt--;
    while ((rt + 1) * (rt + 1) <= n) rt++;
    int per = max(max(min_keys, (rt + 1) / 2), (n + n_spans - 1) / n_spans);
#else
    // Keys a span: a whole number of chunks, the fewest that cover the row in n_spans spans
    // (at least min_keys). A span of 33 keys took two round trips for one key more than 32
    // (session 31's timelines); n_spans is chosen so that the blocks fit in one wave. The rule
    // reads n alone, so a replayed step graph follows its row's length.
    int per = ck * max((min_keys + ck - 1) / ck, ((n + ck - 1) / ck + n_spans - 1) / n_spans);
#endif
    int s0 = lo + span * per, s1 = min(hi + 1, s0 + per);
    // Scores outside [lo, hi]: -inf, shared out among the spans.
    for (int j = span * ATT_S_THREADS + tid; j < n_kv; j += n_spans * ATT_S_THREADS)
        if (j < lo || j > hi)
            for (int i = 0; i < group; i++)
                scores[soff_sc + (size_t)att_query_head(kh, i, group, n_kv_heads) * n_kv + j] = NEG_INF;
    if (s0 >= s1) {
        // A span past the row's keys: only its (m, l) = (-inf, 0), which attention_combine
        // reads (it never reads the sums of spans after the last one with a visible key).
        if (tid < group) {
            int h = att_query_head(kh, tid, group, n_kv_heads);
            float* pp = part + (((size_t)row * n_heads + h) * n_spans + span) * pst;
            pp[0] = NEG_INF;
            pp[1] = 0.f;
        }
        return;
    }
    int jj = tid / tpk, part_i = tid - jj * tpk, nf = head_dim / 4;
    int n_chunks = (s1 - s0 + ck - 1) / ck;
    size_t hoff = (size_t)kh * head_dim;
    // Chunk 0's copies, issued once its slots arrive (the q rows in flight with them); then the
    // next chunk's slot and mask bit. `live` bit st: this thread's key of the chunk in stage st.
    u32 slot;
    bool vis;
    att_split_slot(slots, mask, soff, moff, s0 + jj, s1, slot, vis);
    for (int x = tid; x < group * head_dim; x += ATT_S_THREADS) {
        int i = x / head_dim, d = x - i * head_dim;
        s_q[i * head_dim + d] =
            q[(size_t)row * q_dim + (size_t)att_query_head(kh, i, group, n_kv_heads) * head_dim + d];
    }
    unsigned live_bits = s0 + jj < s1 && vis ? 1u : 0u;
    att_split_issue(s_kv, s_kv + ATT_S_CHUNK_VALUES, kc + (base + slot) * kv_dim + hoff,
                    vc + (base + slot) * kv_dim + hoff, jj, head_dim, part_i, tpk, nf, live_bits != 0);
    cp_async_commit();
    att_split_slot(slots, mask, soff, moff, s0 + ck + jj, s1, slot, vis);
    if (tid < group) {
        s_m[tid] = NEG_INF;
        s_l[tid] = 0.f;
    }
    int o_groups = max(1, ATT_S_THREADS / nf), og = tid / nf, of = tid - og * nf;
    float4 acc[ATT_S_MAX_G];
#pragma unroll
    for (int h = 0; h < ATT_S_MAX_G; h++) acc[h] = float4{0.f, 0.f, 0.f, 0.f};
    __syncthreads();
    TL_MARK(1);
    for (int c = 0; c < n_chunks; c++) {
        int st = c & 1, c0 = s0 + c * ck;
        int j = c0 + jj;
        kv_t* sk = s_kv + st * 2 * ATT_S_CHUNK_VALUES;
        kv_t* sv = sk + ATT_S_CHUNK_VALUES;
        // The next chunk's copies into the other stage (its last readers passed the barrier
        // that ended the chunk before), then the slot of the one after; this chunk's copies
        // (all but the newest group) waited for. The K values a thread sums are the ones it
        // copied itself; the V values meet at the barrier after the scores.
        if (c + 1 < n_chunks) {
            bool ln = j + ck < s1 && vis;
            kv_t* nk = s_kv + (st ^ 1) * 2 * ATT_S_CHUNK_VALUES;
            att_split_issue(nk, nk + ATT_S_CHUNK_VALUES, kc + (base + slot) * kv_dim + hoff,
                            vc + (base + slot) * kv_dim + hoff, jj, head_dim, part_i, tpk, nf, ln);
            live_bits = (live_bits & (1u << st)) | ((ln ? 1u : 0u) << (st ^ 1));
            att_split_slot(slots, mask, soff, moff, j + 2 * ck, s1, slot, vis);
        }
        cp_async_commit();
        cp_async_wait<1>();
        bool live = (live_bits >> st) & 1u;
        float a[ATT_S_MAX_G];
#pragma unroll
        for (int h = 0; h < ATT_S_MAX_G; h++) a[h] = 0.f;
#pragma unroll
        for (int i = 0; i < ATT_S_KPT; i++) {
            int f = part_i + tpk * i;
            if (f < nf) {
                float4 k4 = kv_f4(*(const kv4_t*)(sk + jj * head_dim + 4 * f));
#pragma unroll
                for (int h = 0; h < ATT_S_MAX_G; h++)
                    if (h < group) {
                        float4 q4 = *(const float4*)&s_q[h * head_dim + 4 * f];
                        a[h] += q4.x * k4.x + q4.y * k4.y + q4.z * k4.z + q4.w * k4.w;
                    }
            }
        }
#pragma unroll
        for (int h = 0; h < ATT_S_MAX_G; h++)
            if (h < group)
                for (int o = tpk >> 1; o > 0; o >>= 1) a[h] += __shfl_xor_sync(0xffffffffu, a[h], o);
        if (part_i == 0) {
#pragma unroll
            for (int h = 0; h < ATT_S_MAX_G; h++)
                if (h < group) {
                    float s = live ? att_score_path(a[h] * scale, moff) : NEG_INF;
                    s_s[h * ck + jj] = s;
                    if (j < s1) scores[soff_sc + (size_t)att_query_head(kh, h, group, n_kv_heads) * n_kv + j] = s;
                }
        }
        TL_MARK(2);
        __syncthreads();
        // The chunk's softmax step, a warp a head.
        for (int h = warp; h < group; h += ATT_S_THREADS / 32) {
            float cm = NEG_INF;
            for (int x = lane; x < ck; x += 32) cm = fmaxf(cm, s_s[h * ck + x]);
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) cm = fmaxf(cm, __shfl_xor_sync(0xffffffffu, cm, o));
            float mo = s_m[h], mn = fmaxf(mo, cm);
            float sum = 0.f;
            for (int x = lane; x < ck; x += 32) {
                float s = s_s[h * ck + x];
                float e = s == NEG_INF ? 0.f : expf(s - mn);
                s_s[h * ck + x] = e;
                sum += e;
            }
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
            if (lane == 0) {
                float al = mo == NEG_INF ? 0.f : expf(mo - mn);
                s_a[h] = al;
                s_m[h] = mn;
                s_l[h] = s_l[h] * al + sum;
            }
        }
        __syncthreads();
        TL_MARK(3);
        int nk = min(ck, s1 - c0);
        // O += e V: thread (og, of) takes four elements (of) of every head, keys og, og +
        // o_groups, ... of the chunk: each V load from shared memory serves the whole group.
        if (og < o_groups) {
#pragma unroll
            for (int h = 0; h < ATT_S_MAX_G; h++)
                if (h < group) {
                    float al = s_a[h];
                    acc[h].x *= al;
                    acc[h].y *= al;
                    acc[h].z *= al;
                    acc[h].w *= al;
                }
            for (int y = og; y < nk; y += o_groups) {
                float4 v4 = kv_f4(*(const kv4_t*)(sv + y * head_dim + 4 * of));
#pragma unroll
                for (int h = 0; h < ATT_S_MAX_G; h++)
                    if (h < group) {
                        float e = s_s[h * ck + y];
                        acc[h].x += e * v4.x;
                        acc[h].y += e * v4.y;
                        acc[h].z += e * v4.z;
                        acc[h].w += e * v4.w;
                    }
            }
        }
        __syncthreads();  // the chunk's scores, exps and stage are spent
        TL_MARK(4);
    }
    // The partials of head i: [m, l, padding, the sums over the o_groups in order].
    float* red = s_red;  // the q rows, V and scores are spent: o_groups x group x head_dim
    if (og < o_groups)
#pragma unroll
        for (int h = 0; h < ATT_S_MAX_G; h++)
            if (h < group) *(float4*)&red[(og * group + h) * head_dim + 4 * of] = acc[h];
    __syncthreads();
    if (tid < group) {
        int h = att_query_head(kh, tid, group, n_kv_heads);
        float* pp = part + (((size_t)row * n_heads + h) * n_spans + span) * pst;
        pp[0] = s_m[tid];
        pp[1] = s_l[tid];
    }
    for (int x = tid; x < group * head_dim; x += ATT_S_THREADS) {
        int i = x / head_dim, d = x - i * head_dim;
        float sum = 0.f;
        for (int g = 0; g < o_groups; g++) sum += red[(g * group + i) * head_dim + d];
        int h = att_query_head(kh, i, group, n_kv_heads);
        part[(((size_t)row * n_heads + h) * n_spans + span) * pst + ATT_S_PART_HEAD + d] = sum;
    }
    TL_MARK(9);
}

extern "C" __global__ void __launch_bounds__(ATT_C_THREADS) attention_combine(
    const float* part, float* out, int n_heads, int head_dim, int n_spans, signed char* q8q,
    Q8Blk* q8d) { GRID_ENTER();
    const float NEG_INF = __int_as_float(0xff800000);
    int row = blockIdx.x, h = blockIdx.y, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    int st = head_dim + ATT_S_PART_HEAD;
    const float* pp = part + ((size_t)row * n_heads + h) * n_spans * st;
    __shared__ float s_w[ATT_SPLIT_SPANS];
    __shared__ float s_red[ATT_C_THREADS / 32];
    __shared__ int s_used[ATT_C_THREADS / 32];
    __shared__ __align__(16) float s_sum[ATT_C_THREADS * 4];
    // The spans' maxima and sums (a thread a span); M, the spans used (those up to the last
    // with a visible key: later ones are all empty and never wrote their sums), each span's
    // weight w = expf(m - M) (0 for no visible key, m = -inf) and L = sum w l.
    float m = NEG_INF, l = 0.f;
    if (tid < n_spans) {
        m = pp[tid * st];
        l = pp[tid * st + 1];
    }
    // The weighted sums: thread (g, f) adds four elements (f) of spans g, g + groups, ...
    // Its first ATT_C_PRE spans' sums are loaded here, in flight with the maxima (spans after
    // the last used one hold stale values, never added).
    int nf = head_dim / 4, groups = max(1, ATT_C_THREADS / nf);
    int g = tid / nf, f = tid - g * nf;
    float4 pre[ATT_C_PRE > 0 ? ATT_C_PRE : 1];
#pragma unroll
    for (int i = 0; i < ATT_C_PRE; i++) {
        int c = g + i * groups;
        pre[i] = g < groups && c < n_spans ? *(const float4*)(pp + (size_t)c * st + ATT_S_PART_HEAD + 4 * f)
                                           : float4{0.f, 0.f, 0.f, 0.f};
    }
    float wm = m;
    int u = m != NEG_INF ? tid + 1 : 0;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        wm = fmaxf(wm, __shfl_xor_sync(0xffffffffu, wm, o));
        u = max(u, __shfl_xor_sync(0xffffffffu, u, o));
    }
    if (lane == 0) {
        s_red[warp] = wm;
        s_used[warp] = u;
    }
    __syncthreads();
    TL_MARK(1);
    float M = NEG_INF;
    int used = 0;
    for (int w = 0; w < ATT_C_THREADS / 32; w++) {
        M = fmaxf(M, s_red[w]);
        used = max(used, s_used[w]);
    }
    float w = m != NEG_INF ? expf(m - M) : 0.f;
    if (tid < ATT_SPLIT_SPANS) s_w[tid] = w;
    float wl = m != NEG_INF ? w * l : 0.f;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) wl += __shfl_xor_sync(0xffffffffu, wl, o);
    __syncthreads();  // every thread has read the maxima
    if (lane == 0) s_red[warp] = wl;
    __syncthreads();
    float L = 0.f;
    for (int x = 0; x < ATT_C_THREADS / 32; x++) L += s_red[x];
    // Every span before `used` wrote its sums (an all-masked span zeros, with w = 0).
    if (g < groups) {
        float4 a = float4{0.f, 0.f, 0.f, 0.f};
#pragma unroll
        for (int i = 0; i < ATT_C_PRE; i++) {
            int c = g + i * groups;
            if (c < used) {
                float wc = s_w[c];
                a.x += wc * pre[i].x;
                a.y += wc * pre[i].y;
                a.z += wc * pre[i].z;
                a.w += wc * pre[i].w;
            }
        }
#pragma unroll 8
        for (int c = g + ATT_C_PRE * groups; c < used; c += groups) {
            float wc = s_w[c];
            float4 v = *(const float4*)(pp + (size_t)c * st + ATT_S_PART_HEAD + 4 * f);
            a.x += wc * v.x;
            a.y += wc * v.y;
            a.z += wc * v.z;
            a.w += wc * v.w;
        }
        *(float4*)&s_sum[(g * nf + f) * 4] = a;
    }
    __syncthreads();
    TL_MARK(2);
    int q_dim = n_heads * head_dim;
#pragma unroll
    for (int t = 0; t < (ATT_S_MAX_D + ATT_C_THREADS - 1) / ATT_C_THREADS; t++) {
        int d = tid + t * ATT_C_THREADS;
        float a = 0.f;
        if (d < head_dim)
            for (int x = 0; x < groups; x++) a += s_sum[x * head_dim + d];
        // No visible key at all (an all-false mask row): 0, as `attention` gives.
        float v = L > 0.f ? a / L : 0.f;
        size_t o = (size_t)row * q_dim + (size_t)h * head_dim + d;
        if (d < head_dim) out[o] = v;
        // Uniform per warp: head_dim is a multiple of 32 when q8q is set.
        if (q8q != nullptr && d - (int)(tid & 31) < head_dim) q8_block(v, q8q, q8d, o / 32);
    }
}

// SHORT DECODE ATTENTION (`attention_decode_<D>`, heads of D = 64, 128 or 256 values): run by `cuda`
// (fast numerics, not deterministic) for decode steps (one row a sequence) whose sequences all
// attend over fewer than plan::ATT_SPLIT_FROM_KEYS keys, where the split-key kernels do not run.
// A decode step's attention moves few bytes; what it costs is its chain of dependent memory
// round trips and barriers (the row kernel: nine, 8.8 us a layer on SmolLM2 in Nsight Compute),
// so every stage here is at most one round trip. One block per (row, KV head), all `group`
// query heads of it (GQA: each K and V row is read once for the group):
//  - the group's q rows, the visible range's slots and mask bits to shared memory;
//  - scores: one thread per (key, part of the head: 2 parts of heads up to 128 values, 4 of
//    256) loads its part of the K row at once (float4s) and forms the f32 dot with every query
//    head of the group from shared memory; the parts' sums added in order, times scale, -inf
//    where masked; written to `scores` when it is given (the kq tap: the values the softmax
//    below consumes);
//  - softmax in f32, one warp per query head: the max, p = expf(s - max), their sum;
//  - O = P V: one thread per (4 consecutive values of the head, key group) loads every V row
//    of its keys at once; the key groups' sums meet in shared memory, added in group order;
//    out = O / sum (0 for a row without a visible key, as `attention`), written and quantized
//    for the next matmul (`q8q`), 32 consecutive values a warp, as the other kernels do.
// Per-key probabilities are never formed: kq_softmax is hidden, as with the split kernels. The
// arithmetic is f32 throughout, held to the isolation bound like the split and flash kernels.
// Blocks of 128 keys x P parts threads; groups of up to G query heads (8 for heads up to 128
// values, 4 for 256: the shared memory below stays within 48 KB). A block serves `hpb` heads
// of its group (the host's plan::decode_attention_heads_per_block): one a block when a step
// has few rows, so one sequence's heads run on as many SMs, not one SM per KV head.
#define ATT_D_MAX_KEYS 128
template <int D>
struct AttDecodeShape {
    static constexpr int P = D <= 128 ? 2 : D / 64;
    static constexpr int THREADS = ATT_D_MAX_KEYS * P;
    static constexpr int G = D <= 128 ? 8 : 4;
};

// What `attention_decode_rope_<D>` takes besides attention_decode's arguments: the step's
// projections before rope_store (q, k, v), its per-head norms and their outputs, and the cache
// it writes. Null outputs (qn, kn, qr, kr) are the taps nobody listens to.
struct RopeFused {
    const float* k;
    const float* v;
    const float* qw;
    const float* kw;
    float eps;
    float* qn;
    float* kn;
    float* qr;
    float* kr;
    kv_t* kcw;
    kv_t* vcw;
    const u32* new_slots;
    size_t store_base;
    const double* cs;
    int half;
    int style;
    int n_rows;
};

// The rope stage's norm layout: plan::norm_threads(D) threads (rope_store's block for a head of
// D values: 32, 32, 64), NV values each.
template <int D>
struct RopeNorm {
    static constexpr int NB = D / 4 < 32 ? 32 : D / 4;
    static constexpr int NV = (D + NB - 1) / NB;
};

// Before the grid wait: the row's (cos, sin) pairs to shared memory (the table is staged before
// the step's kernels run) and the norm weights to registers (weights are never written).
template <int D, int THREADS>
__device__ __forceinline__ void attention_decode_rope_early(const RopeFused& rf, double* s_cs,
                                                            float* wq, float* wk, int row) {
    constexpr int NB = RopeNorm<D>::NB, NV = RopeNorm<D>::NV;
    const double* c = rf.cs + (size_t)row * rf.half * 2;
    // Not unrolled: the grid-wait audit counts the loads before the wait in the PTX and the
    // SASS, and ptxas unrolling this loop would read as loads hoisted over it.
#pragma unroll 1
    for (int x = threadIdx.x; x < 2 * rf.half; x += THREADS) s_cs[x] = c[x];
    static_assert(D <= 128, "plan::rope_attention_fuses: heads of 64 and 128");
    if (rf.qw != nullptr) norm_weights<NV, true>(rf.qw, D, NB, wq);
    if (rf.kw != nullptr) norm_weights<NV, true>(rf.kw, D, NB, wk);
}

// rope_store's work for the block's heads (ROPE: q heads h0 .. h0 + hpb - 1 of KV head kh, and
// kh's k), with rope_store's arithmetic: every head's values loaded at once into `stage`; each
// normed there (norm_regs_w over the first plan::norm_threads(D) threads, as rope_store's block
// of that size: bitwise its values); rotated (rope_elem, the pairs from s_cs) into s_q and
// s_knew. The block serving the group's first heads (h0 == 0) is the one rope_store block of
// that k head and v head would be: it writes the rotated k and v to the cache (the other blocks
// of the group use their own bitwise-equal copy in s_knew, never the cache row) and the k taps.
// Every q head is served by one block, which writes its q taps.
template <int D, int THREADS>
__device__ __forceinline__ void attention_decode_rope_stage(
    const float* q, const RopeFused& rf, const double* s_cs, float (&wq)[RopeNorm<D>::NV],
    float (&wk)[RopeNorm<D>::NV], float* stage, float* s_q, float* s_knew, float* s_vnew, int row, int kh, int h0, int hpb, int group,
    int n_heads, int n_kv_heads, u32 own_slot) {
    constexpr int NB = RopeNorm<D>::NB, NV = RopeNorm<D>::NV;
    static_assert(D <= THREADS, "a thread a value of the row's v");
    int tid = threadIdx.x;
    int q_dim = n_heads * D, kv_dim = n_kv_heads * D;
    bool leader = h0 == 0;
    bool store = true;
#ifdef FAULT_KV_SKIP_PREFILL
    if (rf.n_rows > 1) store = false;  // as rope_store's seeded fault
#endif
    // The row's v, loaded with the stage below (one round trip after the wait, not a second
    // one later): the leader copies it to the cache; with an f16 cache every block also keeps
    // it in s_vnew as the cache row holds it (kv_of), the own key's value for O = P V (an f32
    // cache's blocks load it with their other V rows instead).
    constexpr bool KV16 = sizeof(kv_t) == 2;
    bool v_copy = leader && store && tid < D;
    bool v_load = KV16 ? tid < D : v_copy;
    float v_own = v_load ? __ldcg(rf.v + (size_t)row * kv_dim + (size_t)kh * D + tid) : 0.0f;
    auto head_at = [&](int i) -> size_t {
        return i == hpb ? (size_t)row * kv_dim + (size_t)kh * D
                        : (size_t)row * q_dim + (size_t)att_query_head(kh, h0 + i, group, n_kv_heads) * D;
    };
    // What the kernel before wrote (q, k, v) is read through L2 (ld.global.cg): NVVM makes
    // plain loads of these never-written-here pointers non-coherent, which ptxas may hoist
    // above the grid wait (the replay race `audit` catches).
    for (int x = tid; x < (hpb + 1) * D; x += THREADS) {
        int i = x / D, d = x - i * D;
        stage[x] = __ldcg((i == hpb ? rf.k : q) + head_at(i) + d);
    }
    __syncthreads();
    // One head's norm in `stage` (each thread rewrites only the values it read).
    auto norm_head = [&](int i, const float(&w)[NV], float* nout) {
        float hv[NV], r[NV];
#pragma unroll
        for (int j = 0; j < NV; j++) hv[j] = tid < NB && tid + j * NB < D ? stage[i * D + tid + j * NB] : 0.0f;
        norm_regs_w<NV, true>(hv, w, nout == nullptr ? nullptr : nout + head_at(i), D, rf.eps,
                              nullptr, nullptr, 0, r, NB, nullptr, nullptr);
        if (tid < NB) {
#pragma unroll
            for (int j = 0; j < NV; j++)
                if (tid + j * NB < D) stage[i * D + tid + j * NB] = r[j];
        }
    };
    if (rf.qw != nullptr)
        for (int i = 0; i < hpb; i++) norm_head(i, wq, rf.qn);
    if (rf.kw != nullptr) norm_head(hpb, wk, leader ? rf.kn : nullptr);
    __syncthreads();
    size_t dst = (rf.store_base + own_slot) * kv_dim + (size_t)kh * D;
    for (int x = tid; x < (hpb + 1) * D; x += THREADS) {
        int i = x / D, d = x - i * D;
        float rv = rope_elem(stage + i * D, s_cs, d, rf.half, rf.style);
        if (i < hpb) {
            s_q[x] = rv;
            if (rf.qr != nullptr) rf.qr[head_at(i) + d] = rv;
        } else {
            s_knew[d] = rv;
            if (leader) {
                if (rf.kr != nullptr) rf.kr[head_at(i) + d] = rv;
                if (store) rf.kcw[dst + d] = kv_of(rv);
            }
        }
    }
    if (v_copy) rf.vcw[dst + tid] = kv_of(v_own);
    if (KV16 && tid < D) s_vnew[tid] = kv_f(kv_of(v_own));
    __syncthreads();
}

template <int D, bool ROPE>
__device__ __forceinline__ void attention_decode_body(
    const float* q, const kv_t* kc, const kv_t* vc, const u32* slots, const int* info,
    const u8* mask, float* scores, float* out, size_t base, int n_heads, int n_kv_heads,
    float scale, int window, int hpb, signed char* q8q, Q8Blk* q8d, const RopeFused& rf) {
    TL_ENTRY();
    const float NEG_INF = __int_as_float(0xff800000);
    constexpr int P = AttDecodeShape<D>::P, THREADS = AttDecodeShape<D>::THREADS;
    constexpr int MAX_G = AttDecodeShape<D>::G;
    constexpr int PART = D / P;                // values of a K row one thread takes
    constexpr int C4 = D / 4;                  // float4s in a row
    constexpr int KG = THREADS / C4;           // key groups of O = P V
    constexpr int KPT = ATT_D_MAX_KEYS / KG;   // the most keys a thread of O = P V takes
    // Scores' parts (P x groups x keys), later the key groups' O sums (KG x groups x D): both
    // 32 KB at most, never live together.
    constexpr int A_FLOATS = P * MAX_G * ATT_D_MAX_KEYS > KG * MAX_G * D ? P * MAX_G * ATT_D_MAX_KEYS
                                                                       : KG * MAX_G * D;
    static_assert(A_FLOATS <= 8192, "attention_decode: shared memory");
    __shared__ __align__(16) float s_a[A_FLOATS];
    __shared__ __align__(16) float s_q[MAX_G * D];
    __shared__ float s_p[MAX_G * ATT_D_MAX_KEYS];
    __shared__ u32 s_slot[ATT_D_MAX_KEYS];
    __shared__ unsigned char s_vis[ATT_D_MAX_KEYS];
    __shared__ float s_sum[MAX_G];
    // ROPE: the step's own key, rotated by this block, and (f16 cache) its value.
    constexpr bool KV16 = sizeof(kv_t) == 2;
    __shared__ __align__(16) float s_knew[ROPE ? D : 4];
    __shared__ __align__(16) float s_vnew[ROPE && KV16 ? D : 4];
    __shared__ double s_cs[ROPE ? D : 2];
    float wq[RopeNorm<D>::NV], wk[RopeNorm<D>::NV];
    // Before the grid wait (the kernel before is rope_store, which writes q and this step's
    // K/V row): the step's tables (staged before the step's kernels run) and the K and V rows
    // of every key an earlier step wrote (positions before the row's own: one row a sequence),
    // through L2 (ld.global.cg: a replayed step must not read an L1 line left from an earlier
    // one); the row's own key after the wait.
    // The block serves hpb of its KV head's `group` query heads (grid.y = n_kv_heads x
    // group / hpb): heads h0 .. h0 + hpb - 1 of the group, each with the same threads and
    // arithmetic whatever hpb is, so a head's output does not depend on it.
    int group = n_heads / n_kv_heads, slices = group / hpb;
    int row = blockIdx.x, kh = blockIdx.y / slices, h0 = (blockIdx.y % slices) * hpb;
    int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const AttDecodeRow dr = att_decode_row(info, row, window);
    int soff = dr.soff, n_kv = dr.n_kv, pos = dr.pos, moff = dr.moff;
    int lo = dr.lo, hi = dr.hi, n = dr.n;
    size_t soff_sc = dr.soff_sc;
    base = att_layer_base(base);
    int kv_dim = n_kv_heads * D, q_dim = n_heads * D;
    for (int jj = tid; jj < n; jj += THREADS) {
        s_slot[jj] = __ldcg(slots + soff + lo + jj);
        s_vis[jj] = moff < 0 || __ldcg(mask + moff + lo + jj);
    }
    __syncthreads();
    int kj = tid & (ATT_D_MAX_KEYS - 1), hf = tid / ATT_D_MAX_KEYS;
    bool kin = kj < n && s_vis[kj];
    // An f16 cache's K and V stay as loaded until used (KvHeld<true>): half the registers
    // (attention_decode_rope_128 needs 128 a thread instead of 212), and no conversion between
    // two loads, which would make each load wait for the one before (ptxas converts into one
    // register in turn: session 30 measured -4 to -7% that way).
    const kv_t* kr = kc + (base + (kin ? s_slot[kj] : 0)) * kv_dim + (size_t)kh * D + hf * PART;
    KvHeld<true> kv[PART / 4];
    if (kin && lo + kj < pos) {
#pragma unroll
        for (int c = 0; c < PART / 4; c++) kv[c].set(kv_ldcg4(kr + 4 * c));
    }
    // V likewise where the registers allow (heads of up to 128 values).
    constexpr bool EARLY_V = D <= 128;
    int vc4 = tid % C4, vkg = tid / C4;
    const kv_t* vb = vc + (size_t)kh * D + 4 * vc4;
    KvHeld<true> vv[KPT];
#pragma unroll
    for (int r = 0; r < KPT; r++) {
        int jj = vkg + r * KG;
        vv[r].set(kv_of4(float4{0.f, 0.f, 0.f, 0.f}));
        if (EARLY_V && jj < n && s_vis[jj] && lo + jj < pos)
            vv[r].set(kv_ldcg4(vb + (base + s_slot[jj]) * kv_dim));
    }
    // The row's new slot: a step table, staged before the step's kernels run.
    u32 own_slot = 0;
    if constexpr (ROPE) {
        attention_decode_rope_early<D, THREADS>(rf, s_cs, wq, wk, row);
        own_slot = __ldcg(rf.new_slots + row);
    }
    GRID_WAIT();
    TL_SMID();
    if constexpr (ROPE) {
        EARLY_LAUNCH();
    } else {
        PLAIN_ATT_EARLY_LAUNCH();
    }
    if (scores != nullptr)
        for (int j = tid; j < n_kv; j += THREADS)
            if (j < lo || j > hi)
                for (int i = 0; i < hpb; i++)
                    scores[soff_sc + (size_t)att_query_head(kh, h0 + i, group, n_kv_heads) * n_kv + j] = NEG_INF;
    if constexpr (ROPE && EARLY_V && !KV16) {
        // f32 cache: the row's own value, v's (the cache row is one block's to write), bitwise
        // what reaches the cache, loaded now (where the other rows' are in registers already).
#pragma unroll
        for (int r = 0; r < KPT; r++) {
            int jj = vkg + r * KG;
            if (jj < n && s_vis[jj] && lo + jj >= pos)
                vv[r].set(kv_of4(__ldcg((const float4*)(rf.v + (size_t)row * kv_dim + (size_t)kh * D + 4 * vc4))));
        }
    }
    if constexpr (ROPE) {
        // rope_store's work for this block's heads; the row's own key is then s_knew's.
        attention_decode_rope_stage<D, THREADS>(q, rf, s_cs, wq, wk, s_a, s_q, s_knew, s_vnew, row, kh, h0,
                                                hpb, group, n_heads, n_kv_heads, own_slot);
        if (kin && lo + kj >= pos) {
#pragma unroll
            for (int c = 0; c < PART / 4; c++) kv[c].set(kv_of4(((const float4*)(s_knew + hf * PART))[c]));
        }
    } else {
        if (kin && lo + kj >= pos) {
#pragma unroll
            for (int c = 0; c < PART / 4; c++) kv[c].set(kv_ldcg4(kr + 4 * c));
        }
        for (int x = tid; x < hpb * D; x += THREADS) {
            int i = x / D, d = x - i * D;
            s_q[x] = q[(size_t)row * q_dim + (size_t)att_query_head(kh, h0 + i, group, n_kv_heads) * D + d];
        }
        __syncthreads();
    }
    constexpr bool HEADS_INNER = D > 128 && sizeof(kv_t) == 2;
    if (kin && HEADS_INNER) {
        // Every head's sums at once, each K value converted once and used at once: a loop over
        // the heads outside would have ptxas convert the whole row before it (heads of 256:
        // 64 more registers). Each head's sums run in the same order either way.
        float a[MAX_G][4];
#pragma unroll
        for (int i = 0; i < MAX_G; i++) a[i][0] = a[i][1] = a[i][2] = a[i][3] = 0.f;
#pragma unroll
        for (int c = 0; c < PART / 4; c++) {
            float4 kk = kv[c].get();
#pragma unroll
            for (int i = 0; i < MAX_G; i++) {
                if (i < hpb) {
                    float4 qq = ((const float4*)(s_q + i * D + hf * PART))[c];
                    a[i][0] += qq.x * kk.x;
                    a[i][1] += qq.y * kk.y;
                    a[i][2] += qq.z * kk.z;
                    a[i][3] += qq.w * kk.w;
                }
            }
        }
#pragma unroll
        for (int i = 0; i < MAX_G; i++)
            if (i < hpb) s_a[(hf * MAX_G + i) * ATT_D_MAX_KEYS + kj] = (a[i][0] + a[i][1]) + (a[i][2] + a[i][3]);
    } else if (kin) {
        for (int i = 0; i < hpb; i++) {
            const float4* qr = (const float4*)(s_q + i * D + hf * PART);
            float a0 = 0.f, a1 = 0.f, a2 = 0.f, a3 = 0.f;
#pragma unroll
            for (int c = 0; c < PART / 4; c++) {
                float4 qq = qr[c], kk = kv[c].get();
                a0 += qq.x * kk.x;
                a1 += qq.y * kk.y;
                a2 += qq.z * kk.z;
                a3 += qq.w * kk.w;
            }
            s_a[(hf * MAX_G + i) * ATT_D_MAX_KEYS + kj] = (a0 + a1) + (a2 + a3);
        }
    }
    __syncthreads();
    if constexpr (ROPE) {
        LATE_LAUNCH();
    } else {
        PLAIN_ATT_LATE_LAUNCH();
    }
    TL_MARK(6);
    for (int i = warp; i < hpb; i += THREADS / 32) {
        int h = att_query_head(kh, h0 + i, group, n_kv_heads);
        float s[ATT_D_MAX_KEYS / 32];
        float m = NEG_INF;
#pragma unroll
        for (int t = 0; t < ATT_D_MAX_KEYS / 32; t++) {
            int jj = lane + 32 * t;
            float v = NEG_INF;
            if (jj < n && s_vis[jj]) {
                float dot = s_a[i * ATT_D_MAX_KEYS + jj];
#pragma unroll
                for (int pp = 1; pp < P; pp++) dot += s_a[(pp * MAX_G + i) * ATT_D_MAX_KEYS + jj];
                v = att_score_path(dot * scale, moff);
            }
            if (jj < n && scores != nullptr) scores[soff_sc + (size_t)h * n_kv + lo + jj] = v;
            s[t] = v;
            m = fmaxf(m, v);
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
        float l = 0.f;
#pragma unroll
        for (int t = 0; t < ATT_D_MAX_KEYS / 32; t++) {
            float p = s[t] == NEG_INF ? 0.f : expf(s[t] - m);
            s_p[i * ATT_D_MAX_KEYS + lane + 32 * t] = p;
            l += p;
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) l += __shfl_xor_sync(0xffffffffu, l, o);
        if (lane == 0) s_sum[i] = l;
    }
    __syncthreads();
    TL_MARK(7);
    {
        int c = vc4, kg = vkg;
#pragma unroll
        for (int r = 0; r < KPT; r++) {
            int jj = kg + r * KG;
            // ROPE: the row's own value is in registers already (f32 cache) or s_vnew's (f16:
            // the rope stage's copy of v, as the cache row holds it).
            if (jj < n && s_vis[jj] && (!EARLY_V || lo + jj >= pos)) {
                if (ROPE && lo + jj >= pos) {
                    if (!EARLY_V && !KV16)
                        vv[r].set(kv_of4(__ldcg((const float4*)(rf.v + (size_t)row * kv_dim + (size_t)kh * D + 4 * c))));
                } else {
                    vv[r].set(kv_ldcg4(vb + (base + s_slot[jj]) * kv_dim));
                }
            }
        }
        for (int i = 0; i < hpb; i++) {
            float4 a = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
            for (int r = 0; r < KPT; r++) {
                int jj = kg + r * KG;
                float p = jj < n ? s_p[i * ATT_D_MAX_KEYS + jj] : 0.f;
                float4 vf = ROPE && KV16 && jj < n && lo + jj == pos && s_vis[jj]
                                ? *(const float4*)(s_vnew + 4 * c)
                                : vv[r].get();
                a.x += p * vf.x;
                a.y += p * vf.y;
                a.z += p * vf.z;
                a.w += p * vf.w;
            }
            *(float4*)(s_a + ((size_t)kg * MAX_G + i) * D + 4 * c) = a;
        }
    }
    __syncthreads();
    TL_MARK(8);
    for (int x0 = 0; x0 < hpb * D; x0 += THREADS) {
        // Whole warps step together (hpb * D is a multiple of 32).
        if (x0 + (tid & ~31) >= hpb * D) break;
        int x = x0 + tid, i = x / D, d = x - i * D;
        float a = 0.f;
        for (int g = 0; g < KG; g++) a += s_a[((size_t)g * MAX_G + i) * D + d];
        float l = s_sum[i];
        float v = l > 0.f ? a / l : 0.f;
        size_t o = (size_t)row * q_dim + (size_t)att_query_head(kh, h0 + i, group, n_kv_heads) * D + d;
        out[o] = v;
        if (q8q != nullptr) q8_block(v, q8q, q8d, o / 32);
    }
    TL_MARK(9);
}

#define ATTENTION_DECODE(D)                                                                      \
    extern "C" __global__ void __launch_bounds__(AttDecodeShape<D>::THREADS) attention_decode_##D( \
        const float* q, const kv_t* kc, const kv_t* vc, const u32* slots, const int* info,       \
        const u8* mask, float* scores, float* out, size_t base, int n_heads, int n_kv_heads,     \
        float scale, int window, int hpb, signed char* q8q, Q8Blk* q8d) {                        \
        RopeFused none{};                                                                         \
        attention_decode_body<D, false>(q, kc, vc, slots, info, mask, scores, out, base, n_heads, \
                                        n_kv_heads, scale, window, hpb, q8q, q8d, none);          \
    }

// With rope_store's work (plan::rope_attention_fuses: heads of 64 and 128 values).
#define ATTENTION_DECODE_ROPE(D)                                                                 \
    extern "C" __global__ void __launch_bounds__(AttDecodeShape<D>::THREADS)                     \
        attention_decode_rope_##D(                                                               \
            const float* q, kv_t* kc, kv_t* vc, const u32* slots, const int* info,               \
            const u8* mask, float* scores, float* out, size_t base, int n_heads, int n_kv_heads, \
            float scale, int window, int hpb, signed char* q8q, Q8Blk* q8d, const float* k,      \
            const float* v, const float* qw, const float* kw, float eps, float* qn, float* kn,   \
            float* qr, float* kr, const u32* new_slots, size_t store_base, const double* cs,     \
            int half, int style, int n_rows) {                                                   \
        /* The cache is read and written through the same pointers: the row's own key's slot is \
           written by one block and read by none (the others use their own copy). */            \
        RopeFused rf{k,  v,  qw, kw, eps, qn, kn, qr, kr, kc, vc, new_slots, store_base, cs,    \
                     half, style, n_rows};                                                       \
        attention_decode_body<D, true>(q, kc, vc, slots, info, mask, scores, out, base, n_heads,  \
                                       n_kv_heads, scale, window, hpb, q8q, q8d, rf);             \
    }
ATTENTION_DECODE(64)
ATTENTION_DECODE(128)
ATTENTION_DECODE(256)
ATTENTION_DECODE_ROPE(64)
ATTENTION_DECODE_ROPE(128)

// THE SHORT DECODE ATTENTION OF HEADS OF 256 ON A CLUSTER (session 41,
// `attention_decode_cl<CQ>_256`, CQ = 4 or 8). attention_decode_256 gives a head's block every key
// of the row, and a head of 256 is bound by its K and V bytes into that one SM (session 29: 256
// KiB at 128 keys; V copied early only queued behind K). Here the row's keys are cut into CQ
// consecutive chunks, one block of a cluster (1, 1, CQ) each, for the same heads: each block's
// scores, softmax over its own keys (its max m, sum l) and O = P V partial, in
// attention_decode_256's thread layout scaled to a chunk of at most ATT_D_MAX_KEYS / CQ keys;
// then, across the cluster's shared memory (distributed shared memory), block r combines
// outputs [r, r + 1) x hpb x D / CQ: M = max m, w = exp(m - M) per block, O = sum(w acc) /
// sum(w l), written and quantized (q8_block) as attention_decode writes them. Each block stores
// its m, l and the combiners' slices of its O into their shared memory (distributed shared
// memory), then one cluster barrier: the combine reads only its own shared memory, and no
// block waits at a second barrier for its peers' reads before it leaves (session 48; the
// combine read its peers' m, l and O after the barrier, in two rounds, then a second barrier). Other sums than
// attention_decode_256's (a function of the row's key count and CQ only: batch-invariant as
// the unsplit one), so other bits; held to verify's bound as it is. The host runs it where it
// has it (sm_90: clusters) for heads of 256 without rope_store's work (plan::decode_cluster).
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
#define ATT_CL_THREADS 256
template <int CQ>
struct AttClShape {
    static constexpr int D = 256;
    static constexpr int G = 4;                      // the most query heads a block serves
    static constexpr int KPB = ATT_D_MAX_KEYS / CQ;  // the most keys a block takes
    static constexpr int P = ATT_CL_THREADS / KPB;   // parts a K row is cut into
    static constexpr int PART = D / P;               // values of a K row a thread takes
    static constexpr int C4 = D / 4;                 // float4s in a row
    static constexpr int KG = ATT_CL_THREADS / C4;   // key groups of O = P V
    static constexpr int KPT = KPB / KG;             // keys a thread of O = P V takes
    static_assert(KPB <= 32 && KPB * P == ATT_CL_THREADS && KPT * KG == KPB, "the block's layout");
    static_assert(G * D / CQ >= 32 && G * D / CQ <= ATT_CL_THREADS, "a block's share of the outputs");
};

// A block's shared memory (every block of the cluster writes r_acc, r_m and r_l).
template <int CQ>
struct AttClSmem {
    using S = AttClShape<CQ>;
    float s_a[S::P * S::G * S::KPB];   // the scores' parts
    float s_pv[S::KG * S::G * S::D];   // the key groups' O sums
    float s_q[S::G * S::D];
    float r_acc[S::G * S::D];          // received: block r's O on this block's outputs, at r * per
    float s_p[S::G * S::KPB];
    float r_m[CQ * S::G], r_l[CQ * S::G];  // received: block r's max and sum of head i, at r * G + i
    u32 s_slot[S::KPB];
    unsigned char s_vis[S::KPB];
};

// The cluster's primitives: the block's rank, a float of block r's shared memory at the address
// `p` has in this block's (read, or written), the cluster's barrier. bench/attn_emu's shim (ATT_CL_EMULATED) has
// its own, with a copy of the shared memory per block of a cluster it runs at once.
#ifndef ATT_CL_EMULATED
template <int CQ>
__device__ __forceinline__ AttClSmem<CQ>& att_cl_smem() {
    __shared__ __align__(16) AttClSmem<CQ> sm;
    return sm;
}
__device__ __forceinline__ unsigned att_cl_rank() {
    unsigned r;
    asm("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return r;
}
__device__ __forceinline__ float att_cl_peer(const float* p, unsigned r) {
    unsigned a, s = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(a) : "r"(s), "r"(r));
    float v;
    asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(a) : "memory");
    return v;
}
__device__ __forceinline__ void att_cl_put(float* p, unsigned r, float v) {
    unsigned a, s = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(a) : "r"(s), "r"(r));
    asm volatile("st.shared::cluster.f32 [%0], %1;" ::"r"(a), "f"(v) : "memory");
}
__device__ __forceinline__ void att_cl_sync() {
    asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}
// A block arrives at its entry and waits before its first store into a peer's shared memory:
// every block of the cluster has then started (a block's shared memory is not there to write
// before it runs).
__device__ __forceinline__ void att_cl_arrive() { asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory"); }
__device__ __forceinline__ void att_cl_wait() { asm volatile("barrier.cluster.wait.aligned;" ::: "memory"); }
#endif

template <int CQ>
__device__ __forceinline__ void attention_decode_cl_body(
    const float* q, const kv_t* kc, const kv_t* vc, const u32* slots, const int* info,
    const u8* mask, float* scores, float* out, size_t base, int n_heads, int n_kv_heads,
    float scale, int window, int hpb, signed char* q8q, Q8Blk* q8d) {
    using S = AttClShape<CQ>;
    constexpr int D = S::D, G = S::G, KPB = S::KPB, P = S::P, PART = S::PART, C4 = S::C4;
    constexpr int KG = S::KG, KPT = S::KPT, THREADS = ATT_CL_THREADS;
    const float NEG_INF = __int_as_float(0xff800000);
    TL_ENTRY();
    att_cl_arrive();
    AttClSmem<CQ>& sm = att_cl_smem<CQ>();
    float *s_a = sm.s_a, *s_pv = sm.s_pv, *s_q = sm.s_q, *r_acc = sm.r_acc, *s_p = sm.s_p;
    float *r_m = sm.r_m, *r_l = sm.r_l;
    u32* s_slot = sm.s_slot;
    unsigned char* s_vis = sm.s_vis;
    const unsigned rank = att_cl_rank();
    int group = n_heads / n_kv_heads, slices = group / hpb;
    int row = blockIdx.x, kh = blockIdx.y / slices, h0 = (blockIdx.y % slices) * hpb;
    int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const AttDecodeRow dr = att_decode_row(info, row, window);
    int soff = dr.soff, n_kv = dr.n_kv, pos = dr.pos, moff = dr.moff;
    int lo = dr.lo, hi = dr.hi, n = dr.n;
    size_t soff_sc = dr.soff_sc;
    base = att_layer_base(base);
    int kv_dim = n_kv_heads * D, q_dim = n_heads * D;
    // This block's keys: the rank-th of CQ consecutive chunks (empty past the row's end).
    int chunk = (n + CQ - 1) / CQ;
    int k0 = min(n, (int)rank * chunk), nb = min(n, k0 + chunk) - k0, j0 = lo + k0;
    for (int jj = tid; jj < nb; jj += THREADS) {
        s_slot[jj] = __ldcg(slots + soff + j0 + jj);
        s_vis[jj] = moff < 0 || __ldcg(mask + moff + j0 + jj);
    }
    __syncthreads();
    // Before the grid wait (the kernel before wrote q and the row's own K/V row): the K and V
    // values this thread multiplies of every key an earlier step wrote, through L2.
    int kj = tid % KPB, hf = tid / KPB;
    bool kin = kj < nb && s_vis[kj];
    const kv_t* kr = kc + (base + (kin ? s_slot[kj] : 0)) * kv_dim + (size_t)kh * D + hf * PART;
    float4 kv[PART / 4];
#pragma unroll
    for (int c = 0; c < PART / 4; c++) kv[c] = float4{0.f, 0.f, 0.f, 0.f};
    if (kin && j0 + kj < pos) {
#pragma unroll
        for (int c = 0; c < PART / 4; c++) kv[c] = kv_f4(kv_ldcg4(kr + 4 * c));
    }
    int vc4 = tid % C4, vkg = tid / C4;
    const kv_t* vb = vc + (size_t)kh * D + 4 * vc4;
    float4 vv[KPT];
#pragma unroll
    for (int r = 0; r < KPT; r++) {
        int jj = vkg + r * KG;
        vv[r] = float4{0.f, 0.f, 0.f, 0.f};
        if (jj < nb && s_vis[jj] && j0 + jj < pos) vv[r] = kv_f4(kv_ldcg4(vb + (base + s_slot[jj]) * kv_dim));
    }
    GRID_WAIT();
    TL_SMID();
    PLAIN_ATT_EARLY_LAUNCH();
    if (scores != nullptr && rank == 0)
        for (int j = tid; j < n_kv; j += THREADS)
            if (j < lo || j > hi)
                for (int i = 0; i < hpb; i++)
                    scores[soff_sc + (size_t)att_query_head(kh, h0 + i, group, n_kv_heads) * n_kv + j] = NEG_INF;
    // The row's own key and value, written by the kernel before.
    if (kin && j0 + kj >= pos) {
#pragma unroll
        for (int c = 0; c < PART / 4; c++) kv[c] = kv_f4(kv_ldcg4(kr + 4 * c));
    }
#pragma unroll
    for (int r = 0; r < KPT; r++) {
        int jj = vkg + r * KG;
        if (jj < nb && s_vis[jj] && j0 + jj >= pos) vv[r] = kv_f4(kv_ldcg4(vb + (base + s_slot[jj]) * kv_dim));
    }
    for (int x = tid; x < hpb * D; x += THREADS) {
        int i = x / D, d = x - i * D;
        s_q[x] = __ldcg(q + (size_t)row * q_dim + (size_t)att_query_head(kh, h0 + i, group, n_kv_heads) * D + d);
    }
    __syncthreads();
    if (kin) {
        for (int i = 0; i < hpb; i++) {
            const float4* qr = (const float4*)(s_q + i * D + hf * PART);
            float a0 = 0.f, a1 = 0.f, a2 = 0.f, a3 = 0.f;
#pragma unroll
            for (int c = 0; c < PART / 4; c++) {
                float4 qq = qr[c], kk = kv[c];
                a0 += qq.x * kk.x;
                a1 += qq.y * kk.y;
                a2 += qq.z * kk.z;
                a3 += qq.w * kk.w;
            }
            s_a[(hf * G + i) * KPB + kj] = (a0 + a1) + (a2 + a3);
        }
    }
    __syncthreads();
    PLAIN_ATT_LATE_LAUNCH();
    TL_MARK(6);
    att_cl_wait();  // every block has started: its shared memory takes stores
    // The block's softmax, a warp a head, a lane a key.
    for (int i = warp; i < hpb; i += THREADS / 32) {
        int h = att_query_head(kh, h0 + i, group, n_kv_heads);
        float v = NEG_INF;
        if (lane < nb && s_vis[lane]) {
            float dot = s_a[i * KPB + lane];
#pragma unroll
            for (int pp = 1; pp < P; pp++) dot += s_a[(pp * G + i) * KPB + lane];
            v = att_score_path(dot * scale, moff);
        }
        if (lane < nb && scores != nullptr) scores[soff_sc + (size_t)h * n_kv + j0 + lane] = v;
        float m = v;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
        float p = v == NEG_INF ? 0.f : expf(v - m);
        if (lane < KPB) s_p[i * KPB + lane] = p;
        float l = p;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) l += __shfl_xor_sync(0xffffffffu, l, o);
        // to every block of the cluster (lane r to block r)
        if (lane < CQ) {
            att_cl_put(&r_m[rank * G + i], lane, m);
            att_cl_put(&r_l[rank * G + i], lane, l);
        }
    }
    __syncthreads();
    TL_MARK(7);
    for (int i = 0; i < hpb; i++) {
        float4 a = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
        for (int r = 0; r < KPT; r++) {
            int jj = vkg + r * KG;
            float p = jj < nb ? s_p[i * KPB + jj] : 0.f;
            a.x += p * vv[r].x;
            a.y += p * vv[r].y;
            a.z += p * vv[r].z;
            a.w += p * vv[r].w;
        }
        *(float4*)(s_pv + ((size_t)vkg * G + i) * D + 4 * vc4) = a;
    }
    __syncthreads();
    int per = hpb * D / CQ;  // a multiple of 32: whole warps, whole q8 blocks
    // The block's O, each value to the block that combines it (output x: block x / per).
    for (int x = tid; x < hpb * D; x += THREADS) {
        int i = x / D, d = x - i * D;
        float a = 0.f;
#pragma unroll
        for (int g = 0; g < KG; g++) a += s_pv[((size_t)g * G + i) * D + d];
        att_cl_put(&r_acc[(int)rank * per + x % per], (unsigned)(x / per), a);
    }
    TL_MARK(8);
    att_cl_sync();  // every block's m, l and O are in
    if (tid < per) {
        int x = (int)rank * per + tid, i = x / D, d = x - i * D;
        float mq[CQ], M = NEG_INF;
#pragma unroll
        for (int r = 0; r < CQ; r++) {
            mq[r] = r_m[r * G + i];
            M = fmaxf(M, mq[r]);
        }
        float L = 0.f, O = 0.f;
#pragma unroll
        for (int r = 0; r < CQ; r++) {
            float w = mq[r] == NEG_INF ? 0.f : expf(mq[r] - M);
            L += r_l[r * G + i] * w;
            O += r_acc[r * per + tid] * w;
        }
        float v = L > 0.f ? O / L : 0.f;
        size_t o = (size_t)row * q_dim + (size_t)att_query_head(kh, h0 + i, group, n_kv_heads) * D + d;
        out[o] = v;
        if (q8q != nullptr) q8_block(v, q8q, q8d, o / 32);
    }
    TL_MARK(9);
}

#define ATTENTION_DECODE_CL(CQ)                                                                   \
    extern "C" __global__ void __cluster_dims__(1, 1, CQ) __launch_bounds__(ATT_CL_THREADS)      \
        attention_decode_cl##CQ##_256(const float* q, const kv_t* kc, const kv_t* vc,           \
                                      const u32* slots, const int* info, const u8* mask,         \
                                      float* scores, float* out, size_t base, int n_heads,       \
                                      int n_kv_heads, float scale, int window, int hpb,          \
                                      signed char* q8q, Q8Blk* q8d) {                            \
        attention_decode_cl_body<CQ>(q, kc, vc, slots, info, mask, scores, out, base, n_heads,  \
                                     n_kv_heads, scale, window, hpb, q8q, q8d);                  \
    }
ATTENTION_DECODE_CL(4)
ATTENTION_DECODE_CL(8)
#endif

// FLASH PREFILL ATTENTION (`attention_flash_<D>`, heads of D = 64 or 128 values): run by `cuda`
// (fast numerics, not deterministic) for steps with several rows of one sequence (prefill),
// on tensor cores. One block per (tile of `tile_rows` batch rows, KV head): its warps hold 16
// row-heads each (a row-head = one query row of one of the KV head's `group` query heads, row
// major), so each K and V row staged in shared memory serves every row-head of the tile. A tile's
// rows split into runs of one sequence, as in `attention_tile`. Per chunk of 64 keys:
//  - scores S = Q K^T by mma.m16n8k8 in TF32 with the 3-term split (x = hi + lo, both TF32;
//    hi hi + hi lo + lo hi): products good to about 2^-21 relative, so the scores keep the f32
//    dot's error bound that verify holds this op to; times scale, -inf where masked; written
//    to `scores` when it is given (the kq tap: the very values the softmax below consumes);
//  - online softmax in f32: the row's running max m, weights p = expf(s - m), the running sum
//    and the output rescaled by expf(m_old - m) when m grows;
//  - O += P V by the same split mma. P stays in registers: the accumulator layout of S is the
//    A operand's once each group of 8 keys is taken in the order (0, 2, 4, 6, 1, 3, 5, 7),
//    which V's B operand follows (a sum over keys in any order is the same sum).
// Out = O / (sum of p) (0 for a row-head without a visible key, as `attention`), staged in
// shared memory so each warp writes, and quantizes for the next matmul (`q8q`), 32 consecutive
// values of a row-head a step, as the other attention kernels do. Per-key probabilities are
// never formed (kq_softmax stays hidden, as with `attention_split`). Not batch-invariant:
// `cuda-det` and `cuda-exact` never run it. Dynamic shared memory (`plan::flash_smem`): K and
// V chunks (64 rows each) and the block's Q rows, rows of D + 4 floats (conflict-free fragment
// loads), then 64 slots.
#define ATT_F_KEYS 64
#define ATT_F_MAX_WARPS 4

__device__ __forceinline__ unsigned tf32_rna(float x) {
#ifdef __CUDA_ARCH__
    unsigned r;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
    return r;
#else
    return emu_tf32_rna(x);
#endif
}

// x as hi + lo, both TF32 (the rest is below 2^-22 |x|).
__device__ __forceinline__ void tf32_split(float x, unsigned& hi, unsigned& lo) {
    hi = tf32_rna(x);
    lo = tf32_rna(x - __uint_as_float(hi));
}

// c += a b for one m16n8k8 TF32 tile (PTX fragment layouts; g = lane / 4, t = lane % 4):
// a = A[g][t], A[g + 8][t], A[g][t + 4], A[g + 8][t + 4]; b = B[t][g], B[t + 4][g];
// c = C[g][2t], C[g][2t + 1], C[g + 8][2t], C[g + 8][2t + 1].
__device__ __forceinline__ void mma_tf32(float* c, const unsigned* a, const unsigned* b) {
#ifdef __CUDA_ARCH__
    asm volatile(
        "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else
    emu_mma_tf32(c, a, b);
#endif
}

// c += a b with both split: the small terms first.
__device__ __forceinline__ void mma_tf32x3(float* c, const float* a, const float* b) {
    unsigned ah[4], al[4], bh[2], bl[2];
#pragma unroll
    for (int i = 0; i < 4; i++) tf32_split(a[i], ah[i], al[i]);
#pragma unroll
    for (int i = 0; i < 2; i++) tf32_split(b[i], bh[i], bl[i]);
    mma_tf32(c, al, bh);
    mma_tf32(c, ah, bl);
    mma_tf32(c, ah, bh);
}

template <int D>
__device__ __forceinline__ void attention_flash_body(
    const float* q, const kv_t* kc, const kv_t* vc, const u32* slots, const int* info,
    const u8* mask, float* scores, float* out, size_t base, int n_heads, int n_kv_heads,
    float scale, int window, int n_rows, int tile_rows, signed char* q8q, Q8Blk* q8d) {
    constexpr int S = D + 4, NT = ATT_F_KEYS / 8, DT = D / 8;
    extern __shared__ __align__(16) unsigned char att_smem[];
    float* ks = (float*)att_smem;
    float* vs = ks + ATT_F_KEYS * S;
    float* qs = vs + ATT_F_KEYS * S;
    int n_warps = blockDim.x >> 5;
    u32* s_slot = (u32*)(qs + 16 * n_warps * S);
    __shared__ size_t m_off[16 * ATT_F_MAX_WARPS], m_o[16 * ATT_F_MAX_WARPS];
    __shared__ int m_lo[16 * ATT_F_MAX_WARPS], m_pos[16 * ATT_F_MAX_WARPS],
        m_moff[16 * ATT_F_MAX_WARPS];
    const float NEG_INF = __int_as_float(0xff800000);
    int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
    int group = n_heads / n_kv_heads, kh = blockIdx.y;
    base = att_layer_base(base);
    int kv_dim = n_kv_heads * D, q_dim = n_heads * D;
    int r_end = min(n_rows, (int)(blockIdx.x + 1) * tile_rows);
    for (int r0 = blockIdx.x * tile_rows; r0 < r_end;) {
        int soff = info[r0 * ROW_INFO], n_kv = info[r0 * ROW_INFO + 1];
        int r1 = att_run_end(info, r0, r_end);
        int nrh = (r1 - r0) * group;
        __syncthreads();  // the previous run is done with the shared tables and rows
        for (int rh = tid; rh < nrh; rh += blockDim.x) {
            int r = r0 + rh / group, gi = rh % group;
            const int* ri = info + r * ROW_INFO;
            int h = att_query_head(kh, gi, group, n_kv_heads);
            int pos = ri[2];
            m_pos[rh] = pos;
            m_lo[rh] = window > 0 ? max(0, pos - window + 1) : 0;
            m_moff[rh] = ri[4];
            m_off[rh] = (size_t)ri[3] + (size_t)h * n_kv;
            m_o[rh] = (size_t)r * q_dim + (size_t)h * D;
        }
        __syncthreads();
        // The run's q rows (a row-head's q and output share an offset), zeros past its end.
        for (int i = tid; i < 16 * n_warps * D; i += blockDim.x) {
            int rh = i / D, d = i - rh * D;
            qs[rh * S + d] = rh < nrh ? q[m_o[rh] + d] : 0.f;
        }
        __syncthreads();
        int tlo = n_kv, thi = -1;
        for (int rh = 0; rh < nrh; rh += group) {
            tlo = min(tlo, m_lo[rh]);
            thi = max(thi, min(m_pos[rh], n_kv - 1));
        }
        if (scores != nullptr) {
            for (int i = tid; i < nrh * n_kv; i += blockDim.x) {
                int rh = i / n_kv, j = i - rh * n_kv;
                if (j < tlo || j > thi) scores[m_off[rh] + j] = NEG_INF;
            }
        }
        // This lane's two row-heads: A = 16 warp + g, B = A + 8.
        int ra = 16 * warp + g, rb = ra + 8;
        bool va = ra < nrh, vb = rb < nrh;
        int lo_a = va ? m_lo[ra] : 1, pos_a = va ? m_pos[ra] : 0, mo_a = va ? m_moff[ra] : -1;
        int lo_b = vb ? m_lo[rb] : 1, pos_b = vb ? m_pos[rb] : 0, mo_b = vb ? m_moff[rb] : -1;
        bool warp_live = 16 * warp < nrh;
        float m_a = NEG_INF, m_b = NEG_INF, l_a = 0.f, l_b = 0.f;
        float o[DT][4];
#pragma unroll
        for (int i = 0; i < DT; i++) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
        for (int c0 = tlo; c0 <= thi; c0 += ATT_F_KEYS) {
            int nc = min(thi + 1 - c0, ATT_F_KEYS);
            __syncthreads();  // the previous chunk's rows are spent
            for (int j = tid; j < nc; j += blockDim.x) s_slot[j] = slots[soff + c0 + j];
            __syncthreads();
            // K and V rows of the chunk; rows past its end are zeros (their weights are 0, and
            // 0 times a stale NaN would not be).
            for (int i = tid; i < ATT_F_KEYS * (D / 4); i += blockDim.x) {
                int j = i / (D / 4), d = 4 * (i - j * (D / 4));
                float4 kv = {0.f, 0.f, 0.f, 0.f}, vv = {0.f, 0.f, 0.f, 0.f};
                if (j < nc) {
                    size_t src = (base + s_slot[j]) * kv_dim + (size_t)kh * D + d;
                    kv = kv_f4(kv_ld4(kc + src));
                    vv = kv_f4(kv_ld4(vc + src));
                }
                *(float4*)(ks + j * S + d) = kv;
                *(float4*)(vs + j * S + d) = vv;
            }
            __syncthreads();
            if (!warp_live) continue;
            float sc[NT][4];
#pragma unroll
            for (int j = 0; j < NT; j++) sc[j][0] = sc[j][1] = sc[j][2] = sc[j][3] = 0.f;
            const float* qa = qs + (16 * warp + g) * S;
#pragma unroll 2
            for (int kk = 0; kk < D; kk += 8) {
                float a[4] = {qa[kk + t], qa[8 * S + kk + t], qa[kk + t + 4], qa[8 * S + kk + t + 4]};
#pragma unroll
                for (int j = 0; j < NT; j++) {
                    const float* kr = ks + (8 * j + g) * S + kk;
                    float b[2] = {kr[t], kr[t + 4]};
                    mma_tf32x3(sc[j], a, b);
                }
            }
            // Scale and mask; the chunk's max per row-head (a quad of lanes holds a row).
            float cm_a = NEG_INF, cm_b = NEG_INF;
#pragma unroll
            for (int j = 0; j < NT; j++) {
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    int col = 8 * j + 2 * t + (e & 1), key = c0 + col;
                    bool is_a = e < 2;
                    int lo = is_a ? lo_a : lo_b, pos = is_a ? pos_a : pos_b, mo = is_a ? mo_a : mo_b;
                    bool vis = col < nc && key >= lo && key <= pos && (mo < 0 || mask[mo + key]);
                    float s = NEG_INF;
                    if (vis) {
                        s = att_score_path(sc[j][e] * scale, mo);
                    }
                    sc[j][e] = s;
                    if (scores != nullptr && col < nc && (is_a ? va : vb))
                        scores[m_off[is_a ? ra : rb] + key] = s;
                    if (is_a) cm_a = fmaxf(cm_a, s);
                    else cm_b = fmaxf(cm_b, s);
                }
            }
#pragma unroll
            for (int x = 1; x <= 2; x <<= 1) {
                cm_a = fmaxf(cm_a, __shfl_xor_sync(0xffffffffu, cm_a, x));
                cm_b = fmaxf(cm_b, __shfl_xor_sync(0xffffffffu, cm_b, x));
            }
            float nm_a = fmaxf(m_a, cm_a), nm_b = fmaxf(m_b, cm_b);
            // Rescale what came before (nothing yet while the max is still -inf).
            float al_a = nm_a == NEG_INF ? 1.f : expf(m_a - nm_a);
            float al_b = nm_b == NEG_INF ? 1.f : expf(m_b - nm_b);
            m_a = nm_a;
            m_b = nm_b;
            l_a *= al_a;
            l_b *= al_b;
#pragma unroll
            for (int i = 0; i < DT; i++) {
                o[i][0] *= al_a;
                o[i][1] *= al_a;
                o[i][2] *= al_b;
                o[i][3] *= al_b;
            }
#pragma unroll
            for (int j = 0; j < NT; j++) {
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    float mm = e < 2 ? m_a : m_b;
                    float p = sc[j][e] == NEG_INF ? 0.f : expf(sc[j][e] - mm);
                    sc[j][e] = p;
                    if (e < 2) l_a += p;
                    else l_b += p;
                }
            }
            // O += P V, keys of group j in the order (0, 2, 4, 6, 1, 3, 5, 7).
#pragma unroll
            for (int j = 0; j < NT; j++) {
                if (8 * j >= nc) break;
                float a[4] = {sc[j][0], sc[j][2], sc[j][1], sc[j][3]};
                const float* v0 = vs + (8 * j + 2 * t) * S + g;
#pragma unroll
                for (int i = 0; i < DT; i++) {
                    float b[2] = {v0[8 * i], v0[S + 8 * i]};
                    mma_tf32x3(o[i], a, b);
                }
            }
        }
        // The row sums (each lane holds a quarter of its rows' weights), then out = O / sum.
#pragma unroll
        for (int x = 1; x <= 2; x <<= 1) {
            l_a += __shfl_xor_sync(0xffffffffu, l_a, x);
            l_b += __shfl_xor_sync(0xffffffffu, l_b, x);
        }
        __syncwarp();
        // The warp's own q rows are spent: its outputs go there.
        float* os = qs + 16 * warp * S;
#pragma unroll
        for (int i = 0; i < DT; i++) {
            int d = 8 * i + 2 * t;
            os[g * S + d] = l_a > 0.f ? o[i][0] / l_a : 0.f;
            os[g * S + d + 1] = l_a > 0.f ? o[i][1] / l_a : 0.f;
            os[(g + 8) * S + d] = l_b > 0.f ? o[i][2] / l_b : 0.f;
            os[(g + 8) * S + d + 1] = l_b > 0.f ? o[i][3] / l_b : 0.f;
        }
        __syncwarp();
        for (int rr = 0; rr < 16 && 16 * warp + rr < nrh; rr++) {
            int rh = 16 * warp + rr;
#pragma unroll
            for (int d0 = 0; d0 < D; d0 += 32) {
                float v = os[rr * S + d0 + lane];
                size_t oi = m_o[rh] + d0 + lane;
                out[oi] = v;
                if (q8q != nullptr) q8_block(v, q8q, q8d, oi / 32);
            }
        }
        r0 = r1;
    }
}

#define ATTENTION_FLASH(D)                                                                       \
    extern "C" __global__ void __launch_bounds__(32 * ATT_F_MAX_WARPS) attention_flash_##D(      \
        const float* q, const kv_t* kc, const kv_t* vc, const u32* slots, const int* info,       \
        const u8* mask, float* scores, float* out, size_t base, int n_heads, int n_kv_heads,     \
        float scale, int window, int n_rows, int tile_rows, signed char* q8q, Q8Blk* q8d) {      \
        GRID_ENTER();                                                                            \
        attention_flash_body<D>(q, kc, vc, slots, info, mask, scores, out, base, n_heads,        \
                                n_kv_heads, scale, window, n_rows, tile_rows, q8q, q8d);         \
    }
ATTENTION_FLASH(64)
ATTENTION_FLASH(128)

// Weight rows [r0, r0 + rows) of W (quantized, `k` values a row) decoded to f32, for the
// tensor-core prefill (cuBLAS multiplies the decoded tile). One thread per value.
extern "C" __global__ void dequant_rows(const u8* W, float* out, int r0, int rows, int k, int ty,
                                       int bs, int ts) { GRID_ENTER();
    size_t idx = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (idx >= (size_t)rows * k) return;
    QType t{ty, bs, ts};
    size_t r = idx / k;
    int j = (int)(idx - r * k);
    size_t row_bytes = (size_t)(k / bs) * ts;
    out[idx] = deq_at(t, W + (r0 + r) * row_bytes, j);
}

// F16 TENSOR-CORE PREFILL: cuBLAS multiplies f16 copies of the activations and of the decoded
// weight rows, accumulating in f32. f16 keeps 11 significant bits, as TF32 does, so the
// rounding of each operand is TF32's; its range is not: a value beyond +-65504 would become
// infinite, so both conversions raise `overflow` (a sticky flag the host reads at the step's
// end and turns into an error) instead of letting the step run on silently.

extern "C" __global__ void to_f16(const float* __restrict__ x, u16* __restrict__ out,
                                  unsigned* __restrict__ overflow, long long n) { GRID_ENTER();
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i >= n) return;
    float v = x[i];
    if (fabsf(v) > 65504.0f) atomicOr(overflow, 1u);
    out[i] = f2h(v);
}

// Eight consecutive values of a row (`j` a multiple of 8, so inside one block of every type,
// and inside one sub-block of the K-quants): `deq`'s operations with the block's scales decoded
// once instead of once per value.
template <int TY>
__device__ __forceinline__ void deq8(const u8* row, int j, float* v) {
    constexpr int BS = block_elems(TY), TS = block_bytes(TY);
    const u8* b = row + (size_t)(j / BS) * TS;
    int e = j % BS;
    if constexpr (TY == T_Q4_K) {
        float d = ldh(b), mn = ldh(b + 2);
        int g = e >> 6, l = e & 63, sc, m;
        scale_min_k4(l < 32 ? 2 * g : 2 * g + 1, b + 4, &sc, &m);
        float d1 = d * (float)sc, m1 = mn * (float)m;
        const u8* qs = b + 16 + 32 * g + (l & 31);
        int shift = l < 32 ? 0 : 4;
#pragma unroll
        for (int i = 0; i < 8; i++) v[i] = d1 * (float)((qs[i] >> shift) & 0xF) - m1;
    } else if constexpr (TY == T_Q5_K) {
        float d = ldh(b), mn = ldh(b + 2);
        int g = e >> 6, l = e & 63, sc, m;
        scale_min_k4(e >> 5, b + 4, &sc, &m);
        float dl = d * (float)sc, ml = mn * (float)m;
        const u8* qs = b + 48 + 32 * g + (l & 31);
        const u8* qh = b + 16 + (l & 31);
        int shift = l < 32 ? 0 : 4, bit = l < 32 ? (1 << (2 * g)) : (2 << (2 * g));
#pragma unroll
        for (int i = 0; i < 8; i++) {
            int q = ((qs[i] >> shift) & 0xF) + ((qh[i] & bit) ? 16 : 0);
            v[i] = dl * (float)q - ml;
        }
    } else if constexpr (TY == T_Q6_K) {
        // e is a multiple of 8: the eight ql and qh bytes lie in one 16-byte run of a plane.
        float d = ldh(q6p_at(b, 208));
        int n = e >> 7, k = (e >> 5) & 3, l = e & 31;
        const u8* ql = q6p_at(b, 64 * n + ((k & 1) ? 32 : 0) + l);
        const u8* qh = q6p_at(b, 128 + 32 * n + l);
        float dl = d * (float)(signed char)*q6p_at(b, 192 + (e >> 4));
        int shift = k < 2 ? 0 : 4;
#pragma unroll
        for (int i = 0; i < 8; i++) {
            int q = (((ql[i] >> shift) & 0xF) | (((qh[i] >> (2 * k)) & 3) << 4)) - 32;
            v[i] = dl * (float)q;
        }
    } else if constexpr (TY == T_Q4_0 || TY == T_Q4_1) {
        constexpr int QO = TY == T_Q4_0 ? 2 : 4;
        float d = ldh(b);
        const u8* qs = b + QO + (e & 15);
        int shift = e < 16 ? 0 : 4;
#pragma unroll
        for (int i = 0; i < 8; i++) {
            int q = (qs[i] >> shift) & 0xF;
            if constexpr (TY == T_Q4_0) v[i] = (float)(q - 8) * d;
            else v[i] = (float)q * d + ldh(b + 2);
        }
    } else if constexpr (TY == T_Q8_0) {
        float d = ldh(q8p_at(b, 0));
#ifdef LOCKSTEP_Q80_GGUF
        const u8* qs = b + 2 + e;
#pragma unroll
        for (int i = 0; i < 8; i++) v[i] = (float)(signed char)qs[i] * d;
#else
        // e is a multiple of 8: the eight quants are one aligned 8-byte run of the plane.
        uint2 w = *(const uint2*)q8p_at(b, 2 + e);
#pragma unroll
        for (int i = 0; i < 8; i++) v[i] = (float)(signed char)(u8)((i < 4 ? w.x : w.y) >> (8 * (i & 3))) * d;
#endif
    } else {
#pragma unroll
        for (int i = 0; i < 8; i++) v[i] = deq(TY, b, e + i);
    }
}

// Weight rows [r0, r0 + rows) decoded to f16 (`k` a multiple of 8): a thread decodes eight
// consecutive values, formed by `deq`'s operations, and stores them as one 16-byte write.
extern "C" __global__ void dequant_rows_f16(const u8* __restrict__ W, u16* __restrict__ out,
                                           unsigned* __restrict__ overflow, int r0, int rows,
                                           int k, int ty, int bs, int ts) { GRID_ENTER();
    size_t e = (blockIdx.x * (size_t)blockDim.x + threadIdx.x) * 8;
    if (e >= (size_t)rows * k) return;
    size_t r = e / k;
    int j = (int)(e - r * k);
    const u8* row = W + (r0 + r) * ((size_t)(k / bs) * ts);
    float v[8];
    switch (ty) {
        case T_Q4_0: deq8<T_Q4_0>(row, j, v); break;
        case T_Q4_1: deq8<T_Q4_1>(row, j, v); break;
        case T_Q5_0: deq8<T_Q5_0>(row, j, v); break;
        case T_Q5_1: deq8<T_Q5_1>(row, j, v); break;
        case T_Q8_0: deq8<T_Q8_0>(row, j, v); break;
        case T_Q4_K: deq8<T_Q4_K>(row, j, v); break;
        case T_Q5_K: deq8<T_Q5_K>(row, j, v); break;
        case T_Q6_K: deq8<T_Q6_K>(row, j, v); break;
        default: {
            QType t{ty, bs, ts};
#pragma unroll
            for (int i = 0; i < 8; i++) v[i] = deq_at(t, row, j + i);
        }
    }
    unsigned w[4];
    bool big = false;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        big |= fabsf(v[2 * i]) > 65504.0f || fabsf(v[2 * i + 1]) > 65504.0f;
        w[i] = (unsigned)f2h(v[2 * i]) | ((unsigned)f2h(v[2 * i + 1]) << 16);
    }
    if (big) atomicOr(overflow, 1u);
    *reinterpret_cast<uint4*>(out + e) = make_uint4(w[0], w[1], w[2], w[3]);
}

// ============================================================================================
// FAST NUMERICS (`Numerics::Fast`, backend name `cuda`): declared arithmetic quant8.
//
// Activations are quantized once per matmul call (`quantize_q8_32`): every run of 32 values of
// a row becomes int8 q with an f32 scale d = max|x| / 127, q = round_half_even(x * (1 / d))
// clamped to +-127 (NaN to 0): the cpu backend's rule (crates/backend-cpu/src/act.rs) and
// verify's `quantize_q8_f32`, so the isolated reference recomputes on the very same values.
// Each 32-block also keeps the integer sum of its q (for the offsets and mins of Q4_1, Q5_1,
// Q4_K, Q5_K).
//
// `mmv_fast_<id>`: one warp per weight row. A row is cut into units (32 values for the 32-value
// block types, 64 for the K-quants); lane L takes units L, L + 32, ... in order. A unit's
// products are exact integer sums (`__dp4a`, no overflow: |sum| < 2^24 with its sub-block scale
// folded in), turned into f32 and added into the lane's one accumulator with explicit FMAs
// (`acc = fma(d_w * d_x, isum, acc)`, then the min or offset term the same way), in the unit's
// fixed order. The 32 lane sums meet in a butterfly (xor 16, 8, 4, 2, 1; f32 adds, identical
// on every lane). A block runs tiles of up to 8 activation rows (8, then 4, 2, 1 for the rest);
// every row has its own accumulators and the same operations whatever the tile, the row count
// or the row's place: batch-invariant bitwise. tests/fast_numerics.rs emulates every operation
// on the host.
//
// Types with a fast kernel: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K. The others
// (Q2_K, Q3_K, IQ4_NL, IQ4_XS) run the exact kernel on the quantized activations turned back
// into f32 (`q8_values`: q * d, the declared values); F32/F16/BF16 weights are not quantized
// under quant8 and run the exact kernel on x itself.
// ============================================================================================

// One warp per 32-block of the activations (n * k / 32 blocks, k a multiple of 32).
extern "C" __global__ void quantize_q8_32(const float* __restrict__ x, signed char* __restrict__ q,
                                          Q8Blk* __restrict__ ds, int nblk) { LATE_ENTER();
    int blk = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (blk >= nblk) return;
    q8_block(x[(size_t)blk * 32 + lane], q, ds, (size_t)blk);
    LATE_LAUNCH();
    TL_MARK(9);
}

// The quantized activations as the f32 values they stand for (q * d), for the exact kernels of
// the types without a fast kernel.
extern "C" __global__ void q8_values(const signed char* __restrict__ q, const Q8Blk* __restrict__ ds,
                                     float* __restrict__ out, int nvals) { GRID_ENTER();
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < nvals) out[i] = (float)q[i] * ds[i >> 5].d;
}

// Bits 0..3 of v to bit 4 of bytes 0..3 (Q5_0 / Q5_1 high bits).
__device__ __forceinline__ int hb4(u32 v) {
    return (int)(((v & 1u) << 4) | ((v & 2u) << 11) | ((v & 4u) << 18) | ((v & 8u) << 25));
}

// The fast kernels' weight loads (FastUnit::load, below), with an evict-first L2 policy: a
// decode step streams every weight through L2 once, and under the default policy those lines
// push out what the step reads again (the logits and their reduction, the KV cache, activations,
// norm weights, tables). Same values (non-coherent loads, as before: weights are written only at
// upload). tg128 with it against without, alternating, three rounds in two calls (session 22,
// H200): the 8B +2.0 to +3.9%, SmolLM2 +0.8 to +3.6%, Llama-1B +0.4 to +2.0%, Gemma-3 -0.4 to
// +4.5%.
// LOCKSTEP_WEIGHTS_EVICT_NORMAL (LOCKSTEP_CUDA_EVICT_FIRST=0) loads them with the default
// policy, for comparisons.
#ifndef LOCKSTEP_WEIGHTS_EVICT_NORMAL
__device__ __forceinline__ unsigned long long wpol() {
    unsigned long long p;
    asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(p));
    return p;
}
// One scalar load of PTX type PT into a C of constraint CON, under the policy.
#define LDW_SCALAR(NAME, C, PT, CON)                                                             \
    __device__ __forceinline__ C NAME(const void* p) {                                           \
        C v;                                                                                     \
        asm("ld.global.nc.L2::cache_hint." PT " %0, [%1], %2;" : "=" CON(v) : "l"(p), "l"(wpol())); \
        return v;                                                                                \
    }
LDW_SCALAR(ldw1, u32, "u8", "r")
LDW_SCALAR(ldw2, u16, "u16", "h")
LDW_SCALAR(ldw4, u32, "u32", "r")
__device__ __forceinline__ uint2 ldw8(const void* p) {
    uint2 v;
    asm("ld.global.nc.L2::cache_hint.v2.u32 {%0, %1}, [%2], %3;" : "=r"(v.x), "=r"(v.y) : "l"(p), "l"(wpol()));
    return v;
}
__device__ __forceinline__ uint4 ldw16(const void* p) {
    uint4 v;
    asm("ld.global.nc.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
        : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
        : "l"(p), "l"(wpol()));
    return v;
}
#else
__device__ __forceinline__ u32 ldw1(const void* p) { return *(const u8*)p; }
__device__ __forceinline__ u16 ldw2(const void* p) { return ld16((const u8*)p); }
__device__ __forceinline__ u32 ldw4(const void* p) { return *(const u32*)p; }
__device__ __forceinline__ uint2 ldw8(const void* p) { return *(const uint2*)p; }
__device__ __forceinline__ uint4 ldw16(const void* p) { return *(const uint4*)p; }
#endif
__device__ __forceinline__ float ldwh(const u8* p) { return h2f(ldw2(p)); }
__device__ __forceinline__ int ldw_a4(const u8* p) { return (int)ldw4(p); }
// NW little-endian words from a 2-byte aligned address: NW + 1 aligned 4-byte loads and funnel
// shifts (instead of 2 NW 2-byte loads). May read up to 3 bytes past the last word, still
// inside the row's next block or the weight's padding (plan::WEIGHT_PAD, 16 bytes).
template <int NW>
__device__ __forceinline__ void ldw_words_a2(const u8* p, int* out) {
    const u8* a = (const u8*)((size_t)p & ~(size_t)3);
    u32 sh = ((u32)(size_t)p & 3u) * 8u;
    u32 w[NW + 1];
#pragma unroll
    for (int i = 0; i <= NW; i++) w[i] = ldw4(a + 4 * i);
#pragma unroll
    for (int i = 0; i < NW; i++) out[i] = (int)__funnelshift_r(w[i], w[i + 1], sh);
}

// A unit of weights in registers: `load` reads unit u of a row, `dot` adds its product with
// one activation row (xq, xd: the row's quants and block scales) into acc.
template <int TY>
struct FastUnit;

template <>
struct FastUnit<T_Q4_0> {
    static constexpr int E = 32;
    float d;
    int q[4];
    __device__ __forceinline__ void load(const u8* row, int u) {
        const u8* b = row + (size_t)u * 18;
        d = ldwh(b);
        ldw_words_a2<4>(b + 2, q);
    }
    __device__ __forceinline__ float dot(const signed char* xq, const Q8Blk* xd, int u, float acc) const {
        const int4* xv = (const int4*)(xq + (size_t)u * 32);
        int4 x0 = xv[0], x1 = xv[1];
        int xa[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
        int s = 0;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            s = __dp4a(q[i] & 0x0F0F0F0F, xa[i], s);
            s = __dp4a((q[i] >> 4) & 0x0F0F0F0F, xa[4 + i], s);
        }
        Q8Blk a = xd[u];
        s -= 8 * a.s;
        return __fmaf_rn(d * a.d, (float)s, acc);
    }
};

template <>
struct FastUnit<T_Q4_1> {
    static constexpr int E = 32;
    float d, m;
    int q[4];
    __device__ __forceinline__ void load(const u8* row, int u) {
        const u8* b = row + (size_t)u * 20;
        d = ldwh(b);
        m = ldwh(b + 2);
#pragma unroll
        for (int i = 0; i < 4; i++) q[i] = ldw_a4(b + 4 + 4 * i);
    }
    __device__ __forceinline__ float dot(const signed char* xq, const Q8Blk* xd, int u, float acc) const {
        const int4* xv = (const int4*)(xq + (size_t)u * 32);
        int4 x0 = xv[0], x1 = xv[1];
        int xa[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
        int s = 0;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            s = __dp4a(q[i] & 0x0F0F0F0F, xa[i], s);
            s = __dp4a((q[i] >> 4) & 0x0F0F0F0F, xa[4 + i], s);
        }
        Q8Blk a = xd[u];
        acc = __fmaf_rn(d * a.d, (float)s, acc);
        return __fmaf_rn(m * a.d, (float)a.s, acc);
    }
};

template <>
struct FastUnit<T_Q5_0> {
    static constexpr int E = 32;
    float d;
    int q[8];
    __device__ __forceinline__ void load(const u8* row, int u) {
#ifdef LOCKSTEP_Q50_GGUF
        const u8* b = row + (size_t)u * 22;
        d = ldwh(b);
        int w[5];  // qh, then the 16 quant bytes
        ldw_words_a2<5>(b + 2, w);
        u32 qh = (u32)w[0];
#pragma unroll
        for (int i = 0; i < 4; i++) {
            int v = w[1 + i];
            q[i] = (v & 0x0F0F0F0F) | hb4(qh >> (4 * i));
            q[4 + i] = ((v >> 4) & 0x0F0F0F0F) | hb4(qh >> (16 + 4 * i));
        }
#else
        // the device's blocks (Q50_BYTES): three aligned 8-byte loads, each word's high bits
        // one shift and one mask from qh'
        const u8* b = row + (size_t)u * 24;
        uint2 h = ldw8(b), v0 = ldw8(b + 8), v1 = ldw8(b + 16);
        d = h2f((u16)(h.x & 0xFFFFu));
        u32 qh = h.y, v[4] = {v0.x, v0.y, v1.x, v1.y};
#pragma unroll
        for (int i = 0; i < 4; i++) {
            q[i] = (int)((v[i] & 0x0F0F0F0Fu) | ((qh >> i) & 0x10101010u));
            q[4 + i] = (int)(((v[i] >> 4) & 0x0F0F0F0Fu) | ((qh << (4 - i)) & 0x10101010u));
        }
#endif
    }
    __device__ __forceinline__ float dot(const signed char* xq, const Q8Blk* xd, int u, float acc) const {
        const int4* xv = (const int4*)(xq + (size_t)u * 32);
        int4 x0 = xv[0], x1 = xv[1];
        int xa[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
        int s = 0;
#pragma unroll
        for (int i = 0; i < 8; i++) s = __dp4a(q[i], xa[i], s);
        Q8Blk a = xd[u];
        s -= 16 * a.s;
        return __fmaf_rn(d * a.d, (float)s, acc);
    }
};

template <>
struct FastUnit<T_Q5_1> {
    static constexpr int E = 32;
    float d, m;
    int q[8];
    __device__ __forceinline__ void load(const u8* row, int u) {
        const u8* b = row + (size_t)u * 24;
        d = ldwh(b);
        m = ldwh(b + 2);
        u32 qh = (u32)ldw_a4(b + 4);
#pragma unroll
        for (int i = 0; i < 4; i++) {
            int v = ldw_a4(b + 8 + 4 * i);
            q[i] = (v & 0x0F0F0F0F) | hb4(qh >> (4 * i));
            q[4 + i] = ((v >> 4) & 0x0F0F0F0F) | hb4(qh >> (16 + 4 * i));
        }
    }
    __device__ __forceinline__ float dot(const signed char* xq, const Q8Blk* xd, int u, float acc) const {
        const int4* xv = (const int4*)(xq + (size_t)u * 32);
        int4 x0 = xv[0], x1 = xv[1];
        int xa[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
        int s = 0;
#pragma unroll
        for (int i = 0; i < 8; i++) s = __dp4a(q[i], xa[i], s);
        Q8Blk a = xd[u];
        acc = __fmaf_rn(d * a.d, (float)s, acc);
        return __fmaf_rn(m * a.d, (float)a.s, acc);
    }
};

template <>
struct FastUnit<T_Q8_0> {
    static constexpr int E = 32;
    float d;
    int q[8];
    __device__ __forceinline__ void load(const u8* row, int u) {
        const u8* b = row + (size_t)u * 34;
#ifdef LOCKSTEP_Q80_GGUF
        d = ldwh(b);
        ldw_words_a2<8>(b + 2, q);
#else
        int idx = q8p_member(b);
        const u8* g = b - idx * 34;
        uint4 a = ldw16(g + 32 * idx), c = ldw16(g + 32 * idx + 16);
        d = ldwh(g + 512 + 2 * idx);
        q[0] = (int)a.x; q[1] = (int)a.y; q[2] = (int)a.z; q[3] = (int)a.w;
        q[4] = (int)c.x; q[5] = (int)c.y; q[6] = (int)c.z; q[7] = (int)c.w;
#endif
    }
    __device__ __forceinline__ float dot(const signed char* xq, const Q8Blk* xd, int u, float acc) const {
        const int4* xv = (const int4*)(xq + (size_t)u * 32);
        int4 x0 = xv[0], x1 = xv[1];
        int xa[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
        int s = 0;
#pragma unroll
        for (int i = 0; i < 8; i++) s = __dp4a(q[i], xa[i], s);
        return __fmaf_rn(d * xd[u].d, (float)s, acc);
    }
};

// Q4_K and Q5_K: a unit is a pair of 32-value sub-blocks (2jp, 2jp + 1) of one super-block;
// header (d, dmin, 12 scale bytes) and quants in 16-byte loads (blocks of 144 / 176 bytes keep
// 16-byte alignment). Per sub-block: acc = fma(d * dx, sc * isum, acc), then
// acc = fma(dmin * dx, -(m * sum(xq)), acc).
template <int TY>
struct FastUnitK45 {
    static constexpr int E = 64;
    float d, dmin;
    int sc[2], mn[2];
    int q[16];  // 8 ints of sub-block 2jp, 8 of 2jp + 1, as values 0..31
    __device__ __forceinline__ void load(const u8* row, int u) {
        constexpr int TS = TY == T_Q4_K ? 144 : 176;
        int sb = u >> 2, jp = u & 3;
        const u8* b = row + (size_t)sb * TS;
        uint4 h = ldw16(b);
        decode_scales(h, jp);
        const u8* qs = b + (TY == T_Q4_K ? 16 : 48) + 32 * jp;
        uint4 q0 = ldw16(qs), q1 = ldw16(qs + 16);
        decode_quants(q0, q1);
        if constexpr (TY == T_Q5_K) {
            uint4 h0 = ldw16(b + 16), h1 = ldw16(b + 32);
            u32 hv[8] = {h0.x, h0.y, h0.z, h0.w, h1.x, h1.y, h1.z, h1.w};
#pragma unroll
            for (int i = 0; i < 8; i++) {
                q[i] |= (int)(((hv[i] >> (2 * jp)) & 0x01010101u) << 4);
                q[8 + i] |= (int)(((hv[i] >> (2 * jp + 1)) & 0x01010101u) << 4);
            }
        }
    }
    // The super-block's scales and mins for sub-blocks 2jp and 2jp + 1, from its header h.
    __device__ __forceinline__ void decode_scales(uint4 h, int jp) {
        d = h2f((u16)(h.x & 0xFFFF));
        dmin = h2f((u16)(h.x >> 16));
        // scale_min_k4 on the 12 scale bytes (h.y: bytes 0..3, h.z: 4..7, h.w: 8..11), with
        // shifts instead of a byte array (jp is not a compile-time index).
#pragma unroll
        for (int s = 0; s < 2; s++) {
            int j = 2 * jp + s, i = j & 3;
            u32 a = (h.y >> (8 * i)) & 0xFF, c = (h.z >> (8 * i)) & 0xFF, e = (h.w >> (8 * i)) & 0xFF;
            if (j < 4) {
                sc[s] = (int)(a & 63);
                mn[s] = (int)(c & 63);
            } else {
                sc[s] = (int)((e & 0xF) | ((a >> 6) << 4));
                mn[s] = (int)((e >> 4) | ((c >> 6) << 4));
            }
        }
#ifdef FAULT_Q4K_WRONG_SCALE
        if constexpr (TY == T_Q4_K) {
            // seeded fault: each sub-block takes its neighbour's scale and min (as in the
            // exact kernel's decode_lane)
            int t = sc[0]; sc[0] = sc[1]; sc[1] = t;
            t = mn[0]; mn[0] = mn[1]; mn[1] = t;
        }
#endif
    }
    // A unit from fetch's bytes (Q4_K).
    __device__ __forceinline__ void decode(const uint4* raw, int jp) {
        decode_scales(raw[0], jp);
        decode_quants(raw[1], raw[2]);
    }
    // The unit's 32 quant bytes as values 0..15 (Q5_K's high bits are load's).
    __device__ __forceinline__ void decode_quants(uint4 q0, uint4 q1) {
        u32 v[8] = {q0.x, q0.y, q0.z, q0.w, q1.x, q1.y, q1.z, q1.w};
#pragma unroll
        for (int i = 0; i < 8; i++) {
            q[i] = (int)(v[i] & 0x0F0F0F0Fu);
            q[8 + i] = (int)((v[i] >> 4) & 0x0F0F0F0Fu);
        }
    }
    // A Q4_K unit's bytes (load's three loads): the super-block's 16-byte header and the unit's
    // 32 quant bytes, for mmv_pre1r / mmv_pre2r, whose units are all in flight before any is
    // decoded (decode_scales, then decode_quants, as load does).
    __device__ __forceinline__ static void fetch(const u8* row, int u, uint4* raw) {
        static_assert(TY == T_Q4_K, "fetch alone: Q4_K (Q5_K has its high bits too)");
        const u8* b = row + (size_t)(u >> 2) * 144;
        const u8* qs = b + 16 + 32 * (u & 3);
        raw[0] = ldw16(b);
        raw[1] = ldw16(qs);
        raw[2] = ldw16(qs + 16);
    }
    __device__ __forceinline__ float dot(const signed char* xq, const Q8Blk* xd, int u, float acc) const {
        int sb = u >> 2, jp = u & 3;
#pragma unroll
        for (int s = 0; s < 2; s++) {
            int ab = sb * 8 + 2 * jp + s;
            const int4* xv = (const int4*)(xq + (size_t)ab * 32);
            int4 x0 = xv[0], x1 = xv[1];
            int xa[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
            int is = 0;
#pragma unroll
            for (int i = 0; i < 8; i++) is = __dp4a(q[8 * s + i], xa[i], is);
            Q8Blk a = xd[ab];
            acc = __fmaf_rn(d * a.d, (float)(sc[s] * is), acc);
            acc = __fmaf_rn(dmin * a.d, (float)(-(mn[s] * a.s)), acc);
        }
        return acc;
    }
};
template <>
struct FastUnit<T_Q4_K> : FastUnitK45<T_Q4_K> {};
template <>
struct FastUnit<T_Q5_K> : FastUnitK45<T_Q5_K> {};

// Q6_K: unit u = (super-block u / 4, half n = (u / 2) & 1, h = u & 1): values
// 128n + 32k + 16h + (0..16) for k = 0..3, four 16-value runs each with its int8 scale, each
// in activation block 8 sb + 4n + k. On the device's planes (q6p_at): 3 x 16 + 4 + 2 bytes,
// aligned; in GGUF's 210-byte blocks (LOCKSTEP_Q6K_GGUF, 2-byte aligned): ldw_words_a2.
template <>
struct FastUnit<T_Q6_K> {
    static constexpr int E = 64;
    float d;
    int sc[4];
    int q[16];  // run k: ints 4k .. 4k + 3, as values -32..31
    __device__ __forceinline__ void load(const u8* row, int u) {
        int sb = u >> 2, n = (u >> 1) & 1, h = u & 1;
        const u8* b = row + (size_t)sb * 210;
        int wa[4], wb[4], wh[4];
#ifdef LOCKSTEP_Q6K_GGUF
        d = ldwh(b + 208);
#pragma unroll
        for (int k = 0; k < 4; k++) sc[k] = (int)(signed char)ldw1(b + 192 + 8 * n + 2 * k + h);
        ldw_words_a2<4>(b + 64 * n + 16 * h, wa);
        ldw_words_a2<4>(b + 64 * n + 32 + 16 * h, wb);
        ldw_words_a2<4>(b + 128 + 32 * n + 16 * h, wh);
#else
        int idx = q6p_member(b), j = 4 * idx + (u & 3);
        const u8* g = b - idx * 210;
        uint4 a = ldw16(g + 16 * j), c = ldw16(g + 512 + 16 * j), hh = ldw16(g + 1024 + 16 * j);
        u32 s4 = ldw4(g + 1536 + 4 * j);
        d = ldwh(g + 1664 + 2 * idx);
#pragma unroll
        for (int k = 0; k < 4; k++) sc[k] = (int)(signed char)(u8)(s4 >> (8 * k));
        wa[0] = (int)a.x; wa[1] = (int)a.y; wa[2] = (int)a.z; wa[3] = (int)a.w;
        wb[0] = (int)c.x; wb[1] = (int)c.y; wb[2] = (int)c.z; wb[3] = (int)c.w;
        wh[0] = (int)hh.x; wh[1] = (int)hh.y; wh[2] = (int)hh.z; wh[3] = (int)hh.w;
#endif
#pragma unroll
        for (int i = 0; i < 4; i++) {
            u32 A = (u32)wa[i], B = (u32)wb[i], H = (u32)wh[i];
            q[i] = (int)__vsub4((A & 0x0F0F0F0Fu) | ((H << 4) & 0x30303030u), 0x20202020u);
            q[4 + i] = (int)__vsub4((B & 0x0F0F0F0Fu) | ((H << 2) & 0x30303030u), 0x20202020u);
            q[8 + i] = (int)__vsub4(((A >> 4) & 0x0F0F0F0Fu) | (H & 0x30303030u), 0x20202020u);
            q[12 + i] = (int)__vsub4(((B >> 4) & 0x0F0F0F0Fu) | ((H >> 2) & 0x30303030u), 0x20202020u);
        }
    }
    __device__ __forceinline__ float dot(const signed char* xq, const Q8Blk* xd, int u, float acc) const {
        int sb = u >> 2, n = (u >> 1) & 1, h = u & 1;
#pragma unroll
        for (int k = 0; k < 4; k++) {
            int ab = sb * 8 + 4 * n + k;
            int4 x = *(const int4*)(xq + (size_t)ab * 32 + 16 * h);
            int is = 0;
            is = __dp4a(q[4 * k], x.x, is);
            is = __dp4a(q[4 * k + 1], x.y, is);
            is = __dp4a(q[4 * k + 2], x.z, is);
            is = __dp4a(q[4 * k + 3], x.w, is);
            acc = __fmaf_rn(d * xd[ab].d, (float)(sc[k] * is), acc);
        }
        return acc;
    }
};

// The butterfly every lane ends with the same value of.
__device__ __forceinline__ float warp_sum_fixed(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = v + __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// Row r of W (k values, whole blocks) in its encoded bytes.
template <int TY>
__device__ __forceinline__ const u8* fast_row_ptr(const u8* W, int r, int k) {
    return W + (size_t)r * ((size_t)(k / block_elems(TY)) * block_bytes(TY));
}

// NT activation rows t .. t + NT - 1 against weight row r (and r of W2 with PAIR). With EARLY
// the kernel (launched early, GRID_LAUNCH at its entry) has not yet waited for the grid before
// it: it waits here, before its first weight load, then runs every unit of its lane alike.
// Until session 46 the source loaded each lane's first unit before this wait; ptxas keeps no
// non-coherent load ahead of a griddepcontrol.wait that follows it and scheduled the wait
// first, so the default build never ran that order (the timeline build did: its stamps kept the
// loads in place). Every way of making it run measured slower on the H200 (tg128 alternating:
// the wait pinned after the loads' return, Gemma-3 -2.8%, Llama-1B -7.4%, the 8B -2.9%; the
// norm-fused kernels' order, -0.4 / -4.2 / -1.5%; the loads issued before the wait and decoded
// after it, -1.0 / -4.7 / -1.7%; bench/session46/early_weight_variants.patch): the loads then
// compete with the kernel before, which is on the step's critical path. (The norm-fused
// kernels' first units do load before their wait, and gain: loaded after the norm, Gemma-3
// lost 7.5%.) Written as it runs (the wait, then one loop), the 8B went from 462-465 to 489-492
// tok/s, Llama-1B -0.9% and Gemma-3 -0.5% (both within a round's spread; a peeled first unit
// and two units in flight were slower: bench/session46/mmv_peel_pipe.patch; BENCHMARKS.md,
// session 46). With ACT_OUT (and PAIR) returns, in
// every lane, the last row's activation (the value written to y3: the butterfly leaves every
// lane the same sums), else 0. FIRST: the caller loaded the lane's first unit (unit `lane`, when the row has one) into
// first / first2 before its grid wait and whatever it ran after (a fused kernel's prologue,
// which writes the activations xq / xd point at: it must end before this call, whose
// __restrict__ promises that nothing else writes them).
template <int TY, int NT, bool PAIR, bool EARLY = false, bool ACT_OUT = false,
          bool FIRST = false>
__device__ __forceinline__ float fast_rows(const u8* __restrict__ W, const u8* __restrict__ W2,
                                          const signed char* __restrict__ xq,
                                          const Q8Blk* __restrict__ xd, float* __restrict__ y,
                                          float* __restrict__ y2, float* __restrict__ y3, int t,
                                          int k, int m, int r, int act, double cgelu,
                                          const FastUnit<TY>* first = nullptr,
                                          const FastUnit<TY>* first2 = nullptr) {
    constexpr int E = FastUnit<TY>::E;
    constexpr int BS = block_elems(TY), TS = block_bytes(TY);
    int lane = threadIdx.x & 31;
    size_t row_bytes = (size_t)(k / BS) * TS;
    const u8* row = W + (size_t)r * row_bytes;
    const u8* row2 = PAIR ? W2 + (size_t)r * row_bytes : nullptr;
    int units = k / E, kb = k >> 5;
    float acc[NT], acc2[PAIR ? NT : 1];
#pragma unroll
    for (int i = 0; i < NT; i++) acc[i] = 0.0f;
#pragma unroll
    for (int i = 0; i < (PAIR ? NT : 1); i++) acc2[i] = 0.0f;
    // One unit: its weights loaded, then the dots.
    auto unit = [&](int u) {
        FastUnit<TY> w, w2;
        w.load(row, u);
        if constexpr (PAIR) w2.load(row2, u);
        if constexpr (PAIR) {
#pragma unroll
            for (int i = 0; i < NT; i++) {
                const signed char* xr = xq + (size_t)(t + i) * k;
                const Q8Blk* dr = xd + (size_t)(t + i) * kb;
                acc[i] = w.dot(xr, dr, u, acc[i]);
                acc2[i] = w2.dot(xr, dr, u, acc2[i]);
            }
        } else {
#pragma unroll
            for (int i = 0; i < NT; i++)
                acc[i] = w.dot(xq + (size_t)(t + i) * k, xd + (size_t)(t + i) * kb, u, acc[i]);
        }
    };
    int u0 = lane;
    if constexpr (FIRST) {
        static_assert(NT == 1, "a preloaded first unit serves one activation row");
        if (u0 < units) {
            acc[0] = first->dot(xq, xd, u0, acc[0]);
            if constexpr (PAIR) acc2[0] = first2->dot(xq, xd, u0, acc2[0]);
        }
        u0 += 32;
    } else if constexpr (EARLY) {
        GRID_WAIT();
        TL_SMID();
    }
    for (int u = u0; u < units; u += 32) unit(u);
    if (acc[0] != acc[0]) TL_MARK(0);
    TL_MARK(5);
    float last = 0.0f;
#pragma unroll
    for (int i = 0; i < NT; i++) {
        float v = warp_sum_fixed(acc[i]);
        if constexpr (PAIR) {
            float uu = warp_sum_fixed(acc2[i]);
            if (ACT_OUT || lane == 0) {
                // act_mul's operations, so the fused output is bitwise the separate ops'.
                last = act_apply(v, uu, act, cgelu);
            }
            if (lane == 0) {
                size_t o = (size_t)(t + i) * m + r;
                y[o] = v;
                y2[o] = uu;
                y3[o] = last;
            }
        } else {
            if (lane == 0) y[(size_t)(t + i) * m + r] = v;
        }
    }
    TL_MARK(9);
    return last;
}

template <int TY, bool PAIR, bool ONE>
__device__ __forceinline__ void fast_tiles(const u8* __restrict__ W, const u8* __restrict__ W2,
                                           const signed char* __restrict__ xq,
                                           const Q8Blk* __restrict__ xd, float* __restrict__ y,
                                           float* __restrict__ y2, float* __restrict__ y3, int n,
                                           int k, int m, int r, int act, double cgelu);

// One warp per weight row (blockDim.x / 32 rows per block, grid.x over rows); grid.y strides
// over tiles of 8 activation rows. A tile short of 8 rows (only the last) runs as 4 + 2 + 1.
template <int TY, bool PAIR, bool ONE>
__device__ __forceinline__ void mmv_fast_body(const u8* __restrict__ W, const u8* __restrict__ W2,
                                              const signed char* __restrict__ xq,
                                              const Q8Blk* __restrict__ xd, float* __restrict__ y,
                                              float* __restrict__ y2, float* __restrict__ y3, int n,
                                              int k, int m, int act, double cgelu) {
    int r = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (ONE && !PAIR) TL_PARAM_M(m);
    if (r >= m) return;  // a whole warp leaves together: the shuffles stay full-warp
    if (ONE && !PAIR) TL_PARAM_K(k);
    fast_tiles<TY, PAIR, ONE>(W, W2, xq, xd, y, y2, y3, n, k, m, r, act, cgelu);
}

// Weight row r against every activation row, in tiles (see mmv_fast_body).
template <int TY, bool PAIR, bool ONE>
__device__ __forceinline__ void fast_tiles(const u8* __restrict__ W, const u8* __restrict__ W2,
                                           const signed char* __restrict__ xq,
                                           const Q8Blk* __restrict__ xd, float* __restrict__ y,
                                           float* __restrict__ y2, float* __restrict__ y3, int n,
                                           int k, int m, int r, int act, double cgelu) {
    if constexpr (ONE) {
        fast_rows<TY, 1, PAIR, true>(W, W2, xq, xd, y, y2, y3, 0, k, m, r, act, cgelu);
        return;
    }
    for (int t0 = blockIdx.y * 8; t0 < n; t0 += gridDim.y * 8) {
        int nt = min(8, n - t0), t = t0;
        if (nt == 8) {
            fast_rows<TY, 8, PAIR>(W, W2, xq, xd, y, y2, y3, t, k, m, r, act, cgelu);
            continue;
        }
        if (nt & 4) {
            fast_rows<TY, 4, PAIR>(W, W2, xq, xd, y, y2, y3, t, k, m, r, act, cgelu);
            t += 4;
        }
        if (nt & 2) {
            fast_rows<TY, 2, PAIR>(W, W2, xq, xd, y, y2, y3, t, k, m, r, act, cgelu);
            t += 2;
        }
        if (nt & 1) fast_rows<TY, 1, PAIR>(W, W2, xq, xd, y, y2, y3, t, k, m, r, act, cgelu);
    }
}

// Up to three weights of one type and row length against the same activations in one launch
// (q, k and v): grid.x runs over the rows of all three, each warp takes its row of its weight
// and does exactly what mmv_fast_<id> does for that row.
template <int TY, bool ONE>
__device__ __forceinline__ void mmv3_fast_body(const u8* __restrict__ W0, const u8* __restrict__ W1,
                                               const u8* __restrict__ W2,
                                               const signed char* __restrict__ xq,
                                               const Q8Blk* __restrict__ xd, float* y0, float* y1,
                                               float* y2, int n, int k, int m0, int m1, int m2) {
    int r = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (r < m0) {
        fast_tiles<TY, false, ONE>(W0, nullptr, xq, xd, y0, nullptr, nullptr, n, k, m0, r, 0, 0.0);
    } else if (r < m0 + m1) {
        fast_tiles<TY, false, ONE>(W1, nullptr, xq, xd, y1, nullptr, nullptr, n, k, m1, r - m0, 0, 0.0);
    } else if (r < m0 + m1 + m2) {
        fast_tiles<TY, false, ONE>(W2, nullptr, xq, xd, y2, nullptr, nullptr, n, k, m2, r - m0 - m1, 0,
                              0.0);
    }
}

// A fast kernel's entry: the one-row (decode) builds let the next kernel launch and leave the
// wait to fast_rows, before their first weight load; the tile builds wait here.
template <bool ONE>
__device__ __forceinline__ void fast_enter() {
    if constexpr (ONE) TL_ENTRY();
    if constexpr (ONE) GRID_LAUNCH();
    else GRID_ENTER();
}

// Per type with a fast kernel: mmv_fast_<id> (matmul) and gate_up_fast_<id> (the fused
// gate/up/activation: one warp per row of each weight, the same activation rows).
// A diagnostic delay (session 51): LOCKSTEP_DELAY_MMV1=N (one-row mmv_fast1) and
// LOCKSTEP_DELAY_MMV2R=N (mmv_fast2r) keep every warp N ns past its rows, so the kernel ends
// N ns later: what tg128 loses says how much of the kernel's time is on the step's path.
// (Only in such a build: the emulators compile this section as host C++.)
#if defined(LOCKSTEP_DELAY_MMV1) || defined(LOCKSTEP_DELAY_MMV2R)
__device__ __forceinline__ void diag_delay_ns(unsigned long long ns) {
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    } while (t - t0 < ns);
}
#endif
#ifdef LOCKSTEP_DELAY_MMV1
#define DELAY_MMV1(ONE) if (ONE) diag_delay_ns(LOCKSTEP_DELAY_MMV1);
#else
#define DELAY_MMV1(ONE)
#endif
#ifdef LOCKSTEP_DELAY_MMV2R
#define DELAY_MMV2R() diag_delay_ns(LOCKSTEP_DELAY_MMV2R);
#else
#define DELAY_MMV2R()
#endif
#define FAST_KERNELS(TY, NAME, ONE)                                                             \
    extern "C" __global__ void __launch_bounds__(128)                                           \
        mmv_##NAME##_##TY(const u8* W, const signed char* xq, const Q8Blk* xd, float* y, int n, \
                          int k, int m) {                                                       \
        fast_enter<ONE>();                                                                      \
        if (ONE) TL_PARAM0((size_t)W);                                                          \
        mmv_fast_body<TY, false, ONE>(W, nullptr, xq, xd, y, nullptr, nullptr, n, k, m, 0, 0.0);\
        DELAY_MMV1(ONE)                                                                         \
    }                                                                                           \
    extern "C" __global__ void __launch_bounds__(128)                                           \
        gate_up_##NAME##_##TY(const u8* Wg, const u8* Wu, const signed char* xq,                \
                              const Q8Blk* xd, float* g, float* u, float* a, int n, int k,      \
                              int m, int act, double c) {                                       \
        fast_enter<ONE>();                                                                      \
        mmv_fast_body<TY, true, ONE>(Wg, Wu, xq, xd, g, u, a, n, k, m, act, c);                 \
    }                                                                                           \
    extern "C" __global__ void __launch_bounds__(128)                                           \
        mmv3_##NAME##_##TY(const u8* W0, const u8* W1, const u8* W2, const signed char* xq,     \
                           const Q8Blk* xd, float* y0, float* y1, float* y2, int n, int k,      \
                           int m0, int m1, int m2) {                                            \
        fast_enter<ONE>();                                                                      \
        mmv3_fast_body<TY, ONE>(W0, W1, W2, xq, xd, y0, y1, y2, n, k, m0, m1, m2);              \
    }
// One activation row against NR consecutive weight rows r0 .. r0 + NR - 1 a warp (the rows
// past m skipped). Each row's arithmetic is fast_rows<TY, 1, false, true>'s: lane l takes units
// l, l + 32, ... of every row, after the grid wait, the dots in the same order, the same
// butterfly; so every output is bitwise mmv_fast1's. What
// changes is how much a lane has in flight: a row of fewer than 32 units (the small models'
// rows of 576 / 640 values: 18 / 20 units) leaves lanes idle, and one unit a lane in flight
// could not keep up with memory. Two rows a warp: the LM heads' (Q8_0, 49152 x 576 and 262144 x
// 640) 15.3 / 79.4 us -> 9.7 / 48.3 us alone on the H200 (bench/gemv_lab/head_lab.cu, session 24).
// With `stage` (mmv_head2r), lane 0 also puts its rows' values in stage[warp * NR + j].
template <int TY, int NR>
__device__ __forceinline__ void fast_rows_nr(const u8* __restrict__ W,
                                             const signed char* __restrict__ xq,
                                             const Q8Blk* __restrict__ xd, float* __restrict__ y,
                                             int k, int m, int r0, float* stage = nullptr) {
    constexpr int E = FastUnit<TY>::E;
    int lane = threadIdx.x & 31;
    int units = k / E;
    float acc[NR];
#pragma unroll
    for (int j = 0; j < NR; j++) acc[j] = 0.0f;
    auto unit = [&](int u) {
        FastUnit<TY> w[NR];
#pragma unroll
        for (int j = 0; j < NR; j++)
            if (r0 + j < m) w[j].load(fast_row_ptr<TY>(W, r0 + j, k), u);
#pragma unroll
        for (int j = 0; j < NR; j++)
            if (r0 + j < m) acc[j] = w[j].dot(xq, xd, u, acc[j]);
    };
    // The wait before the first weight load (see fast_rows).
    GRID_WAIT();
    TL_SMID();
    for (int u = lane; u < units; u += 32) unit(u);
#pragma unroll
    for (int j = 0; j < NR; j++) {
        float v = warp_sum_fixed(acc[j]);
        if (lane == 0 && r0 + j < m) {
            y[r0 + j] = v;
            if (stage != nullptr) stage[(threadIdx.x >> 5) * NR + j] = v;
        }
    }
    TL_MARK(9);
}

// q, k and v two rows a warp: q's and k's rows of type TY, v's of TYV (mmv3_fast2r_<TY> with
// TYV = TY; mmv3_fast2r_<TY>_<TYV> for the plan::MIXED_QKV pairs, below).
template <int TY, int TYV>
__device__ __forceinline__ void mmv3_two_rows(const u8* W0, const u8* W1, const u8* W2,
                                              const signed char* xq, const Q8Blk* xd, float* y0,
                                              float* y1, float* y2, int k, int m0, int m1, int m2) {
    TL_ENTRY();
    GRID_LAUNCH();
    int r = (blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5)) * 2;
    if (r < m0) fast_rows_nr<TY, 2>(W0, xq, xd, y0, k, m0, r);
    else if (r < m0 + m1) fast_rows_nr<TY, 2>(W1, xq, xd, y1, k, m1, r - m0);
    else if (r < m0 + m1 + m2) fast_rows_nr<TYV, 2>(W2, xq, xd, y2, k, m2, r - m0 - m1);
}

// mmv_fast1_<id> and mmv3_fast1_<id> with two weight rows a warp (fast_rows_nr;
// plan::fast_two_rows picks them, for one activation row: n is 1). mmv3's host gives m0 and m1
// even, so a warp's two rows are rows of one weight. (gate_up_fast1 two rows a warp, 145
// registers a thread for Q4_K, cost Llama-1B 7% and the 8B 14% of tg128: session 24d.)
#define FAST_TWO_ROWS(TY)                                                                       \
    extern "C" __global__ void __launch_bounds__(128)                                           \
        mmv_fast2r_##TY(const u8* W, const signed char* xq, const Q8Blk* xd, float* y, int n,   \
                        int k, int m) {                                                         \
        TL_ENTRY();                                                                             \
        GRID_LAUNCH();                                                                          \
        int r0 = (blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5)) * 2;                     \
        if (r0 >= m) return; /* a whole warp leaves together */                                 \
        fast_rows_nr<TY, 2>(W, xq, xd, y, k, m, r0);                                            \
        DELAY_MMV2R()                                                                           \
    }                                                                                           \
    extern "C" __global__ void __launch_bounds__(128)                                           \
        mmv3_fast2r_##TY(const u8* W0, const u8* W1, const u8* W2, const signed char* xq,       \
                         const Q8Blk* xd, float* y0, float* y1, float* y2, int n, int k,        \
                         int m0, int m1, int m2) {                                              \
        mmv3_two_rows<TY, TY>(W0, W1, W2, xq, xd, y0, y1, y2, k, m0, m1, m2);                   \
    }                                                                                           \
    extern "C" __global__ void __launch_bounds__(128)                                           \
        mmv_head2r_##TY(const u8* W, const signed char* xq, const Q8Blk* xd, float* y, int n,   \
                        int k, int m, float* yh, const unsigned* skip) {                        \
        __shared__ float st[8];                                                                 \
        GRID_LAUNCH();                                                                          \
        int r0 = (blockIdx.x * 4 + (threadIdx.x >> 5)) * 2;                                     \
        if (r0 < m) fast_rows_nr<TY, 2>(W, xq, xd, y, k, m, r0, st);                            \
        else GRID_WAIT(); /* no store of this block's before the wait (the grid-wait audit) */  \
        if (yh == nullptr || (skip != nullptr && *skip != 0u)) return;                          \
        __syncthreads();                                                                        \
        int b0 = blockIdx.x * 8, t = threadIdx.x;                                               \
        if (t < 8 && b0 + t < m) yh[b0 + t] = st[t];                                            \
    }

// mmv_head2r_<id>: mmv_fast2r_<id> (every value bitwise its) for a replayed step's LM head
// (graph_exec::head_rewrite), which also writes its rows into mapped page-locked host memory
// (yh, when given): the block's eight values staged in shared memory and stored as one
// 32-byte write, so the logits reach the host as the head computes them instead of in a copy
// after it (bench/gemv_lab/host_io.cu, session 38: SmolLM2's head and its 192 KiB out, 24.5 us
// a step with the copy engine, 18.8 this way; a warp's own 4-byte stores to the host, 72.8).
// Its launches have 128 threads (four warps, eight rows). `skip` (with the gate, above: a
// launch that timed out at its gate) keeps the host's rows as they were.
// The _fast1 kernels are the _fast ones for one activation row (decode), compiled without the
// tile paths: the 8-row tiles' registers would otherwise set the occupancy of every launch.
// Same per-row arithmetic, so a row's result does not depend on which of the two ran.
#define FAST_FOR(TY) FAST_KERNELS(TY, fast, false) FAST_KERNELS(TY, fast1, true)
FAST_FOR(2)
FAST_FOR(3)
FAST_FOR(6)
FAST_FOR(7)
FAST_FOR(8)
FAST_FOR(12)
FAST_FOR(13)
FAST_FOR(14)
FAST_TWO_ROWS(2)
FAST_TWO_ROWS(3)
FAST_TWO_ROWS(6)
FAST_TWO_ROWS(7)
FAST_TWO_ROWS(8)
FAST_TWO_ROWS(12)
FAST_TWO_ROWS(13)
FAST_TWO_ROWS(14)

// THE O PROJECTION WITH ITS WEIGHTS BEFORE ITS GRID WAIT (session 50; graph_exec::
// preload_rewrite, LOCKSTEP_CUDA_O_PRELOAD=0 to keep the plain kernels). mmv_pre1r_<id> /
// mmv_pre2r_<id> are mmv_fast1_<id> / mmv_fast2r_<id> (the same launch; every value bitwise
// theirs: each row's units in the same order, the same butterfly; bench/mmv_emu proves it) for
// rows of at most 64 units (two a lane), every unit of the warp's rows loaded and decoded
// before the grid wait, in a branch of its own (FusedFirst's form, which ptxas keeps before
// the wait; fast_rows' and fast_rows_nr's loads are after it). The rewrite gives them the o
// projection that follows a decode attention: the attention moves few bytes, so the o's
// weights arrive while it runs (the o 2.0 -> 1.3 us a layer on Gemma-3, 6.2 -> 2.7 on the 8B;
// tg128 Llama-1B +1.8%, Gemma-3 and the 8B unchanged: the attention beside the loads slows).
template <int TY, int NR>
struct PreRows {
    FastUnit<TY> w[NR][2];
    __device__ __forceinline__ void load(const u8* W, int r0, int k, int m) {
        int lane = threadIdx.x & 31, units = k / FastUnit<TY>::E;
        uint4 raw[NR][2][3];
        if (lane >= units) return;
        bool second = lane + 32 < units;
#pragma unroll
        for (int i = 0; i < NR; i++)
            if (r0 + i < m) FastUnit<TY>::fetch(fast_row_ptr<TY>(W, r0 + i, k), lane, raw[i][0]);
        if (second) {
#pragma unroll
            for (int i = 0; i < NR; i++)
                if (r0 + i < m)
                    FastUnit<TY>::fetch(fast_row_ptr<TY>(W, r0 + i, k), lane + 32, raw[i][1]);
        }
        int jp = lane & 3;  // (lane + 32) & 3 too
#pragma unroll
        for (int i = 0; i < NR; i++)
            if (r0 + i < m) w[i][0].decode(raw[i][0], jp);
        if (second) {
#pragma unroll
            for (int i = 0; i < NR; i++)
                if (r0 + i < m) w[i][1].decode(raw[i][1], jp);
        }
    }
};
// Rows r0 .. r0 + NR - 1 of W (k values, at most 64 units) against one activation row: the
// weights, the grid wait, then fast_rows' (NR = 1) or fast_rows_nr's (NR = 2) sums.
template <int TY, int NR>
__device__ __forceinline__ void pre_rows(const u8* __restrict__ W,
                                         const signed char* __restrict__ xq,
                                         const Q8Blk* __restrict__ xd, float* __restrict__ y,
                                         int k, int m, int r0) {
    PreRows<TY, NR> p;
    p.load(W, r0, k, m);
    GRID_WAIT();
    TL_SMID();
    int lane = threadIdx.x & 31, units = k / FastUnit<TY>::E;
    float acc[NR];
#pragma unroll
    for (int i = 0; i < NR; i++) acc[i] = 0.0f;
#pragma unroll
    for (int j = 0; j < 2; j++) {
        int u = lane + 32 * j;
        if (u < units) {
#pragma unroll
            for (int i = 0; i < NR; i++)
                if (r0 + i < m) acc[i] = p.w[i][j].dot(xq, xd, u, acc[i]);
        }
    }
    TL_MARK(5);
#pragma unroll
    for (int i = 0; i < NR; i++) {
        float v = warp_sum_fixed(acc[i]);
        if (lane == 0 && r0 + i < m) y[r0 + i] = v;
    }
    TL_MARK(9);
}
#define PRELOAD_ROWS(TY, NR)                                                                    \
    extern "C" __global__ void __launch_bounds__(128)                                           \
        mmv_pre##NR##r_##TY(const u8* W, const signed char* xq, const Q8Blk* xd, float* y,      \
                            int n, int k, int m) {                                              \
        TL_ENTRY();                                                                             \
        GRID_LAUNCH();                                                                          \
        int r0 = (blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5)) * NR;                    \
        if (r0 >= m) return; /* a whole warp leaves together */                                 \
        pre_rows<TY, NR>(W, xq, xd, y, k, m, r0);                                               \
    }
PRELOAD_ROWS(12, 1)
PRELOAD_ROWS(12, 2)

// A ROW'S 32 LANES PLAYED BY FEWER (session 53; the row arithmetic of a cluster step on 16 SMs,
// where a warp a row leaves 12 of 32 lanes idle on rows of 20 units and runs a block's rows one
// after another: bench/cluster_lab/gemma_step.cu, BENCHMARKS.md session 53). Row r (and, PAIR,
// row r of W2) of fast_rows<TY, 1, PAIR>, its lanes played by the LPR lanes of this lane's group
// (this lane being lane p of it), so a warp takes 32 / LPR rows at once: played lane p + LPR k
// folds units p + LPR k, + 32, ... from 0.0f, as fast_rows' lane does; then warp_sum_fixed's
// butterfly, its steps o >= LPR inside the thread (lanes i and i ^ o are one thread's played
// lanes: i mod LPR is kept; a pair's sum is the same bits whichever operand comes first), the
// rest as shuffles within the group. Every lane of the group ends with the row's sums (v, uv),
// bitwise fast_rows' (tests/mmv_emulation.rs). decode_layers_cluster's cl_row is the same for
// Q4_1 rows in shared memory.
template <int TY, int LPR, bool PAIR>
__device__ __forceinline__ void played_row(const u8* __restrict__ wa, const u8* __restrict__ wb,
                                           const signed char* __restrict__ xq,
                                           const Q8Blk* __restrict__ xd, int units, int p,
                                           float& v, float& uv) {
    static_assert(LPR >= 1 && LPR <= 32 && (LPR & (LPR - 1)) == 0, "a power of two of lanes");
    constexpr int K = 32 / LPR;
    float a[K], c[K];
#pragma unroll
    for (int k = 0; k < K; k++) {
        a[k] = 0.0f;
        c[k] = 0.0f;
        for (int u = p + LPR * k; u < units; u += 32) {
            FastUnit<TY> w;
            w.load(wa, u);
            a[k] = w.dot(xq, xd, u, a[k]);
            if constexpr (PAIR) {
                FastUnit<TY> w2;
                w2.load(wb, u);
                c[k] = w2.dot(xq, xd, u, c[k]);
            }
        }
    }
#pragma unroll
    for (int s = K / 2; s > 0; s >>= 1) {
        float ta[K], tc[K];
#pragma unroll
        for (int k = 0; k < K; k++) {
            ta[k] = a[k] + a[k ^ s];
            tc[k] = PAIR ? c[k] + c[k ^ s] : 0.0f;
        }
#pragma unroll
        for (int k = 0; k < K; k++) {
            a[k] = ta[k];
            c[k] = tc[k];
        }
    }
    v = a[0];
    uv = c[0];
#pragma unroll
    for (int o = LPR / 2; o > 0; o >>= 1) {
        v = v + __shfl_xor_sync(0xffffffffu, v, o);
        if constexpr (PAIR) uv = uv + __shfl_xor_sync(0xffffffffu, uv, o);
    }
}

// Rows r0 .. r0 + 32 / LPR - 1 of W (k values of type TY) a warp, row r0 + lane / LPR in each
// group, into y (rows from m on skipped; the whole warp runs, for its shuffles).
template <int TY, int LPR>
__device__ __forceinline__ void played_rows(const u8* __restrict__ W, const signed char* __restrict__ xq,
                                            const Q8Blk* __restrict__ xd, float* __restrict__ y,
                                            int k, int m, int r0) {
    int lane = threadIdx.x & 31, p = lane % LPR, r = r0 + lane / LPR, rr = r < m ? r : m - 1;
    float v, unused;
    played_row<TY, LPR, false>(fast_row_ptr<TY>(W, rr, k), nullptr, xq, xd, k / FastUnit<TY>::E, p, v,
                               unused);
    if (p == 0 && r < m) y[r] = v;
}

// The gate/up rows r0 .. r0 + 32 / LPR - 1 (both weights, each of k values) a warp, as
// fast_rows<TY, 1, true> writes them: g, u and the activation act(g) * u (act_apply).
template <int TY, int LPR>
__device__ __forceinline__ void played_gate_up(const u8* __restrict__ Wg, const u8* __restrict__ Wu,
                                               const signed char* __restrict__ xq,
                                               const Q8Blk* __restrict__ xd, float* __restrict__ gg,
                                               float* __restrict__ uu, float* __restrict__ aa, int k,
                                               int m, int r0, int act, double cgelu) {
    int lane = threadIdx.x & 31, p = lane % LPR, r = r0 + lane / LPR, rr = r < m ? r : m - 1;
    float v, uv;
    played_row<TY, LPR, true>(fast_row_ptr<TY>(Wg, rr, k), fast_row_ptr<TY>(Wu, rr, k), xq, xd,
                              k / FastUnit<TY>::E, p, v, uv);
    if (p == 0 && r < m) {
        gg[r] = v;
        uu[r] = uv;
        aa[r] = act_apply(v, uv, act, cgelu);
    }
}
// ============================================================================================
// END FAST NUMERICS
// ============================================================================================

// The fused gate/up for one activation row (decode) that also quantizes its activation for the
// down projection, sparing quantize_q8_32's launch: blocks of 32 warps, one row each, so a
// block holds one whole 32-value block of the output; the values are those written to `a`,
// quantized by q8_block as quantize_q8_32 would from `a`. The host takes it where the blocks
// fit one wave (plan::gate_up_quantizes) and gives m a multiple of 32.
// The end of a 32-row gate/up block: its 32 activations (v, each warp's row, in every lane)
// meet in shared memory and one warp quantizes them as output block blockIdx.x.
__device__ __forceinline__ void act_block_q8(float v, float* s_act, signed char* aq, Q8Blk* ad) {
    if ((threadIdx.x & 31) == 0) s_act[threadIdx.x >> 5] = v;
    __syncthreads();
    if (threadIdx.x < 32) q8_block(s_act[threadIdx.x], aq, ad, blockIdx.x);
}

#define GATE_UP_Q8(TY)                                                                           \
    extern "C" __global__ void __launch_bounds__(1024)                                            \
        gate_up_q8_fast1_##TY(const u8* Wg, const u8* Wu, const signed char* xq,                \
                              const Q8Blk* xd, float* g, float* u, float* a, int k, int m,      \
                              int act, double c, signed char* aq, Q8Blk* ad) {                  \
        fast_enter<true>();                                                                      \
        __shared__ float s_act[32];                                                              \
        int r = blockIdx.x * 32 + (threadIdx.x >> 5);                                            \
        float v = fast_rows<TY, 1, true, true, true>(Wg, Wu, xq, xd, g, u, a, 0, k, m, r, act, c); \
        act_block_q8(v, s_act, aq, ad);                                                          \
    }
GATE_UP_Q8(2)
GATE_UP_Q8(3)
GATE_UP_Q8(6)
GATE_UP_Q8(7)
GATE_UP_Q8(8)
GATE_UP_Q8(12)
GATE_UP_Q8(13)
GATE_UP_Q8(14)

// ============================================================================================
// RESIDUAL NORM IN ITS CONSUMER (Backend::residual_norm_then, one activation row): the decode
// q/k/v and gate/up mat-vecs with residual_norm's stages run first by every block, sparing
// residual_norm's launch and the round trip of its quantized output. Each block runs the
// stages exactly as residual_norm's block of nt = plan::norm_threads(g) threads does (its first
// nt threads; the block may be larger), so every block holds bitwise the values residual_norm
// would write; it quantizes the normed row into its shared memory and multiplies from there.
// Block 0 also writes every output residual_norm writes (bn, sum, out and the global
// quantization), from the very registers it quantized: the taps are what every block consumed.
// The host runs rows of at most NORM_FUSED_MAX values here (4 a thread at most): every block
// reads the whole row, which pays for SmolLM2's and Gemma-3's rows, not for Llama's (those take
// the long kernels below, a block an SM).
// ============================================================================================
#define NORM_FUSED_MAX 1024
// The most threads of a fused block but gate_up_q8's 32-row blocks (plan::norm_fused_block,
// up to plan::NORM_FUSED_BLOCK_MAX): the kernels' launch bounds.
#define NORM_FUSED_THREADS 512

#define NORM_FUSED_NV 4

// The norm's weights of one thread (post norm, norm), loaded before the grid wait.
struct NormFusedWeights {
    float pw[NORM_FUSED_NV], w[NORM_FUSED_NV];
};

// SCALED (scale_norm_mmv3_fast1_<id>, layer 0's input, no residual sum): the row is a alone,
// times s as the scale kernel multiplies it when sum is given (then written there: the scaled
// row), as it is when not; b and pw are not read.
template <bool SCALED = false>
__device__ __forceinline__ void norm_row_shared(const float* __restrict__ a,
                                                const float* __restrict__ b,
                                                const float* __restrict__ pw, float* bn,
                                                float* sum, const NormFusedWeights& nwv,
                                                float* out, int g, float eps, int nt,
                                                signed char* q, Q8Blk* ds, signed char* sq,
                                                Q8Blk* sd, float s = 1.0f) {
    constexpr int NV = NORM_FUSED_NV;
    bool first = blockIdx.x == 0;
    int t = threadIdx.x;
    float av[NV], bv[NV], r[NV];
#pragma unroll
    for (int i = 0; i < NV; i++) {
        bool in = t < nt && t + i * nt < g;
        // __ldcg, not a plain load: a and b come through __restrict__ pointers, so a plain load
        // is non-coherent (ld.global.nc), and ptxas moved those above the grid wait in the
        // caller, to read rows the kernel before was still writing (check's "untapped
        // (replayed) steps vs tapped" broke bitwise on three models, session 12; the SASS
        // showed why, session 13). The audit in nvrtc_compiles.rs (audit.rs) now fails a build
        // whose SASS runs any load ahead of a wait that its PTX puts after it.
        av[i] = in ? __ldcg(a + t + i * nt) : 0.0f;
        bv[i] = (in && !SCALED) ? __ldcg(b + t + i * nt) : 0.0f;
    }
    if constexpr (SCALED) {
        if (sum != nullptr) {
#pragma unroll
            for (int i = 0; i < NV; i++) {
                av[i] = av[i] * s;
                if (first && t < nt && t + i * nt < g) sum[t + i * nt] = av[i];
            }
        }
        TL_MARK(1);
        norm_regs_w<NV, true>(av, nwv.w, first ? out : nullptr, g, eps, sq, sd, 0, r, nt,
                              first ? q : nullptr, first ? ds : nullptr, 0, 1, 2, 2);
        TL_MARK(3);
        return;
    }
    // Timeline builds: mark 7 once the thread's loads have arrived (the test below waits for
    // them), mark 8 once the post norm is done, so the prologue's time splits into the loads,
    // each reduction (mark 2: the second) and the quantization (mark 3). The default build
    // compiles both away.
    float arrived = 0.0f;
#pragma unroll
    for (int i = 0; i < NV; i++) arrived += av[i] + bv[i];
    if (arrived != arrived) TL_MARK(0);
    TL_MARK(7);
    if (pw != nullptr) {
        norm_regs_w<NV, true>(bv, nwv.pw, first ? bn : nullptr, g, eps, nullptr, nullptr, 0, r,
                              nt, nullptr, nullptr, 0, 1, 14, 1);
#pragma unroll
        for (int i = 0; i < NV; i++) bv[i] = r[i];
        TL_MARK(8);
    }
#pragma unroll
    for (int i = 0; i < NV; i++) {
        av[i] = av[i] + bv[i];
        if (first && t < nt && t + i * nt < g) sum[t + i * nt] = av[i];
    }
    TL_MARK(1);
    // Only block 0 writes the global quantization, its scales included (until session 26 every
    // block wrote the same scales: the same values, but racing stores; no speed change either
    // way, BENCHMARKS.md).
    norm_regs_w<NV, true>(av, nwv.w, first ? out : nullptr, g, eps, sq, sd, 0, r, nt,
                          first ? q : nullptr, first ? ds : nullptr, 0, 1, 2, 2);
    TL_MARK(3);
}

__device__ __forceinline__ NormFusedWeights norm_fused_weights(const float* pw, const float* w,
                                                               int g, int nt) {
    NormFusedWeights v;
    if (pw != nullptr) norm_weights<NORM_FUSED_NV, true>(pw, g, nt, v.pw);
    norm_weights<NORM_FUSED_NV, true>(w, g, nt, v.w);
    return v;
}

// A fused kernel's first units: each lane's first unit of its warp's row (of both weights),
// loaded before the grid wait as the one-row mat-vecs do (weights are written only at upload).
template <int TY, bool PAIR>
struct FusedFirst {
    FastUnit<TY> w, w2;
    __device__ __forceinline__ void load(const u8* W, const u8* W2, int r, int k) {
        int lane = threadIdx.x & 31;
        if (lane >= k / FastUnit<TY>::E) return;
        w.load(fast_row_ptr<TY>(W, r, k), lane);
        if constexpr (PAIR) w2.load(fast_row_ptr<TY>(W2, r, k), lane);
    }
};

#define NORM_IN_ARGS                                                                              \
    const float *a, const float *b, const float *pw, float *bn, float *sum, const float *nw,     \
        float *out, int g, float eps, int nt, signed char *q, Q8Blk *ds
// A fused kernel's start: the next kernel may launch; the norm weights are loaded; then (the
// caller, between the two) each warp's first weight units; then NORM_GATE: the grid wait, the
// norm into the block's shared row, and the barrier after which every warp reads it.
#define NORM_GATE_SETUP                                                                           \
    TL_ENTRY();                                                                                   \
    GRID_LAUNCH();                                                                                \
    __shared__ __align__(16) signed char sq[NORM_FUSED_MAX];                                      \
    __shared__ Q8Blk sd[NORM_FUSED_MAX / 32];                                                     \
    NormFusedWeights nwv = norm_fused_weights(pw, nw, g, nt);
#define NORM_GATE_OF(SCALED, S)                                                                   \
    GRID_WAIT();                                                                                  \
    norm_row_shared<SCALED>(a, b, pw, bn, sum, nwv, out, g, eps, nt, q, ds, sq, sd, S);           \
    __syncthreads();
#define NORM_GATE NORM_GATE_OF(false, 1.0f)

// norm_mmv3_fast1_<id>: the norm, then q, k and v (mmv3_fast1's rows, blockDim.x / 32 a
// block). norm_gate_up_fast1_<id>: the norm, then gate_up_fast1's rows. norm_gate_up_q8_fast1
// <id>: blocks of 32 rows that also quantize their activation for the down projection, as
// gate_up_q8_fast1 does. Every warp runs NORM_GATE (a warp without a row too).
// norm_mmv3_fast1's body, q and k of type TY, v of TYV: each warp loads its row's first units
// (of its weight's type; a block of one type holds one unit's registers) before the gate.
template <int TY, int TYV, bool SCALED = false>
__device__ __forceinline__ void norm_mmv3_body(NORM_IN_ARGS, const NormFusedWeights& nwv,
                                               signed char* sq, Q8Blk* sd, const u8* W0,
                                               const u8* W1, const u8* W2, float* y0, float* y1,
                                               float* y2, int m0, int m1, int m2,
                                               float s = 1.0f) {
    int r = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    const u8* W = nullptr;
    float* y = nullptr;
    int m = 0, rr = r;
    bool isv = false;
    if (r < m0) {
        W = W0; y = y0; m = m0;
    } else if ((rr = r - m0) < m1) {
        W = W1; y = y1; m = m1;
    } else if ((rr = r - m0 - m1) < m2) {
        W = W2; y = y2; m = m2; isv = true;
    }
    if constexpr (TY == TYV) {
        FusedFirst<TY, false> f;
        if (W != nullptr) f.load(W, nullptr, rr, g);
        NORM_GATE_OF(SCALED, s)
        if (W != nullptr)
            fast_rows<TY, 1, false, false, false, true>(W, nullptr, sq, sd, y, nullptr, nullptr, 0,
                                                        g, m, rr, 0, 0.0, &f.w);
    } else {
        FusedFirst<TY, false> f;
        FusedFirst<TYV, false> fv;
        if (isv) fv.load(W, nullptr, rr, g);
        else if (W != nullptr) f.load(W, nullptr, rr, g);
        NORM_GATE_OF(SCALED, s)
        if (isv)
            fast_rows<TYV, 1, false, false, false, true>(W, nullptr, sq, sd, y, nullptr, nullptr,
                                                         0, g, m, rr, 0, 0.0, &fv.w);
        else if (W != nullptr)
            fast_rows<TY, 1, false, false, false, true>(W, nullptr, sq, sd, y, nullptr, nullptr, 0,
                                                        g, m, rr, 0, 0.0, &f.w);
    }
}
#define NORM_MMV3_ARGS                                                                            \
    NORM_IN_ARGS, const u8 *W0, const u8 *W1, const u8 *W2, float *y0, float *y1, float *y2,     \
        int m0, int m1, int m2
#define NORM_MMV3_CALL(TY, TYV)                                                                   \
    NORM_GATE_SETUP                                                                               \
    norm_mmv3_body<TY, TYV>(a, b, pw, bn, sum, nw, out, g, eps, nt, q, ds, nwv, sq, sd, W0, W1,   \
                            W2, y0, y1, y2, m0, m1, m2);
#define NORM_FUSED(TY)                                                                             \
    extern "C" __global__ void __launch_bounds__(NORM_FUSED_THREADS) norm_mmv3_fast1_##TY(        \
        NORM_MMV3_ARGS) {                                                                         \
        NORM_MMV3_CALL(TY, TY)                                                                    \
    }                                                                                             \
    extern "C" __global__ void __launch_bounds__(NORM_FUSED_THREADS) norm_gate_up_fast1_##TY(     \
        NORM_IN_ARGS, const u8* Wg, const u8* Wu, float* gg, float* uu, float* aa, int m,         \
        int act, double c) {                                                                      \
        NORM_GATE_SETUP                                                                           \
        int r = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);                              \
        FusedFirst<TY, true> f;                                                                   \
        if (r < m) f.load(Wg, Wu, r, g);                                                          \
        NORM_GATE                                                                                 \
        if (r < m)                                                                                \
            fast_rows<TY, 1, true, false, false, true>(Wg, Wu, sq, sd, gg, uu, aa, 0, g, m, r,    \
                                                       act, c, &f.w, &f.w2);                      \
    }
// The 32-row quantizing blocks, for the 32-value block types alone (plan::norm_gate_up_quantizes:
// the K-quants' first units of both weights would spill a 1024-thread block's registers).
#define NORM_FUSED_Q8(TY)                                                                          \
    extern "C" __global__ void __launch_bounds__(1024) norm_gate_up_q8_fast1_##TY(                \
        NORM_IN_ARGS, const u8* Wg, const u8* Wu, float* gg, float* uu, float* aa, int m,         \
        int act, double c, signed char* aq, Q8Blk* ad) {                                          \
        NORM_GATE_SETUP                                                                           \
        __shared__ float s_act[32];                                                               \
        int r = blockIdx.x * 32 + (threadIdx.x >> 5);                                             \
        FusedFirst<TY, true> f;                                                                   \
        f.load(Wg, Wu, r, g);                                                                     \
        NORM_GATE                                                                                 \
        float v = fast_rows<TY, 1, true, false, true, true>(Wg, Wu, sq, sd, gg, uu, aa, 0, g, m,  \
                                                            r, act, c, &f.w, &f.w2);             \
        act_block_q8(v, s_act, aq, ad);                                                           \
    }
NORM_FUSED(2)
NORM_FUSED(3)
NORM_FUSED(6)
NORM_FUSED(7)
NORM_FUSED(8)
NORM_FUSED(12)
NORM_FUSED(13)
NORM_FUSED(14)
// q and k of type TY, v of TYV (plan::MIXED_QKV lists the pairs).
#define MIXED_QKV_FOR(M) M(6, 8) M(12, 14) M(13, 14)
#define NORM_MMV3_MIXED(TY, TYV)                                                                   \
    extern "C" __global__ void __launch_bounds__(NORM_FUSED_THREADS) norm_mmv3_fast1_##TY##_##TYV( \
        NORM_MMV3_ARGS) {                                                                         \
        NORM_MMV3_CALL(TY, TYV)                                                                   \
    }
MIXED_QKV_FOR(NORM_MMV3_MIXED)
// scale_norm_mmv3_fast1_<id>[_<v id>]: layer 0's q/k/v with its norm and the embedding's scale
// (Backend::scale_norm_then): norm_mmv3_fast1's body on the row a (times s, written to sum,
// when sum is given), no residual sum; b, pw and bn are not read (the host passes null).
#define SCALE_NORM_MMV3(NAME, TY, TYV)                                                             \
    extern "C" __global__ void __launch_bounds__(NORM_FUSED_THREADS) NAME(NORM_MMV3_ARGS,         \
                                                                          float s) {              \
        NORM_GATE_SETUP                                                                           \
        norm_mmv3_body<TY, TYV, true>(a, b, pw, bn, sum, nw, out, g, eps, nt, q, ds, nwv, sq, sd, \
                                      W0, W1, W2, y0, y1, y2, m0, m1, m2, s);                     \
    }
#define SCALE_NORM_MMV3_ONE(TY) SCALE_NORM_MMV3(scale_norm_mmv3_fast1_##TY, TY, TY)
#define SCALE_NORM_MMV3_PAIR(TY, TYV) \
    SCALE_NORM_MMV3(scale_norm_mmv3_fast1_##TY##_##TYV, TY, TYV)
SCALE_NORM_MMV3_ONE(2)
SCALE_NORM_MMV3_ONE(3)
SCALE_NORM_MMV3_ONE(6)
SCALE_NORM_MMV3_ONE(7)
SCALE_NORM_MMV3_ONE(8)
SCALE_NORM_MMV3_ONE(12)
SCALE_NORM_MMV3_ONE(13)
SCALE_NORM_MMV3_ONE(14)
MIXED_QKV_FOR(SCALE_NORM_MMV3_PAIR)
// The same pairs for a decode q/k/v whose norm runs on its own (layer 0's, after rms_norm;
// rows longer than NORM_LONG_MAX; LOCKSTEP_CUDA_NORM_LONG=0): mmv3_fast2r_<TY>'s rows, the v rows of TYV two a warp as well
// (fast_rows_nr<TYV, 2>, bitwise mmv_fast1_<TYV>'s, as every two-row warp is), so such a layer's
// v is not a launch of its own on the step's chain (plan::qkv_mixed_one_launch).
#define MMV3_MIXED_2R(TY, TYV)                                                                    \
    extern "C" __global__ void __launch_bounds__(128)                                             \
        mmv3_fast2r_##TY##_##TYV(const u8* W0, const u8* W1, const u8* W2, const signed char* xq, \
                                 const Q8Blk* xd, float* y0, float* y1, float* y2, int n, int k,  \
                                 int m0, int m1, int m2) {                                        \
        mmv3_two_rows<TY, TYV>(W0, W1, W2, xq, xd, y0, y1, y2, k, m0, m1, m2);                    \
    }
MIXED_QKV_FOR(MMV3_MIXED_2R)

// THE NORM INSIDE ITS CONSUMER, LONG ROWS (plan::norm_fuses_long: one activation row of more
// than NORM_FUSED_MAX values, at most NORM_LONG_MAX: Llama-3.2-1B's 2048, Llama-3.1-8B's 4096).
// Session 12 fused these rows into blocks of 512 / 1024 threads of 32 rows each, every block
// re-running the norm: several prologues an SM, during which no weight moves (the 8B lost 28%).
// Here the grid is at most one block of 1024 threads an SM (plan::norm_long_grid): each block
// runs the norm once (norm_row_shared, bitwise residual_norm's block of plan::norm_threads(g)
// threads: the same values, block 0 writing residual_norm's outputs), then its warps take rows
// grid-stride, warp w of block b first row 32 b + w, each row fast_rows' one-row sums (bitwise
// the one-row mat-vecs'). Before the grid wait each warp asks its first LOCKSTEP_LONG_PF_ROWS
// rows into L2 (a prefetch holds no register, unlike FusedFirst's units, which would spill 64
// registers a thread), so DRAM streams the consumer's weights while the block runs the norm.
// On the H200 (BENCHMARKS.md, session 47; tg128 against residual_norm then the consumer) the 8B
// +2.9-3.1%, Llama-1B +9.7-10.6%; a prefetch of no rows or of two lost part of it; rows dealt
// warp-major (warp w of block b first row w * gridDim.x + b, every SM busy to the end) cost the
// 8B 1.2% of block-major's (a block's 32 rows are contiguous).
// ============================================================================================
#define NORM_LONG_MAX 4096
#ifndef LOCKSTEP_LONG_PF_ROWS
#define LOCKSTEP_LONG_PF_ROWS 1
#endif

// Row r of W (k values of type TY) asked into L2, a 128-byte line a lane (on the device only:
// bench/mmv_emu runs the rows below on the CPU, tests/mmv_emulation.rs).
template <int TY>
__device__ __forceinline__ void long_row_prefetch(const u8* W, int r, int k) {
    size_t bytes = (size_t)(k / block_elems(TY)) * block_bytes(TY);
    const u8* row = W + (size_t)r * bytes;
    for (size_t o = (size_t)(threadIdx.x & 31) * 128; o < bytes; o += 32 * 128) {
#ifdef __CUDA_ARCH__
        asm volatile("prefetch.global.L2 [%0];" ::"l"(row + o));
#endif
    }
}

#define NORM_LONG_SETUP                                                                            \
    TL_ENTRY();                                                                                    \
    GRID_LAUNCH();                                                                                 \
    __shared__ __align__(16) signed char sq[NORM_LONG_MAX];                                        \
    __shared__ Q8Blk sd[NORM_LONG_MAX / 32];                                                       \
    NormFusedWeights nwv = norm_fused_weights(pw, nw, g, nt);                                      \
    int stride_ = gridDim.x * (blockDim.x >> 5);                                                   \
    int r0_ = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);

// q, k and v (rows m0, m1, m2 in that order; q and k of type TY, v of TYV) after the norm, a
// row a warp (two rows a warp, as mmv3_fast2r takes them, spill at 64 registers a thread).
template <int TY, int TYV>
__device__ __forceinline__ void norm_long_mmv3_rows(const signed char* sq, const Q8Blk* sd,
                                                    const u8* W0, const u8* W1, const u8* W2,
                                                    float* y0, float* y1, float* y2, int g,
                                                    int m0, int m1, int m2, int r0, int stride,
                                                    bool prefetch) {
    for (int r = r0, i = 0; r < m0 + m1 + m2; r += stride, i++) {
        if (prefetch) {
            if (i == LOCKSTEP_LONG_PF_ROWS) return;
            if (r < m0) long_row_prefetch<TY>(W0, r, g);
            else if (r < m0 + m1) long_row_prefetch<TY>(W1, r - m0, g);
            else long_row_prefetch<TYV>(W2, r - m0 - m1, g);
        } else if (r < m0) {
            fast_rows<TY, 1, false>(W0, nullptr, sq, sd, y0, nullptr, nullptr, 0, g, m0, r, 0, 0.0);
        } else if (r < m0 + m1) {
            fast_rows<TY, 1, false>(W1, nullptr, sq, sd, y1, nullptr, nullptr, 0, g, m1, r - m0, 0,
                                    0.0);
        } else {
            fast_rows<TYV, 1, false>(W2, nullptr, sq, sd, y2, nullptr, nullptr, 0, g, m2,
                                     r - m0 - m1, 0, 0.0);
        }
    }
}

// The gate/up rows (m of each) after the norm, a row of both weights a warp.
template <int TY>
__device__ __forceinline__ void norm_long_gate_up_rows(const signed char* sq, const Q8Blk* sd,
                                                       const u8* Wg, const u8* Wu, float* gg,
                                                       float* uu, float* aa, int g, int m,
                                                       int act, double c, int r0, int stride,
                                                       bool prefetch) {
    for (int r = r0, i = 0; r < m; r += stride, i++) {
        if (prefetch) {
            if (i == LOCKSTEP_LONG_PF_ROWS) return;
            long_row_prefetch<TY>(Wg, r, g);
            long_row_prefetch<TY>(Wu, r, g);
        } else {
            fast_rows<TY, 1, true>(Wg, Wu, sq, sd, gg, uu, aa, 0, g, m, r, act, c);
        }
    }
}

#define NORM_LONG_MMV3(NAME, TY, TYV)                                                              \
    extern "C" __global__ void __launch_bounds__(1024) NAME(NORM_MMV3_ARGS) {                      \
        NORM_LONG_SETUP                                                                            \
        norm_long_mmv3_rows<TY, TYV>(sq, sd, W0, W1, W2, y0, y1, y2, g, m0, m1, m2, r0_, stride_,  \
                                     true);                                                        \
        NORM_GATE                                                                                  \
        norm_long_mmv3_rows<TY, TYV>(sq, sd, W0, W1, W2, y0, y1, y2, g, m0, m1, m2, r0_, stride_,  \
                                     false);                                                       \
    }
#define NORM_LONG(TY)                                                                              \
    NORM_LONG_MMV3(norm_long_mmv3_##TY, TY, TY)                                                    \
    extern "C" __global__ void __launch_bounds__(1024) norm_long_gate_up_##TY(                     \
        NORM_IN_ARGS, const u8* Wg, const u8* Wu, float* gg, float* uu, float* aa, int m,          \
        int act, double c) {                                                                       \
        NORM_LONG_SETUP                                                                            \
        norm_long_gate_up_rows<TY>(sq, sd, Wg, Wu, gg, uu, aa, g, m, act, c, r0_, stride_, true);  \
        NORM_GATE                                                                                  \
        norm_long_gate_up_rows<TY>(sq, sd, Wg, Wu, gg, uu, aa, g, m, act, c, r0_, stride_, false); \
    }
NORM_LONG(2)
NORM_LONG(3)
NORM_LONG(6)
NORM_LONG(7)
NORM_LONG(8)
NORM_LONG(12)
NORM_LONG(13)
NORM_LONG(14)
#define NORM_LONG_MIXED(TY, TYV) NORM_LONG_MMV3(norm_long_mmv3_##TY##_##TYV, TY, TYV)
MIXED_QKV_FOR(NORM_LONG_MIXED)
// scale_norm_long_mmv3_<id>[_<v id>]: layer 0's q/k/v of a long row (Backend::scale_norm_then),
// as scale_norm_mmv3_fast1 is for short ones: the row a alone, times s when sum is given.
#define SCALE_NORM_LONG_MMV3(NAME, TY, TYV)                                                        \
    extern "C" __global__ void __launch_bounds__(1024) NAME(NORM_MMV3_ARGS, float s) {             \
        NORM_LONG_SETUP                                                                            \
        norm_long_mmv3_rows<TY, TYV>(sq, sd, W0, W1, W2, y0, y1, y2, g, m0, m1, m2, r0_, stride_,  \
                                     true);                                                        \
        NORM_GATE_OF(true, s)                                                                      \
        norm_long_mmv3_rows<TY, TYV>(sq, sd, W0, W1, W2, y0, y1, y2, g, m0, m1, m2, r0_, stride_,  \
                                     false);                                                       \
    }
#define SCALE_NORM_LONG_ONE(TY) SCALE_NORM_LONG_MMV3(scale_norm_long_mmv3_##TY, TY, TY)
#define SCALE_NORM_LONG_PAIR(TY, TYV) \
    SCALE_NORM_LONG_MMV3(scale_norm_long_mmv3_##TY##_##TYV, TY, TYV)
SCALE_NORM_LONG_ONE(2)
SCALE_NORM_LONG_ONE(3)
SCALE_NORM_LONG_ONE(6)
SCALE_NORM_LONG_ONE(7)
SCALE_NORM_LONG_ONE(8)
SCALE_NORM_LONG_ONE(12)
SCALE_NORM_LONG_ONE(13)
SCALE_NORM_LONG_ONE(14)
MIXED_QKV_FOR(SCALE_NORM_LONG_PAIR)
NORM_FUSED_Q8(2)
NORM_FUSED_Q8(3)
NORM_FUSED_Q8(6)
NORM_FUSED_Q8(7)
NORM_FUSED_Q8(8)


// ============================================================================================
// LOGITS REDUCTION (LogitsOut::Top): per logits row, its k largest entries in the sampler's
// order and the monitors' statistics, so that only those cross to the host. The definition is
// LogitsSummary::of_row (crates/graph/src/logits.rs): the same ids and values, bit for bit.
// Two passes: TOP_THREADS-thread blocks each take a chunk of a row (at most TOP_PER values a
// thread) and leave its k largest keys and partial statistics; one block per row merges them.
// ============================================================================================
#define TOP_THREADS 256
#define TOP_PER 16

// The sampler's order as one integer: a larger key is a larger logit, or the same logit with a
// lower id; -0.0 and +0.0 are one value. Every finite logit's key is above 2^55, so 0 marks
// "nothing" (a taken or absent entry).
__device__ __forceinline__ unsigned long long top_key(u32 id, float v) {
    u32 b = v == 0.0f ? 0u : __float_as_uint(v);
    u32 o = (b & 0x80000000u) ? ~b : (b | 0x80000000u);
    return ((unsigned long long)o << 32) | (unsigned long long)(0xFFFFFFFFu - id);
}

__device__ __forceinline__ unsigned long long warp_max_u64(unsigned long long v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        unsigned long long w = __shfl_xor_sync(0xffffffffu, v, o);
        v = w > v ? w : v;
    }
    return v;
}

// The block's largest key (every thread gets it); `red` holds TOP_THREADS / 32 + 1 entries.
__device__ __forceinline__ unsigned long long block_max_u64(unsigned long long v,
                                                            unsigned long long* red) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    v = warp_max_u64(v);
    if (lane == 0) red[warp] = v;
    __syncthreads();
    if (warp == 0) {
        unsigned long long w = lane < (TOP_THREADS >> 5) ? red[lane] : 0ull;
        w = warp_max_u64(w);
        if (lane == 0) red[TOP_THREADS >> 5] = w;
    }
    __syncthreads();
    unsigned long long r = red[TOP_THREADS >> 5];
    __syncthreads();
    return r;
}

// The block's reduction of v by op (every thread gets it); `id` is op's identity, which the
// lanes beyond the block's warps contribute.
template <class T, class Op>
__device__ __forceinline__ T block_reduce(T v, T id, T* red, Op op) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
    if (lane == 0) red[warp] = v;
    __syncthreads();
    if (warp == 0) {
        T w = lane < (TOP_THREADS >> 5) ? red[lane] : id;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) w = op(w, __shfl_xor_sync(0xffffffffu, w, o));
        if (lane == 0) red[TOP_THREADS >> 5] = w;
    }
    __syncthreads();
    T r = red[TOP_THREADS >> 5];
    __syncthreads();
    return r;
}

struct MaxF { __device__ float operator()(float a, float b) const { return fmaxf(a, b); } };
struct SumD { __device__ double operator()(double a, double b) const { return a + b; } };
struct SumI { __device__ int operator()(int a, int b) const { return a + b; } };
struct MinI { __device__ int operator()(int a, int b) const { return min(a, b); } };

// k rounds of "take the largest remaining key" over each thread's `n` keys; thread 0 writes
// the i-th largest to out[i] (0 once the keys run out).
template <int PER>
__device__ __forceinline__ void block_top_keys(unsigned long long (&keys)[PER], int k,
                                               unsigned long long* out,
                                               unsigned long long* red) {
    for (int i = 0; i < k; i++) {
        unsigned long long m = 0;
#pragma unroll
        for (int j = 0; j < PER; j++) m = keys[j] > m ? keys[j] : m;
        unsigned long long best = block_max_u64(m, red);
        // Keys are unique (the id is part of them): exactly one thread holds `best`.
#pragma unroll
        for (int j = 0; j < PER; j++)
            if (keys[j] == best) keys[j] = 0;
        if (threadIdx.x == 0) out[i] = best;
        if (best == 0) {
            if (threadIdx.x == 0)
                for (int r = i + 1; r < k; r++) out[r] = 0;
            break;
        }
    }
}

// Pass 1: grid (blocks per row, rows). Block b of row r takes logits [b * chunk, (b + 1) *
// chunk) of the row (chunk <= TOP_THREADS * TOP_PER) and writes its k largest keys to
// keys[(r * nb + b) * k ..], its finite max, sum of exp(v - max) and of (v - max) exp(v - max)
// to stats[(r * nb + b) * 3 ..] (f64, as the host's monitor sums), and its count of non-finite
// values, of NaNs and its first non-finite index to counts[(r * nb + b) * 3 ..].
extern "C" __global__ void __launch_bounds__(TOP_THREADS)
    logits_top_part(const float* __restrict__ x, int n_vocab, int chunk, int k,
                    unsigned long long* __restrict__ keys, double* __restrict__ stats,
                    int* __restrict__ counts) {
    GRID_ENTER();
    __shared__ unsigned long long red64[TOP_THREADS / 32 + 1];
    __shared__ double redd[TOP_THREADS / 32 + 1];
    __shared__ float redf[TOP_THREADS / 32 + 1];
    __shared__ int redi[TOP_THREADS / 32 + 1];
    int row = blockIdx.y, nb = gridDim.x, b = blockIdx.x;
    const float* xr = x + (size_t)row * n_vocab;
    int lo = b * chunk, hi = min(n_vocab, lo + chunk);
    unsigned long long kk[TOP_PER];
    float v[TOP_PER];
    float mx = __int_as_float(0xff800000);
    int bad = 0, nan = 0, first = 0x7fffffff;
#pragma unroll
    for (int j = 0; j < TOP_PER; j++) {
        int i = lo + j * TOP_THREADS + threadIdx.x;
        kk[j] = 0;
        v[j] = 0.0f;
        if (i < hi) {
            float t = xr[i];
            v[j] = t;
            if (isfinite(t)) {
                kk[j] = top_key((u32)i, t);
                mx = fmaxf(mx, t);
            } else {
                bad++;
                nan += isnan(t) ? 1 : 0;
                first = min(first, i);
            }
        }
    }
    mx = block_reduce(mx, __int_as_float(0xff800000), redf, MaxF());
    double z = 0.0, s = 0.0;
#pragma unroll
    for (int j = 0; j < TOP_PER; j++) {
        if (kk[j] != 0) {
            double d = (double)v[j] - (double)mx;
            double e = exp(d);
            z += e;
            s += e * d;
        }
    }
    z = block_reduce(z, 0.0, redd, SumD());
    s = block_reduce(s, 0.0, redd, SumD());
    bad = block_reduce(bad, 0, redi, SumI());
    nan = block_reduce(nan, 0, redi, SumI());
    first = block_reduce(first, 0x7fffffff, redi, MinI());
    size_t slot = (size_t)row * nb + b;
    if (threadIdx.x == 0) {
        stats[slot * 3] = (double)mx;
        stats[slot * 3 + 1] = z;
        stats[slot * 3 + 2] = s;
        counts[slot * 3] = bad;
        counts[slot * 3 + 1] = nan;
        counts[slot * 3 + 2] = first;
    }
    block_top_keys<TOP_PER>(kk, k, keys + slot * k, red64);
}

// The logits of a few tokens of some rows (RowPick::gather: what penalties and a logit bias
// adjust), copied bit for bit: out[i] = x[rows[i] * n_vocab + ids[i]], one thread a pair.
extern "C" __global__ void logits_gather(const float* __restrict__ x, int n_vocab,
                                         const u32* __restrict__ rows,
                                         const u32* __restrict__ ids, int n,
                                         float* __restrict__ out) {
    GRID_ENTER();
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = x[(size_t)rows[i] * n_vocab + ids[i]];
}

// Pass 2: one block per row over the nb * k keys of pass 1 (at most TOP_THREADS * TOP_PER).
// Writes out[r * (2k + 6) ..]: k ids, k values (the logits' own bits, read back from x), the
// non-finite count, the NaN count, the first non-finite index (-1: none) and its value, and
// the entropy as the two halves of an f64.
extern "C" __global__ void __launch_bounds__(TOP_THREADS)
    logits_top_merge(const float* __restrict__ x, int n_vocab, int nb, int k,
                     const unsigned long long* __restrict__ keys,
                     const double* __restrict__ stats, const int* __restrict__ counts,
                     u32* __restrict__ out) {
    GRID_ENTER();
    __shared__ unsigned long long red64[TOP_THREADS / 32 + 1];
    __shared__ unsigned long long best[64];
    __shared__ double redd[TOP_THREADS / 32 + 1];
    __shared__ float redf[TOP_THREADS / 32 + 1];
    __shared__ int redi[TOP_THREADS / 32 + 1];
    int row = blockIdx.x, n = nb * k;
    const unsigned long long* kr = keys + (size_t)row * n;
    unsigned long long kk[TOP_PER];
#pragma unroll
    for (int j = 0; j < TOP_PER; j++) {
        int i = j * TOP_THREADS + threadIdx.x;
        kk[j] = i < n ? kr[i] : 0ull;
    }
    block_top_keys<TOP_PER>(kk, k, best, red64);
    // The blocks' statistics, combined about the row's max M: z = sum z_b e^(m_b - M),
    // s = sum (s_b + (m_b - M) z_b) e^(m_b - M); entropy = ln z - s / z.
    const double* st = stats + (size_t)row * nb * 3;
    const int* ct = counts + (size_t)row * nb * 3;
    float mb = __int_as_float(0xff800000);
    int bad = 0, nan = 0, first = 0x7fffffff;
    for (int b = threadIdx.x; b < nb; b += TOP_THREADS) {
        mb = fmaxf(mb, (float)st[b * 3]);
        bad += ct[b * 3];
        nan += ct[b * 3 + 1];
        first = min(first, ct[b * 3 + 2]);
    }
    float M = block_reduce(mb, __int_as_float(0xff800000), redf, MaxF());
    double z = 0.0, s = 0.0;
    for (int b = threadIdx.x; b < nb; b += TOP_THREADS) {
        double zb = st[b * 3 + 1];
        if (zb > 0.0) {
            double dm = st[b * 3] - (double)M, w = exp(dm);
            z += zb * w;
            s += (st[b * 3 + 2] + dm * zb) * w;
        }
    }
    z = block_reduce(z, 0.0, redd, SumD());
    s = block_reduce(s, 0.0, redd, SumD());
    bad = block_reduce(bad, 0, redi, SumI());
    nan = block_reduce(nan, 0, redi, SumI());
    first = block_reduce(first, 0x7fffffff, redi, MinI());
    u32* o = out + (size_t)row * (2 * k + 6);
    const float* xr = x + (size_t)row * n_vocab;
    for (int i = threadIdx.x; i < k; i += TOP_THREADS) {
        unsigned long long key = best[i];
        u32 id = key == 0 ? 0xFFFFFFFFu : 0xFFFFFFFFu - (u32)(key & 0xFFFFFFFFull);
        o[i] = id;
        o[k + i] = key == 0 ? 0u : __float_as_uint(xr[id]);
    }
    if (threadIdx.x == 0) {
        bool none = bad > 0;
        double h = none || z <= 0.0 ? 0.0 : log(z) - s / z;
        o[2 * k] = (u32)bad;
        o[2 * k + 1] = (u32)nan;
        o[2 * k + 2] = bad > 0 ? (u32)first : 0xFFFFFFFFu;
        o[2 * k + 3] = bad > 0 ? __float_as_uint(xr[first]) : 0u;
        unsigned long long hb = (unsigned long long)__double_as_longlong(h);
        o[2 * k + 4] = (u32)(hb & 0xFFFFFFFFull);
        o[2 * k + 5] = (u32)(hb >> 32);
    }
}

// WHOLE-ROW DRAWS (`LogitsOut::TopDraw`): temperature sampling without top-k or top-p draws
// from every token of the row. The token must be bitwise the host's (lockstep_sampling's
// `row_draw`, the definition), so every value is spelled with IEEE-rounded f64 operations that
// are never contracted into a fused multiply-add: det_exp is row_draw's, constant for constant
// (tests/draw_consts.rs compares them); weight = det_exp((logit - max) / t), 0 below
// max + ln(min_p); sums in a tree of butterflies over 32 children; the walk from the top,
// children in order, `cum + child`, the first whose running sum exceeds u * total; the last
// token with a positive weight should rounding leave the target past a node's last child.
#define DX_LOG2E 0x3FF71547652B82FEull
#define DX_LN2_HI 0x3FE62E42FEE00000ull
#define DX_LN2_LO 0x3DEA39EF35793C76ull
#define DX_MIN_X 0xC085E00000000000ull
__device__ __constant__ unsigned long long DX_COEFFS[12] = {
    0x3DE6124613A86D09ull, 0x3E21EED8EFF8D898ull, 0x3E5AE64567F544E4ull, 0x3E927E4FB7789F5Cull,
    0x3EC71DE3A556C734ull, 0x3EFA01A01A01A01Aull, 0x3F2A01A01A01A01Aull, 0x3F56C16C16C16C17ull,
    0x3F81111111111111ull, 0x3FA5555555555555ull, 0x3FC5555555555555ull, 0x3FE0000000000000ull};

__device__ __forceinline__ double det_exp(double x) {
    if (x > 0.0) x = 0.0;
    if (isnan(x) || x < __longlong_as_double(DX_MIN_X)) return 0.0;
#ifdef FAULT_DRAW_LIBM_EXP
    return exp(x);  // seeded fault: the platform's exp, within an ulp but not the sampler's bits
#endif
    double k = floor(__dadd_rn(__dmul_rn(x, __longlong_as_double(DX_LOG2E)), 0.5));
    double r = __dsub_rn(__dsub_rn(x, __dmul_rn(k, __longlong_as_double(DX_LN2_HI))),
                         __dmul_rn(k, __longlong_as_double(DX_LN2_LO)));
    double p = __longlong_as_double(DX_COEFFS[0]);
#pragma unroll
    for (int i = 1; i < 12; i++) p = __dadd_rn(__dmul_rn(p, r), __longlong_as_double(DX_COEFFS[i]));
    p = __dadd_rn(__dmul_rn(p, r), 1.0);
    p = __dadd_rn(__dmul_rn(p, r), 1.0);
    double scale = __longlong_as_double((unsigned long long)((long long)k + 1023) << 52);
    return __dmul_rn(p, scale);
}

// The butterfly of a warp's values: a[i] + a[i ^ o], o = 16 ... 1 (every lane gets the sum;
// the two orders of each add give the same bits).
__device__ __forceinline__ double draw_butterfly(double v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = __dadd_rn(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// A row's draw parameters (the host's RowDraw): t (0: nothing), ln(min_p), u (negative: the
// total alone, for top-p and logprobs: t = 1, no min-p), and 1 where the row wants top-p
// candidates (the nucleus_* kernels).
#define DRAW_PARAMS 4
// Words a row's picks leave: the drawn token, the total's two halves, the drawn token's logit.
#define PICK_WORDS 4

// The row's max (logits_top_merge's first value) when the row is finite and drawn from.
__device__ __forceinline__ bool draw_row_max(const u32* top, int k, const double* prm, double* m) {
    if (prm[0] <= 0.0 || top[2 * k] != 0) return false;
    *m = (double)__uint_as_float(top[k]);
    return true;
}

__device__ __forceinline__ double draw_weight(float l, double m, const double* prm) {
    double x = (double)l;
    if (x < __dadd_rn(m, prm[1])) return 0.0;
    return det_exp(__ddiv_rn(__dsub_rn(x, m), prm[0]));
}

// Level 1: grid (segments / warps a block, rows); a warp per segment of 32 consecutive tokens:
// their weights' butterfly sum into sums[row * nseg + seg], and the segment's last token of
// positive weight (-1: none) into last[row * nseg + seg]. `top` is logits_top_merge's output
// (rows of 2k + 6 words), `prm` the rows' parameters.
extern "C" __global__ void __launch_bounds__(256)
    draw_leaves(const float* __restrict__ x, int n_vocab, const u32* __restrict__ top, int k,
                const double* __restrict__ prm, double* __restrict__ sums, int* __restrict__ last) {
    GRID_ENTER();
    int row = blockIdx.y, lane = threadIdx.x & 31;
    int nseg = (n_vocab + 31) / 32;
    int seg = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (seg >= nseg) return;
    const double* p = prm + (size_t)row * DRAW_PARAMS;
    double m;
    if (!draw_row_max(top + (size_t)row * (2 * k + 6), k, p, &m)) return;
    int i = seg * 32 + lane;
    double w = i < n_vocab ? draw_weight(x[(size_t)row * n_vocab + i], m, p) : 0.0;
    double s = draw_butterfly(w);
    unsigned pos = __ballot_sync(0xffffffffu, w > 0.0);
    if (lane == 0) {
        sums[(size_t)row * nseg + seg] = s;
        last[(size_t)row * nseg + seg] = pos == 0 ? -1 : seg * 32 + (31 - __clz(pos));
    }
}

// The most nodes a level above the segments holds (vocabularies up to 32^4 tokens).
#define DRAW_MAX_UPPER 1024

// One block of 1024 threads per row: the levels above the segments (butterflies of 32), the
// total, then warp 0 walks down; the token to drawn[PICK_WORDS * row] and its logit's bits to
// the word 3 after it (0xFFFFFFFF: no draw, the row not finite), or with a negative u the
// total's two halves to the words 1 and 2 (0xFFFFFFFF twice: not finite). A row without
// parameters (t = 0) is left as it is.
extern "C" __global__ void __launch_bounds__(1024)
    draw_pick(const float* __restrict__ x, int n_vocab, const u32* __restrict__ top, int k,
              const double* __restrict__ prm, const double* __restrict__ sums,
              const int* __restrict__ last, u32* __restrict__ drawn) {
    GRID_ENTER();
    __shared__ double up[2 * DRAW_MAX_UPPER];  // the levels above the segments, bottom first
    __shared__ double leaf[32];
    __shared__ int red[33];
    __shared__ int s_node;
    int row = blockIdx.x, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const double* p = prm + (size_t)row * DRAW_PARAMS;
    double m;
    drawn += PICK_WORDS * (size_t)row;
    if (p[0] <= 0.0) return;
    bool total_only = p[2] < 0.0;
    if (!draw_row_max(top + (size_t)row * (2 * k + 6), k, p, &m)) {
        if (tid == 0) {
            if (total_only) drawn[1] = drawn[2] = 0xFFFFFFFFu;
            else drawn[0] = drawn[3] = 0xFFFFFFFFu;
        }
        return;
    }
    int nseg = (n_vocab + 31) / 32;
    const double* s1 = sums + (size_t)row * nseg;
    // The last token of positive weight (the max's own weight is 1, so there is one).
    int lp = -1;
    for (int j = tid; j < nseg; j += 1024) lp = max(lp, last[(size_t)row * nseg + j]);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) lp = max(lp, __shfl_xor_sync(0xffffffffu, lp, o));
    if (lane == 0) red[warp] = lp;
    // Levels: len[0] = nseg (global), then each ceil(len / 32) in `up` until one is left.
    int len[5], off[5];
    int nl = 1;
    len[0] = nseg;
    off[0] = 0;
    int o = 0;
    while (len[nl - 1] > 1) {
        len[nl] = (len[nl - 1] + 31) / 32;
        off[nl] = o;
        o += len[nl];
        nl++;
    }
    __syncthreads();
    if (tid == 0) {
        int v = -1;
        for (int w = 0; w < 32; w++) v = max(v, red[w]);
        red[32] = v;
    }
    for (int l = 1; l < nl; l++) {
        for (int node = warp; node < len[l]; node += 32) {
            int c = node * 32 + lane;
            double v = 0.0;
            if (c < len[l - 1]) v = l == 1 ? s1[c] : up[off[l - 1] + c];
            v = draw_butterfly(v);
            if (lane == 0) up[off[l] + node] = v;
        }
        __syncthreads();
    }
    if (warp != 0) return;
    double total = nl == 1 ? s1[0] : up[off[nl - 1]];
    if (total_only) {
        if (lane == 0) {
            unsigned long long tb = (unsigned long long)__double_as_longlong(total);
            drawn[1] = (u32)(tb & 0xFFFFFFFFull);
            drawn[2] = (u32)(tb >> 32);
        }
        return;
    }
    double target = __dmul_rn(p[2], total);
    double cum = 0.0;
    int node = 0;
    bool lost = false;
    // Every level below the root, then the tokens: the warp loads the chosen node's 32
    // children (a segment's tokens: their weights), lane 0 walks them in order.
    for (int l = nl - 2; l >= -1 && !lost; l--) {
        int c = node * 32 + lane;
        int n_here = l >= 0 ? len[l] : n_vocab;
        double v = 0.0;
        if (c < n_here) {
            if (l < 0) v = draw_weight(x[(size_t)row * n_vocab + c], m, p);
            else if (l == 0) v = s1[c];
            else v = up[off[l] + c];
        }
        leaf[lane] = v;
        __syncwarp();
        if (lane == 0) {
            int found = -1;
            for (int j = 0; j < 32 && node * 32 + j < n_here; j++) {
                double next = __dadd_rn(cum, leaf[j]);
                if (target < next) {
                    found = node * 32 + j;
                    break;
                }
                cum = next;
            }
            s_node = found;
        }
        __syncwarp();
        node = s_node;
        lost = node < 0;
        __syncwarp();
    }
    if (lane == 0) {
        u32 tok = lost ? (u32)red[32] : (u32)node;
        drawn[0] = tok;
        drawn[3] = __float_as_uint(x[(size_t)row * n_vocab + tok]);
    }
}

// TOP-P CANDIDATES (`RowPick::Nucleus`): a prefix of the row in the sampler's order (value
// descending, ties by the lower id) long enough to hold most nuclei, sorted on the device, so
// the sampler finds the nucleus there (it checks: a prefix that falls short makes the host
// copy the row instead). Logits within NUC_RANGE of the max fall in bins of 1/NUC_SCALE; the
// prefix is every logit of the bins from the top while their count stays within NUC_CAP.
#define NUC_BINS 2048
#define NUC_SCALE 64.0f
#define NUC_CAP 2048
#define NUC_THREADS 256

__device__ __forceinline__ int nuc_bin(float m, float l) {
    float d = m - l;
    return d < (float)NUC_BINS / NUC_SCALE ? (int)(d * NUC_SCALE) : NUC_BINS;
}

// Rows asking for top-p candidates (`prm` word 3) with a finite max.
__device__ __forceinline__ bool nuc_row(const u32* top, int k, const double* prm, float* m) {
    if (prm[0] <= 0.0 || prm[3] <= 0.0 || top[2 * k] != 0) return false;
    *m = __uint_as_float(top[k]);
    return true;
}

// Pass 1: grid (blocks, rows), NUC_THREADS threads: the row's bin counts into hist[row * NUC_BINS]
// (zeroed by the host).
extern "C" __global__ void __launch_bounds__(NUC_THREADS)
    nucleus_hist(const float* __restrict__ x, int n_vocab, const u32* __restrict__ top, int k,
                 const double* __restrict__ prm, int* __restrict__ hist) {
    GRID_ENTER();
    __shared__ int sh[NUC_BINS];
    int row = blockIdx.y;
    float m;
    if (!nuc_row(top + (size_t)row * (2 * k + 6), k, prm + (size_t)row * DRAW_PARAMS, &m)) return;
    for (int b = threadIdx.x; b < NUC_BINS; b += NUC_THREADS) sh[b] = 0;
    __syncthreads();
    const float* xr = x + (size_t)row * n_vocab;
    for (int i = blockIdx.x * NUC_THREADS + threadIdx.x; i < n_vocab; i += gridDim.x * NUC_THREADS) {
        int b = nuc_bin(m, xr[i]);
        if (b < NUC_BINS) atomicAdd(&sh[b], 1);
    }
    __syncthreads();
    for (int b = threadIdx.x; b < NUC_BINS; b += NUC_THREADS)
        if (sh[b] != 0) atomicAdd(&hist[(size_t)row * NUC_BINS + b], sh[b]);
}

// Pass 2: same grid. Every block finds the last bin whose running count from the top stays
// within NUC_CAP (-1: the first bin alone holds more), then appends the keys (top_key) of its
// logits in those bins to keys[row * NUC_CAP ..], counted in count[row] (zeroed by the host).
extern "C" __global__ void __launch_bounds__(NUC_THREADS)
    nucleus_gather(const float* __restrict__ x, int n_vocab, const u32* __restrict__ top, int k,
                   const double* __restrict__ prm, const int* __restrict__ hist,
                   unsigned long long* __restrict__ keys, int* __restrict__ count) {
    GRID_ENTER();
    constexpr int PER = NUC_BINS / NUC_THREADS;
    __shared__ int scan[NUC_THREADS];
    __shared__ int s_end;
    int row = blockIdx.y, t = threadIdx.x;
    float m;
    if (!nuc_row(top + (size_t)row * (2 * k + 6), k, prm + (size_t)row * DRAW_PARAMS, &m)) return;
    const int* h = hist + (size_t)row * NUC_BINS;
    int local[PER], sum = 0;
#pragma unroll
    for (int j = 0; j < PER; j++) {
        local[j] = h[t * PER + j];
        sum += local[j];
    }
    scan[t] = sum;
    if (t == 0) s_end = -1;
    __syncthreads();
    // Inclusive scan of the threads' sums (Hillis-Steele).
    for (int o = 1; o < NUC_THREADS; o <<= 1) {
        int v = t >= o ? scan[t - o] : 0;
        __syncthreads();
        scan[t] += v;
        __syncthreads();
    }
    int run = scan[t] - sum, last = -1;
#pragma unroll
    for (int j = 0; j < PER; j++) {
        run += local[j];
        if (run <= NUC_CAP) last = t * PER + j;
    }
    if (last >= 0) atomicMax(&s_end, last);
    __syncthreads();
    int end = s_end;
    if (end < 0) return;
    const float* xr = x + (size_t)row * n_vocab;
    for (int i = blockIdx.x * NUC_THREADS + t; i < n_vocab; i += gridDim.x * NUC_THREADS) {
        float l = xr[i];
        if (nuc_bin(m, l) <= end) {
            int pos = atomicAdd(&count[row], 1);
            if (pos < NUC_CAP) keys[(size_t)row * NUC_CAP + pos] = top_key((u32)i, l);
        }
    }
}

// Pass 3: one block of 1024 threads a row: the gathered keys sorted descending (bitonic, in
// shared memory), out[row * (1 + 2 NUC_CAP) ..] = the count, then the ids, then the logits'
// bits (read back from x). Rows without a nucleus get a count of 0.
extern "C" __global__ void __launch_bounds__(1024)
    nucleus_sort(const float* __restrict__ x, int n_vocab, const u32* __restrict__ top, int k,
                 const double* __restrict__ prm, const unsigned long long* __restrict__ keys,
                 const int* __restrict__ count, u32* __restrict__ out) {
    GRID_ENTER();
    __shared__ unsigned long long s[NUC_CAP];
    int row = blockIdx.x, t = threadIdx.x;
    u32* o = out + (size_t)row * (1 + 2 * NUC_CAP);
    float m;
    int n = 0;
    if (nuc_row(top + (size_t)row * (2 * k + 6), k, prm + (size_t)row * DRAW_PARAMS, &m))
        n = min(count[row], NUC_CAP);
    for (int i = t; i < NUC_CAP; i += 1024) s[i] = i < n ? keys[(size_t)row * NUC_CAP + i] : 0ull;
    __syncthreads();
    for (int size = 2; size <= NUC_CAP; size <<= 1) {
        for (int stride = size >> 1; stride > 0; stride >>= 1) {
            for (int i = t; i < NUC_CAP; i += 1024) {
                int j = i ^ stride;
                if (j > i) {
                    bool desc = (i & size) == 0;
                    unsigned long long a = s[i], b = s[j];
                    if (desc ? a < b : a > b) {
                        s[i] = b;
                        s[j] = a;
                    }
                }
            }
            __syncthreads();
        }
    }
    if (t == 0) o[0] = (u32)n;
    const float* xr = x + (size_t)row * n_vocab;
    for (int i = t; i < n; i += 1024) {
        u32 id = 0xFFFFFFFFu - (u32)(s[i] & 0xFFFFFFFFull);
        o[1 + i] = id;
        o[1 + NUC_CAP + i] = __float_as_uint(xr[id]);
    }
}

// ============================================================================================
// THE CLUSTER DECODE STEP (session 36, `decode_layers_cluster`): every layer of a replayed
// one-row decode step of a llama-shaped model of SmolLM2-135M's dimensions (rows of 576, 9
// query heads and 3 KV heads of 64, a feed-forward of 1536, Q4_1 weights, an f32 cache), as one
// kernel on one cluster of 16 blocks of 512 threads, in place of the six kernels a layer of the
// step graph runs (norm_mmv3_fast1_3 or rms_norm and mmv3_fast1_3, attention_decode_rope_64,
// mmv_fast1_3, norm_gate_up_fast1_3, quantize_q8_32, mmv_fast1_3) and of the output norm after
// them (residual_norm, session 38), with their arithmetic bit for bit: graph_exec::cluster_rewrite
// replaces those nodes of a captured step by this one, and check's replayed-vs-tapped invariance
// holds every replay to the eager kernels' logits.
//
// A layer, in phases (bench/cluster_lab/step_cluster.cu is the lab it comes from):
//   A (every block) the residual add and the attention norm, norm_row_shared's arithmetic (the
//     first plan::norm_threads(576) = 256 threads, norm_regs_w, q8_block) on rows in shared
//     memory (layer 0: rms_norm's, no add);
//   B (blocks 0-8, a query head each) the head's 64 q rows; (blocks 9-11, 12-14) a KV group's
//     64 k rows, rotated as rope_store rotates them, or its 64 v rows, written to the cache row
//     and sent to the group's three head blocks (session 37: a head block computed all 192);
//   C (blocks 0-8) attention_decode_body<64, true>'s arithmetic for that head; the head's output
//     quantized (q8_block) and sent to every block;
//   D 36 o rows a block, sent to every block; E the residual add and the feed-forward norm, 96
//     gate and 96 up rows, the activation, quantized by its block and sent; F 36 down rows, sent.
// A row of a mat-vec is fast_rows' row: its 32 lanes played by 4 or 8 lanes (cl_rows: each
// played lane folds its units in fast_rows' order, and warp_sum_fixed's butterfly pairs played
// lanes inside a thread where i ^ o keeps i mod the group size), so every value is bitwise the
// op-by-op kernels' (bench/cluster_lab/ffn_cluster.cu, step_cluster.cu: 30 layers bitwise).
// Exchanges are one-way: st.async stores into every block's shared memory, each completing on
// the receiver's mbarrier, which waits for the bytes it expects. Each block's weights for a
// phase are bulk-copied into shared memory a layer ahead (slots), issued by the block's last
// thread; an attention block stages its head's earlier K/V rows (cp.async) in the gate/up slot
// between the gate/up phase of the layer before and its attention. The layers are compiled
// twice (cl_layers<MASKED>): a row without a mask skips the per-key visibility tests.
// ============================================================================================
// Clusters, bulk copies and st.async are sm_90's: elsewhere the module has no such kernel and
// the host keeps the captured graphs.
#if !defined(LOCKSTEP_KV_F16) && (!defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900)
#define CL_D 576
#define CL_NH 9
#define CL_NKV 3
#define CL_HD 64
#define CL_F 1536
#define CL_CS 16
#define CL_THREADS 512
#define CL_WARPS (CL_THREADS / 32)
#define CL_GQ (CL_NH / CL_NKV)
#define CL_KV_DIM (CL_NKV * CL_HD)
#define CL_RB_D (CL_D / 32 * 20)
#define CL_RB_F (CL_F / 32 * 20)
#define CL_RO (CL_D / CL_CS)
#define CL_RF (CL_F / CL_CS)
#define CL_RDN (CL_D / CL_CS)
#define CL_NORM_BYTES (CL_D * 4)
// slot 0: the attention norm and (the head, K and V blocks) their 64 q, k or v rows, refilled
// once they are read; slot 1: the o rows; slot 2: the gate/up rows (and an attention block's staged K/V
// rows); slot 3: the down rows; slot 4: the feed-forward norm, on a barrier of its own and a
// layer ahead, so an attention block's norm does not wait for the gate/up rows it issues only
// after its attention
#define CL_S0 (CL_NORM_BYTES + CL_HD * CL_RB_D)
#define CL_S1 (CL_RO * CL_RB_D)
#define CL_S2 (2 * CL_RF * CL_RB_D)
#define CL_S3 (CL_RDN * CL_RB_F)
#define CL_S4 CL_NORM_BYTES
#define CL_OFF1 CL_S0
#define CL_OFF2 (CL_S0 + CL_S1)
#define CL_OFF3 (CL_S0 + CL_S1 + CL_S2)
#define CL_OFF4 (CL_S0 + CL_S1 + CL_S2 + CL_S3)
#define CL_SLOT_BYTES (CL_S0 + CL_S1 + CL_S2 + CL_S3 + CL_S4)
static_assert(2 * ATT_D_MAX_KEYS * CL_HD * 4 <= CL_S2, "an attention block's staged K/V rows fit slot 2");
static_assert(CL_NH + 2 * CL_NKV <= CL_CS, "a block for each query head, and for each group's k and v");
// The most layers (cluster::MAX_LAYERS): their table is copied into shared memory, so no phase
// waits on a global load to find its next weights.
#define CL_MAX_LAYERS 32

// A layer's tensors as the step's kernels read them (host: graph_exec::ClusterLayer).
struct ClusterLayer {
    const u8* wq;
    const u8* wk;
    const u8* wv;
    const u8* wo;
    const u8* wg;
    const u8* wu;
    const u8* wd;
    const float* attn_norm;
    const float* ffn_norm;
    const double* cs;    // the step's rope table (its one row's pairs)
    unsigned long long base;  // the layer's first cache row
};

// The kernel's one argument (host: graph_exec::ClusterArgs).
struct ClusterStep {
    const ClusterLayer* layers;
    int n_layers;
    int half;   // rope pairs (32: the kernel's constant, cluster::plan checks)
    int style;  // rope_elem's style (0: likewise)
    float eps;
    float scale;
    int act;       // act_apply's activation (0, SiLU: likewise) and constant
    double cgelu;
    kv_t* kc;
    kv_t* vc;
    const u32* slots;
    const int* info;  // attention_decode's row table (ROW_INFO)
    const u8* mask;
    const u32* new_slots;
    const float* x_in;  // layer 0's input: the embedding
    float* x_out;       // the last layer's residual after its attention (ffn_inp)
    float* ffn_out;     // the last layer's down projection
};

// The output norm after the last layer (residual_norm's work, session 38), on block 0: the
// record after the layers in the layer table (host: graph_exec::cluster_rewrite), its weights
// null for none (the lab's runs end at the last layer's down projection). Not in ClusterStep:
// five more pointers there cost the layers' loop 0.25 us a layer (the kernel is at its 128
// registers, and ptxas spilled 40 bytes instead of 24; session 38's lab).
struct ClusterOut {
    const float* norm;  // its weights
    float* sum;         // ffn_inp + ffn_out
    float* f32;         // that normed
    signed char* q;     // and quantized (what the LM head reads)
    Q8Blk* d;
};
static_assert(sizeof(ClusterOut) <= sizeof(ClusterLayer), "the record takes a layer's room");

struct __align__(16) ClusterVecs {
    float xa[CL_D];       // the residual entering a layer
    float x1[CL_D];       // after the attention's residual add
    float down_in[CL_D];  // the down projection's output (received)
    float o_in[CL_D];     // the o projection's output (received)
    float qkv[CL_HD];  // a block's q, k or v rows
    float stage[CL_RF];   // a block's rows before they are sent
    float s_a[16 * CL_HD];  // attention: the scores' two parts, then the key groups' sums
    float s_p[ATT_D_MAX_KEYS];
    float s_q[CL_HD];
    float onorm[CL_D];    // block 0: the output norm's weights
    float s_knew[CL_HD];  // the row's own k (rotated) and v, from the group's K and V blocks
    float s_vnew[CL_HD];
    double s_cs[CL_HD];
    u32 s_slot[ATT_D_MAX_KEYS];
    unsigned char s_vis[ATT_D_MAX_KEYS];
    __align__(16) signed char nq[CL_D];    // the normed row, quantized
    __align__(16) signed char aq[CL_F];    // the activation, quantized (received)
    __align__(16) signed char attq[CL_D];  // the attention output, quantized (received)
    __align__(16) signed char att_q8[CL_HD];
    __align__(16) signed char act_q8[CL_RF];
    __align__(16) Q8Blk nd[CL_D / 32];
    __align__(16) Q8Blk ad[CL_F / 32];
    __align__(16) Q8Blk attd[CL_D / 32];
    __align__(16) Q8Blk att_d8[2];
    __align__(16) Q8Blk act_d8[CL_RF / 32];
    float s_sum;
};

// cluster::VEC_BYTES: the host's room for the vectors.
static_assert(sizeof(ClusterVecs) <= 24 * 1024, "cluster::VEC_BYTES");

__device__ __forceinline__ unsigned cl_smem(const void* p) {
    return (unsigned)__cvta_generic_to_shared(p);
}
__device__ __forceinline__ void cl_wait(unsigned bar, unsigned parity) {
    unsigned done = 0;
    while (!done)
        asm volatile(
            "{ .reg .pred p; mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2; "
            "selp.u32 %0, 1, 0, p; }"
            : "=r"(done)
            : "r"(bar), "r"(parity)
            : "memory");
}
__device__ __forceinline__ void cl_expect(unsigned bar, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes)
                 : "memory");
}
// Weights (written only at upload) into this block's shared memory, on its barrier. Every size
// is a constant, so the chunks unroll into straight copies: as a loop, the issuing thread's
// address arithmetic held up its warp on the critical path (0.5 us a layer in the lab).
__device__ __forceinline__ void cl_bulk(unsigned bar, void* dst, const void* src, int bytes) {
#pragma unroll
    for (int o = 0; o < bytes; o += 16384) {
        int n = bytes - o < 16384 ? bytes - o : 16384;
        asm volatile(
            "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                cl_smem((u8*)dst + o)),
            "l"((const u8*)src + o), "r"(n), "r"(bar)
            : "memory");
    }
}
// 16 (or 8) bytes into block `to`'s shared memory at `dst`, completing on its barrier `bar`.
__device__ __forceinline__ void cl_send16(const void* dst, const void* bar, int to, uint4 v) {
    unsigned raddr, rbar;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(raddr) : "r"(cl_smem(dst)), "r"(to));
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(rbar) : "r"(cl_smem(bar)), "r"(to));
    asm volatile(
        "st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.b32 [%0], {%1, %2, %3, %4}, [%5];" ::"r"(
            raddr),
        "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w), "r"(rbar)
        : "memory");
}
__device__ __forceinline__ void cl_send8(const void* dst, const void* bar, int to, unsigned a, unsigned b) {
    unsigned raddr, rbar;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(raddr) : "r"(cl_smem(dst)), "r"(to));
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(rbar) : "r"(cl_smem(bar)), "r"(to));
    asm volatile(
        "st.async.shared::cluster.mbarrier::complete_tx::bytes.v2.b32 [%0], {%1, %2}, [%3];" ::"r"(raddr),
        "r"(a), "r"(b), "r"(rbar)
        : "memory");
}

// A Q4_1 unit of fast_rows from shared memory (FastUnit<T_Q4_1>::load reads global memory).
__device__ __forceinline__ void cl_unit(FastUnit<T_Q4_1>& w, const u8* row, int u) {
    const u8* b = row + (size_t)u * 20;
    w.d = h2f(*(const u16*)b);
    w.m = h2f(*(const u16*)(b + 2));
#pragma unroll
    for (int i = 0; i < 4; i++) w.q[i] = *(const int*)(b + 4 + 4 * i);
}

// One row (and, PAIR, the same row of a second weight) of fast_rows<T_Q4_1, 1, ...>, its 32 lanes
// played by the group of LPR lanes this lane is lane p of: played lane p + LPR * k folds units
// p + LPR * k, + 32, ... from 0.0f (fast_rows' lane), then warp_sum_fixed's butterfly, its steps
// o >= LPR inside the thread (lane i and i ^ o are one thread's: i mod LPR is kept; each pair's
// sum is the same bits whichever operand comes first), the rest as shuffles in the group.
template <int LPR, bool PAIR>
__device__ __forceinline__ void cl_row(const u8* wa, const u8* wb, const signed char* xq,
                                       const Q8Blk* xd, int units, int p, float& v, float& uv) {
    constexpr int K = 32 / LPR;
    float a[K], b[K];
#pragma unroll
    for (int k = 0; k < K; k++) {
        a[k] = 0.0f;
        b[k] = 0.0f;
        for (int u = p + LPR * k; u < units; u += 32) {
            FastUnit<T_Q4_1> w;
            cl_unit(w, wa, u);
            a[k] = w.dot(xq, xd, u, a[k]);
            if constexpr (PAIR) {
                FastUnit<T_Q4_1> w2;
                cl_unit(w2, wb, u);
                b[k] = w2.dot(xq, xd, u, b[k]);
            }
        }
    }
#pragma unroll
    for (int s = K / 2; s > 0; s >>= 1) {
        float ta[K], tb[K];
#pragma unroll
        for (int k = 0; k < K; k++) {
            ta[k] = a[k] + a[k ^ s];
            if constexpr (PAIR) tb[k] = b[k] + b[k ^ s];
        }
#pragma unroll
        for (int k = 0; k < K; k++) {
            a[k] = ta[k];
            if constexpr (PAIR) b[k] = tb[k];
        }
    }
    v = a[0];
    uv = b[0];
#pragma unroll
    for (int o = LPR / 2; o > 0; o >>= 1) {
        v = v + __shfl_xor_sync(0xffffffffu, v, o);
        if constexpr (PAIR) uv = uv + __shfl_xor_sync(0xffffffffu, uv, o);
    }
}

// Rows [0, n) of a weight slot, LPR lanes a row; f(row, value) on each group's first lane.
template <int LPR, typename Fn>
__device__ __forceinline__ void cl_rows(const u8* W, int row_bytes, int n, int units,
                                        const signed char* xq, const Q8Blk* xd, Fn f) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, p = lane % LPR;
    constexpr int RPW = 32 / LPR;
    for (int j0 = warp * RPW; j0 < n; j0 += CL_WARPS * RPW) {
        int j = j0 + lane / LPR;
        int jr = j < n ? j : n - 1;  // whole warps shuffle
        float v, unused;
        cl_row<LPR, false>(W + (size_t)jr * row_bytes, nullptr, xq, xd, units, p, v, unused);
        if (j < n && p == 0) f(j, v);
    }
}

// norm_row_shared's arithmetic (no post norm) on rows in shared memory: sum = a + b (or a alone,
// rms_norm's, when b is null), its RMS norm on the first 256 threads, quantized into sq / sd.
__device__ __forceinline__ void cl_norm(const float* a, const float* b, float* sum, const float* w,
                                        float eps, signed char* sq, Q8Blk* sd, float* out = nullptr) {
    constexpr int NV = NORM_FUSED_NV, nt = 256, g = CL_D;
    static_assert(NV * nt >= g, "plan::norm_threads(576) threads hold the row");
    int t = threadIdx.x;
    float av[NV], r[NV], wv[NV];
    norm_weights<NV, true>(w, g, nt, wv);
#pragma unroll
    for (int i = 0; i < NV; i++) {
        bool in = t < nt && t + i * nt < g;
        av[i] = in ? a[t + i * nt] : 0.0f;
        if (b != nullptr) av[i] = av[i] + (in ? b[t + i * nt] : 0.0f);
        if (in) sum[t + i * nt] = av[i];
    }
    norm_regs_w<NV, true>(av, wv, out, g, eps, sq, sd, 0, r, nt, nullptr, nullptr);
    __syncthreads();
}

// The block's n floats (stage) to every block's dst[base, base + n), on their barrier `bar`.
__device__ __forceinline__ void cl_push(const float* stage, float* dst, int base, int n,
                                        unsigned long long* bar) {
    __syncthreads();
    const int q = n / 4;
    for (int t = threadIdx.x; t < q * CL_CS; t += CL_THREADS) {
        int to = t / q, i = t % q;
        cl_send16(dst + base + 4 * i, bar, to, reinterpret_cast<const uint4*>(stage)[i]);
    }
    __syncthreads();
}

// A block's part in the cluster and the shared memory it works in: the kernel's prologue
// builds it, cl_layers runs the layers with it.
struct ClusterCtx {
    const ClusterStep& A;
    u8* slots;
    ClusterVecs& s;
    unsigned long long* bars;
    const ClusterLayer* layers;
    unsigned rank;
    int tid;
    bool attn, kblk, kvb;
    int kh, h;
    __device__ __forceinline__ unsigned bar(int i) const { return cl_smem(&bars[i]); }
    // The copies are issued by the last thread: its warp is idle during the attention (warps
    // 0-7 run it, warp 0 its softmax), and an issuing thread's warp waits for it (0.6 us a
    // layer when thread 0 issued, in the lab).
    __device__ __forceinline__ void issue(int l, int p) const {
        if (tid != CL_THREADS - 1) return;
        // the block's reads of the slot (generic proxy) before the copy's writes (async proxy)
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
        const ClusterLayer& L = layers[l];
        unsigned b = bar(p);
        if (p == 0) {
            cl_expect(b, CL_NORM_BYTES + (attn || kvb ? CL_HD * CL_RB_D : 0));
            cl_bulk(b, slots, L.attn_norm, CL_NORM_BYTES);
            if (attn || kvb) {
                const u8* w = attn ? L.wq + (size_t)h * CL_HD * CL_RB_D
                                   : (kblk ? L.wk : L.wv) + (size_t)kh * CL_HD * CL_RB_D;
                cl_bulk(b, slots + CL_NORM_BYTES, w, CL_HD * CL_RB_D);
            }
        } else if (p == 1) {
            cl_expect(b, CL_S1);
            cl_bulk(b, slots + CL_OFF1, L.wo + (size_t)rank * CL_RO * CL_RB_D, CL_S1);
        } else if (p == 2) {
            cl_expect(b, CL_S2);
            cl_bulk(b, slots + CL_OFF2, L.wg + (size_t)rank * CL_RF * CL_RB_D, CL_RF * CL_RB_D);
            cl_bulk(b, slots + CL_OFF2 + CL_RF * CL_RB_D, L.wu + (size_t)rank * CL_RF * CL_RB_D, CL_RF * CL_RB_D);
        } else if (p == 3) {
            cl_expect(b, CL_S3);
            cl_bulk(b, slots + CL_OFF3, L.wd + (size_t)rank * CL_RDN * CL_RB_F, CL_S3);
        } else {
            cl_expect(bar(8), CL_S4);
            cl_bulk(bar(8), slots + CL_OFF4, L.ffn_norm, CL_S4);
        }
    }
    __device__ __forceinline__ void receive(int i, unsigned bytes, unsigned parity) const {
        if (tid == 0) cl_expect(bar(i), bytes);
        cl_wait(bar(i), parity);
    }
};

// The layers, compiled twice: with a mask, and without one, where every key is visible and
// the attention's code has no per-key reads of s_vis (0.2-0.4 us a layer in the lab when
// one copy tested a run-time flag).
template <bool MASKED>
__device__ __forceinline__ void cl_layers(const ClusterCtx& c, const int n, const int pos, const int moff,
                                          const u32 own_slot) {
    const ClusterStep& A = c.A;
    u8* slots = c.slots;
    ClusterVecs& s = c.s;
    unsigned long long* bars = c.bars;
    const ClusterLayer* layers = c.layers;
    const unsigned rank = c.rank;
    const int tid = c.tid, warp = tid >> 5, lane = tid & 31, kh = c.kh, h = c.h;
    const bool attn = c.attn, kblk = c.kblk, kvb = c.kvb;
    auto bar = [&](int i) { return c.bar(i); };
    auto issue = [&](int l, int p) { c.issue(l, p); };
    auto receive = [&](int i, unsigned bytes, unsigned parity) { c.receive(i, bytes, parity); };
    float* kst = reinterpret_cast<float*>(slots + CL_OFF2);  // staged K rows, then V rows
    float* vst = kst + ATT_D_MAX_KEYS * CL_HD;
    auto visible = [&](int j) { return !MASKED || s.s_vis[j]; };
    // An attention block's earlier keys' K and V rows of layer l (written by earlier steps)
    // into slot 2, by cp.async, a row a 16 threads.
    auto stage_kv = [&](int l) {
        const size_t base = att_layer_base(layers[l].base);
        const int per = min(n, pos) * (CL_HD / 4);  // keys before the row's own
        for (int x = tid; x < 2 * per; x += CL_THREADS) {
            bool isv = x >= per;
            int rem = isv ? x - per : x, j = rem >> 4, c = rem & 15;
            if (!visible(j)) continue;
            const kv_t* src = (isv ? A.vc : A.kc) + (base + s.s_slot[j]) * CL_KV_DIM + (size_t)kh * CL_HD + 4 * c;
            float* dst = (isv ? vst : kst) + (size_t)j * CL_HD + 4 * c;
            asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(cl_smem(dst)), "l"(src) : "memory");
        }
        asm volatile("cp.async.commit_group;" ::: "memory");
    };
    if (attn) stage_kv(0);

    for (int l = 0; l < A.n_layers; l++) {
        const unsigned par = l & 1;
        const bool more = l + 1 < A.n_layers;
        const float* attn_norm = reinterpret_cast<const float*>(slots);
        const float* ffn_norm = reinterpret_cast<const float*>(slots + CL_OFF4);
        // The kernel after this one (the LM head) launches when this grid ends. (Experiments,
        // LOCKSTEP_CUDA_DEFINES: CL_LAUNCH_AT_LAYER from the start of the last layer, its blocks
        // issuing their first weight loads and then waiting at griddepcontrol.wait;
        // CL_LAUNCH_AT_DOWN from the last down phase.)
#ifdef CL_LAUNCH_AT_LAYER
        if (!more) GRID_LAUNCH();
#endif
        // ---- A: the residual add and the attention norm (layer 0: rms_norm of the embedding)
        cl_wait(bar(0), par);
        if (l > 0) receive(7, CL_D * 4, par ^ 1);
        cl_norm(s.xa, l > 0 ? s.down_in : nullptr, s.x1, attn_norm, A.eps, s.nq, s.nd);
        // The timeline build's marks (the last layer's phases, block 0): 10 the attention norm,
        // 11 q and the staged rows, 12 the attention sent, 13 o sent, 14 the activation
        // sent, 15 down done.
        TL_MARK(10);
        if (!attn && !kvb && more) issue(l + 1, 0);  // slot 0 is read
        if (kvb) {
            // ---- B (blocks 9-14): the group's k rows, rotated by rope_elem as rope_store
            // does, or its v rows; into the cache row and to the group's three head blocks
            cl_rows<8>(slots + CL_NORM_BYTES, CL_RB_D, CL_HD, CL_D / 32, s.nq, s.nd,
                       [&](int j, float v) { s.qkv[j] = v; });
            __syncthreads();
            if (more) issue(l + 1, 0);  // slot 0 is read
            if (tid < CL_HD) {
                // rope_elem over the whole head, pairs (0, 1), (2, 3), ...: cluster::plan
                // takes only that (half = 32, style 0)
                float v = kblk ? rope_elem(s.qkv, s.s_cs, tid, CL_HD / 2, 0) : s.qkv[tid];
                // written at the layer's base, as attention_decode_rope_<64> writes (its
                // reads, and stage_kv's, go through att_layer_base)
                size_t dst = (layers[l].base + own_slot) * CL_KV_DIM + (size_t)kh * CL_HD + tid;
                if (kblk) A.kc[dst] = kv_of(v);
                else A.vc[dst] = kv_of(v);
                s.stage[tid] = v;
            }
            __syncthreads();
            for (int t = tid; t < CL_GQ * (CL_HD / 4); t += CL_THREADS) {
                int to = kh * CL_GQ + t / (CL_HD / 4), i = t % (CL_HD / 4);
                cl_send16((kblk ? s.s_knew : s.s_vnew) + 4 * i, &bars[9], to,
                          reinterpret_cast<const uint4*>(s.stage)[i]);
            }
            __syncthreads();  // s.stage is read before the o rows are staged there
        }
        if (attn) {
            // ---- B: the head's q rows
            cl_rows<8>(slots + CL_NORM_BYTES, CL_RB_D, CL_HD, CL_D / 32, s.nq, s.nd,
                       [&](int j, float v) { s.qkv[j] = v; });
            // ---- C: attention_decode_body<64, true>'s arithmetic for head h (hpb 1)
            constexpr int P = 2, PART = CL_HD / P, C4 = CL_HD / 4, KG = 256 / C4, KPT = ATT_D_MAX_KEYS / KG;
            const int kj = tid & (ATT_D_MAX_KEYS - 1), hf = tid / ATT_D_MAX_KEYS;
            const bool at = tid < 256;  // attention_decode_<64>'s block is 256 threads
            const bool kin = at && kj < n && visible(kj);
            const int vc4 = tid % C4, vkg = tid / C4;
            float4 kv[PART / 4], vv[KPT];
            asm volatile("cp.async.wait_group 0;" ::: "memory");
            __syncthreads();  // the q rows and every thread's staged K/V rows are in
            TL_MARK(11);
            if (more) issue(l + 1, 0);  // slot 0 is read
            if (kin && kj < pos) {
#pragma unroll
                for (int c = 0; c < PART / 4; c++) kv[c] = ((const float4*)(kst + (size_t)kj * CL_HD + hf * PART))[c];
            }
#pragma unroll
            for (int r = 0; r < KPT; r++) {
                int jj = vkg + r * KG;
                vv[r] = float4{0.f, 0.f, 0.f, 0.f};
                if (at && jj < n && jj < pos && visible(jj))
                    vv[r] = *(const float4*)(vst + (size_t)jj * CL_HD + 4 * vc4);
            }
            // rope_store's work on the q head (the k head's is its K block's)
            for (int d = tid; d < CL_HD; d += CL_THREADS) s.s_q[d] = rope_elem(s.qkv, s.s_cs, d, CL_HD / 2, 0);
            // the row's own k (rotated) and v from the group's K and V blocks
            receive(9, 2 * CL_HD * 4, par);
            __syncthreads();
            if (kin && kj >= pos) {
#pragma unroll
                for (int c = 0; c < PART / 4; c++) kv[c] = ((const float4*)(s.s_knew + hf * PART))[c];
            }
#pragma unroll
            for (int r = 0; r < KPT; r++) {
                int jj = vkg + r * KG;
                if (at && jj < n && jj >= pos && visible(jj)) vv[r] = *(const float4*)(s.s_vnew + 4 * vc4);
            }
            if (kin) {
                const float4* qr = (const float4*)(s.s_q + hf * PART);
                float a0 = 0.f, a1 = 0.f, a2 = 0.f, a3 = 0.f;
#pragma unroll
                for (int c = 0; c < PART / 4; c++) {
                    float4 qq = qr[c], kk = kv[c];
                    a0 += qq.x * kk.x;
                    a1 += qq.y * kk.y;
                    a2 += qq.z * kk.z;
                    a3 += qq.w * kk.w;
                }
                s.s_a[hf * ATT_D_MAX_KEYS + kj] = (a0 + a1) + (a2 + a3);
            }
            __syncthreads();
            if (warp == 0) {
                const float NEG_INF = __int_as_float(0xff800000);
                float sc[ATT_D_MAX_KEYS / 32];
                float m = NEG_INF;
#pragma unroll
                for (int t = 0; t < ATT_D_MAX_KEYS / 32; t++) {
                    int jj = lane + 32 * t;
                    float v = NEG_INF;
                    if (jj < n && visible(jj)) {
                        float dot = s.s_a[jj];
                        dot += s.s_a[ATT_D_MAX_KEYS + jj];
                        v = att_score_path(dot * A.scale, moff);
                    }
                    sc[t] = v;
                    m = fmaxf(m, v);
                }
#pragma unroll
                for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
                float lsum = 0.f;
#pragma unroll
                for (int t = 0; t < ATT_D_MAX_KEYS / 32; t++) {
                    float p = sc[t] == NEG_INF ? 0.f : expf(sc[t] - m);
                    s.s_p[lane + 32 * t] = p;
                    lsum += p;
                }
#pragma unroll
                for (int o = 16; o > 0; o >>= 1) lsum += __shfl_xor_sync(0xffffffffu, lsum, o);
                if (lane == 0) s.s_sum = lsum;
            }
            __syncthreads();
            if (at) {
                float4 a = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
                for (int r = 0; r < KPT; r++) {
                    int jj = vkg + r * KG;
                    float p = jj < n ? s.s_p[jj] : 0.f;
                    float4 vf = vv[r];
                    a.x += p * vf.x;
                    a.y += p * vf.y;
                    a.z += p * vf.z;
                    a.w += p * vf.w;
                }
                *(float4*)(s.s_a + (size_t)vkg * CL_HD + 4 * vc4) = a;
            }
            __syncthreads();
            if (tid < CL_HD) {
                float a = 0.f;
                for (int gi = 0; gi < KG; gi++) a += s.s_a[(size_t)gi * CL_HD + tid];
                float lsum = s.s_sum;
                float v = lsum > 0.f ? a / lsum : 0.f;
                q8_block(v, s.att_q8, s.att_d8, (size_t)(tid >> 5));
            }
            __syncthreads();
            // the head's 64 quantized values and 2 scales to every block
            for (int t = tid; t < 5 * CL_CS; t += CL_THREADS) {
                int to = t / 5, i = t % 5;
                if (i < 4)
                    cl_send16(s.attq + h * CL_HD + 16 * i, &bars[4], to, reinterpret_cast<const uint4*>(s.att_q8)[i]);
                else
                    cl_send16(s.attd + 2 * h, &bars[4], to, *reinterpret_cast<const uint4*>(s.att_d8));
            }
            __syncthreads();
            TL_MARK(12);
            issue(l, 2);  // the staged rows are read: the slot takes the layer's gate/up
        }
        // ---- D: o rows
        receive(4, CL_NH * (CL_HD + 2 * (int)sizeof(Q8Blk)), par);
        cl_wait(bar(1), par);
        cl_rows<8>(slots + CL_OFF1, CL_RB_D, CL_RO, CL_D / 32, s.attq, s.attd,
                   [&](int j, float v) { s.stage[j] = v; });
        cl_push(s.stage, s.o_in, rank * CL_RO, CL_RO, &bars[5]);
        TL_MARK(13);
        if (more) issue(l + 1, 1);
        // ---- E: the residual add, the feed-forward norm, gate/up and the activation
        receive(5, CL_D * 4, par);
        cl_wait(bar(8), par);
        cl_norm(s.x1, s.o_in, s.xa, ffn_norm, A.eps, s.nq, s.nd);
        if (more) issue(l + 1, 4);  // slot 4 is read
        if (!more && rank == 0)  // the last layer's ffn_inp goes out
            for (int i = tid; i < CL_D; i += CL_THREADS) A.x_out[i] = s.xa[i];
        cl_wait(bar(2), par);
        {
            const int p = lane % 4;
            const u8* W = slots + CL_OFF2;
            for (int j0 = warp * 8; j0 < CL_RF; j0 += CL_WARPS * 8) {
                int j = j0 + lane / 4, jr = j < CL_RF ? j : CL_RF - 1;
                float gv, uv;
                cl_row<4, true>(W + (size_t)jr * CL_RB_D, W + (size_t)(CL_RF + jr) * CL_RB_D, s.nq, s.nd,
                                CL_D / 32, p, gv, uv);
                // act_mul's operations (SiLU, act 0: cluster::plan takes no other), as fast_rows
                // applies them; a constant, so the other activation's code is not compiled in
                float a = act_apply(gv, uv, 0, 0.0);
                if (j < CL_RF && p == 0) s.stage[j] = a;
            }
        }
        // quantize_q8_32's q8_block on the block's three whole 32-value blocks, then 6 x 16
        // bytes of values and 3 x 8 bytes of scales to every block
        __syncthreads();
        if (warp < CL_RF / 32) q8_block(s.stage[warp * 32 + lane], s.act_q8, s.act_d8, (size_t)warp);
        __syncthreads();
        for (int t = tid; t < 9 * CL_CS; t += CL_THREADS) {
            int to = t / 9, i = t % 9;
            if (i < 6) {
                cl_send16(s.aq + rank * CL_RF + 16 * i, &bars[6], to, reinterpret_cast<const uint4*>(s.act_q8)[i]);
            } else {
                const Q8Blk& q = s.act_d8[i - 6];
                cl_send8(s.ad + rank * (CL_RF / 32) + (i - 6), &bars[6], to, __float_as_uint(q.d), (unsigned)q.s);
            }
        }
        __syncthreads();
        TL_MARK(14);
        if (more) {
            // slot 2 is read: an attention block stages the next layer's K/V rows there, the
            // others take the next layer's feed-forward norm and gate/up rows
            if (attn) stage_kv(l + 1);
            else issue(l + 1, 2);
        }
        // ---- F: down rows
#ifdef CL_LAUNCH_AT_DOWN
        if (!more) GRID_LAUNCH();
#endif
        receive(6, CL_F + CL_F / 32 * (int)sizeof(Q8Blk), par);
        cl_wait(bar(3), par);
        cl_rows<8>(slots + CL_OFF3, CL_RB_F, CL_RDN, CL_F / 32, s.aq, s.ad, [&](int j, float v) {
            s.stage[j] = v;
            if (!more) A.ffn_out[rank * CL_RDN + j] = v;
        });
        // (the last layer's rows too, for the output norm after the layers)
        cl_push(s.stage, s.down_in, rank * CL_RDN, CL_RDN, &bars[7]);
        if (more) issue(l + 1, 3);
        TL_MARK(15);
    }
}

extern "C" __global__ void __launch_bounds__(CL_THREADS, 1) decode_layers_cluster(ClusterStep A) {
    extern __shared__ __align__(128) u8 cl_dyn[];
    u8* slots = cl_dyn;
    ClusterVecs& s = *reinterpret_cast<ClusterVecs*>(cl_dyn + CL_SLOT_BYTES);
    // 0-3: the weight slots; 4: attention, 5: o, 6: activation, 7: down; 8: slot 4; 9: the
    // row's own k and v
    __shared__ __align__(8) unsigned long long bars[10];
    __shared__ ClusterLayer layers[CL_MAX_LAYERS + 1];  // and the output norm's record
    unsigned rank, dyn;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
    asm volatile("mov.u32 %0, %%dynamic_smem_size;" : "=r"(dyn));
    if (dyn < CL_SLOT_BYTES + sizeof(ClusterVecs) || blockDim.x != CL_THREADS || A.n_layers > CL_MAX_LAYERS)
        __trap();
    const int tid = threadIdx.x;
    // Blocks 0-8 serve the query heads: block (kh, h0) the head attention_decode's block
    // (kh, h0) serves (hpb = 1). Blocks 9-11 compute KV group rank - 9's k rows, 12-14 its v
    // rows (kvb): each writes its cache row and sends it to the group's three head blocks.
    // Block 15 has no part in the attention.
    const bool attn = rank < CL_NH;
    const bool kblk = rank >= CL_NH && rank < CL_NH + CL_NKV;
    const bool kvb = rank >= CL_NH && rank < CL_NH + 2 * CL_NKV;
    const int kh = attn ? (int)rank / CL_GQ : kblk ? (int)rank - CL_NH : (int)rank - CL_NH - CL_NKV;
    const int h0 = (int)rank % CL_GQ;
    const int h = att_query_head(kh, h0, CL_GQ, CL_NKV);
    ClusterCtx c{A, slots, s, bars, layers, rank, tid, attn, kblk, kvb, kh, h};
    auto bar = [&](int i) { return c.bar(i); };
    if (tid == 0) {
        for (int p = 0; p < 10; p++) asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(bar(p)));
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    // The layer table and the output norm's record (written when the graph was built: read
    // before the wait)
#pragma unroll 1
    for (int i = tid; i < (A.n_layers + 1) * (int)(sizeof(ClusterLayer) / 8); i += CL_THREADS)
        reinterpret_cast<unsigned long long*>(layers)[i] = reinterpret_cast<const unsigned long long*>(A.layers)[i];
    __syncthreads();
    // Layer 0's weights before the grid wait (weights are written only at upload); an
    // attention block's gate/up slot waits for its staged K/V rows to be read.
    for (int p = 0; p < 5; p++)
        if (p != 2 || !attn) c.issue(0, p);
    GRID_WAIT();
    // The step's row: attention_decode's table (one row, no window: the host's rewrite checks).
    const int soff = A.info[0], n_kv = A.info[1], pos = A.info[2], moff = A.info[4];
    const int n = min(pos, n_kv - 1) + 1;
    if (n > ATT_D_MAX_KEYS || n < 1) __trap();  // the step graph's key keeps short contexts here
    const bool masked = moff >= 0;
    for (int i = tid; i < CL_D; i += CL_THREADS) s.xa[i] = A.x_in[i];
    if (attn || kblk)
        for (int x = tid; x < CL_HD; x += CL_THREADS) s.s_cs[x] = layers[0].cs[x];
    if (attn) {
        for (int j = tid; j < n; j += CL_THREADS) {
            s.s_slot[j] = A.slots[soff + j];
            if (masked) s.s_vis[j] = A.mask[moff + j] != 0;
        }
    }
    const u32 own_slot = A.new_slots[0];
    // the output norm's weights (written only at upload), for block 0 after the layers
    const ClusterOut& out = *reinterpret_cast<const ClusterOut*>(&layers[A.n_layers]);
    if (out.norm != nullptr && rank == 0)
        for (int i = tid; i < CL_D; i += CL_THREADS) s.onorm[i] = out.norm[i];
    // every block's barriers are initialized (and its rows loaded) before anyone sends
    asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
    if (masked)
        cl_layers<true>(c, n, pos, moff, own_slot);
    else
        cl_layers<false>(c, n, pos, moff, own_slot);
    // Every block waits for the last layer's down rows it was sent, so none leaves with bytes
    // still on their way into it. The output norm: residual_norm's arithmetic (sum = ffn_inp +
    // ffn_out, its RMS norm on the first plan::norm_threads(576) = 256 threads, as its one
    // block of 256 runs it, quantized by q8_block), written where residual_norm writes, for
    // the LM head, by block 0.
    c.receive(7, CL_D * 4, (A.n_layers - 1) & 1);
    if (out.norm != nullptr && rank == 0) cl_norm(s.xa, s.down_in, out.sum, s.onorm, A.eps, out.q, out.d, out.f32);
    // no block leaves while another may still send into it
    asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}
#endif  // !LOCKSTEP_KV_F16 && sm_90
