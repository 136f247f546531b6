// SmolLM2-135M's 30 decode layers as one 16-block cluster kernel with the production kernels'
// arithmetic, bit for bit (session 36). Session 34's v3 (cluster_layer2.cu) ran a layer in 11.46
// us against about 14.7 in the step, but with arithmetic of its own; its section 3 found the
// production arithmetic (a warp a row) 4 us a layer slower on 16 SMs. This session's
// ffn_cluster.cu variants play a row's 32 lanes with 4 or 8 lanes (vl_rows: bitwise, as fast as
// v3's own order). So: can the whole layer be bitwise the six kernels and still fast?
//
// Production, a layer (kernels.cu, included as NVRTC compiles it; the step's kernels on SmolLM2):
//   norm_mmv3_fast1_3 (the residual add and attention norm, q/k/v), attention_decode_rope_64
//   (rope_store's work and the short decode attention, heads of 64, paged cache), mmv_fast1_3
//   (o), norm_gate_up_fast1_3 (the residual add and feed-forward norm, gate/up, SiLU),
//   quantize_q8_32, mmv_fast1_3 (down).
// step_cluster: one cluster of 16 blocks of 512 threads runs every layer:
//   A (every block) the residual add and norm, norm_row_shared's arithmetic (norm_regs_w on the
//     first 256 threads, q8_block), from shared memory;
//   B (blocks 0-8, a query head each) its q head and its group's k and v rows (vl_rows);
//   C (blocks 0-8) attention_decode_body<64, true>'s arithmetic for that head (hpb 1), the
//     cache read through the slot table and written by each group's first head; the head's
//     output quantized (q8_block) and sent one way (st.async) to every block;
//   D (every block) 36 o rows, sent to every block;
//   E the residual add and feed-forward norm, 96 gate and 96 up rows, SiLU, sent to every block;
//   F the activation quantized (q8_block), 36 down rows, sent to every block.
// Each block's weights for a phase are copied into shared memory (bulk copies) one layer ahead,
// as in v3. Outputs are checked bitwise against the six kernels' for every layer: the o and down
// outputs, the attention output, the residual and every cache row written.
// nvcc -gencode=arch=compute_90a,code=sm_90a -O3 --fmad=false -std=c++17 \
//   -diag-suppress 128,177,550,549 [-DACT_Q8=0] [-DLO=16 -DLD=16] -o step_cluster step_cluster.cu
// What it showed (session 36, H200; results/step_cluster*.txt): bitwise the six kernels over 30
// layers (attention, o and down outputs of every layer, the residual, the whole cache) at pos 64
// and 127, in every version. Us a layer against the six kernels' 14.0 (pos 64) / 14.7 (pos 127):
//   v1 (K/V rows loaded in the attention phase, every block quantizing the activation): 13.3 / 14.9;
//   v2 (K/V rows staged by cp.async into the gate/up slot; the activation quantized by its
//   sender, ACT_Q8): 11.3 / 12.4 (ACT_Q8=0: 11.75 / 12.8);
//   v3, this file (slot 0 refilled after q/k/v, the feed-forward norm in slot 2, the K/V rows
//   staged from the gate/up phase of the layer before): 11.1 / 12.0.
// kernels.cu's decode_layers_cluster is this kernel in the backend.
#define LOCKSTEP_FAST_F32
__device__ unsigned emu_tf32_rna(float);
__device__ void emu_mma_tf32(float*, const unsigned*, const unsigned*);
#include "../../crates/backend-cuda/src/kernels.cu"
#include "../gemv_lab/lab_common.cuh"

#include <cmath>

constexpr int D = 576, NH = 9, NKV = 3, HD = 64, F = 1536, LAYERS = 30, GQ = NH / NKV;
constexpr int QKV = D + 2 * NKV * HD, KV_DIM = NKV * HD;
constexpr int CS = 16, THREADS = 512, WARPS = THREADS / 32;
constexpr int RB_D = D / 32 * 20, RB_F = F / 32 * 20;  // Q4_1 row bytes: k = 576, k = 1536
constexpr int RO = D / CS, RF = F / CS, RDN = D / CS;  // o, gate/up, down rows a block
constexpr int SLOTS_PER_LAYER = 256;                   // cache rows a layer (16 pages of 16)
constexpr float EPS = 1e-5f;
// shared-memory weight slots, refilled a layer ahead
// slot 0: the attention norm and (attention blocks) the q/k/v rows, refilled once q/k/v is done;
// slot 1: the o rows; slot 2: the feed-forward norm and the gate/up rows (an attention block
// stages its K/V rows there from the gate/up phase of the layer before to its attention);
// slot 3: the down rows
constexpr int NORM_BYTES = D * 4;
constexpr int S0 = NORM_BYTES + 3 * HD * RB_D, S1 = RO * RB_D, S2 = NORM_BYTES + 2 * RF * RB_D, S3 = RDN * RB_F;
constexpr int OFF1 = S0, OFF2 = S0 + S1, OFF3 = S0 + S1 + S2, SLOT_BYTES = S0 + S1 + S2 + S3;
static_assert(S0 % 16 == 0 && S1 % 16 == 0 && S2 % 16 == 0 && S3 % 16 == 0, "bulk copy sizes");
constexpr int NMARK = 16;
#ifndef LQ
#define LQ 4
#endif
// ACT_Q8 1: each block quantizes its own 96 activation values (3 whole q8 blocks) and sends
// them quantized; 0: every block quantizes the whole received row (v1)
#ifndef ACT_Q8
#define ACT_Q8 1
#endif
#ifndef LO
#define LO 8
#endif
#ifndef LG
#define LG 4
#endif
#ifndef LD
#define LD 8
#endif

