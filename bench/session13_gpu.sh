#!/bin/bash
# Session 13: what the decode mat-vecs' L2 prefetch before the grid wait buys (kernels.cu's
# l2_prefetch; LOCKSTEP_CUDA_L2_PREFETCH=0 turns it off): tg128 on the four anchor shapes, on
# and off alternately, plus check on two cut models (the prefetch is a hint: same values).
# Build: f3282b5 + bench/session13/prefetch.patch (an experiment, not kept), as
# .device/lockstep.
set -u
B=${LOCKSTEP:-./.device/lockstep}
O=${OUT:-/tmp/s13}; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf | tail -1
$B synth --like smollm2 --type Q4_1 --layers 4 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol4.gguf | tail -1
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/gemma3.gguf | tail -1
$B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf | tail -1
$B synth --like llama-8b --type Q4_K_M --layers 2 -o /tmp/l8b2.gguf | tail -1
( $B synth --like llama-8b --type Q4_K_M -o /tmp/l8b.gguf > /dev/null 2>&1 ) &
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
$B bench --backend cuda -m /tmp/smol.gguf -p 0 -n 4 -r 1 > /dev/null 2>&1
el
for m in smol4 l8b2; do
  $B check -m /tmp/$m.gguf --backend cuda > $O/c-$m.txt 2>&1
  echo "== check $m: rc $? $(grep -E '^  (ok|FAIL)' $O/c-$m.txt | tr -s ' ' | cut -c1-60 | tr '\n' '|')"
done; el
wait
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv,noheader
for m in smol gemma3 l1b l8b; do
  for pass in 1 2; do
    echo "-- $m on : $($B bench --backend cuda -m /tmp/$m.gguf -p 0 -n 128 -r 5 2>&1 | grep -E '\| tg' | tr -s ' ')"
    echo "-- $m off: $(LOCKSTEP_CUDA_L2_PREFETCH=0 $B bench --backend cuda -m /tmp/$m.gguf -p 0 -n 128 -r 5 2>&1 | grep -E '\| tg' | tr -s ' ')"
  done
done; el
