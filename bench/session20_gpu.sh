#!/bin/bash
# NOT ON MAIN: the kernels and knobs this script compares were measured and not kept (BENCHMARKS.md,
# session 20); the script is kept as the record of what ran.
# Session 20: the norms' quantization four values a lane through shared memory (q8_quad;
# LOCKSTEP_CUDA_Q8_WARP=1 keeps session 19's value a lane): programmatic edges after the
# graph_exec refactor, check --ops (guard regions), same tokens, tg128 alternating, Gemma-3's
# quantizing gate/up after its post norm (LOCKSTEP_CUDA_NORM_Q8_POST=1), timelines.
set -u
B=./.device/lockstep
O=${OUT:-/tmp/s20}; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf | tail -1
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/gemma3.gguf | tail -1
$B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf | tail -1
( $B synth --like llama-8b --type Q4_K_M -o /tmp/l8b.gguf > /dev/null 2>&1 ) &
( LOCKSTEP_CUDA_Q8_WARP=1 $B bench --backend cuda -m /tmp/smol.gguf -p 0 -n 4 -r 1 > /dev/null 2>&1 ) &
( LOCKSTEP_CUDA_TIMELINE=/tmp/x.tsv $B bench --backend cuda -m /tmp/smol.gguf -p 0 -n 4 -r 1 > /dev/null 2>&1 ) &
LOCKSTEP_CUDA_STATS=1 $B bench --backend cuda -m /tmp/smol.gguf -p 0 -n 16 -r 1 2>&1 | grep -E 'step graphs|\| tg' | tr -s ' '
$B check --ops --backend cuda > $O/ops.txt 2>&1; echo "== check --ops --backend cuda: rc $? $(tail -1 $O/ops.txt)"
grep -E 'FAIL' $O/ops.txt | head -8
wait
el
for m in smol gemma3 l1b l8b; do
  for s in 1 0; do
    a=$(LOCKSTEP_CUDA_Q8_WARP=$s $B run --backend cuda -m /tmp/$m.gguf -p "The quick brown fox" -n 48 --temp 0 2>/dev/null | md5sum | cut -c1-12)
    b=$(LOCKSTEP_CUDA_Q8_WARP=$s $B run --backend cuda -m /tmp/$m.gguf -p "Once upon a time" -n 48 --top-k 40 --seed 7 2>/dev/null | md5sum | cut -c1-12)
    echo "$m warp=$s greedy $a top-k $b"
  done
done
a=$(LOCKSTEP_CUDA_NORM_Q8_POST=1 $B run --backend cuda -m /tmp/gemma3.gguf -p "The quick brown fox" -n 48 --temp 0 2>/dev/null | md5sum | cut -c1-12)
echo "gemma3 q8post greedy $a"
el
for round in 1 2; do
  for m in smol gemma3 l1b l8b; do
    for s in 1 0; do
      echo "-- $m warp=$s: $(LOCKSTEP_CUDA_Q8_WARP=$s $B bench --backend cuda -m /tmp/$m.gguf -p 0 -n 128 -r 3 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f6)"
    done
  done
  echo "-- gemma3 q8post: $(LOCKSTEP_CUDA_NORM_Q8_POST=1 $B bench --backend cuda -m /tmp/gemma3.gguf -p 0 -n 128 -r 3 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f6)"
done
el
for m in smol gemma3; do
  LOCKSTEP_CUDA_TIMELINE=$O/tl_$m.tsv $B bench --backend cuda -m /tmp/$m.gguf -p 0 -n 128 -r 2 > $O/tl_$m.txt 2>&1
  echo "== timeline $m: $(grep -E '\| tg' $O/tl_$m.txt | tr -s ' ' | cut -d'|' -f6)"
done
el
