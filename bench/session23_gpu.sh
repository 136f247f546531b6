#!/bin/bash
# Session 23: the replay clock (LOCKSTEP_CUDA_REPLAY_CLOCK=1): where a replayed decode step's
# wall time goes between host and device, tg128 on the four shapes.
set -u
B=./.device/lockstep
O=${OUT:-/tmp/s23}; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf | tail -1
( $B bench --backend cuda -m /tmp/smol.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 ) &
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/gemma3.gguf | tail -1
$B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf | tail -1
( $B synth --like llama-8b --type Q4_K_M -o /tmp/l8b.gguf > /dev/null 2>&1 ) &
wait
el
for m in smol gemma3 l1b l8b; do [ -f /tmp/$m.gguf ] || { echo "no /tmp/$m.gguf"; exit 1; }; done
for m in smol gemma3 l1b l8b; do
  echo "== $m"
  LOCKSTEP_CUDA_REPLAY_CLOCK=1 $B bench --backend cuda -m /tmp/$m.gguf -p 0 -n 128 -r 3 > $O/clock_$m.txt 2>&1
  grep -E '\| tg|replay|  [a-z]+ +[0-9-]' $O/clock_$m.txt | tr -s ' '
  echo "-- without the clock: $($B bench --backend cuda -m /tmp/$m.gguf -p 0 -n 128 -r 3 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f6)"
done
el
