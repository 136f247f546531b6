// The CPU emulation harness of the one-row fast mat-vecs (bench/mmv_emu/run.sh builds and runs
// it): two weight rows a warp against a warp a row, bitwise, for every type with a fast kernel.
#include <cstring>
#include "shim.h"
#include "globals.h"
typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
struct int4 { int x, y, z, w; };
struct uint4 { unsigned x, y, z, w; };
using std::tanh;
// The device intrinsics the fast kernels use, as the PTX defines them.
inline int __dp4a(int a, int b, int c) {
    for (int i = 0; i < 4; i++) c += (int)(signed char)(a >> (8 * i)) * (int)(signed char)(b >> (8 * i));
    return c;
}
inline unsigned __funnelshift_r(unsigned lo, unsigned hi, unsigned sh) {
    unsigned long long v = ((unsigned long long)hi << 32) | lo;
    return (unsigned)(v >> (sh & 31));
}
inline unsigned __vsub4(unsigned a, unsigned b) {
    unsigned r = 0;
    for (int i = 0; i < 4; i++) r |= (((a >> (8 * i)) - (b >> (8 * i))) & 0xFFu) << (8 * i);
    return r;
}
// cvt.f32.f16 (exact): the attention shim's h2f.
inline u16 ld16(const u8* p) { return (u16)p[0] | ((u16)p[1] << 8); }
inline float ldh(const u8* p) { return h2f(ld16(p)); }
#include "kern.inc"
#include "run.h"
#include <cstdio>
#include <cstdlib>
#include <random>

// A random weight matrix of m rows of k values of type TY: random bytes, every f16 that could be
// a scale made small and finite (every second byte's high bits cleared). It starts at an
// address that is a multiple of 1680 and of 544, as the backend uploads Q6_K's and Q8_0's planes
// (kernels.cu q6p_at and q8p_at find a block's plane group from its address); whole plane groups
// plus the 16 bytes of padding the device has.
struct Weights {
    std::vector<u8> store;
    u8* p;
    u8* data() { return p; }
};
template <int TY>
static Weights weights(std::mt19937& rng, int k, int m) {
    size_t row = (size_t)(k / block_elems(TY)) * block_bytes(TY);
    size_t n = row * m + 1680 + 16;
    Weights w;
    const size_t A = 57120;  // lcm(1680, 544)
    w.store.resize(n + A);
    w.p = w.store.data() + (A - (size_t)w.store.data() % A) % A;
    for (size_t i = 0; i < n; i++) w.p[i] = (u8)rng();
    for (size_t i = 1; i < n; i += 2) w.p[i] %= 0x3B;
    return w;
}

// A quantized activation row of k values: random int8, small block scales, the blocks' sums.
static void activation(std::mt19937& rng, int k, std::vector<signed char>& xq, std::vector<Q8Blk>& xd) {
    xq.assign(k, 0);
    xd.assign(k / 32, Q8Blk{});
    for (auto& v : xq) v = (signed char)(rng() % 255 - 127);
    for (int b = 0; b < k / 32; b++) {
        int s = 0;
        for (int i = 0; i < 32; i++) s += xq[b * 32 + i];
        xd[b] = Q8Blk{0.001f * (float)(1 + rng() % 50), s};
    }
}

// The m rows of w against the activation, a warp a row (mmv_fast1: four warps a block) into one
// and two rows a warp (mmv_fast2r) into two.
template <int TY>
static void both_ways(const u8* w, const std::vector<signed char>& xq, const std::vector<Q8Blk>& xd, int k, int m,
                      std::vector<float>& one, std::vector<float>& two) {
    one.assign(m, NAN);
    two.assign(m, NAN);
    launch({(unsigned)((m + 3) / 4), 1, 1}, 128, 0, [&] {
        int r = blockIdx.x * 4 + (threadIdx.x >> 5);
        if (r < m)
            fast_rows<TY, 1, false, true>(w, nullptr, xq.data(), xd.data(), one.data(), nullptr, nullptr, 0, k, m, r, 0, 0.0);
    });
    launch({(unsigned)((m + 7) / 8), 1, 1}, 128, 0, [&] {
        int r0 = (blockIdx.x * 4 + (threadIdx.x >> 5)) * 2;
        if (r0 < m) fast_rows_nr<TY, 2>(w, xq.data(), xd.data(), two.data(), k, m, r0);
    });
}

