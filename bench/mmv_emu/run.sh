#!/bin/bash
# CPU emulation of the one-row fast mat-vecs (no GPU needed): kernels.cu's FAST NUMERICS section
# as it is (weight units, fast_rows, fast_rows_nr) compiled as C++ with bench/attn_emu's shim
# (one std::thread per CUDA thread, per-warp barriers for the shuffles), run for every type with
# a fast kernel on random weights and activations: two weight rows a warp (fast_rows_nr: the
# mmv_fast2r / mmv3_fast2r kernels' rows) against a warp a row (fast_rows, mmv_fast1's), bitwise;
# and the long norm-fused kernels' rows (norm_long_mmv3_rows, norm_long_gate_up_rows), dealt
# grid-stride, against a warp a row (mmv_fast1's, gate_up_fast1's): every row once, bitwise.
# Usage: bench/mmv_emu/run.sh [seed]; MMV_EMU_PERTURB=1 flips one output's last bit (the
# harness must fail). bench/mmv_emu/run.sh layout-build DIR: the two builds that read Q6_K, Q5_0
# and Q8_0 rows from GGUF's blocks and from the device's layouts (tests/mmv_emulation.rs compares
# them).
set -e
D=$(cd "$(dirname "$0")" && pwd)
W=${TMPDIR:-/tmp}/mmv_emu.$$; mkdir -p $W
trap 'rm -rf "$W"' EXIT
python3 - "$D/../../crates/backend-cuda/src/kernels.cu" "$W/kern.inc" <<'PY'
import sys
s = open(sys.argv[1]).read()
t0 = s.index("#define T_F32 0"); t1 = s.index("__device__ __forceinline__ float h2f(u16 h)")
q0 = s.index("struct Q8Blk {"); q1 = s.index("__constant__ signed char KVALUES_IQ4NL")
b0 = s.index("// Elements and bytes per block of each type"); b1 = s.index("template <int TY>\n__device__ __forceinline__ float deq_t")
p0 = s.index("// Q6_K weights on the device are stored in planes"); p1 = s.index("// Element `e` of the block at `b`")
f0 = s.index("// Bits 0..3 of v to bit 4 of bytes 0..3"); f1 = s.index("// END FAST NUMERICS")
# The long norm-fused kernels' rows (their prefetch is device-only).
l0 = s.index("#define NORM_LONG_MAX 4096"); l1 = s.index("#define NORM_LONG_SETUP")
r0 = s.index("// q, k and v (rows m0, m1, m2 in that order"); r1 = s.index("#define NORM_LONG_MMV3(NAME, TY, TYV)")
k = s[t0:t1] + s[q0:q1] + s[p0:p1] + s[b0:b1] + s[f0:f1] + s[l0:l1] + s[r0:r1]
open(sys.argv[2], 'w').write(k)
PY
CXX="g++ -std=c++20 -O1 -ffp-contract=off -fno-fast-math -pthread -DLOCKSTEP_WEIGHTS_EVICT_NORMAL -I$W -I$D -I$D/../attn_emu"
if [ "${1:-}" = layout-build ]; then
  # run.sh layout-build DIR: DIR/emu_gguf reads Q6_K, Q5_0 and Q8_0 from GGUF's blocks
  # (-DLOCKSTEP_Q6K_GGUF -DLOCKSTEP_Q50_GGUF -DLOCKSTEP_Q80_GGUF), DIR/emu from the device's
  # planes and repacked Q5_0 blocks (the default build); each then runs
  # `layout FILE K M [q5_0|q8_0]` (main.cpp).
  $CXX -DLOCKSTEP_Q6K_GGUF -DLOCKSTEP_Q50_GGUF -DLOCKSTEP_Q80_GGUF $D/main.cpp -o "$2/emu_gguf" &
  $CXX $D/main.cpp -o "$2/emu"
  wait
  exit 0
fi
$CXX $D/main.cpp -o $W/emu
$W/emu ${1:-1}
