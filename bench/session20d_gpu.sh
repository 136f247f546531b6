#!/bin/bash
# Session 20d: quantize_q8_32 and the short decode attention letting the next kernel launch
# after their loads (LOCKSTEP_CUDA_LATE_LAUNCH=1) against at once: same tokens, tg128
# alternating; then the full bench (pp512 + tg128, -r 5) of both builds on the four shapes.
set -u
B=./.device/lockstep
O=${OUT:-/tmp/s20d}; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf | tail -1
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/gemma3.gguf | tail -1
$B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf | tail -1
( $B synth --like llama-8b --type Q4_K_M -o /tmp/l8b.gguf > /dev/null 2>&1 ) &
( LOCKSTEP_CUDA_LATE_LAUNCH=1 $B bench --backend cuda -m /tmp/smol.gguf -p 0 -n 4 -r 1 > /dev/null 2>&1 ) &
$B bench --backend cuda -m /tmp/smol.gguf -p 0 -n 4 -r 1 > /dev/null 2>&1
wait
el
for m in smol gemma3 l1b l8b; do
  for s in 0 1; do
    a=$(LOCKSTEP_CUDA_LATE_LAUNCH=$s $B run --backend cuda -m /tmp/$m.gguf -p "The quick brown fox" -n 48 --temp 0 2>/dev/null | md5sum | cut -c1-12)
    b=$(LOCKSTEP_CUDA_LATE_LAUNCH=$s $B run --backend cuda -m /tmp/$m.gguf -p "Once upon a time" -n 48 --top-k 40 --seed 7 2>/dev/null | md5sum | cut -c1-12)
    echo "$m late=$s greedy $a top-k $b"
  done
done
el
for round in 1 2; do
  for m in l8b l1b gemma3 smol; do
    for s in 0 1; do
      echo "-- $m late=$s: $(LOCKSTEP_CUDA_LATE_LAUNCH=$s $B bench --backend cuda -m /tmp/$m.gguf -p 0 -n 128 -r 3 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f6)"
    done
  done
done
el
for s in 0 1; do
  for m in smol gemma3 l1b l8b; do
    echo "-- $m late=$s (bench -r 5):"; LOCKSTEP_CUDA_LATE_LAUNCH=$s $B bench --backend cuda -m /tmp/$m.gguf -r 5 2>&1 | grep -E '\| (pp|tg)|GPU memory' | tr -s ' '
  done
done
el