// Outputs of `got` that differ from `ref` bit for bit or are not finite (every one when `ref`
// is all zero: the comparison would mean nothing). With perturb, got's middle output goes one
// bit off first (the harness must see it).
static int differing(const std::vector<float>& ref, std::vector<float> got, bool perturb) {
    size_t n = ref.size();
    if (perturb) {
        unsigned u; std::memcpy(&u, &got[n / 2], 4); u ^= 1; std::memcpy(&got[n / 2], &u, 4);
    }
    int bad = 0, zero = 0;
    for (size_t i = 0; i < n; i++) {
        bad += std::memcmp(&ref[i], &got[i], 4) != 0 || !std::isfinite(ref[i]) || !std::isfinite(got[i]);
        zero += ref[i] == 0.0f;
    }
    return bad + (zero == (int)n ? (int)n : 0);
}

template <int TY>
static int run_type(const char* name, std::mt19937& rng, bool perturb) {
    int fails = 0;
    // Rows of fewer than 32 units, exactly 32, more (two and a half passes); an odd row count
    // (the last warp holds one row) and an even one.
    int ks32[] = {576, 640, 1024, 2560}, ks256[] = {512, 2048, 4352};
    std::vector<int> ks = block_elems(TY) == 256 ? std::vector<int>(ks256, ks256 + 3) : std::vector<int>(ks32, ks32 + 4);
    for (int k : ks) {
        for (int m : {13, 24}) {
            auto w = weights<TY>(rng, k, m);
            std::vector<signed char> xq;
            std::vector<Q8Blk> xd;
            activation(rng, k, xq, xd);
            std::vector<float> one, two;
            both_ways<TY>(w.data(), xq, xd, k, m, one, two);
            int bad = differing(one, two, perturb);
            printf("%-5s k %5d m %3d: %s (%d rows differ)\n", name, k, m, bad ? "MISMATCH" : "bitwise", bad);
            fails += bad != 0;
        }
    }
    return fails;
}

// The long norm-fused kernels' rows after their norm (kernels.cu norm_long_mmv3_rows,
// norm_long_gate_up_rows: rows grid-stride over a grid's warps, a row a warp) against a warp a
// row (mmv_fast1's, gate_up_fast1's): every row of every weight written, once, bitwise. Rows of
// 2048 values; odd row counts, so warps cross from one weight to the next between passes; a
// grid of 3 blocks of 4 warps (the kernels' rows depend on the grid only through the first row
// and the stride). One output one bit off (perturb) must show.
static void report_long(const char* what, const char* name, const std::vector<float>& ref,
                        const std::vector<float>& got, bool perturb, int& fails) {
    int bad = differing(ref, got, perturb);
    printf("long %-8s %-9s: %s (%d differ)\n", what, name, bad ? "rows MISMATCH" : "rows bitwise", bad);
    fails += bad != 0;
}

