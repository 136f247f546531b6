// SmolLM2-135M's 30 decode layers as one 16-block cluster kernel with the production kernels'
// arithmetic, bit for bit (session 36). Session 34's v3 (cluster_layer2.cu) ran a layer in 11.46
// us against about 14.7 in the step, but with arithmetic of its own; its section 3 found the
// production arithmetic (a warp a row) 4 us a layer slower on 16 SMs. ffn_cluster.cu's variants
// play a row's 32 lanes with 4 or 8 lanes: bitwise, and as fast as v3's own order.
//
// This lab now runs the backend's kernel, kernels.cu `decode_layers_cluster` (its phases are
// described there), against the six kernels a layer the step graph otherwise runs
// (`rms_norm` and `mmv3_fast1_3` for layer 0, then `norm_mmv3_fast1_3`; `attention_decode_rope_64`,
// `mmv_fast1_3` (o), `norm_gate_up_fast1_3`, `quantize_q8_32`, `mmv_fast1_3` (down)), from the
// same random Q4_1 weights and paged f32 cache: the last layer's residual (ffn_inp) and down
// output and the whole K and V caches must be the same bits. Then both are timed as CUDA graphs.
// The kernel was developed here in three versions before it moved to kernels.cu (7d33df8 has
// them, with per-phase marks; results/step_cluster_v1*.txt, _v2*.txt, _v3.txt):
//   v1 (K/V rows loaded in the attention phase, every block quantizing the activation): 13.30 /
//   14.93 us a layer at pos 64 / 127, against the six kernels' 14.0 / 14.7;
//   v2 (K/V rows staged by cp.async into the gate/up slot; the activation quantized by its
//   sender): 11.28 / 12.36 (every block quantizing: 11.75 / 12.83);
//   v3 (slot 0 refilled after q/k/v, the feed-forward norm in slot 2, the K/V rows staged from
//   the gate/up phase of the layer before): 11.11 / 11.98, bitwise in every version.
// The backend's kernel, run here (results/step_cluster_backend_kernel.txt): bitwise, 12.07 /
// 13.02 against 14.26 / 15.07: about 1 us a layer slower than v3 in the same conditions.
// Session 37 found the gap by building variants of kernels.cu (-DKERNELS_CU) and running them
// side by side (results/step_cluster_variants_s37.txt): thread 0 issued the bulk copies through
// a loop, and its warp (warp 0: the softmax) waited for it; copies unrolled and issued by the
// last thread, 12.07 -> 11.11; the layers compiled with and without a mask, 10.95. Then the k
// and v rows moved to blocks 9-14 (each head block computes 64 q rows, was 192 rows of q/k/v):
// 10.31 / 11.16 / 11.08 at pos 64 / 127 / 100 with a mask (results/step_cluster.txt), bitwise.
// -DLAB_MARKS with a copy from marks_variant.py prints block 0's phases
// (results/step_cluster_marks.txt).
// Session 38: the kernel's layer table has a record after the layers (the output norm's
// pointers; zeros here: no output norm), so the table has LAYERS + 1 entries. Five more
// pointers in ClusterStep had cost the loop 0.25 us a layer in this lab (ptxas spills at the
// kernel's 128 registers); bench/session38/lab_*.txt.
// nvcc -gencode=arch=compute_90a,code=sm_90a -O3 --fmad=false -std=c++17 \
//   -diag-suppress 128,177,550,549 -o step_cluster step_cluster.cu
#define LOCKSTEP_FAST_F32
__device__ unsigned emu_tf32_rna(float);
__device__ void emu_mma_tf32(float*, const unsigned*, const unsigned*);
// KERNELS_CU: another copy of kernels.cu (a variant, or an earlier commit's) to run instead
#ifdef KERNELS_CU
#include KERNELS_CU
#else
#include "../../crates/backend-cuda/src/kernels.cu"
#endif
#include "../gemv_lab/lab_common.cuh"

#include <cmath>

constexpr int D = CL_D, NH = CL_NH, NKV = CL_NKV, HD = CL_HD, F = CL_F, LAYERS = 30;
constexpr int QKV = D + 2 * NKV * HD, KV_DIM = NKV * HD;
constexpr int RB_D = CL_RB_D, RB_F = CL_RB_F;
constexpr int SLOTS_PER_LAYER = 256;  // cache rows a layer (16 pages of 16)
constexpr float EPS = 1e-5f;
// cluster::VEC_BYTES: the backend's room for the kernel's vectors
constexpr size_t SMEM = CL_SLOT_BYTES + 24 * 1024;

