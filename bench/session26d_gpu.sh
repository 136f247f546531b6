#!/bin/bash
# Session 26d, timing only: SmolLM2's step timeline puts 1.1-1.2 us of each norm-fused consumer
# between its norm's reduction and its quantized row (marks 2 -> 3). Is it the f64 norm? The
# same build with LOCKSTEP_CUDA_DEFINES=LOCKSTEP_NORM_F32 (the norm's sum, reduction and scale
# in f32: other values, never committed as is) against the build, tg128 alternating, and both
# timelines.
set -u
B=./.device/lockstep
O=${OUT:-/tmp/s26d}; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf | tail -1
$B synth --like smollm2 --type Q4_1 --layers 2 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol2.gguf | tail -1
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/gemma3.gguf | tail -1
$B bench --backend cuda -m /tmp/smol2.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 &
LOCKSTEP_CUDA_DEFINES=LOCKSTEP_NORM_F32 $B bench --backend cuda -m /tmp/smol2.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 &
LOCKSTEP_CUDA_TIMELINE=/tmp/x.tsv $B bench --backend cuda -m /tmp/smol2.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 &
LOCKSTEP_CUDA_DEFINES=LOCKSTEP_NORM_F32 LOCKSTEP_CUDA_TIMELINE=/tmp/y.tsv $B bench --backend cuda -m /tmp/smol2.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 &
wait; el
tg() { env $1 $B bench --backend cuda -m /tmp/$2.gguf -p 0 -n 128 -r 3 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f6; }
for r in 1 2 3; do
  for m in smol gemma3; do
    for x in "S26_NONE=1" "LOCKSTEP_CUDA_DEFINES=LOCKSTEP_NORM_F32"; do echo "-- $m r$r [$x]: $(tg "$x" $m)"; done
  done
done
el
for x in "S26_NONE=1" "LOCKSTEP_CUDA_DEFINES=LOCKSTEP_NORM_F32"; do
  n=$(echo $x | tr -dc 'A-Z0-9_' | tail -c 6)
  env $x LOCKSTEP_CUDA_TIMELINE=$O/tl_$n.tsv $B bench --backend cuda -m /tmp/smol.gguf -p 0 -n 128 -r 2 > $O/tl_$n.txt 2>&1
  echo "== timeline [$x]: $(grep -E '\| tg' $O/tl_$n.txt | tr -s ' ' | cut -d'|' -f6)"
  grep -A7 "graph 0" $O/tl_$n.txt
done
el
