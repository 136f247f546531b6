#!/bin/bash
# Session 29e: where the latency-bound kernels let the next one launch, re-measured on the H200
# with today's mat-vecs (whose first weight loads ptxas sinks below their grid wait, so a mat-vec
# launched early loads nothing before it may): the defaults (residual_norm after its loads,
# quantize_q8_32 and the decode attention after their loads / scores) against launching at
# entry (LOCKSTEP_CUDA_LAUNCH_AT_ENTRY=1: the norms; LOCKSTEP_CUDA_LATE_LAUNCH=0: the quantizer
# and the attention) and both. The timelines of session 29 show the next kernel of a late
# launcher arriving only as it completes. tg128 -r 3, alternating, two rounds; the tokens first.
set -u
B=./.device/lockstep
O=${OUT:-/tmp/s29e}; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
V=("S29_NONE=1" "LOCKSTEP_CUDA_LATE_LAUNCH=0" "LOCKSTEP_CUDA_LAUNCH_AT_ENTRY=1" "LOCKSTEP_CUDA_LATE_LAUNCH=0 LOCKSTEP_CUDA_LAUNCH_AT_ENTRY=1")
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf | tail -1
for x in "${V[@]}"; do ( env $x $B bench --backend cuda -m /tmp/smol.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 ) & done
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/gemma3.gguf | tail -1
$B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf | tail -1
$B synth --like llama-8b --type Q4_K_M -o /tmp/l8b.gguf | tail -1
wait; el
h() { env $1 $B run --backend cuda -m /tmp/$2.gguf "${@:3}" 2>/dev/null | md5sum | cut -c1-12; }
for m in smol gemma3 l8b; do
  for x in "${V[@]}"; do echo "$m [$x] greedy $(h "$x" $m -p 'The quick brown fox' -n 48 --temp 0) top-k $(h "$x" $m -p 'Once upon a time' -n 48 --top-k 40 --seed 7)"; done
done
echo "(s28: smol 10d82d4b9948 d29998751468, gemma3 64901c8f9708 6ed04893ed86, l8b 4aa7e0e30dda 71249884f2ee)"
el
bn() { env $1 $B bench --backend cuda -m /tmp/$2.gguf -p 0 -n 128 -r 3 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f6 | tr '\n' ' '; }
for r in 1 2; do
  for m in smol gemma3 l1b l8b; do
    for x in "${V[@]}"; do echo "-- $m r$r [$x]: $(bn "$x" $m)"; done
  done
  el
done
