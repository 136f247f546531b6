#!/bin/bash
# NOT ON MAIN: the kernels and knobs this script compares were measured and not kept (BENCHMARKS.md,
# session 20); the script is kept as the record of what ran.
# Session 20c: each one-row decode mat-vec warp asks its whole weight row into L2 (one
# cp.async.bulk.prefetch from lane 0) before its grid wait (LOCKSTEP_CUDA_ROW_PREFETCH=0 leaves
# it out): check --ops, same tokens, tg128 alternating, the 8B's timeline.
set -u
B=./.device/lockstep
O=${OUT:-/tmp/s20c}; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf | tail -1
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/gemma3.gguf | tail -1
$B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf | tail -1
( $B synth --like llama-8b --type Q4_K_M -o /tmp/l8b.gguf > /dev/null 2>&1 ) &
( LOCKSTEP_CUDA_ROW_PREFETCH=0 $B bench --backend cuda -m /tmp/smol.gguf -p 0 -n 4 -r 1 > /dev/null 2>&1 ) &
( LOCKSTEP_CUDA_TIMELINE=/tmp/x.tsv $B bench --backend cuda -m /tmp/smol.gguf -p 0 -n 4 -r 1 > /dev/null 2>&1 ) &
$B check --ops --backend cuda > $O/ops.txt 2>&1; echo "== check --ops --backend cuda: rc $? $(tail -1 $O/ops.txt)"
grep -E 'FAIL' $O/ops.txt | head -8
wait
el
for m in smol gemma3 l1b l8b; do
  for s in 0 1; do
    a=$(LOCKSTEP_CUDA_ROW_PREFETCH=$s $B run --backend cuda -m /tmp/$m.gguf -p "The quick brown fox" -n 48 --temp 0 2>/dev/null | md5sum | cut -c1-12)
    b=$(LOCKSTEP_CUDA_ROW_PREFETCH=$s $B run --backend cuda -m /tmp/$m.gguf -p "Once upon a time" -n 48 --top-k 40 --seed 7 2>/dev/null | md5sum | cut -c1-12)
    echo "$m row_prefetch=$s greedy $a top-k $b"
  done
done
el
for round in 1 2; do
  for m in l8b l1b gemma3 smol; do
    for s in 0 1; do
      echo "-- $m row_prefetch=$s: $(LOCKSTEP_CUDA_ROW_PREFETCH=$s $B bench --backend cuda -m /tmp/$m.gguf -p 0 -n 128 -r 3 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f6)"
    done
  done
done
el
LOCKSTEP_CUDA_TIMELINE=$O/tl_l8b.tsv $B bench --backend cuda -m /tmp/l8b.gguf -p 0 -n 128 -r 2 > $O/tl_l8b.txt 2>&1
echo "== timeline l8b: $(grep -E '\| tg' $O/tl_l8b.txt | tr -s ' ' | cut -d'|' -f6)"
el
