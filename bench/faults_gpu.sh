#!/bin/bash
# The seeded faults of the CUDA kernels (binary built with --features faults), each localized by
# `lockstep diff --a ref --b cuda` or by `check`'s invariances.
set -u
B=${LOCKSTEP_FAULTS:-./.device/lockstep-faults}
export LOCKSTEP_CUDA_CACHE=/tmp/cubin-faults
$B synth --like smollm2 --type Q4_1 --layers 4 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol4.gguf | tail -1
P="The capital of France is Paris. The capital of Germany is"
for f in kv-skip-prefill wrong-kv-head kv-view-offset; do
  echo "== $f (smollm2 shape, 4 layers)"
  LOCKSTEP_CUDA_FAULT=$f $B diff -m /tmp/smol4.gguf --a ref --b cuda -p "$P" --decode 4 2>&1 | grep -E "^verdict" ; echo "exit ${PIPESTATUS[0]}"
done
echo "== q4k-wrong-scale (tiny-llama Q4_K)"
LOCKSTEP_CUDA_FAULT=q4k-wrong-scale $B diff -m .device/tiny/tiny-llama-Q4_K.gguf --a ref --b cuda --ids 1,2,3,4,5,6 --decode 2 2>&1 | grep -E "^verdict"
echo "== f16-as-f32 (tiny-llama F16)"
LOCKSTEP_CUDA_FAULT=f16-as-f32 $B diff -m .device/tiny/tiny-llama-F16.gguf --a ref --b cuda --ids 1,2,3,4,5,6 --decode 2 2>&1 | grep -E "^verdict"
echo "== mask-drift: diff (whole run), then check (all-true mask vs none, bitwise)"
LOCKSTEP_CUDA_FAULT=mask-drift $B diff -m /tmp/smol4.gguf --a ref --b cuda -p "$P" --decode 4 2>&1 | grep -E "^verdict"
LOCKSTEP_CUDA_FAULT=mask-drift $B check -m /tmp/smol4.gguf --backend cuda 2>&1 | grep -E "mask|result|first|break" | head -6
echo "== clean (no fault): check"
$B check -m /tmp/smol4.gguf --backend cuda 2>&1 | tail -9
which nsys ncu 2>&1 | head -2; ls /usr/local/cuda/bin 2>/dev/null | head -30 | tr '\n' ' '
