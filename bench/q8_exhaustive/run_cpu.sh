#!/bin/bash
# q8_scale and q8_inverse, cut out of kernels.cu as they are, over every non-negative float on
# the CPU (cpu.cpp), and the fast norms' mean norm_mean over every float for several g. Usage: bench/q8_exhaustive/run_cpu.sh [threads]
set -e
D=$(cd "$(dirname "$0")" && pwd)
W=${TMPDIR:-/tmp}/q8_exhaustive.$$; mkdir -p $W
trap 'rm -rf "$W"' EXIT
python3 - "$D/../../crates/backend-cuda/src/kernels.cu" "$W/q8_cut.inc" <<'PY'
import sys
s = open(sys.argv[1]).read()
a = s.index("__device__ __forceinline__ float q8_scale(float a)")
b = s.index("// q2 / ds2, when given, receive a copy")
m0 = s.index("__device__ __forceinline__ float norm_mean(float ss, int g)")
m1 = s.index("__device__ __forceinline__ float norm_scale(float ss, int g, float eps)", m0)
open(sys.argv[2], 'w').write(s[a:b] + s[m0:m1])
PY
g++ -std=c++17 -O2 -march=native -ffp-contract=off -fno-fast-math -pthread -I$W $D/cpu.cpp -o $W/q8x
$W/q8x ${1:-2}
