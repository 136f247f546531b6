#!/bin/bash
# Session 18, sixth script: mmv_long1 (early_row_dots' loop) for one-row mat-vecs of long
# rows. The lab (mmv_fast1 against mmv_long1 and the variants), then tg128 with
# LOCKSTEP_CUDA_LONG_MMV at 8192 (the default: the down projections of Llama-1B and the 8B),
# 0 (off) and 4096 (also q/o of the 8B, Llama-1B's ...), alternating, and the same tokens.
set -u
B=./.device/lockstep
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
NVCC=$(which nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null | head -1)
( $NVCC -arch=sm_90 -O3 --fmad=false -std=c++17 -Xptxas -v -o /tmp/gemv_lab bench/gemv_lab/gemv_lab.cu 2> /tmp/ptxas.txt ) &
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf | tail -1
$B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf | tail -1
( $B synth --like llama-8b --type Q4_K_M -o /tmp/l8b.gguf > /dev/null 2>&1 ) &
$B bench --backend cuda -m /tmp/smol.gguf -p 0 -n 8 -r 1 > /dev/null 2>&1
wait
el
grep -E "Compiling entry|Used [0-9]+ registers" /tmp/ptxas.txt | paste - - | grep -E "(mmv_long1|mmv_fast1)_1[24]'" | sed 's/ptxas info *: //g' | cut -c1-110
/tmp/gemv_lab | grep -E "real|long1|u1 t128|stream_read  (48|431)"
el
P="The quick brown fox jumps over the lazy dog. Once upon a time"
same=0; diff_=0
for m in l1b l8b; do
  for cfg in "--temp 0" "--temp 0.8 --top-k 40"; do
    a=$($B run -m /tmp/$m.gguf --backend cuda $cfg --seed 4 -n 64 --ignore-eos --no-monitors -p "$P" 2>/dev/null | md5sum)
    c=$(LOCKSTEP_CUDA_LONG_MMV=0 $B run -m /tmp/$m.gguf --backend cuda $cfg --seed 4 -n 64 --ignore-eos --no-monitors -p "$P" 2>/dev/null | md5sum)
    if [ "$a" == "$c" ]; then same=$((same+1)); else diff_=$((diff_+1)); echo "DIFFER: $m $cfg ($a / $c)"; fi
  done
done
echo "== long rows on vs off (run -n 64): $same same, $diff_ different"
el
tg() { env $1 $B bench --backend cuda -m /tmp/$2.gguf -p 0 -n 128 -r 5 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f6; }
for round in 1 2; do
  for m in l8b l1b; do
    echo "-- $m 8192: $(tg LOCKSTEP_CUDA_LONG_MMV=8192 $m)  off: $(tg LOCKSTEP_CUDA_LONG_MMV=0 $m)  4096: $(tg LOCKSTEP_CUDA_LONG_MMV=4096 $m)"
  done
done
echo "-- smol 8192 (no long rows): $(tg LOCKSTEP_CUDA_LONG_MMV=8192 smol)  512: $(tg LOCKSTEP_CUDA_LONG_MMV=512 smol)"
el
