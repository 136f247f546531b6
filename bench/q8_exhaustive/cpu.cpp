// kernels.cu's q8_scale and q8_inverse as compiled for the CPU emulations (cut out of kernels.cu
// by run_cpu.sh), against IEEE a / 127.0f and 1.0f / d, bit for bit, on every non-negative float:
// the scale for every a; the inverse of every scale the quantizer can form (d = q8_scale(a)) and
// of every d below 2^126 (the range the inverse claims). NaN against NaN counts as equal for the
// inverse, which is never stored. Also the fast norms' mean (norm_mean: ss * (1 / g) in f64)
// against IEEE ss / (float)g on every non-negative float ss, for the row lengths of the models
// here and odd divisors up to 2^24. Threads split the sweep. Session 43.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>
#define __device__
#define __forceinline__ inline
inline float __fmaf_rn(float a, float b, float c) { return std::fma(a, b, c); }
#define LOCKSTEP_FAST_F32
#include "q8_cut.inc"

static float bits(uint32_t u) { float x; std::memcpy(&x, &u, 4); return x; }
static uint32_t ubits(float x) { uint32_t u; std::memcpy(&u, &x, 4); return u; }
static bool same(float a, float b, bool nan_eq) { return ubits(a) == ubits(b) || (nan_eq && a != a && b != b); }

int main(int argc, char** argv) {
    unsigned nt = argc > 1 ? (unsigned)atoi(argv[1]) : 2;
    if (nt == 0) nt = 1;
    std::vector<uint64_t> bad(3 * nt, 0);
    std::vector<std::thread> th;
    for (unsigned t = 0; t < nt; t++)
        th.emplace_back([&, t] {
            for (uint64_t i = t; i < 0x80000000ull; i += nt) {
                float x = bits((uint32_t)i);
                float rd = x / 127.0f, gd = q8_scale(x);
                if (!same(rd, gd, false)) bad[3 * t]++;
                float ri = rd != 0.0f ? 1.0f / rd : 0.0f;
                if (!same(ri, q8_inverse(gd), true)) bad[3 * t + 1]++;
                if (i < 0x7e800000ull && !same(x != 0.0f ? 1.0f / x : 0.0f, q8_inverse(x), true))
                    bad[3 * t + 2]++;
            }
        });
    for (auto& t : th) t.join();
    uint64_t b[3] = {0, 0, 0};
    for (unsigned t = 0; t < nt; t++)
        for (int k = 0; k < 3; k++) b[k] += bad[3 * t + k];
    const int gs[] = {64, 256, 576, 640, 896, 1152, 3, 127, 16777215};
    uint64_t nb = 0;
    th.clear();
    std::vector<uint64_t> badm(nt, 0);
    for (unsigned t = 0; t < nt; t++)
        th.emplace_back([&, t] {
            for (int g : gs)
                for (uint64_t i = t; i < 0x80000000ull; i += nt) {
                    float x = bits((uint32_t)i);
                    if (!same(x / (float)g, norm_mean(x, g), false)) badm[t]++;
                }
        });
    for (auto& t : th) t.join();
    for (unsigned t = 0; t < nt; t++) nb += badm[t];
    printf("norm_mean(ss, g) vs ss / (float)g, all 2^31 non-negative ss, g in {64, 256, 576, 640, "
           "896, 1152, 3, 127, 2^24 - 1}: %llu differ\n",
           (unsigned long long)nb);
    printf("q8_scale vs a / 127.0f, all 2^31 non-negative a: %llu differ\n", (unsigned long long)b[0]);
    printf("q8_inverse(q8_scale(a)) vs 1.0f / (a / 127.0f), all a: %llu differ\n", (unsigned long long)b[1]);
    printf("q8_inverse(d) vs 1.0f / d, all d < 2^126: %llu differ\n", (unsigned long long)b[2]);
    return b[0] || b[1] || b[2] || nb ? 1 : 0;
}
