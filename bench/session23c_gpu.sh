#!/bin/bash
# Session 23c: bench's logits lent where they land (forward_lend) and the replays' tables
# uploaded from page-locked memory (LOCKSTEP_CUDA_PINNED_TABLES), against session 22's build
# (.device/lockstep-head); tg128 alternating, then the replay clock of the new build.
set -u
B=./.device/lockstep
H=./.device/lockstep-head
O=${OUT:-/tmp/s23c}; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf | tail -1
( $B bench --backend cuda -m /tmp/smol.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 ) &
( LOCKSTEP_CUDA_CACHE=/tmp/cubin-head $H bench --backend cuda -m /tmp/smol.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 ) &
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/gemma3.gguf | tail -1
$B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf | tail -1
( $B synth --like llama-8b --type Q4_K_M -o /tmp/l8b.gguf > /dev/null 2>&1 ) &
wait
el
for m in smol gemma3 l1b l8b; do [ -f /tmp/$m.gguf ] || { echo "no /tmp/$m.gguf"; exit 1; }; done
tg() { $1 bench --backend cuda -m /tmp/$2.gguf -p 0 -n 128 -r 3 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f6; }
for r in 1 2; do
  for m in gemma3 smol l1b l8b; do
    echo "-- $m head: $(LOCKSTEP_CUDA_CACHE=/tmp/cubin-head tg $H $m)"
    echo "-- $m new, tables pageable: $(LOCKSTEP_CUDA_PINNED_TABLES=0 tg $B $m)"
    echo "-- $m new: $(tg $B $m)"
  done
  el
done
for m in gemma3 smol; do
  for x in 0 1; do
    echo "== $m clock, pinned tables $x"
    LOCKSTEP_CUDA_PINNED_TABLES=$x LOCKSTEP_CUDA_REPLAY_CLOCK=1 $B bench --backend cuda -m /tmp/$m.gguf -p 0 -n 128 -r 3 > $O/clock_${m}_$x.txt 2>&1
    grep -E '\| tg|  [a-z]+ +[0-9-]' $O/clock_${m}_$x.txt | tr -s ' '
  done
done
el
