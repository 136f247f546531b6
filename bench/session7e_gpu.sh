#!/bin/bash
# Session 7: does the attention's fused output quantization pay? tg128 with it and without
# (`LOCKSTEP_CUDA_ATTN_Q8=0`), interleaved, on the two small anchors and Llama-1B; plus the
# tiled kernel forced for SmolLM2 and Llama-1B decode. Same binary, one machine.
set -u
B=${LOCKSTEP:-./.device/lockstep}
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf | tail -1
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/gemma3.gguf | tail -1
$B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf | tail -1
for round in 1 2; do
  for m in /tmp/gemma3.gguf /tmp/smol.gguf /tmp/l1b.gguf; do
    for q in 1 0; do
      echo "$(basename $m) q8=$q round $round: $(LOCKSTEP_CUDA_ATTN_Q8=$q $B bench --backend cuda -m $m -r 5 -p 0 2>&1 | grep -E '\| tg' | tr -s ' ')"
    done
  done
done
for m in /tmp/smol.gguf /tmp/l1b.gguf; do
  echo "$(basename $m) tile q8=1: $(LOCKSTEP_CUDA_ATTN=tile $B bench --backend cuda -m $m -r 5 -p 0 2>&1 | grep -E '\| tg' | tr -s ' ')"
done
