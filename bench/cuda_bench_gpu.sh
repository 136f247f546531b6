#!/bin/bash
# pp512 / tg128 of the cuda backend's modes side by side in one run: cuda (tensor-core
# prefill), cuda --deterministic (cuda-det) and cuda-exact, on synthesized anchor shapes.
set -u
B=${LOCKSTEP:-./.device/lockstep}
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf | tail -1
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/gemma3.gguf | tail -1
$B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf | tail -1
$B synth --like llama-8b --type Q4_K_M -o /tmp/l8b.gguf | tail -1
for m in /tmp/smol.gguf /tmp/gemma3.gguf /tmp/l1b.gguf /tmp/l8b.gguf; do
  echo "-- $m"
  $B bench --backend cuda -m $m -r 3 2>&1 | grep -E "\| (pp|tg)|GPU memory"
  $B bench --deterministic --backend cuda -m $m -r 3 2>&1 | grep -E "\| (pp|tg)"
  $B bench --backend cuda-exact -m $m -r 2 -p 0 2>&1 | grep -E "\| (pp|tg)"
done
