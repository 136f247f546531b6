#!/bin/bash
# Session 45, call 13: the one-row mat-vecs' row index from the constant block size instead of
# blockDim (read before the grid wait, held to the kernel before's end after the decode
# attention), against LOCKSTEP_CUDA_MMV_BLOCKDIM=1 (as before): tokens, tg128 alternating on
# Gemma-3 and Llama-1B, the new build's timeline.
set -u
B=./.device/lockstep
O=/tmp/s45k; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/g3.gguf > /dev/null 2>&1
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf --layers 3 -o /tmp/g3c.gguf > /dev/null 2>&1
$B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf > /dev/null 2>&1
Z=LOCKSTEP_CUDA_MMV_BLOCKDIM=1
PIDS=""
for v in X=1 "$Z"; do
  env "$v" $B bench --backend cuda -m /tmp/g3c.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 & PIDS="$PIDS $!"
done
LOCKSTEP_CUDA_TIMELINE=/tmp/x $B bench --backend cuda -m /tmp/g3c.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 & PIDS="$PIDS $!"
wait $PIDS; el
h() { env "$@" $B run --backend cuda -m /tmp/$M.gguf -p 'The quick brown fox' -n 48 --temp 0 2>/dev/null | md5sum | cut -c1-12; }
M=g3; echo "tokens g3: $(h X=1) $(h "$Z") (64901c8f9708)"
M=l1b; echo "tokens l1b: $(h X=1) $(h "$Z") (4e5bee1ab652)"
tg() { timeout 60 env "$@" $B bench --backend cuda -m /tmp/$M.gguf -p 0 -n 128 -r 3 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f6 | sed 's/ *± */±/; s/ //g'; }
M=g3
for r in 1 2; do echo "g3 round $r: constant $(tg X=1) | blockDim $(tg "$Z")"; done
M=l1b
for r in 1 2; do echo "l1b round $r: constant $(tg X=1) | blockDim $(tg "$Z")"; done
el
LOCKSTEP_CUDA_TIMELINE=$O/tl_g3.txt $B bench --backend cuda -m /tmp/g3.gguf -p 0 -n 32 -r 1 2>&1 | grep '| tg'
awk -F'\t' 'NR>1 && $1==0 && $3>=4 && $3<=10' $O/tl_g3.txt | cut -f4-9
mkdir -p $OUT/s45k && cp $O/*.txt $OUT/s45k/ 2>/dev/null
true
