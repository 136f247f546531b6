#!/bin/bash
# Session 25g, timing only: how much the small models' decode step would gain if a one-row
# mat-vec's launch were gone. .device/lockstep_skip is the submitted build plus
# bench/session25/skip_o_down_timing.patch (never committed: wrong values), whose S25_SKIP
# leaves out the o projection (o), the down projection's separate quantize_q8_32 (q: the
# mat-vec reads a stale quantization), or both the quantizer and the down mat-vec (d).
# tg128 -r 3, alternating, three rounds.
set -u
B=./.device/lockstep_skip
O=${OUT:-/tmp/s25g}; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf | tail -1
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/gemma3.gguf | tail -1
$B bench --backend cuda -m /tmp/smol.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1
el
tg() { env $1 $B bench --backend cuda -m /tmp/$2.gguf -p 0 -n 128 -r 3 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f6; }
for r in 1 2 3; do
  for m in smol gemma3; do
    for x in "S25_NONE=1" "S25_SKIP=o" "S25_SKIP=q" "S25_SKIP=d" "S25_SKIP=od"; do echo "-- $m r$r [$x]: $(tg "$x" $m)"; done
  done
done
el
