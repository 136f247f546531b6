#!/bin/bash
# CPU emulation of the CUDA attention kernels (no GPU needed): kernels.cu's `attention`,
# `attention_tile[_wide]`, `attention_split` and `attention_combine` compiled as C++ (one std::thread per CUDA thread, std::barrier for
# __syncthreads), run on random batches (GQA, windows, masks, several sequences, head sizes
# 8..512, exp underflow) with random tilings, compared bitwise (scores, probs, output); and
# `attention_split` + `attention_combine` (f32 split-key decode), `attention_decode_<D>` (f32
# short decode; `attention_decode_cl<N>_256` too, the keys cut over a cluster of N blocks run at
# once) and `attention_flash_<D>` held to verify's bound; `attention_decode_rope_<D>`
# bitwise `rope_store` then `attention_decode_<D>` (outputs, scores, taps, the cache).
# Usage: bench/attn_emu/run.sh [cases] [seed] [extra g++ flags, e.g. -DFAULT_WRONG_KV_HEAD]
# HD=512 forces the head size; ATTN_EMU_FLAGS adds g++ flags (-DLOCKSTEP_KV_F16: the fast
# build's f16 KV cache). Heavy on threads: run it niced.
set -e
D=$(cd "$(dirname "$0")" && pwd)
W=${TMPDIR:-/tmp}/attn_emu.$$; mkdir -p $W
trap 'rm -rf "$W"' EXIT
python3 - "$D/../../crates/backend-cuda/src/kernels.cu" "$W/kern.inc" <<'PY'
import sys
s = open(sys.argv[1]).read()
r = s.index("// The reference's reduction of eight partial sums"); r2 = s.index('}\n', r) + 2
a = s.index('// Per query row: [slots offset'); b = s.index('// Weight rows [r0, r0 + rows) of W (quantized')
q0 = s.index("struct Q8Blk {"); q1 = s.index("__constant__ signed char KVALUES_IQ4NL")
# The norms (rope_store's per-head norms) and rope_store itself, which the fused short decode
# kernel (`attention_decode_rope_<D>`) is compared with bitwise.
n0 = s.index("// RMS norm of groups of `g` values"); n1 = s.index("// Blocks of up to 1024 threads (plan::norm_threads)")
e0 = s.index("__device__ __forceinline__ float rope_elem"); e1 = s.index('extern "C" __global__ void gather_rows')
k = "typedef unsigned char u8;\ntypedef unsigned int u32;\n" + s[q0:q1] + s[r:r2] + s[n0:n1] + s[e0:e1] + s[a:b]
k = k.replace("extern __shared__ __align__(16) unsigned char att_smem[];", "unsigned char* att_smem = g_dyn_smem;")
open(sys.argv[2], 'w').write(k)
PY
g++ -std=c++20 -O1 -ffp-contract=off -fno-fast-math -pthread -I$W -I$D ${3:-} ${ATTN_EMU_FLAGS:-} $D/main.cpp -o $W/emu
$W/emu ${1:-12} ${2:-1}
