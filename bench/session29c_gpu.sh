#!/bin/bash
# Session 29c (timing only, bench/session29/half_kv_timing.patch): what a KV cache of half the
# bytes could give the decode step. LOCKSTEP_TIMING_HALF_KV makes the short decode attention
# load half of its K and V bytes (each loaded float4 stands in for two; the values are wrong,
# the tokens meaningless); tg128 against the build as is, alternating in one call.
set -u
B=./.device/lockstep
O=${OUT:-/tmp/s29c}; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf | tail -1
( $B bench --backend cuda -m /tmp/smol.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 ) &
( LOCKSTEP_CUDA_DEFINES=LOCKSTEP_TIMING_HALF_KV $B bench --backend cuda -m /tmp/smol.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 ) &
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/gemma3.gguf | tail -1
$B synth --like llama-8b --type Q4_K_M -o /tmp/l8b.gguf | tail -1
wait; el
bn() { env $1 $B bench --backend cuda -m /tmp/$2.gguf -p 0 -n 128 -r 3 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f6 | tr '\n' ' '; }
for r in 1 2; do
  for m in smol gemma3 l8b; do
    for x in "S29_NONE=1" "LOCKSTEP_CUDA_DEFINES=LOCKSTEP_TIMING_HALF_KV"; do echo "-- $m r$r [$x]: $(bn "$x" $m)"; done
  done
  el
done
LOCKSTEP_CUDA_DEFINES=LOCKSTEP_TIMING_HALF_KV LOCKSTEP_CUDA_TIMELINE=$O/tl_l8b_half.tsv $B bench --backend cuda -m /tmp/l8b.gguf -p 0 -n 128 -r 2 > $O/tl_l8b_half.txt 2>&1
grep -A10 "graph 0" $O/tl_l8b_half.txt
el
