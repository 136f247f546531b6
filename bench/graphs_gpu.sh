#!/bin/bash
# CUDA step graphs on the GPU: correctness (check --backend cuda, whose "untapped" invariance
# compares replayed steps' logits with eagerly run, tapped ones, bitwise; greedy generations
# with graphs on and off) and tg128 with graphs on vs off, side by side in one run.
set -u
B=${LOCKSTEP:-./.device/lockstep}
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf | tail -1
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/gemma3.gguf | tail -1
$B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf | tail -1
for m in /tmp/smol.gguf /tmp/gemma3.gguf; do
  echo "== check -m $m --backend cuda"
  ( time LOCKSTEP_CUDA_STATS=1 $B check -m $m --backend cuda ) > /tmp/c.txt 2>&1; echo "exit $?"
  grep -E "untapped|verdict|hold|FAIL|graphs|^real" /tmp/c.txt | head -12; cat /tmp/c.txt >> $OUT/check.txt
done
echo "== greedy generation, graphs on vs off"
for m in /tmp/smol.gguf /tmp/gemma3.gguf; do
  LOCKSTEP_CUDA_STATS=1 $B run -m $m --backend cuda --temp 0 -n 96 "The capital of France is" > /tmp/on.txt 2> /tmp/on.err
  LOCKSTEP_CUDA_GRAPHS=0 $B run -m $m --backend cuda --temp 0 -n 96 "The capital of France is" > /tmp/off.txt 2>/dev/null
  if cmp -s /tmp/on.txt /tmp/off.txt; then echo "$(basename $m): identical ($(wc -c < /tmp/on.txt) bytes)"; else echo "$(basename $m): DIFFERENT"; fi
  grep graphs /tmp/on.err
done
echo "== tg128 / pp512, graphs off then on"
for m in /tmp/smol.gguf /tmp/gemma3.gguf /tmp/l1b.gguf; do
  echo "-- $m"
  LOCKSTEP_CUDA_GRAPHS=0 $B bench --backend cuda -m $m -r 3 2>&1 | grep -E "tg|pp" | tail -2
  LOCKSTEP_CUDA_STATS=1 $B bench --backend cuda -m $m -r 3 2>&1 | grep -E "tg|pp|graphs" | tail -3
done
