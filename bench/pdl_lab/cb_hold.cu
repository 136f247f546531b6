// Session 45: when may a programmatic secondary read its kernel parameters? lockstep's timeline
// found the o projection's first parameter read (constant bank 0) returning only when the decode
// attention before it ends (3-7 us after the o's blocks started), while the kernels after the o
// read theirs at once. This lab replays a graph of kernels shaped like a Gemma-3 layer's seven
// (blocks, where each lets the next launch, how long it works, its shared memory), 18 layers,
// all on programmatic edges, and stamps in block 0 of each: entry (before any parameter read),
// the first parameter in a register, the grid wait's release, the end of its work.
// nvcc -arch=sm_90 -O2 -std=c++17 -o cb_hold cb_hold.cu; ./cb_hold "spec" ... (one spec a run:
// seven kernels "blocks:trigger:work_ns:smem_kb[:params:threads:gy:gz:cz:flags]" separated by
// commas; trigger e = at entry, w = after the grid wait, l = after the work; params s = 32
// bytes, b = 512; flags below).
#include <cuda_runtime.h>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

struct Rec {
    unsigned long long entry, param, arrive, release, done, uparam;
};
__device__ Rec recs[1 << 14];

__device__ __forceinline__ unsigned long long now() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)::"memory");
    return t;
}
__device__ __forceinline__ void spin(unsigned long long ns) {
    unsigned long long t0 = now();
    while (now() - t0 < ns) {
    }
}

// Flags (the spec's tenth field, letters): L a pre-wait load of 8 KB a block (ld.global.cg,
// consumed before the wait, as the attention loads its keys), W a pre-wait "weight" load after
// the parameter (ld.global.nc with an evict-first L2 hint, as the mat-vecs), O an output of
// 16 KB written after the wait and the previous kernel's read after the wait. B (the kernel's
// template): 512 bytes of parameters instead of 32.
// U: before those, a parameter through the uniform datapath (ULDC, as the mat-vecs' row
// count and length), its own stamp (session 45's engine timeline: the o projection's block
// waited 3.6 us between its first parameter, an LDC, and the code after its ULDC reads).
enum { F_L = 1, F_W = 2, F_O = 4, F_U = 8 };
template <int PAD>
struct Args {
    int id, work_ns, flags, m;
    float* buf;        // 2 floats, never written
    const uint4* big;  // 64 MB read-only
    float* act;        // 2 x 16 KB: outputs
    char pad[PAD];
};
__device__ __forceinline__ uint4 ld_nc_hint(const uint4* p) {
    uint4 v;
    unsigned long long pol;
    asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(pol));
    asm volatile("ld.global.nc.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p), "l"(pol));
    return v;
}
template <int TRIG, int PAD>
__global__ void k(Args<PAD> a) {
    extern __shared__ float sm[];
    unsigned long long te = now();
    bool rec = (threadIdx.x | blockIdx.x | blockIdx.y | blockIdx.z) == 0;
    if (TRIG == 0) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    int myid = a.id;  // constant bank 0
    if (myid == -12345) a.buf[0] = 1.0f;  // never: orders the stamp after the parameter
    unsigned long long tp = now();
    int flags = a.flags;
    unsigned long long tu = tp;
    if (flags & F_U) {
        // The mat-vecs' prologue: the warp's row from blockDim, against the row count m (a
        // parameter, which ptxas reads through the uniform datapath there, as here).
        int r = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
        if (r >= a.m) a.buf[1] = 3.0f;  // never (m is above every row)
        tu = now();
    }
    unsigned int blk = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    unsigned int acc = 0;
    if (flags & F_L) {
        const uint4* p = a.big + ((size_t)(myid % 64) * 8192 + (blk % 64) * 512 + threadIdx.x % 512);
        uint4 v = __ldcg(p);
        acc ^= v.x ^ v.w;
    }
    if (flags & F_W) {
        const uint4* p = a.big + (1u << 21) + ((size_t)(myid % 64) * 16384 + (blk % 256) * 64 + threadIdx.x % 64);
        uint4 v = ld_nc_hint(p);
        acc ^= v.y ^ v.z;
    }
    if (acc == 0x12345u) a.buf[1] = 2.0f;  // consumed before the wait
    unsigned long long ta = now();
    asm volatile("griddepcontrol.wait;" ::: "memory");
    unsigned long long tr = now();
    if (TRIG == 1) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    if (flags & F_O) {
        const float* in = a.act + ((myid & 1) ? 0 : 4096);
        float* out = a.act + ((myid & 1) ? 4096 : 0);
        unsigned int i = (blk * blockDim.x + threadIdx.x) % 4096;
        out[i] = in[i] + 1.0f;
    }
    sm[threadIdx.x] = (float)threadIdx.x;
    spin((unsigned long long)a.work_ns);
    if (sm[threadIdx.x] < -1.0f) a.buf[1] = sm[threadIdx.x];
    if (TRIG == 2) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    unsigned long long td = now();
    if (rec) recs[myid] = Rec{te, tp, ta, tr, td, tu};
}

