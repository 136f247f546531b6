#!/bin/bash
# Session 29g: the submitted build (9f2d0ad) and llama.cpp side by side on this card,
# as session 28f: llama-bench -p 512 -n 128 -ngl 99 -r 10 -fa 0,1, then lockstep bench -r 10,
# model by model, one round.
set -u
B=./.device/lockstep
O=${OUT:-/tmp/s29g}; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
LIMIT=${LIMIT:-500}
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
LB=/tmp/llama-bench
cat .device/llama-bench.xz.part* | xz -d > $LB && chmod +x $LB
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf | tail -1
( $B bench --backend cuda -m /tmp/smol.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 ) &
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/gemma3.gguf | tail -1
$B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf | tail -1
$B synth --like llama-8b --type Q4_K_M -o /tmp/l8b.gguf | tail -1
wait; el
for m in smol gemma3 l1b l8b; do
  left=$(( LIMIT - ($(date +%s) - T0) ))
  if [ $left -lt 45 ]; then echo "-- $m: skipped, $left s left"; continue; fi
  echo "== $m" | tee -a $O/side_by_side.txt
  timeout $left $LB -m /tmp/$m.gguf -p 512 -n 128 -ngl 99 -r 10 -fa 0,1 -o md 2>&1 | grep -E '^\| [a-z]' | grep -v model | tee -a $O/side_by_side.txt
  timeout $left $B bench --backend cuda -m /tmp/$m.gguf -r 10 2>&1 | grep -E '^\| [a-z0-9]|GPU memory' | grep -v model | tee -a $O/side_by_side.txt
done
el