struct __align__(16) Vecs {
    float xa[D];       // the residual entering a layer (production's x2)
    float x1[D];       // after the attention's residual add
    float down_in[D];  // the down projection's output (received)
    float o_in[D];     // the o projection's output (received)
    float act_in[F];   // the activation (received)
    float qkv[3 * HD]; // an attention block's q head, its group's k and v
    float stage[RF];   // a block's rows before they are sent
    float s_a[16 * HD];  // attention: the scores' two parts, later the key groups' sums
    float s_p[ATT_D_MAX_KEYS];
    float s_q[HD], s_knew[HD], att_stage[2 * HD];
    double s_cs[HD];
    u32 s_slot[ATT_D_MAX_KEYS];
    __align__(16) signed char nq[D];    // the normed row, quantized
    __align__(16) signed char aq[F];    // the activation, quantized
    __align__(16) signed char attq[D];  // the attention output, quantized (received)
    __align__(16) signed char att_q8[HD];
    __align__(16) Q8Blk nd[D / 32];
    __align__(16) Q8Blk ad[F / 32];
    __align__(16) Q8Blk attd[D / 32];
    __align__(16) Q8Blk att_d8[2];
    __align__(16) signed char act_q8[RF];  // the block's activation values, quantized
    __align__(16) Q8Blk act_d8[RF / 32];
    float s_sum;
};

__device__ __forceinline__ unsigned long long gtime() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t) :: "memory");
    return t;
}
__device__ __forceinline__ unsigned smem_u32(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }
__device__ __forceinline__ unsigned mapa_u32(unsigned addr, int rank) {
    unsigned r;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(addr), "r"(rank));
    return r;
}
__device__ __forceinline__ void mbar_wait(unsigned bar, unsigned parity) {
    unsigned done = 0;
    while (!done)
        asm volatile(
            "{ .reg .pred p; mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
            : "=r"(done)
            : "r"(bar), "r"(parity)
            : "memory");
}
__device__ __forceinline__ void mbar_expect(unsigned bar, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void bulk(unsigned bar, void* dst, const void* src, int bytes) {
    constexpr int CHUNK = 16384;
    for (int o = 0; o < bytes; o += CHUNK) {
        int n = bytes - o < CHUNK ? bytes - o : CHUNK;
        asm volatile(
            "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                smem_u32((u8*)dst + o)),
            "l"((const u8*)src + o), "r"(n), "r"(bar)
            : "memory");
    }
}
// 16 bytes into block `to`'s shared memory at `dst`, completing on its barrier `bar`.
__device__ __forceinline__ void send16(const void* dst, const void* bar, int to, uint4 v) {
    unsigned raddr = mapa_u32(smem_u32(dst), to), rbar = mapa_u32(smem_u32(bar), to);
    asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.b32 [%0], {%1, %2, %3, %4}, [%5];" ::"r"(
                     raddr),
                 "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w), "r"(rbar)
                 : "memory");
}

__device__ __forceinline__ void load_q41_shared(FastUnit<T_Q4_1>& w, const u8* row, int u) {
    const u8* b = row + (size_t)u * 20;
    w.d = h2f(*(const u16*)b);
    w.m = h2f(*(const u16*)(b + 2));
#pragma unroll
    for (int i = 0; i < 4; i++) w.q[i] = *(const int*)(b + 4 + 4 * i);
}

