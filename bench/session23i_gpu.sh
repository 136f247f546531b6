#!/bin/bash
# Session 23i: after the last-look refactor (the replay path's table writes, the clock's instants
# only when it is on): tokens with the batched copy on and off, check on cut SmolLM2, one clock.
set -u
B=./.device/lockstep
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf | tail -1
$B synth --like smollm2 --type Q4_1 --layers 4 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol4.gguf | tail -1
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/gemma3.gguf | tail -1
for m in smol gemma3; do
  for x in 1 0; do
    a=$(LOCKSTEP_CUDA_BATCH_UPLOADS=$x $B run --backend cuda -m /tmp/$m.gguf -p "The quick brown fox" -n 48 --temp 0 2>/dev/null | md5sum | cut -c1-12)
    b=$(LOCKSTEP_CUDA_BATCH_UPLOADS=$x $B run --backend cuda -m /tmp/$m.gguf -p "Once upon a time" -n 48 --top-k 40 --seed 7 2>/dev/null | md5sum | cut -c1-12)
    echo "$m batch uploads $x: greedy $a top-k $b"
  done
done
$B check -m /tmp/smol4.gguf --backend cuda --tolerance 1e-2 2>&1 | grep -E "untapped|result"
LOCKSTEP_CUDA_REPLAY_CLOCK=1 $B bench --backend cuda -m /tmp/gemma3.gguf -p 0 -n 128 -r 3 2>&1 | grep -E '\| tg|  [a-z]+ +[0-9-]' | tr -s ' '
