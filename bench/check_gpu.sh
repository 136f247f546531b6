#!/bin/bash
set -u
B=${LOCKSTEP:-./.device/lockstep}
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf | tail -1
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/gemma3.gguf | tail -1
for m in /tmp/smol.gguf /tmp/gemma3.gguf; do
  echo "== check -m $m --backend cuda"; ( time $B check -m $m --backend cuda ) 2>&1 | tail -12
done
echo "== check --ops --backend cuda"; $B check --ops --backend cuda 2>&1 | tail -1