struct Spec {
    int blocks, trig, work_ns, smem_kb;
    bool big;
    int threads, gy, gz, cz;  // block size; grid (blocks, gy, gz); cluster (1, 1, cz)
    int flags;
};

static void* kfun(const Spec& s) {
    if (s.big) {
        if (s.trig == 0) return (void*)k<0, 480>;
        if (s.trig == 1) return (void*)k<1, 480>;
        return (void*)k<2, 480>;
    }
    if (s.trig == 0) return (void*)k<0, 8>;
    if (s.trig == 1) return (void*)k<1, 8>;
    return (void*)k<2, 8>;
}

int main(int argc, char** argv) {
    const int LAYERS = 18, REPS = 200;
    float* buf;
    cudaMalloc(&buf, 1024);
    uint4* big;
    cudaMalloc(&big, 64u << 20);
    cudaMemset(big, 1, 64u << 20);
    float* act;
    cudaMalloc(&act, 8192 * sizeof(float));
    cudaMemset(act, 0, 8192 * sizeof(float));
    cudaStream_t st;
    cudaStreamCreate(&st);
    for (int a = 1; a < argc; a++) {
        std::vector<Spec> sp;
        std::string arg = argv[a];
        size_t p = 0;
        while (p < arg.size()) {
            size_t q = arg.find(',', p);
            if (q == std::string::npos) q = arg.size();
            std::string t = arg.substr(p, q - p);
            Spec s{};
            s.threads = 128; s.gy = 1; s.gz = 1; s.cz = 1;
            char tc = 'e', pc = 's';
            char fl[16] = {0};
            int n = sscanf(t.c_str(), "%d:%c:%d:%d:%c:%d:%d:%d:%d:%15s", &s.blocks, &tc, &s.work_ns, &s.smem_kb,
                           &pc, &s.threads, &s.gy, &s.gz, &s.cz, fl);
            if (n < 4) { printf("bad spec %s\n", t.c_str()); return 1; }
            s.trig = tc == 'e' ? 0 : tc == 'w' ? 1 : 2;
            s.big = pc == 'b';
            s.flags = (strchr(fl, 'L') ? F_L : 0) | (strchr(fl, 'W') ? F_W : 0) | (strchr(fl, 'O') ? F_O : 0) |
                      (strchr(fl, 'U') ? F_U : 0);
            sp.push_back(s);
            p = q + 1;
        }
        int K = (int)sp.size();
        for (auto& s : sp) {
            cudaFuncSetAttribute(kfun(s), cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024);
            cudaFuncSetAttribute(kfun(s), cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
        }
        cudaGraph_t g;
        cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal);
        for (int l = 0; l < LAYERS; l++)
            for (int i = 0; i < K; i++) {
                const Spec& s = sp[i];
                cudaLaunchConfig_t cfg = {};
                cfg.gridDim = dim3(s.blocks, s.gy, s.gz);
                cfg.blockDim = dim3(s.threads);
                cfg.dynamicSmemBytes = (size_t)std::max(s.smem_kb, 1) * 1024;  // the kernel writes sm[threadIdx.x]
                cfg.stream = st;
                cudaLaunchAttribute at[2];
                at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
                at[0].val.programmaticStreamSerializationAllowed = 1;
                at[1].id = cudaLaunchAttributeClusterDimension;
                at[1].val.clusterDim.x = 1;
                at[1].val.clusterDim.y = 1;
                at[1].val.clusterDim.z = s.cz;
                cfg.attrs = at;
                cfg.numAttrs = s.cz > 1 ? 2 : 1;
                int id = l * K + i;
                Args<480> ab{};
                Args<8> as{};
                ab.id = as.id = id;
                ab.work_ns = as.work_ns = s.work_ns;
                ab.flags = as.flags = s.flags;
                ab.m = as.m = 1 << 30;
                ab.buf = as.buf = buf;
                ab.big = as.big = big;
                ab.act = as.act = act;
                void* args[] = {s.big ? (void*)&ab : (void*)&as};
                cudaError_t e = cudaLaunchKernelExC(&cfg, kfun(s), args);
                if (e != cudaSuccess) { printf("launch: %s\n", cudaGetErrorString(e)); return 1; }
            }
        cudaStreamEndCapture(st, &g);
        cudaGraphExec_t ex;
        if (cudaGraphInstantiate(&ex, g, 0) != cudaSuccess) { printf("instantiate failed\n"); return 1; }
        int n = LAYERS * K;
        // per role: entry - prev release, param - entry, arrive - entry, release - prev release
        std::vector<std::vector<double>> ent(K), par(K), parp(K), share(K), upar(K);
        std::vector<Rec> h(n);
        for (int r = 0; r < REPS; r++) {
            cudaGraphLaunch(ex, st);
            cudaError_t e = cudaStreamSynchronize(st);
            if (e != cudaSuccess) { printf("replay: %s\n", cudaGetErrorString(e)); return 1; }
            if (r < 5) continue;
            cudaMemcpyFromSymbol(h.data(), recs, n * sizeof(Rec));
            for (int j = 2 * K; j < n; j++) {
                int i = j % K;
                const Rec& c = h[j];
                const Rec& pv = h[j - 1];
                ent[i].push_back(((double)c.entry - (double)pv.release) / 1000.0);
                par[i].push_back(((double)c.param - (double)c.entry) / 1000.0);
                upar[i].push_back(((double)c.uparam - (double)c.entry) / 1000.0);
                parp[i].push_back(((double)c.param - (double)pv.done) / 1000.0);
                share[i].push_back(((double)c.release - (double)pv.release) / 1000.0);
            }
        }
        auto med = [](std::vector<double>& v) {
            std::sort(v.begin(), v.end());
            return v.empty() ? 0.0 : v[v.size() / 2];
        };
        double step = 0;
        for (int i = 0; i < K; i++) step += med(share[i]);
        printf("spec %s: layer %.2f us (sum of medians)\n", argv[a], step);
        printf("  %-3s %-18s %9s %11s %12s %14s %9s\n", "i", "kernel", "entry-pr", "param-entry", "uparam-entry",
               "param-prevdone", "share");
        for (int i = 0; i < K; i++) {
            char nm[64];
            snprintf(nm, sizeof nm, "%d:%c:%d:%d%s%s%s%s%s", sp[i].blocks, "ewl"[sp[i].trig], sp[i].work_ns,
                     sp[i].smem_kb, sp[i].big ? "B" : "", sp[i].flags & F_L ? "L" : "", sp[i].flags & F_W ? "W" : "",
                     sp[i].flags & F_O ? "O" : "", sp[i].flags & F_U ? "U" : "");
            printf("  %-3d %-18s %9.2f %11.2f %12.2f %14.2f %9.2f\n", i, nm, med(ent[i]), med(par[i]),
                   med(upar[i]), med(parp[i]), med(share[(i + 1) % K]));
        }
        cudaGraphExecDestroy(ex);
        cudaGraphDestroy(g);
    }
    return 0;
}
