#!/bin/bash
# Session 28c: do the next mat-vec's blocks, launched early beside a latency-bound kernel,
# slow its chain? LOCKSTEP_CUDA_SOLO=norm,quant,attn gives decode's residual_norm /
# quantize_q8_32 / short attention blocks the rest of their SM's shared memory (dynamic, unused),
# so no other block shares their SM. Same values (the tokens say so); tg128 alternating.
set -u
B=./.device/lockstep
O=${OUT:-/tmp/s28c}; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf | tail -1
( $B bench --backend cuda -m /tmp/smol.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 ) &
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/gemma3.gguf | tail -1
$B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf | tail -1
$B synth --like llama-8b --type Q4_K_M -o /tmp/l8b.gguf | tail -1
wait; el
h() { env $1 $B run --backend cuda -m /tmp/$2.gguf "${@:3}" 2>/dev/null | md5sum | cut -c1-12; }
for m in smol l8b; do
  echo "$m [SOLO=norm,quant,attn] greedy $(h LOCKSTEP_CUDA_SOLO=norm,quant,attn $m -p 'The quick brown fox' -n 48 --temp 0)"
done
echo "(s27: smol 10d82d4b9948, l8b 4aa7e0e30dda)"
el
bn() { env $1 $B bench --backend cuda -m /tmp/$2.gguf -p 0 -n 128 -r 3 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f5,6 | tr '\n' ' '; }
for r in 1 2; do
  for m in l8b l1b; do
    for x in S28_NONE=1 LOCKSTEP_CUDA_SOLO=norm LOCKSTEP_CUDA_SOLO=norm,quant,attn; do echo "-- $m r$r [$x]: $(bn $x $m)"; done
  done
  for m in smol gemma3; do
    for x in S28_NONE=1 LOCKSTEP_CUDA_SOLO=attn LOCKSTEP_CUDA_SOLO=norm,quant,attn; do echo "-- $m r$r [$x]: $(bn $x $m)"; done
  done
  el
done
