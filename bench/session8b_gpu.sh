#!/bin/bash
# Session 8, second call: the split-key attention's partials now come from the step's pool (the
# first build freed them on drop, so every decode step ran eagerly). Invariances with graph
# statistics, isolation once more, then the A/B timings (split against the kernels it replaces)
# and the span size. Logs in $OUT.
set -u
B=${LOCKSTEP:-./.device/lockstep}
O=${OUT:-/tmp/s8b}; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
( $B synth --like llama-8b --type Q4_K_M -o /tmp/l8b.gguf > /tmp/synth8b.log 2>&1 ) &
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf | tail -1
$B synth --like smollm2 --type Q4_1 --layers 4 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol4.gguf | tail -1
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/gemma3.gguf | tail -1
$B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf | tail -1
echo "== check smol4 cuda:"; LOCKSTEP_CUDA_STATS=1 $B check -m /tmp/smol4.gguf --backend cuda 2>&1 | tail -12
echo "== check gemma3 cuda:"; LOCKSTEP_CUDA_STATS=1 $B check -m /tmp/gemma3.gguf --backend cuda 2>&1 | grep -E "replayed|mask vs|result|graphs"
echo "== gemma3 isolate 1 + 48: $($B diff -m /tmp/gemma3.gguf --a ref --b cuda --ids 4000 --decode 48 --isolate 2>&1 | grep -E '^isolated verdict' | cut -c1-150)"
el
for m in /tmp/smol.gguf /tmp/gemma3.gguf /tmp/l1b.gguf; do
  for a in split unsplit split unsplit; do
    echo "-- $(basename $m) $a: $(LOCKSTEP_CUDA_STATS=1 LOCKSTEP_CUDA_ATTN=$a $B bench --backend cuda -m $m -p 0 -n 128 -r 5 2>&1 | grep -E '\| tg|graphs' | tr -s ' ' | tr '\n' ' ')"
  done
done; el
for m in /tmp/smol.gguf /tmp/gemma3.gguf; do
  for a in split unsplit; do
    echo "-- $(basename $m) $a tg1024: $(LOCKSTEP_CUDA_ATTN=$a $B bench --backend cuda -m $m -p 0 -n 1024 -r 2 2>&1 | grep -E '\| tg' | tr -s ' ')"
  done
done; el
for k in 16 64; do
  for m in /tmp/gemma3.gguf /tmp/l1b.gguf; do
    echo "-- $(basename $m) min keys $k: $(LOCKSTEP_CUDA_SPLIT_KEYS=$k $B bench --backend cuda -m $m -p 0 -n 128 -r 5 2>&1 | grep -E '\| tg' | tr -s ' ')"
  done
done; el
wait; tail -1 /tmp/synth8b.log
for a in split unsplit; do
  echo "-- l8b $a: $(LOCKSTEP_CUDA_ATTN=$a $B bench --backend cuda -m /tmp/l8b.gguf -p 0 -n 128 -r 3 2>&1 | grep -E '\| tg' | tr -s ' ')"
done; el