// A row's 32 lanes played by LPR lanes (ffn_cluster.cu: bitwise fast_rows' lane order and
// warp_sum_fixed's butterfly).
template <int LPR, bool PAIR>
__device__ __forceinline__ void vl_rows(const u8* wa, const u8* wb, const signed char* xq, const Q8Blk* xd,
                                        int units, int p, float& v, float& uv) {
    constexpr int K = 32 / LPR;
    float a[K], b[K];
#pragma unroll
    for (int k = 0; k < K; k++) {
        a[k] = 0.0f;
        b[k] = 0.0f;
        for (int u = p + LPR * k; u < units; u += 32) {
            FastUnit<T_Q4_1> w;
            load_q41_shared(w, wa, u);
            a[k] = w.dot(xq, xd, u, a[k]);
            if constexpr (PAIR) {
                FastUnit<T_Q4_1> w2;
                load_q41_shared(w2, wb, u);
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

// Rows [0, n) of one weight slot, LPR lanes a row: f(row, value) on the group's first lane.
template <int LPR, typename Fn>
__device__ __forceinline__ void rows(const u8* W, int row_bytes, int n, int units, const signed char* xq,
                                     const Q8Blk* xd, Fn f) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, p = lane % LPR;
    constexpr int RPW = 32 / LPR;
    for (int j0 = warp * RPW; j0 < n; j0 += WARPS * RPW) {
        int j = j0 + lane / LPR;
        int jr = j < n ? j : n - 1;
        float v, unused;
        vl_rows<LPR, false>(W + (size_t)jr * row_bytes, nullptr, xq, xd, units, p, v, unused);
        if (j < n && p == 0) f(j, v);
    }
}

// norm_row_shared's arithmetic (no post norm) on rows in shared memory: sum = a + b, its RMS
// norm (norm_regs_w over the first 256 threads, plan::norm_threads(576)), quantized into sq/sd.
__device__ __forceinline__ void norm_add(const float* a, const float* b, float* sum, const float* w, signed char* sq,
                                         Q8Blk* sd) {
    constexpr int NV = NORM_FUSED_NV, nt = 256, g = D;
    int t = threadIdx.x;
    float av[NV], bv[NV], r[NV], wv[NV];
    norm_weights<NV, true>(w, g, nt, wv);
#pragma unroll
    for (int i = 0; i < NV; i++) {
        bool in = t < nt && t + i * nt < g;
        av[i] = in ? a[t + i * nt] : 0.0f;
        bv[i] = in ? b[t + i * nt] : 0.0f;
    }
#pragma unroll
    for (int i = 0; i < NV; i++) {
        av[i] = av[i] + bv[i];
        if (t < nt && t + i * nt < g) sum[t + i * nt] = av[i];
    }
    norm_regs_w<NV, true>(av, wv, nullptr, g, EPS, sq, sd, 0, r, nt, nullptr, nullptr);
    __syncthreads();
}

// The block's n floats in s.stage to every block's dst[base, base + n), on their barrier `bar`.
__device__ __forceinline__ void push(const float* stage, float* dst, int base, int n, unsigned long long* bar) {
    __syncthreads();
    const int q = n / 4;
    for (int t = threadIdx.x; t < q * CS; t += THREADS) {
        int to = t / q, i = t % q;
        send16(dst + base + 4 * i, bar, to, reinterpret_cast<const uint4*>(stage)[i]);
    }
    __syncthreads();
}
struct Args {
    const u8* W;        // [layer][q, k, v, o, gate, up, down], Q4_1
    size_t per_layer;   // bytes a layer
    const float* norms; // [layer][attn_norm, ffn_norm]
    float* kc;
    float* vc;          // [layer * SLOTS_PER_LAYER + slot][KV_DIM]
    const u32* slots;   // the sequence's slots, positions 0 .. pos
    const double* cs;   // the row's (cos, sin) pairs
    int pos;
    const float* x_in;  // the residual entering layer 0 and the down output before it
    const float* ffn_in;
    float* att_out;     // [layer][D], checks
    float* o_out;
    float* ffn_out;
    float* x_out;       // the residual after the last layer
    unsigned long long* marks;  // [layer][NMARK], block 0
};

__device__ __forceinline__ const u8* wq_of(const Args& A, int l) { return A.W + (size_t)l * A.per_layer; }

extern "C" __global__ void __launch_bounds__(THREADS, 1) step_cluster(Args A) {
    extern __shared__ __align__(128) u8 dsm[];
    u8* slots = dsm;
    Vecs& s = *reinterpret_cast<Vecs*>(dsm + SLOT_BYTES);
    // 0-3: weight slots; 4: attention, 5: o, 6: activation, 7: down
    __shared__ __align__(8) unsigned long long bars[8];
    unsigned rank;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const bool attn = rank < NH;
    const int h = rank, kh = h / GQ;
    const bool leader = attn && h % GQ == 0;
    const int pos = A.pos, n = pos + 1;
#define MARK(i) \
    if (rank == 0 && tid == 0) A.marks[l * NMARK + (i)] = gtime();

    // The layer's tensors: q (D rows), k, v (KV_DIM), o (D), gate, up (F), down (D rows of F).
    auto wq = [&](int l) { return wq_of(A, l); };
    auto wk = [&](int l) { return wq(l) + (size_t)D * RB_D; };
    auto wv = [&](int l) { return wk(l) + (size_t)KV_DIM * RB_D; };
    auto wo = [&](int l) { return wv(l) + (size_t)KV_DIM * RB_D; };
    auto wg = [&](int l) { return wo(l) + (size_t)D * RB_D; };
    auto wu = [&](int l) { return wg(l) + (size_t)F * RB_D; };
    auto wd = [&](int l) { return wu(l) + (size_t)F * RB_D; };
    auto issue = [&](int l, int p) {
        if (tid != 0) return;
        // the block's reads of the slot (generic proxy) before the copy's writes (async proxy)
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
        unsigned b = smem_u32(&bars[p]);
        if (p == 0) {
            mbar_expect(b, NORM_BYTES + (attn ? 3 * HD * RB_D : 0));
            bulk(b, slots, A.norms + (size_t)l * 2 * D, NORM_BYTES);  // the attention norm
            if (attn) {
                u8* d = slots + NORM_BYTES;
                bulk(b, d, wq(l) + (size_t)h * HD * RB_D, HD * RB_D);
                bulk(b, d + HD * RB_D, wk(l) + (size_t)kh * HD * RB_D, HD * RB_D);
                bulk(b, d + 2 * HD * RB_D, wv(l) + (size_t)kh * HD * RB_D, HD * RB_D);
            }
        } else if (p == 1) {
            mbar_expect(b, S1);
            bulk(b, slots + OFF1, wo(l) + (size_t)rank * RO * RB_D, S1);
        } else if (p == 2) {
            mbar_expect(b, S2);
            bulk(b, slots + OFF2, A.norms + (size_t)l * 2 * D + D, NORM_BYTES);  // the feed-forward norm
            bulk(b, slots + OFF2 + NORM_BYTES, wg(l) + (size_t)rank * RF * RB_D, RF * RB_D);
            bulk(b, slots + OFF2 + NORM_BYTES + RF * RB_D, wu(l) + (size_t)rank * RF * RB_D, RF * RB_D);
        } else {
            mbar_expect(b, S3);
            bulk(b, slots + OFF3, wd(l) + (size_t)rank * RDN * RB_F, S3);
        }
    };
    auto bar = [&](int i) { return smem_u32(&bars[i]); };
    float* kst = reinterpret_cast<float*>(slots + OFF2);  // staged K rows, then V rows
    float* vst = kst + ATT_D_MAX_KEYS * HD;
    // An attention block's earlier keys' K and V rows of layer l (written by earlier steps, so
    // they may be read at any time) into slot 2, by cp.async, a row a 16 threads.
    auto stage_kv = [&](int l) {
        const size_t base = (size_t)l * SLOTS_PER_LAYER;
        const int per = pos * (HD / 4);
        for (int x = tid; x < 2 * per; x += THREADS) {
            bool isv = x >= per;
            int rem = isv ? x - per : x, j = rem >> 4, c = rem & 15;
            const float* src = (isv ? A.vc : A.kc) + (base + s.s_slot[j]) * KV_DIM + (size_t)kh * HD + 4 * c;
            float* dst = (isv ? vst : kst) + (size_t)j * HD + 4 * c;
            asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(smem_u32(dst)), "l"(src) : "memory");
        }
        asm volatile("cp.async.commit_group;" ::: "memory");
    };
    auto receive = [&](int i, unsigned bytes, unsigned parity) {
        if (tid == 0) mbar_expect(bar(i), bytes);
        mbar_wait(bar(i), parity);
    };

    if (tid == 0) {
        for (int p = 0; p < 8; p++) asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(bar(p)));
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    for (int p = 0; p < 4; p++)
        if (p != 2 || !attn) issue(0, p);
    for (int i = tid; i < D; i += THREADS) {
        s.xa[i] = A.x_in[i];
        s.down_in[i] = A.ffn_in[i];
    }
    if (attn) {
        for (int x = tid; x < 2 * (HD / 2); x += THREADS) s.s_cs[x] = A.cs[x];
        for (int j = tid; j < n; j += THREADS) s.s_slot[j] = A.slots[j];
    }
    // every block's barriers are initialized before anyone sends into them
    asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
    if (attn) stage_kv(0);

    for (int l = 0; l < LAYERS; l++) {
        const unsigned par = l & 1;
        const bool more = l + 1 < LAYERS;
        const float* attn_norm = reinterpret_cast<const float*>(slots);
        const float* ffn_norm = reinterpret_cast<const float*>(slots + OFF2);
        MARK(0);
        // ---- A: residual add, attention norm
        mbar_wait(bar(0), par);
        if (l > 0) receive(7, D * 4, par ^ 1);
        MARK(1);
        norm_add(s.xa, s.down_in, s.x1, attn_norm, s.nq, s.nd);
        if (!attn && more) issue(l + 1, 0);  // the attention norm is read
        MARK(2);
        if (attn) {
            // ---- B: the head's q rows, its group's k and v rows
            const u8* wa = slots + NORM_BYTES;
            rows<LQ>(wa, RB_D, 3 * HD, D / 32, s.nq, s.nd, [&](int j, float v) { s.qkv[j] = v; });
            // ---- C: attention_decode_body<64, true>'s arithmetic, heads a block 1
            constexpr int P = 2, PART = HD / P, C4 = HD / 4, KG = 256 / C4, KPT = ATT_D_MAX_KEYS / KG;
            const size_t base = (size_t)l * SLOTS_PER_LAYER;
            const int kj = tid & (ATT_D_MAX_KEYS - 1), hf = tid / ATT_D_MAX_KEYS;
            const bool at = tid < 256;
            const bool kin = at && kj < n;
            float4 kv[PART / 4];
            const int vc4 = tid % C4, vkg = tid / C4;
            float4 vv[KPT];
            {
                asm volatile("cp.async.wait_group 0;" ::: "memory");
                __syncthreads();  // the q/k/v rows and every thread's staged K/V rows are in
                if (more) issue(l + 1, 0);  // slot 0 is read: the next layer's norm and q/k/v rows
                if (kin && kj < pos) {
#pragma unroll
                    for (int c = 0; c < PART / 4; c++) kv[c] = ((const float4*)(kst + (size_t)kj * HD + hf * PART))[c];
                }
#pragma unroll
                for (int r = 0; r < KPT; r++) {
                    int jj = vkg + r * KG;
                    vv[r] = float4{0.f, 0.f, 0.f, 0.f};
                    if (at && jj < n && jj < pos) vv[r] = *(const float4*)(vst + (size_t)jj * HD + 4 * vc4);
                }
            }
            MARK(3);
#pragma unroll
            for (int r = 0; r < KPT; r++) {
                int jj = vkg + r * KG;
                if (at && jj < n && jj >= pos) vv[r] = *(const float4*)(s.qkv + 2 * HD + 4 * vc4);
            }
            // rope_store's work: q head i = 0 and the k head (stage = qkv's first 128 values)
            {
                size_t dst = (base + s.s_slot[pos]) * KV_DIM + (size_t)kh * HD;
                for (int x = tid; x < 2 * HD; x += THREADS) {
                    int i = x / HD, d = x - i * HD;
                    float rv = rope_elem(s.qkv + i * HD, s.s_cs, d, HD / 2, 0);
                    if (i == 0) {
                        s.s_q[d] = rv;
                    } else {
                        s.s_knew[d] = rv;
                        if (leader) A.kc[dst + d] = rv;
                    }
                }
                if (leader && tid < HD) A.vc[dst + tid] = s.qkv[2 * HD + tid];
            }
            __syncthreads();
            if (kin && kj >= pos) {
#pragma unroll
                for (int c = 0; c < PART / 4; c++) kv[c] = ((const float4*)(s.s_knew + hf * PART))[c];
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
                    if (jj < n) {
                        float dot = s.s_a[jj];
                        dot += s.s_a[ATT_D_MAX_KEYS + jj];
                        v = dot * 0.125f;
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
                *(float4*)(s.s_a + (size_t)vkg * HD + 4 * vc4) = a;
            }
            __syncthreads();
            if (tid < HD) {
                float a = 0.f;
                for (int gi = 0; gi < KG; gi++) a += s.s_a[(size_t)gi * HD + tid];
                float lsum = s.s_sum;
                float v = lsum > 0.f ? a / lsum : 0.f;
                A.att_out[(size_t)l * D + h * HD + tid] = v;
                q8_block(v, s.att_q8, s.att_d8, (size_t)(tid >> 5));
            }
            __syncthreads();
            MARK(4);
            // the head's 64 quantized values and 2 scales to every block (80 sends)
            for (int t = tid; t < 5 * CS; t += THREADS) {
                int to = t / 5, i = t % 5;
                if (i < 4)
                    send16(s.attq + h * HD + 16 * i, &bars[4], to, reinterpret_cast<const uint4*>(s.att_q8)[i]);
                else
                    send16(s.attd + 2 * h, &bars[4], to, *reinterpret_cast<const uint4*>(s.att_d8));
            }
            __syncthreads();
            issue(l, 2);  // the staged rows are read: the slot takes the layer's gate/up
        }
        // ---- D: o rows
        receive(4, NH * (HD + 2 * (int)sizeof(Q8Blk)), par);
        MARK(5);
        mbar_wait(bar(1), par);
        rows<LO>(slots + OFF1, RB_D, RO, D / 32, s.attq, s.attd, [&](int j, float v) {
            s.stage[j] = v;
            A.o_out[(size_t)l * D + rank * RO + j] = v;
        });
        push(s.stage, s.o_in, rank * RO, RO, &bars[5]);
        if (more) issue(l + 1, 1);
        MARK(6);
        // ---- E: residual add, feed-forward norm, gate/up, SiLU
        receive(5, D * 4, par);
        MARK(7);
        norm_add(s.x1, s.o_in, s.xa, ffn_norm, s.nq, s.nd);
        MARK(8);
        mbar_wait(bar(2), par);
        {
            const int p = lane % LG;
            constexpr int RPW = 32 / LG;
            const u8* W = slots + OFF2 + NORM_BYTES;
            for (int j0 = warp * RPW; j0 < RF; j0 += WARPS * RPW) {
                int j = j0 + lane / LG, jr = j < RF ? j : RF - 1;
                float gv, uv;
                vl_rows<LG, true>(W + (size_t)jr * RB_D, W + (size_t)(RF + jr) * RB_D, s.nq, s.nd, D / 32, p, gv, uv);
                float a = act_apply(gv, uv, 0, 0.7978845608028654);
                if (j < RF && p == 0) s.stage[j] = a;
            }
        }
        if (ACT_Q8) {
            // quantize_q8_32's q8_block on the block's 3 whole 32-value blocks, then 6 x 16
            // bytes of values and 3 x 8 bytes of scales to every block
            __syncthreads();
            if (warp < RF / 32) q8_block(s.stage[warp * 32 + lane], s.act_q8, s.act_d8, (size_t)warp);
            __syncthreads();
            for (int t = tid; t < 9 * CS; t += THREADS) {
                int to = t / 9, i = t % 9;
                if (i < 6) {
                    send16(s.aq + rank * RF + 16 * i, &bars[6], to, reinterpret_cast<const uint4*>(s.act_q8)[i]);
                } else {
                    const Q8Blk* src = s.act_d8 + (i - 6);
                    unsigned raddr = mapa_u32(smem_u32(s.ad + rank * (RF / 32) + (i - 6)), to);
                    unsigned rbar = mapa_u32(smem_u32(&bars[6]), to);
                    asm volatile(
                        "st.async.shared::cluster.mbarrier::complete_tx::bytes.v2.b32 [%0], {%1, %2}, [%3];" ::"r"(raddr),
                        "r"(__float_as_uint(src->d)), "r"(src->s), "r"(rbar)
                        : "memory");
                }
            }
            __syncthreads();
        } else {
            push(s.stage, s.act_in, rank * RF, RF, &bars[6]);
        }
        if (more) {
            // slot 2 is read: an attention block stages the next layer's K/V rows there, the
            // others take the next layer's feed-forward norm and gate/up rows
            if (attn) stage_kv(l + 1);
            else issue(l + 1, 2);
        }
        MARK(9);
        // ---- F: the activation quantized, down rows
        receive(6, ACT_Q8 ? F + F / 32 * (int)sizeof(Q8Blk) : F * 4, par);
        MARK(10);
        if (!ACT_Q8) {
            for (int b = warp; b < F / 32; b += WARPS) q8_block(s.act_in[b * 32 + lane], s.aq, s.ad, (size_t)b);
            __syncthreads();
        }
        MARK(11);
        mbar_wait(bar(3), par);
        rows<LD>(slots + OFF3, RB_F, RDN, F / 32, s.aq, s.ad, [&](int j, float v) {
            s.stage[j] = v;
            A.ffn_out[(size_t)l * D + rank * RDN + j] = v;
        });
        push(s.stage, s.down_in, rank * RDN, RDN, &bars[7]);
        if (more) issue(l + 1, 3);
        MARK(12);
    }
    receive(7, D * 4, (LAYERS - 1) & 1);
    // no block leaves while another may still send into it
    asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
    if (rank == 0)
        for (int i = tid; i < D; i += THREADS) A.x_out[i] = s.xa[i];
}

// ------------------------------------------------------------------ host
static void fill_small(u8* p, size_t bytes, u32 seed) {
    // random nibbles; every f16 pair small and finite (high byte 0x00..0x23: |x| < 2^-7), so
    // 30 random layers stay finite
    std::vector<u8> hbuf(bytes);
    u32 x = seed;
    for (size_t i = 0; i < bytes; i++) {
        x = x * 1664525u + 1013904223u;
        hbuf[i] = (u8)(x >> 24);
    }
    for (size_t i = 1; i < bytes; i += 2) hbuf[i] = hbuf[i] % 0x24;
    CK(cudaMemcpy(p, hbuf.data(), bytes, cudaMemcpyHostToDevice));
}

int main(int argc, char** argv) {
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    printf("device: %s, %d SMs; step_cluster: 16 blocks of %d threads, lanes a row q/k/v %d, o %d, gate/up %d, down %d; "
           "ACT_Q8 %d\n",
           prop.name, prop.multiProcessorCount, THREADS, LQ, LO, LG, LD, ACT_Q8);
    const size_t per_layer = (size_t)QKV * RB_D + (size_t)D * RB_D + 2 * (size_t)F * RB_D + (size_t)D * RB_F;
    u8* W;
    CK(cudaMalloc(&W, per_layer * LAYERS + 256));
    fill_small(W, per_layer * LAYERS, 12345);
    auto wq = [&](int l) { return W + l * per_layer; };
    auto wk = [&](int l) { return wq(l) + (size_t)D * RB_D; };
    auto wv = [&](int l) { return wk(l) + (size_t)KV_DIM * RB_D; };
    auto wo = [&](int l) { return wv(l) + (size_t)KV_DIM * RB_D; };
    auto wg = [&](int l) { return wo(l) + (size_t)D * RB_D; };
    auto wu = [&](int l) { return wg(l) + (size_t)F * RB_D; };
    auto wd = [&](int l) { return wu(l) + (size_t)F * RB_D; };
    std::vector<float> hn((size_t)LAYERS * 2 * D);
    for (size_t i = 0; i < hn.size(); i++) hn[i] = 0.5f + 0.001f * (float)(i % 997);
    float* norms;
    CK(cudaMalloc(&norms, hn.size() * 4));
    CK(cudaMemcpy(norms, hn.data(), hn.size() * 4, cudaMemcpyHostToDevice));

    const size_t cache_floats = (size_t)LAYERS * SLOTS_PER_LAYER * KV_DIM;
    std::vector<float> hk(cache_floats), hv(cache_floats);
    {
        u32 x = 99;
        for (size_t i = 0; i < cache_floats; i++) {
            x = x * 1664525u + 1013904223u;
            hk[i] = ((float)(x >> 8) / 16777216.0f - 0.5f) * 2.0f;
            x = x * 1664525u + 1013904223u;
            hv[i] = ((float)(x >> 8) / 16777216.0f - 0.5f) * 2.0f;
        }
    }
    float *kc[2], *vc[2];
    for (int i = 0; i < 2; i++) {
        CK(cudaMalloc(&kc[i], cache_floats * 4));
        CK(cudaMalloc(&vc[i], cache_floats * 4));
    }
    auto reset_cache = [&]() {
        for (int i = 0; i < 2; i++) {
            CK(cudaMemcpy(kc[i], hk.data(), cache_floats * 4, cudaMemcpyHostToDevice));
            CK(cudaMemcpy(vc[i], hv.data(), cache_floats * 4, cudaMemcpyHostToDevice));
        }
    };
    // paged: position j's slot on page (j / 16 * 5 + 3) % 16
    std::vector<u32> hslots(ATT_D_MAX_KEYS);
    for (int j = 0; j < ATT_D_MAX_KEYS; j++) hslots[j] = (u32)(((j / 16) * 5 + 3) % 16 * 16 + j % 16);
    u32 *slots, *new_slot;
    CK(cudaMalloc(&slots, hslots.size() * 4));
    CK(cudaMemcpy(slots, hslots.data(), hslots.size() * 4, cudaMemcpyHostToDevice));
    CK(cudaMalloc(&new_slot, 4));
    int* info;
    CK(cudaMalloc(&info, 5 * 4));
    double* cs;
    CK(cudaMalloc(&cs, HD * 8));

    std::vector<float> x_init(D);
    for (int i = 0; i < D; i++) x_init[i] = 0.01f * (float)((i * 37) % 101 - 50);
    float *x_in, *ffn_in;
    CK(cudaMalloc(&x_in, D * 4));
    CK(cudaMalloc(&ffn_in, D * 4));
    CK(cudaMemcpy(x_in, x_init.data(), D * 4, cudaMemcpyHostToDevice));
    CK(cudaMemset(ffn_in, 0, D * 4));
    // per-layer outputs of both ways: [2][LAYERS][D]
    float *att[2], *oo[2], *ff[2], *xo[2];
    for (int i = 0; i < 2; i++) {
        CK(cudaMalloc(&att[i], (size_t)LAYERS * D * 4));
        CK(cudaMalloc(&oo[i], (size_t)LAYERS * D * 4));
        CK(cudaMalloc(&ff[i], (size_t)LAYERS * D * 4));
        CK(cudaMalloc(&xo[i], D * 4));
    }
    // the six kernels' buffers
    float *x1, *x2, *normed, *qkv, *fnormed, *gg, *uu, *aa;
    CK(cudaMalloc(&x1, D * 4));
    CK(cudaMalloc(&x2, D * 4));
    CK(cudaMalloc(&normed, D * 4));
    CK(cudaMalloc(&qkv, QKV * 4));
    CK(cudaMalloc(&fnormed, D * 4));
    CK(cudaMalloc(&gg, F * 4));
    CK(cudaMalloc(&uu, F * 4));
    CK(cudaMalloc(&aa, F * 4));
    signed char *q, *aq, *q8q;
    Q8Blk *ds, *ad, *q8d;
    CK(cudaMalloc(&q, D));
    CK(cudaMalloc(&ds, D / 32 * sizeof(Q8Blk)));
    CK(cudaMalloc(&aq, F));
    CK(cudaMalloc(&ad, F / 32 * sizeof(Q8Blk)));
    CK(cudaMalloc(&q8q, D));
    CK(cudaMalloc(&q8d, D / 32 * sizeof(Q8Blk)));
    unsigned long long* marks;
    CK(cudaMalloc(&marks, (size_t)LAYERS * NMARK * 8));

    const size_t smem = SLOT_BYTES + sizeof(Vecs);
    CK(cudaFuncSetAttribute(step_cluster, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
    CK(cudaFuncSetAttribute(step_cluster, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    printf("step_cluster: %zu bytes of dynamic shared memory a block (weight slots %d, vectors %zu)\n", smem,
           SLOT_BYTES, sizeof(Vecs));

    auto set_pos = [&](int pos) {
        int hinfo[5] = {0, pos + 1, pos, 0, -1};
        CK(cudaMemcpy(info, hinfo, sizeof(hinfo), cudaMemcpyHostToDevice));
        u32 ns = hslots[pos];
        CK(cudaMemcpy(new_slot, &ns, 4, cudaMemcpyHostToDevice));
        std::vector<double> hcs(HD);
        for (int i = 0; i < HD / 2; i++) {
            double th = pos * std::pow(10000.0, -2.0 * i / HD);
            hcs[2 * i] = std::cos(th);
            hcs[2 * i + 1] = std::sin(th);
        }
        CK(cudaMemcpy(cs, hcs.data(), HD * 8, cudaMemcpyHostToDevice));
    };
    // the six kernels, layer l (way 0)
    auto layer = [&](cudaStream_t st, int l, bool pdl) {
        const float* pw = nullptr;
        float* bn = nullptr;
        int g = D, nt = 256, m0 = D, m1 = KV_DIM, m2 = KV_DIM;
        float eps = EPS;
        const float* b = l == 0 ? (const float*)ffn_in : (const float*)(ff[0] + (size_t)(l - 1) * D);
        const float* a = l == 0 ? (const float*)x_in : (const float*)x2;
        launch_pdl(st, pdl, norm_mmv3_fast1_3, dim3(QKV / 8), dim3(256), a, b, pw, bn, x1,
                   (const float*)(norms + (size_t)l * 2 * D), normed, g, eps, nt, q, ds, (const u8*)wq(l),
                   (const u8*)wk(l), (const u8*)wv(l), qkv, qkv + D, qkv + D + KV_DIM, m0, m1, m2);
        size_t base = (size_t)l * SLOTS_PER_LAYER;
        int nh = NH, nkh = NKV, window = 0, hpb = 1, half = HD / 2, style = 0, n_rows = 1;
        float scale = 0.125f;
        const float* nullf = nullptr;
        float* nullw = nullptr;
        const u8* nullm = nullptr;
        launch_pdl(st, pdl, attention_decode_rope_64, dim3(1, NH), dim3(256), (const float*)qkv, kc[0], vc[0],
                   (const u32*)slots, (const int*)info, nullm, nullw, att[0] + (size_t)l * D, base, nh, nkh, scale,
                   window, hpb, q8q, q8d, (const float*)(qkv + D), (const float*)(qkv + D + KV_DIM), nullf, nullf,
                   eps, nullw, nullw, nullw, nullw, (const u32*)new_slot, base, (const double*)cs, half, style,
                   n_rows);
        int one = 1, kdim = D, mo = D;
        launch_pdl(st, pdl, mmv_fast1_3, dim3(D / 4), dim3(128), (const u8*)wo(l), (const signed char*)q8q,
                   (const Q8Blk*)q8d, oo[0] + (size_t)l * D, one, kdim, mo);
        int mm = F, act = 0;
        double c = 0.7978845608028654;
        launch_pdl(st, pdl, norm_gate_up_fast1_3, dim3(F / 8), dim3(256), (const float*)x1,
                   (const float*)(oo[0] + (size_t)l * D), pw, bn, x2, (const float*)(norms + (size_t)l * 2 * D + D),
                   fnormed, g, eps, nt, q, ds, (const u8*)wg(l), (const u8*)wu(l), gg, uu, aa, mm, act, c);
        int nblk = F / 32;
        launch_pdl(st, pdl, quantize_q8_32, dim3((nblk + 7) / 8), dim3(256), (const float*)aa, aq, ad, nblk);
        int kd = F, md = D;
        launch_pdl(st, pdl, mmv_fast1_3, dim3(D / 4), dim3(128), (const u8*)wd(l), (const signed char*)aq,
                   (const Q8Blk*)ad, ff[0] + (size_t)l * D, one, kd, md);
        if (l == LAYERS - 1) CK(cudaMemcpyAsync(xo[0], x2, D * 4, cudaMemcpyDeviceToDevice, st));
    };
    auto cluster = [&](cudaStream_t st, int pos) {
        Args a{W, per_layer, norms, kc[1], vc[1], slots, cs, pos, x_in, ffn_in, att[1], oo[1], ff[1], xo[1], marks};
        cudaLaunchConfig_t cfg = {};
        cfg.gridDim = dim3(CS);
        cfg.blockDim = dim3(THREADS);
        cfg.dynamicSmemBytes = smem;
        cfg.stream = st;
        cudaLaunchAttribute at[1];
        at[0].id = cudaLaunchAttributeClusterDimension;
        at[0].val.clusterDim.x = CS;
        at[0].val.clusterDim.y = 1;
        at[0].val.clusterDim.z = 1;
        cfg.attrs = at;
        cfg.numAttrs = 1;
        CK(cudaLaunchKernelEx(&cfg, step_cluster, a));
    };

    int positions[] = {64, 127};
    for (int pos : positions) {
        set_pos(pos);
        reset_cache();
        cudaStream_t st;
        CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
        for (int l = 0; l < LAYERS; l++) layer(st, l, false);
        cluster(st, pos);
        CK(cudaStreamSynchronize(st));
        CK(cudaGetLastError());
        // 1. bitwise, layer by layer
        auto get = [&](const float* p, size_t nf) {
            std::vector<float> v(nf);
            CK(cudaMemcpy(v.data(), p, nf * 4, cudaMemcpyDeviceToHost));
            return v;
        };
        const char* names[3] = {"attention", "o", "down"};
        float* bufs[2][3] = {{att[0], oo[0], ff[0]}, {att[1], oo[1], ff[1]}};
        bool all = true;
        for (int k = 0; k < 3; k++) {
            auto r = get(bufs[0][k], (size_t)LAYERS * D), c = get(bufs[1][k], (size_t)LAYERS * D);
            int first = -1;
            size_t diffs = 0;
            float mx = 0;
            for (size_t i = 0; i < r.size(); i++) {
                mx = fmaxf(mx, fabsf(r[i]));
                if (memcmp(&r[i], &c[i], 4) != 0) {
                    if (first < 0) first = (int)i;
                    diffs++;
                }
            }
            all = all && diffs == 0;
            if (diffs == 0)
                printf("pos %d: %-9s outputs of 30 layers: bitwise the same (max |v| %.3g)\n", pos, names[k], mx);
            else
                printf("pos %d: %-9s outputs: %zu of %zu DIFFER, first at layer %d value %d: %.9g vs %.9g\n", pos,
                       names[k], diffs, r.size(), first / D, first % D, r[first], c[first]);
        }
        {
            auto r = get(xo[0], D), c = get(xo[1], D);
            bool same = memcmp(r.data(), c.data(), D * 4) == 0;
            all = all && same;
            printf("pos %d: residual after 30 layers: %s\n", pos, same ? "bitwise the same" : "DIFFERENT");
            auto k0 = get(kc[0], cache_floats), k1 = get(kc[1], cache_floats);
            auto v0 = get(vc[0], cache_floats), v1 = get(vc[1], cache_floats);
            bool ksame = memcmp(k0.data(), k1.data(), cache_floats * 4) == 0;
            bool vsame = memcmp(v0.data(), v1.data(), cache_floats * 4) == 0;
            size_t changed = 0;
            for (size_t i = 0; i < cache_floats; i++) changed += memcmp(&k0[i], &hk[i], 4) != 0;
            all = all && ksame && vsame;
            printf("pos %d: K cache %s, V cache %s (%zu K values written by the step)\n", pos,
                   ksame ? "bitwise the same" : "DIFFERENT", vsame ? "bitwise the same" : "DIFFERENT", changed);
        }
        printf("pos %d: the cluster step is %s the six kernels'\n", pos, all ? "BITWISE" : "NOT bitwise");
        CK(cudaStreamDestroy(st));

        // 2. timing: the six kernels as a graph with programmatic edges (30 layers a replay), the
        // cluster kernel as a graph of 4 launches; alternating, 3 rounds
        for (int round = 0; round < 3; round++) {
            float six = time_graph(LAYERS, [&](cudaStream_t s2, int i, bool capture) { layer(s2, i % LAYERS, capture); });
            float one = time_graph(4, [&](cudaStream_t s2, int, bool) { cluster(s2, pos); }) / LAYERS;
            printf("pos %d round %d: six kernels %.2f us a layer, cluster step %.2f us a layer\n", pos, round, six, one);
        }
        std::vector<unsigned long long> mk((size_t)LAYERS * NMARK);
        CK(cudaMemcpy(mk.data(), marks, mk.size() * 8, cudaMemcpyDeviceToHost));
        // block 0 (a query head, a group's first), the median over layers 1-28 of each phase
        const char* ph[12] = {"wait weights+down", "attention norm", "q/k/v rows", "attention", "receive attention",
                              "o rows + send", "receive o", "ffn norm", "gate/up + send", "receive act",
                              "quantize act", "down + send"};
        printf("pos %d: block 0, median us a phase (layers 1-28):", pos);
        for (int p = 0; p < 12; p++) {
            std::vector<double> v;
            for (int l = 1; l < LAYERS - 1; l++) v.push_back((mk[l * NMARK + p + 1] - mk[l * NMARK + p]) / 1e3);
            std::sort(v.begin(), v.end());
            printf(" %s %.2f;", ph[p], v[v.size() / 2]);
        }
        std::vector<double> lv;
        for (int l = 1; l < LAYERS - 1; l++) lv.push_back((mk[(l + 1) * NMARK] - mk[l * NMARK]) / 1e3);
        std::sort(lv.begin(), lv.end());
        printf(" a layer %.2f\n", lv[lv.size() / 2]);
    }
    return 0;
}