template <int TY, int TYV>
static int run_long(const char* name, std::mt19937& rng, bool perturb) {
    const int k = 2048, G = 3, WARPS = 4;
    int fails = 0;
    int m[3] = {41, 9, 7};
    auto w0 = weights<TY>(rng, k, m[0]);
    auto w1 = weights<TY>(rng, k, m[1]);
    auto w2 = weights<TYV>(rng, k, m[2]);
    std::vector<signed char> xq;
    std::vector<Q8Blk> xd;
    activation(rng, k, xq, xd);
    // A warp a row, each weight on its own (mmv_fast1's rows).
    std::vector<float> ref(m[0] + m[1] + m[2], NAN), got(ref.size(), NAN);
    const u8* ws[3] = {w0.data(), w1.data(), w2.data()};
    for (int j = 0, off = 0; j < 3; off += m[j], j++) {
        launch({(unsigned)((m[j] + 3) / 4), 1, 1}, 128, 0, [&] {
            int r = blockIdx.x * 4 + (threadIdx.x >> 5);
            if (r >= m[j]) return;
            if (j < 2)
                fast_rows<TY, 1, false, true>(ws[j], nullptr, xq.data(), xd.data(), ref.data() + off, nullptr, nullptr, 0, k, m[j], r, 0, 0.0);
            else
                fast_rows<TYV, 1, false, true>(ws[j], nullptr, xq.data(), xd.data(), ref.data() + off, nullptr, nullptr, 0, k, m[j], r, 0, 0.0);
        });
    }
    for (bool prefetch : {true, false}) {
        launch({(unsigned)G, 1, 1}, 32 * WARPS, 0, [&] {
            int stride = gridDim.x * (blockDim.x >> 5), r0 = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
            norm_long_mmv3_rows<TY, TYV>(xq.data(), xd.data(), ws[0], ws[1], ws[2], got.data(), got.data() + m[0],
                                         got.data() + m[0] + m[1], k, m[0], m[1], m[2], r0, stride, prefetch);
        });
    }
    report_long("q/k/v", name, ref, got, perturb, fails);
    if (TY != TYV) return fails;
    // The gate/up: 29 rows of both weights, SiLU then GELU.
    for (int act : {0, 1}) {
        const int mg = 29;
        const double c = 0.7978845608028654;
        auto wg = weights<TY>(rng, k, mg), wu = weights<TY>(rng, k, mg);
        std::vector<float> rg(mg, NAN), ru(mg, NAN), ra(mg, NAN), gg(mg, NAN), gu(mg, NAN), ga(mg, NAN);
        launch({(unsigned)((mg + 3) / 4), 1, 1}, 128, 0, [&] {
            int r = blockIdx.x * 4 + (threadIdx.x >> 5);
            if (r < mg)
                fast_rows<TY, 1, true, true>(wg.data(), wu.data(), xq.data(), xd.data(), rg.data(), ru.data(), ra.data(), 0, k, mg, r, act, c);
        });
        for (bool prefetch : {true, false}) {
            launch({(unsigned)G, 1, 1}, 32 * WARPS, 0, [&] {
                int stride = gridDim.x * (blockDim.x >> 5), r0 = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
                norm_long_gate_up_rows<TY>(xq.data(), xd.data(), wg.data(), wu.data(), gg.data(), gu.data(), ga.data(), k, mg,
                                           act, c, r0, stride, prefetch);
            });
        }
        std::vector<float> ref3(rg), got3(gg);
        ref3.insert(ref3.end(), ru.begin(), ru.end()); ref3.insert(ref3.end(), ra.begin(), ra.end());
        got3.insert(got3.end(), gu.begin(), gu.end()); got3.insert(got3.end(), ga.begin(), ga.end());
        report_long(act == 0 ? "gate/up" : "gate/up1", name, ref3, got3, perturb, fails);
    }
    return fails;
}

// The o projection with its weights before its grid wait (kernels.cu pre_rows: mmv_pre1r_12,
// mmv_pre2r_12) against a warp a row (mmv_fast1_12's rows): every row bitwise. Q4_K rows of 1
// to 64 units (one or two a lane; Gemma-3's o 16, Llama-1B's 32, the 8B's 64), odd and even
// row counts (a warp's second row past the last). One output one bit off (perturb) must show.
static int run_preload(std::mt19937& rng, bool perturb) {
    int fails = 0;
    for (int k : {256, 1024, 2048, 3072, 4096}) {
        for (int m : {13, 24}) {
            auto w = weights<T_Q4_K>(rng, k, m);
            std::vector<signed char> xq;
            std::vector<Q8Blk> xd;
            activation(rng, k, xq, xd);
            std::vector<float> one, two;
            both_ways<T_Q4_K>(w.data(), xq, xd, k, m, one, two);
            std::vector<float> p1(m, NAN), p2(m, NAN);
            launch({(unsigned)((m + 3) / 4), 1, 1}, 128, 0, [&] {
                int r0 = blockIdx.x * 4 + (threadIdx.x >> 5);
                if (r0 < m) pre_rows<T_Q4_K, 1>(w.data(), xq.data(), xd.data(), p1.data(), k, m, r0);
            });
            launch({(unsigned)((m + 7) / 8), 1, 1}, 128, 0, [&] {
                int r0 = (blockIdx.x * 4 + (threadIdx.x >> 5)) * 2;
                if (r0 < m) pre_rows<T_Q4_K, 2>(w.data(), xq.data(), xd.data(), p2.data(), k, m, r0);
            });
            std::vector<float> got(p1);
            got.insert(got.end(), p2.begin(), p2.end());
            std::vector<float> ref(one);
            ref.insert(ref.end(), one.begin(), one.end());
            int bad = differing(ref, got, perturb);
            printf("preload Q4_K k %5d m %3d: %s (%d rows differ)\n", k, m, bad ? "MISMATCH" : "bitwise", bad);
            fails += bad != 0;
        }
    }
    return fails;
}

