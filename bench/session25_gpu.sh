#!/bin/bash
# Session 25: llama.cpp and lockstep side by side on the lent card, in one call.
#
# The anchors (../shared/bench/llama_cpp_cuda_h100.md) are llama.cpp on an H100; since
# session 21 only H200s have been lent, so lockstep's figures had no llama.cpp of the same card
# beside them. This builds llama.cpp's llama-bench for the card from the same commit as the
# anchors (the llama-cpp-python 0.3.36 sdist's vendored tree, trimmed to what llama-bench needs:
# .device/llama.cpp.tar.xz, made by bench/llama_cpp_trim.sh; never committed), with CUDA for
# sm_90 (static, CUDA graphs on by default as in the anchors), then runs on each synthesized
# model, one after the other in this call: llama-bench -p 512 -n 128 -ngl 99 -r 5 -fa 0,1 (the
# anchors' definitions), and lockstep bench --backend cuda -r 5 (pp512, tg128).
# A build from an earlier call can travel instead (.device/llama-bench.xz.part*): then no build.
# Out: $OUT/llama-bench.xz.part* (the binary, for a later call), $OUT/side_by_side.txt.
set -u
B=./.device/lockstep
O=${OUT:-/tmp/s25}; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
LIMIT=${LIMIT:-560}
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader
nproc
# lockstep's kernels compiled once (NVRTC), and the models, beside the build.
(
  nice -n 5 $B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf > /dev/null 2>&1
  nice -n 5 $B bench --backend cuda -m /tmp/smol.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1
  nice -n 5 $B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/gemma3.gguf > /dev/null 2>&1
  nice -n 5 $B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf > /dev/null 2>&1
  nice -n 5 $B synth --like llama-8b --type Q4_K_M -o /tmp/l8b.gguf > /dev/null 2>&1
  echo "   models and kernels ready at $(( $(date +%s) - T0 )) s"
) &
LB=/tmp/lc/b/bin/llama-bench
if ls .device/llama-bench.xz.part* > /dev/null 2>&1; then
  mkdir -p /tmp/lc/b/bin && cat .device/llama-bench.xz.part* | xz -d > $LB && chmod +x $LB
  echo "llama-bench carried: $(ls -la $LB | awk '{print $5}') bytes"
else
  mkdir -p /tmp/lc && tar -xJf .device/llama.cpp.tar.xz -C /tmp/lc
  G=""; command -v ninja > /dev/null && G="-G Ninja"
  cmake -S /tmp/lc/llama.cpp -B /tmp/lc/b $G -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES=90-real -DBUILD_SHARED_LIBS=OFF -DGGML_NATIVE=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF \
    -DLLAMA_BUILD_SERVER=OFF > $O/cmake.log 2>&1 || { echo "cmake failed"; tail -20 $O/cmake.log; exit 1; }
  el
  timeout $(( LIMIT - 150 - ($(date +%s) - T0) )) cmake --build /tmp/lc/b --target llama-bench -j 18 > $O/build.log 2>&1
  rc=$?
  echo "build rc $rc: $(grep -c 'Building' $O/build.log) units built; $(tail -1 $O/build.log | cut -c1-150)"
  el
  [ -x $LB ] || { grep -m5 -B2 -A5 'error' $O/build.log; exit 1; }
  strip $LB
  xz -T16 -6 -c $LB | split -b 15m - $O/llama-bench.xz.part
  ls -la $O/
fi
$LB --version 2>&1 | tail -2
wait
el
for m in smol gemma3 l1b l8b; do
  left=$(( LIMIT - ($(date +%s) - T0) ))
  if [ $left -lt 60 ]; then echo "-- $m: skipped, $left s left"; continue; fi
  [ -f /tmp/$m.gguf ] || { echo "no /tmp/$m.gguf"; continue; }
  echo "== $m"
  timeout $left $LB -m /tmp/$m.gguf -p 512 -n 128 -ngl 99 -r 5 -fa 0,1 -o md 2>&1 | grep -E '^\|' | tee -a $O/side_by_side.txt
  timeout $left $B bench --backend cuda -m /tmp/$m.gguf -r 5 2>&1 | grep -E '^\||memory' | tee -a $O/side_by_side.txt
  el
done
