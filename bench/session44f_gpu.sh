#!/bin/bash
# Needs bench/session44/in_block_q8.patch applied to main at 9c3e991 (the kernels were not kept).
# Session 44, call 6: why the in-block quantization loses (call 5: Gemma-3 -6%): tg128 with and
# without programmatic edges (LOCKSTEP_CUDA_PDL=0: no kernel resident before its predecessor
# ends), in blocks against Q8S=0; timelines of each grid's last block (LOCKSTEP_TL_LAST).
set -u
B=./.device/lockstep
O=/tmp/s44f; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/g3.gguf > /dev/null 2>&1
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf --layers 3 -o /tmp/g3c.gguf > /dev/null 2>&1
TL=LOCKSTEP_CUDA_DEFINES=LOCKSTEP_TL_LAST
$B bench --backend cuda -m /tmp/g3c.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 &
P1=$!
env "$TL" LOCKSTEP_CUDA_TIMELINE=/tmp/x $B bench --backend cuda -m /tmp/g3c.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 &
P2=$!
wait $P1 $P2; el
tg() { timeout 60 env "$@" $B bench --backend cuda -m /tmp/$M.gguf -p 0 -n 128 -r 3 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f6 | sed 's/ *± */±/; s/ //g'; }
M=g3
for r in 1 2; do
  echo "g3 round $r: in blocks $(tg X=1) | Q8S=0 $(tg LOCKSTEP_CUDA_Q8S=0) | PDL=0 in blocks $(tg LOCKSTEP_CUDA_PDL=0) | PDL=0 Q8S=0 $(tg LOCKSTEP_CUDA_PDL=0 LOCKSTEP_CUDA_Q8S=0)"
done
el
env "$TL" LOCKSTEP_CUDA_TIMELINE=$O/tl_g3_last.txt $B bench --backend cuda -m /tmp/g3.gguf -p 0 -n 32 -r 1 > /dev/null 2>&1
env "$TL" LOCKSTEP_CUDA_Q8S=0 LOCKSTEP_CUDA_TIMELINE=$O/tl_g3_last_old.txt $B bench --backend cuda -m /tmp/g3.gguf -p 0 -n 32 -r 1 > /dev/null 2>&1
LOCKSTEP_CUDA_PDL=0 LOCKSTEP_CUDA_TIMELINE=$O/tl_g3_nopdl.txt $B bench --backend cuda -m /tmp/g3.gguf -p 0 -n 32 -r 1 > /dev/null 2>&1
el
mkdir -p $OUT/s44f && cp $O/*.txt $OUT/s44f/ 2>/dev/null
true
