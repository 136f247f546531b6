#!/bin/bash
# Session 23e: the submitted build's figures (pp512, tg128, bench -r 3), then a third tg128 round
# against session 22's build (.device/lockstep-head), alternating.
set -u
B=./.device/lockstep
H=./.device/lockstep-head
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
for m in smol gemma3 l1b l8b; do
  r=$($B bench --backend cuda -m /tmp/$m.gguf -r 3 2>&1)
  echo "== $m $(echo "$r" | grep -E '\| pp512' | tr -s ' ' | cut -d'|' -f5,6) $(echo "$r" | grep -E '\| tg128' | tr -s ' ' | cut -d'|' -f5,6) $(echo "$r" | grep -E 'peak' | tr -s ' ')"
done
el
tg() { $1 bench --backend cuda -m /tmp/$2.gguf -p 0 -n 128 -r 3 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f6; }
for m in gemma3 smol l1b l8b; do
  echo "-- $m head: $(LOCKSTEP_CUDA_CACHE=/tmp/cubin-head tg $H $m)"
  echo "-- $m new: $(tg $B $m)"
done
el
