#!/bin/bash
# Session 45, call 9: the timeline build with its record index drawn by a float atomic that is
# first read after the release stamp (ptxas aggregated the integer one across the warp, and
# its shuffle made every block wait for the round trip before its arrival stamp and its wait):
# Gemma-3 and Llama-1B timelines (first and last blocks), the timeline build's own tg32, and
# the plain build's tg128 beside it.
set -u
B=./.device/lockstep
O=/tmp/s45g; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/g3.gguf > /dev/null 2>&1
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf --layers 3 -o /tmp/g3c.gguf > /dev/null 2>&1
$B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf > /dev/null 2>&1
L="LOCKSTEP_CUDA_DEFINES=LOCKSTEP_TL_LAST"
PIDS=""
for v in X=1 "$L"; do
  env "$v" LOCKSTEP_CUDA_TIMELINE=/tmp/x $B bench --backend cuda -m /tmp/g3c.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 & PIDS="$PIDS $!"
done
$B bench --backend cuda -m /tmp/g3c.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 & PIDS="$PIDS $!"
wait $PIDS; el
tl() { env "$@" $B bench --backend cuda -m /tmp/$M.gguf -p 0 -n 32 -r 1 2>&1 | grep -E '\| tg'; }
M=g3
tl X=1 LOCKSTEP_CUDA_TIMELINE=$O/tl_g3.txt
tl "$L" LOCKSTEP_CUDA_TIMELINE=$O/tl_g3_last.txt
M=l1b
tl X=1 LOCKSTEP_CUDA_TIMELINE=$O/tl_l1b.txt
tl "$L" LOCKSTEP_CUDA_TIMELINE=$O/tl_l1b_last.txt
tg() { timeout 60 $B bench --backend cuda -m /tmp/$M.gguf -p 0 -n 128 -r 3 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f6; }
M=g3; echo "g3 plain tg128: $(tg)"
M=l1b; echo "l1b plain tg128: $(tg)"
el
for f in tl_g3 tl_g3_last; do echo "== $f"; head -8 $O/$f.txt | sed -n 8p; awk -F'\t' 'NR>1 && $1==0 && $3>=4 && $3<=10' $O/$f.txt | cut -f4-9; done
for f in tl_l1b tl_l1b_last; do echo "== $f"; awk -F'\t' 'NR>1 && $1==0 && $3>=4 && $3<=12' $O/$f.txt | cut -f4-9; done
mkdir -p $OUT/s45g && cp $O/*.txt $OUT/s45g/ 2>/dev/null
true
