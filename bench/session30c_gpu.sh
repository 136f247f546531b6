#!/bin/bash
# Session 30c: decode at depth beside llama.cpp: llama-bench -n 128 -d 1024,4096 -fa 0,1 and
# lockstep bench -d (f32 cache, the default, and LOCKSTEP_CUDA_KV=f16), SmolLM2 and the 8B.
set -u
B=./.device/lockstep
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
LIMIT=${LIMIT:-560}
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
LB=/tmp/llama-bench
cat .device/llama-bench.xz.part* | xz -d > $LB && chmod +x $LB
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf | tail -1
$B bench --backend cuda -m /tmp/smol.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 &
LOCKSTEP_CUDA_KV=f16 $B bench --backend cuda -m /tmp/smol.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 &
$B synth --like llama-8b --type Q4_K_M -o /tmp/l8b.gguf | tail -1
wait; el
for m in smol l8b; do
  left=$(( LIMIT - ($(date +%s) - T0) )); [ $left -lt 40 ] && { echo "-- $m skipped"; continue; }
  echo "== $m"
  timeout $left $LB -m /tmp/$m.gguf -p 0 -n 128 -d 0,1024,4096 -ngl 99 -r 3 -fa 0,1 -o md 2>&1 | grep -E '^\| [a-z]' | grep -v model
  for x in S30_NONE=1 LOCKSTEP_CUDA_KV=f16; do
    for d in 0 1024 4096; do
      left=$(( LIMIT - ($(date +%s) - T0) )); [ $left -lt 20 ] && continue
      echo "lockstep [$x] $(timeout $left env $x $B bench --backend cuda -m /tmp/$m.gguf -p 0 -n 128 -d $d -r 3 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f5,6)"
    done
  done
  el
done
