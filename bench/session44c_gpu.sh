#!/bin/bash
# Needs bench/session44/f32_down.patch applied to main at 9c3e991 (the kernels were not kept).
# Session 44, call 3: whether the f32 down's late blocks wait for their SMs' shared-memory
# carveout (timing only): tg128 with the preferred carveout set on every kernel
# (LOCKSTEP_CUDA_CARVEOUT) or on the f32 downs alone (LOCKSTEP_CUDA_XF_CARVEOUT), against
# XF=0; timelines.
set -u
B=./.device/lockstep
O=/tmp/s44c; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/g3.gguf > /dev/null 2>&1
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf --layers 3 -o /tmp/g3c.gguf > /dev/null 2>&1
$B bench --backend cuda -m /tmp/g3c.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 &
LOCKSTEP_CUDA_TIMELINE=/tmp/x $B bench --backend cuda -m /tmp/g3c.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 &
wait; el
tg() { timeout 60 env "$@" $B bench --backend cuda -m /tmp/$M.gguf -p 0 -n 128 -r 3 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f6 | sed 's/ *± */±/; s/ //g'; }
M=g3
for r in 1 2; do
  echo "g3 round $r: XF=0 $(tg LOCKSTEP_CUDA_XF=0) | xf $(tg X=1) | all 100 $(tg LOCKSTEP_CUDA_CARVEOUT=100) | all 100 XF=0 $(tg LOCKSTEP_CUDA_CARVEOUT=100 LOCKSTEP_CUDA_XF=0) | all 50 $(tg LOCKSTEP_CUDA_CARVEOUT=50) | xf 100 $(tg LOCKSTEP_CUDA_XF_CARVEOUT=100) | xf 0 $(tg LOCKSTEP_CUDA_XF_CARVEOUT=0)"
done
el
LOCKSTEP_CUDA_CARVEOUT=100 LOCKSTEP_CUDA_TIMELINE=$O/tl_g3_all100.txt $B bench --backend cuda -m /tmp/g3.gguf -p 0 -n 32 -r 1 > /dev/null 2>&1
LOCKSTEP_CUDA_XF_CARVEOUT=0 LOCKSTEP_CUDA_TIMELINE=$O/tl_g3_xf0.txt $B bench --backend cuda -m /tmp/g3.gguf -p 0 -n 32 -r 1 > /dev/null 2>&1
el
mkdir -p $OUT/s44c && cp $O/*.txt $OUT/s44c/ 2>/dev/null
true