// `layout FILE K M [q5_0|q8_0]`: the Q6_K (or Q5_0, Q8_0) rows in FILE (M rows of K values, in
// the layout this build reads: the device's Q6_K and Q8_0 planes and repacked Q5_0 blocks by
// default; or GGUF's blocks under -DLOCKSTEP_Q6K_GGUF -DLOCKSTEP_Q50_GGUF -DLOCKSTEP_Q80_GGUF)
// against
// a fixed activation, a warp a row and two rows a warp; prints each row's two results as hex.
// run.sh compiles both builds and feeds each its layout of the same weights
// (tests/mmv_emulation.rs writes them, the device's by plan::q6k_planar / plan::q50_repacked):
// the outputs must agree bit for bit.
static int layout(const char* path, int k, int m, int ty) {
    FILE* f = fopen(path, "rb");
    if (!f) { printf("cannot open %s\n", path); return 2; }
    std::vector<u8> bytes;
    for (int c; (c = fgetc(f)) != EOF;) bytes.push_back((u8)c);
    fclose(f);
    // At a multiple of the plane group (Q6_K's 1680 and Q8_0's 544 both divide A), with a
    // group's slack and the device's padding after.
    const size_t A = 57120;
    std::vector<u8> store(bytes.size() + A + 1680 + 16, 0);
    u8* w = store.data() + (A - (size_t)store.data() % A) % A;
    std::memcpy(w, bytes.data(), bytes.size());
    std::mt19937 rng(5);
    std::vector<signed char> xq;
    std::vector<Q8Blk> xd;
    activation(rng, k, xq, xd);
    std::vector<float> one, two;
    if (ty == T_Q5_0) both_ways<T_Q5_0>(w, xq, xd, k, m, one, two);
    else if (ty == T_Q8_0) both_ways<T_Q8_0>(w, xq, xd, k, m, one, two);
    else both_ways<T_Q6_K>(w, xq, xd, k, m, one, two);
    for (int r = 0; r < m; r++) {
        unsigned a, b;
        std::memcpy(&a, &one[r], 4);
        std::memcpy(&b, &two[r], 4);
        printf("row %d: %08x %08x\n", r, a, b);
    }
    return 0;
}

// A row's 32 lanes played by LPR lanes (kernels.cu played_rows, played_gate_up: a warp 32 / LPR
// rows at once) against a warp a row (fast_rows, mmv_fast1's and gate_up_fast1's): every row,
// and with the gate/up pair the gate, the up and the activation (SiLU and GELU), bitwise. Rows of
// fewer than 32 units, exactly 32 and more; odd and even row counts (the last warp's rows past m).
template <int TY, int LPR>
static int run_played_lpr(const char* name, std::mt19937& rng, bool perturb) {
    int fails = 0;
    int ks32[] = {576, 640, 2048}, ks256[] = {1024, 2048, 4352};
    std::vector<int> ks = block_elems(TY) == 256 ? std::vector<int>(ks256, ks256 + 3) : std::vector<int>(ks32, ks32 + 3);
    constexpr int RPW = 32 / LPR;
    for (int k : ks) {
        for (int m : {13, 24}) {
            auto w = weights<TY>(rng, k, m);
            auto w2 = weights<TY>(rng, k, m);
            std::vector<signed char> xq;
            std::vector<Q8Blk> xd;
            activation(rng, k, xq, xd);
            std::vector<float> one(m, NAN), played(m, NAN);
            launch({(unsigned)((m + 3) / 4), 1, 1}, 128, 0, [&] {
                int r = blockIdx.x * 4 + (threadIdx.x >> 5);
                if (r < m)
                    fast_rows<TY, 1, false, true>(w.data(), nullptr, xq.data(), xd.data(), one.data(), nullptr, nullptr,
                                                  0, k, m, r, 0, 0.0);
            });
            launch({(unsigned)((m + 4 * RPW - 1) / (4 * RPW)), 1, 1}, 128, 0, [&] {
                int r0 = (blockIdx.x * 4 + (threadIdx.x >> 5)) * RPW;
                if (r0 < m) played_rows<TY, LPR>(w.data(), xq.data(), xd.data(), played.data(), k, m, r0);
            });
            int bad = differing(one, played, perturb);
            printf("played %-5s LPR %d k %5d m %3d: %s (%d rows differ)\n", name, LPR, k, m,
                   bad ? "MISMATCH" : "bitwise", bad);
            fails += bad != 0;
            for (int act : {0, 1}) {
                const double c = 0.7978845608028654;
                std::vector<float> g1(m, NAN), u1(m, NAN), a1(m, NAN), g2(m, NAN), u2(m, NAN), a2(m, NAN);
                launch({(unsigned)((m + 3) / 4), 1, 1}, 128, 0, [&] {
                    int r = blockIdx.x * 4 + (threadIdx.x >> 5);
                    if (r < m)
                        fast_rows<TY, 1, true, true>(w.data(), w2.data(), xq.data(), xd.data(), g1.data(), u1.data(),
                                                     a1.data(), 0, k, m, r, act, c);
                });
                launch({(unsigned)((m + 4 * RPW - 1) / (4 * RPW)), 1, 1}, 128, 0, [&] {
                    int r0 = (blockIdx.x * 4 + (threadIdx.x >> 5)) * RPW;
                    if (r0 < m)
                        played_gate_up<TY, LPR>(w.data(), w2.data(), xq.data(), xd.data(), g2.data(), u2.data(),
                                                a2.data(), k, m, r0, act, c);
                });
                int bg = differing(g1, g2, perturb), bu = differing(u1, u2, false), ba = differing(a1, a2, false);
                printf("played %-5s LPR %d k %5d m %3d gate/up %s: %s (%d, %d, %d differ)\n", name, LPR, k, m,
                       act ? "GELU" : "SiLU", bg + bu + ba ? "MISMATCH" : "bitwise", bg, bu, ba);
                fails += bg + bu + ba != 0;
            }
        }
    }
    return fails;
}
template <int TY>
static int run_played(const char* name, std::mt19937& rng, bool perturb) {
    return run_played_lpr<TY, 4>(name, rng, perturb) + run_played_lpr<TY, 8>(name, rng, perturb);
}

