#!/bin/bash
# Session 52, call 2: LOCKSTEP_CUDA_NORM_WIDE=1 (Gemma-3's rows of 640 normed on 512 threads,
# the norm-fused prologue quantizing in two passes, not three) against the default, ten rounds
# alternating, the order swapped every round; Gemma-3 only (the only shape with rows of
# 577-1024 values).
set -u
B=./.device/lockstep
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
NW="env LOCKSTEP_CUDA_NORM_WIDE=1"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/g3.gguf > /dev/null 2>&1
$B bench --backend cuda -m /tmp/g3.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1; el
tg() { timeout 60 $@ bench --backend cuda -m /tmp/g3.gguf -p 0 -n 128 -r 3 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f6 | sed 's/ *± */±/; s/ //g'; }
for r in 1 2 3 4 5; do
  echo "g3 tg128 round $r: norm wide $(tg $NW $B) | default $(tg $B)"
  echo "g3 tg128 round $r': default $(tg $B) | norm wide $(tg $NW $B)"
done; el
true