// ------------------------------------------------------------------ host
int main(int argc, char** argv) {
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    printf("device: %s, %d SMs; decode_layers_cluster: %d blocks of %d threads\n", prop.name,
           prop.multiProcessorCount, CL_CS, CL_THREADS);
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
    // the runs with a mask (masked_pos below): every third key hidden, the row's own visible
    u8* mask;
    CK(cudaMalloc(&mask, ATT_D_MAX_KEYS));
    {
        std::vector<u8> hm(ATT_D_MAX_KEYS);
        for (int j = 0; j < ATT_D_MAX_KEYS; j++) hm[j] = j % 3 != 1 || j == 100;
        CK(cudaMemcpy(mask, hm.data(), hm.size(), cudaMemcpyHostToDevice));
    }
    bool with_mask = false;
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
    // the cluster kernel's layer table and outputs
    std::vector<ClusterLayer> hl(LAYERS + 1);  // and the output norm's record: none (zeros)
    for (int l = 0; l < LAYERS; l++)
        hl[l] = ClusterLayer{wq(l), wk(l), wv(l), wo(l), wg(l), wu(l), wd(l), norms + (size_t)l * 2 * D,
                             norms + (size_t)l * 2 * D + D, cs, (unsigned long long)l * SLOTS_PER_LAYER};
    ClusterLayer* layers;
    CK(cudaMalloc(&layers, hl.size() * sizeof(ClusterLayer)));
    CK(cudaMemcpy(layers, hl.data(), hl.size() * sizeof(ClusterLayer), cudaMemcpyHostToDevice));

    CK(cudaFuncSetAttribute(decode_layers_cluster, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
    CK(cudaFuncSetAttribute(decode_layers_cluster, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)SMEM));
    printf("decode_layers_cluster: %zu bytes of dynamic shared memory a block (slots %d, vectors %zu)\n", SMEM,
           CL_SLOT_BYTES, sizeof(ClusterVecs));

    auto set_pos = [&](int pos) {
        int hinfo[5] = {0, pos + 1, pos, 0, with_mask ? 0 : -1};
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
        if (l == 0) {
            // the step's first layer: rms_norm of the embedding, then q/k/v (mmv3_fast1)
            launch_pdl(st, pdl, rms_norm, dim3(1), dim3(256), (const float*)x_in,
                       (const float*)norms, normed, g, eps, q, ds);
            int one = 1;
            launch_pdl(st, pdl, mmv3_fast1_3, dim3(QKV / 4), dim3(128), (const u8*)wq(0), (const u8*)wk(0),
                       (const u8*)wv(0), (const signed char*)q, (const Q8Blk*)ds, qkv, qkv + D, qkv + D + KV_DIM,
                       one, g, m0, m1, m2);
        } else {
            launch_pdl(st, pdl, norm_mmv3_fast1_3, dim3(QKV / 8), dim3(256), (const float*)x2,
                       (const float*)(ff[0] + (size_t)(l - 1) * D), pw, bn, x1,
                       (const float*)(norms + (size_t)l * 2 * D), normed, g, eps, nt, q, ds, (const u8*)wq(l),
                       (const u8*)wk(l), (const u8*)wv(l), qkv, qkv + D, qkv + D + KV_DIM, m0, m1, m2);
        }
        const float* resid = l == 0 ? (const float*)x_in : (const float*)x1;
        size_t base = (size_t)l * SLOTS_PER_LAYER;
        int nh = NH, nkh = NKV, window = 0, hpb = 1, half = HD / 2, style = 0, n_rows = 1;
        float scale = 0.125f;
        const float* nullf = nullptr;
        float* nullw = nullptr;
        const u8* nullm = with_mask ? mask : nullptr;
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
        launch_pdl(st, pdl, norm_gate_up_fast1_3, dim3(F / 8), dim3(256), resid,
                   (const float*)(oo[0] + (size_t)l * D), pw, bn, x2, (const float*)(norms + (size_t)l * 2 * D + D),
                   fnormed, g, eps, nt, q, ds, (const u8*)wg(l), (const u8*)wu(l), gg, uu, aa, mm, act, c);
        int nblk = F / 32;
        launch_pdl(st, pdl, quantize_q8_32, dim3((nblk + 7) / 8), dim3(256), (const float*)aa, aq, ad, nblk);
        int kd = F, md = D;
        launch_pdl(st, pdl, mmv_fast1_3, dim3(D / 4), dim3(128), (const u8*)wd(l), (const signed char*)aq,
                   (const Q8Blk*)ad, ff[0] + (size_t)l * D, one, kd, md);
        if (l == LAYERS - 1) CK(cudaMemcpyAsync(xo[0], x2, D * 4, cudaMemcpyDeviceToDevice, st));
    };
    auto cluster = [&](cudaStream_t st) {
        ClusterStep a{layers, LAYERS, HD / 2, 0, EPS, 0.125f, 0, 0.7978845608028654, kc[1], vc[1], slots, info, mask,
                      new_slot, x_in, xo[1], ff[1]};
        cudaLaunchConfig_t cfg = {};
        cfg.gridDim = dim3(CL_CS);
        cfg.blockDim = dim3(CL_THREADS);
        cfg.dynamicSmemBytes = SMEM;
        cfg.stream = st;
        cudaLaunchAttribute at[1];
        at[0].id = cudaLaunchAttributeClusterDimension;
        at[0].val.clusterDim.x = CL_CS;
        at[0].val.clusterDim.y = 1;
        at[0].val.clusterDim.z = 1;
        cfg.attrs = at;
        cfg.numAttrs = 1;
        CK(cudaLaunchKernelEx(&cfg, decode_layers_cluster, a));
    };

    // pos 100 runs with the mask (the kernel's other instantiation), bitwise check only
    int positions[] = {64, 127, 100};
    for (int pos : positions) {
        with_mask = pos == 100;
        set_pos(pos);
        if (with_mask) printf("pos %d: with a mask hiding every third key (the kernel's masked copy)\n", pos);
        reset_cache();
        cudaStream_t st;
        CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
        for (int l = 0; l < LAYERS; l++) layer(st, l, false);
        cluster(st);
        CK(cudaStreamSynchronize(st));
        CK(cudaGetLastError());
        // 1. bitwise: the last layer's residual and down output, every cache value
        auto get = [&](const float* p, size_t nf) {
            std::vector<float> v(nf);
            CK(cudaMemcpy(v.data(), p, nf * 4, cudaMemcpyDeviceToHost));
            return v;
        };
        bool all = true;
        const char* names[2] = {"residual after 30 layers (ffn_inp)", "the last down output"};
        const float* ref[2] = {xo[0], ff[0] + (size_t)(LAYERS - 1) * D};
        const float* got[2] = {xo[1], ff[1]};
        for (int k = 0; k < 2; k++) {
            auto r = get(ref[k], D), c = get(got[k], D);
            bool same = memcmp(r.data(), c.data(), D * 4) == 0;
            float mx = 0;
            for (float x : r) mx = fmaxf(mx, fabsf(x));
            all = all && same;
            printf("pos %d: %s: %s (max |v| %.3g)\n", pos, names[k], same ? "bitwise the same" : "DIFFERENT", mx);
        }
        {
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

#ifdef LAB_MARKS
        // a variant of kernels.cu with LABMARK(i) stamps (block 0's global timer, lab_marks[layer
        // * 16 + i]): the median of each phase over layers 1-28, in the kernel's order
        {
            cudaStream_t s3;
            CK(cudaStreamCreateWithFlags(&s3, cudaStreamNonBlocking));
            for (int r = 0; r < 3; r++) cluster(s3);
            CK(cudaStreamSynchronize(s3));
            std::vector<unsigned long long> mk(32 * 16);
            CK(cudaMemcpyFromSymbol(mk.data(), lab_marks, mk.size() * 8));
            const int order[] = {0, 1, 2, 13, 3, 4, 5, 6, 7, 14, 8, 15, 9, 10, 11, 12};
            const char* what[] = {"wait slot 0 + down", "attention norm", "q/k/v rows", "staged K/V wait",
                                  "attention", "send + receive attention", "o rows + send", "receive o",
                                  "wait ffn norm", "ffn norm", "wait gate/up", "gate/up + act + send",
                                  "receive act", "wait down", "down + send"};
            printf("pos %d: block 0, median us a phase (layers 1-28):", pos);
            auto med = [&](auto f) {
                std::vector<double> v;
                for (int l = 1; l < 29; l++) v.push_back(f(l));
                std::sort(v.begin(), v.end());
                return v[v.size() / 2];
            };
            for (int k = 0; k + 1 < 16; k++)
                printf(" %s %.2f;", what[k], med([&](int l) {
                           return (double)(mk[l * 16 + order[k + 1]] - mk[l * 16 + order[k]]) / 1e3;
                       }));
            printf(" a layer %.2f\n", med([&](int l) { return (double)(mk[(l + 1) * 16] - mk[l * 16]) / 1e3; }));
            CK(cudaStreamDestroy(s3));
        }
#endif
        // 2. timing: the six kernels as a graph with programmatic edges (30 layers a replay), the
        // cluster kernel as a graph of 4 launches; alternating, 3 rounds
        for (int round = 0; round < 3; round++) {
            float six = time_graph(LAYERS, [&](cudaStream_t s2, int i, bool capture) { layer(s2, i % LAYERS, capture); });
            float one = time_graph(4, [&](cudaStream_t s2, int, bool) { cluster(s2); }) / LAYERS;
            printf("pos %d round %d: six kernels %.2f us a layer, cluster step %.2f us a layer\n", pos, round, six, one);
        }
    }
    return 0;
}
