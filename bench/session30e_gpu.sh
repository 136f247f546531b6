#!/bin/bash
# Session 30e: the split-key spans' fewest keys (LOCKSTEP_CUDA_SPLIT_KEYS, plan::ATT_SPLIT_MIN_KEYS)
# with 30d's span rule, against session 8's rule, tg128 at depths 1024, 4096 and 256.
set -u
B=./.device/lockstep
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
LIMIT=${LIMIT:-500}
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf | tail -1
$B bench --backend cuda -m /tmp/smol.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 &
$B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf | tail -1
$B synth --like llama-8b --type Q4_K_M -o /tmp/l8b.gguf | tail -1
wait; el
bn() { env $1 $B bench --backend cuda -m /tmp/$2.gguf $3 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f5,6 | tr '\n' ' '; }
ab() {
  for x in "$@"; do
    left=$(( LIMIT - ($(date +%s) - T0) )); if [ $left -lt 15 ]; then echo "-- $M $A [$x]: skipped"; continue; fi
    echo "-- $M [$x] $(timeout $left bash -c "$(declare -f bn); B=$B; bn '$x' $M '$A'")"
  done
}
for d in 1024 4096 256; do
  for M in l1b smol l8b; do
    A="-p 0 -n 128 -d $d -r 2"; ab LOCKSTEP_CUDA_SPLIT_SPANS=32 S30_NONE=1 LOCKSTEP_CUDA_SPLIT_KEYS=16 LOCKSTEP_CUDA_SPLIT_KEYS=32
  done
  el
done
