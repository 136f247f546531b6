#!/bin/bash
# Needs bench/session44/f32_down.patch applied to main at 9c3e991 (the kernels were not kept).
# Session 44, call 4: the f32 down with every kernel's preferred carveout at 100 (call 3: the
# xf kernels' blocks waited for their SMs' carveout), combined with the launch and preload
# variants (kernel defines); tg128 -r 3 against XF=0, two rounds; timelines.
set -u
B=./.device/lockstep
O=/tmp/s44d; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/g3.gguf > /dev/null 2>&1
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf --layers 3 -o /tmp/g3c.gguf > /dev/null 2>&1
$B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf > /dev/null 2>&1 &
D=LOCKSTEP_CUDA_DEFINES
V1="$D=LOCKSTEP_XF_LATE_LAUNCH"
V3="$D=LOCKSTEP_XF_LATE_LAUNCH LOCKSTEP_XF_NO_PRELOAD"
for v in X=1 "$V1" "$V3"; do
  env "$v" $B bench --backend cuda -m /tmp/g3c.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 &
  env "$v" LOCKSTEP_CUDA_TIMELINE=/tmp/x $B bench --backend cuda -m /tmp/g3c.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 &
done
wait; el
export LOCKSTEP_CUDA_CARVEOUT=100
tg() { timeout 60 env "$@" $B bench --backend cuda -m /tmp/$M.gguf -p 0 -n 128 -r 3 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f6 | sed 's/ *± */±/; s/ //g'; }
M=g3
for r in 1 2; do
  echo "g3 round $r (all 100): XF=0 $(tg LOCKSTEP_CUDA_XF=0) | xf $(tg X=1) | late $(tg "$V1") | late+nopre $(tg "$V3") | XF=0 carveout unset $(tg LOCKSTEP_CUDA_XF=0 LOCKSTEP_CUDA_CARVEOUT=)"
done
M=l1b
echo "l1b (all 100): XF=0 $(tg LOCKSTEP_CUDA_XF=0) | XF=8192 $(tg LOCKSTEP_CUDA_XF=8192) | late XF=8192 $(tg "$V1" LOCKSTEP_CUDA_XF=8192)"
el
env "$V1" LOCKSTEP_CUDA_TIMELINE=$O/tl_g3_late100.txt $B bench --backend cuda -m /tmp/g3.gguf -p 0 -n 32 -r 1 > /dev/null 2>&1
el
mkdir -p $OUT/s44d && cp $O/*.txt $OUT/s44d/ 2>/dev/null
true