int main(int argc, char** argv) {
    if (argc > 4 && std::strcmp(argv[1], "layout") == 0) {
        const char* t = argc > 5 ? argv[5] : "";
        return layout(argv[2], atoi(argv[3]), atoi(argv[4]),
                      std::strcmp(t, "q5_0") == 0 ? T_Q5_0 : std::strcmp(t, "q8_0") == 0 ? T_Q8_0 : T_Q6_K);
    }
    std::mt19937 rng(argc > 1 ? atoi(argv[1]) : 1);
    bool perturb = getenv("MMV_EMU_PERTURB") != nullptr;
    int fails = 0;
    fails += run_type<T_Q4_0>("Q4_0", rng, perturb);
    fails += run_type<T_Q4_1>("Q4_1", rng, perturb);
    fails += run_type<T_Q5_0>("Q5_0", rng, perturb);
    fails += run_type<T_Q5_1>("Q5_1", rng, perturb);
    fails += run_type<T_Q8_0>("Q8_0", rng, perturb);
    fails += run_type<T_Q4_K>("Q4_K", rng, perturb);
    fails += run_type<T_Q5_K>("Q5_K", rng, perturb);
    fails += run_type<T_Q6_K>("Q6_K", rng, perturb);
    fails += run_long<T_Q4_0, T_Q4_0>("Q4_0", rng, perturb);
    fails += run_long<T_Q4_1, T_Q4_1>("Q4_1", rng, perturb);
    fails += run_long<T_Q5_0, T_Q5_0>("Q5_0", rng, perturb);
    fails += run_long<T_Q5_1, T_Q5_1>("Q5_1", rng, perturb);
    fails += run_long<T_Q8_0, T_Q8_0>("Q8_0", rng, perturb);
    fails += run_long<T_Q4_K, T_Q4_K>("Q4_K", rng, perturb);
    fails += run_long<T_Q5_K, T_Q5_K>("Q5_K", rng, perturb);
    fails += run_long<T_Q6_K, T_Q6_K>("Q6_K", rng, perturb);
    fails += run_long<T_Q5_0, T_Q8_0>("Q5_0/Q8_0", rng, perturb);
    fails += run_long<T_Q4_K, T_Q6_K>("Q4_K/Q6_K", rng, perturb);
    fails += run_long<T_Q5_K, T_Q6_K>("Q5_K/Q6_K", rng, perturb);
    fails += run_preload(rng, perturb);
    fails += run_played<T_Q5_0>("Q5_0", rng, perturb);
    fails += run_played<T_Q8_0>("Q8_0", rng, perturb);
    fails += run_played<T_Q4_K>("Q4_K", rng, perturb);
    fails += run_played<T_Q6_K>("Q6_K", rng, perturb);
    printf(fails ? "FAIL: %d shapes differ\n" : "PASS: %d shapes differ\n", fails);
    return fails ? 1 : 0;
}
