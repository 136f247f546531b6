#!/bin/bash
# Session 24b: two rows a warp for rows of more than 32 units too (LOCKSTEP_CUDA_TWO_ROWS_UNITS:
# the 8B's o, v, down and LM head, Llama-1B's down), tg128 alternating; tokens with it on.
set -u
B=./.device/lockstep
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf | tail -1
( $B bench --backend cuda -m /tmp/l1b.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 ) &
$B synth --like llama-8b --type Q4_K_M -o /tmp/l8b.gguf | tail -1
wait
el
for m in l1b l8b; do
  a=$(LOCKSTEP_CUDA_TWO_ROWS_UNITS=100000 $B run --backend cuda -m /tmp/$m.gguf -p "The quick brown fox" -n 48 --temp 0 2>/dev/null | md5sum | cut -c1-12)
  b=$(LOCKSTEP_CUDA_TWO_ROWS_UNITS=100000 $B run --backend cuda -m /tmp/$m.gguf -p "Once upon a time" -n 48 --top-k 40 --seed 7 2>/dev/null | md5sum | cut -c1-12)
  echo "$m all units: greedy $a top-k $b"
done
tg() { env $1 $B bench --backend cuda -m /tmp/$2.gguf -p 0 -n 128 -r 3 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f6; }
for r in 1 2; do
  for m in l1b l8b; do
    for x in 0:32 2048:32 2048:100000 1:100000; do echo "-- $m two rows (min rows:max units) $x: $(tg "LOCKSTEP_CUDA_TWO_ROWS=${x%:*} LOCKSTEP_CUDA_TWO_ROWS_UNITS=${x#*:}" $m)"; done
  done
done
el
