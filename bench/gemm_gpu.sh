#!/bin/bash
# Tensor-core prefill (cuBLAS TF32 GEMM for steps of more than 64 rows) vs --deterministic
# (the batch-invariant kernels for every step): correctness against the reference, then
# pp512 / tg128 side by side in one run.
set -u
B=${LOCKSTEP:-./.device/lockstep}
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf | tail -1
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/gemma3.gguf | tail -1
$B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf | tail -1
IDS=$(python3 -c "import random; random.seed(7); print(','.join(str(random.randrange(1000, 40000)) for _ in range(100)))")
for m in /tmp/smol.gguf /tmp/gemma3.gguf; do
  echo "== diff --a ref --b cuda, 100-token prompt (GEMM prefill) + 4 decode, --isolate: $m"
  $B diff -m $m --a ref --b cuda --ids $IDS --decode 4 --isolate > /tmp/d.txt 2>&1; echo "exit $?"
  grep -E "^verdict|isolat|worst|tolerance profile" /tmp/d.txt | head -6; cat /tmp/d.txt >> $OUT/diff.txt
  echo "== check --backend cuda (non-deterministic declarations)"; $B check -m $m --backend cuda 2>&1 | tail -9
done
echo "== bench: --deterministic, then default (tensor-core prefill)"
for m in /tmp/smol.gguf /tmp/gemma3.gguf /tmp/l1b.gguf; do
  echo "-- $m"
  $B bench --deterministic --backend cuda -m $m -r 3 2>&1 | grep -E "\| (pp|tg)"
  $B bench --backend cuda -m $m -r 3 2>&1 | grep -E "\| (pp|tg)"
done
$B synth --like llama-8b --type Q4_K_M -o /tmp/l8b.gguf | tail -1
echo "-- /tmp/l8b.gguf"
$B bench --deterministic --backend cuda -m /tmp/l8b.gguf -r 2 2>&1 | grep -E "\| (pp|tg)|memory"
$B bench --backend cuda -m /tmp/l8b.gguf -r 2 2>&1 | grep -E "\| (pp|tg)|memory"
