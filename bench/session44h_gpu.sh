#!/bin/bash
# Session 44, call 8: whether the o projection arrives late after the decode attention because
# that attention runs on a cluster: Gemma-3's timeline with the cluster attention (default) and
# with `attention_decode_256` (LOCKSTEP_CUDA_ATT_CL=0); the graphs' programmatic edge counts.
set -u
B=./.device/lockstep
O=/tmp/s44h; mkdir -p $O
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/g3.gguf > /dev/null 2>&1
LOCKSTEP_CUDA_TIMELINE=$O/tl_g3.txt LOCKSTEP_CUDA_STATS=1 $B bench --backend cuda -m /tmp/g3.gguf -p 0 -n 32 -r 1 > $O/stats_cl.txt 2>&1
LOCKSTEP_CUDA_ATT_CL=0 LOCKSTEP_CUDA_TIMELINE=$O/tl_g3_nocl.txt LOCKSTEP_CUDA_STATS=1 $B bench --backend cuda -m /tmp/g3.gguf -p 0 -n 32 -r 1 > $O/stats_nocl.txt 2>&1
grep -i -E "programmatic|edges" $O/stats_cl.txt $O/stats_nocl.txt | head -6
for f in tl_g3 tl_g3_nocl; do echo "== $f"; awk -F'\t' 'NR>1 && $1==0 && $3>=4 && $3<=8' $O/$f.txt | cut -f4-8; done
mkdir -p $OUT/s44h && cp $O/*.txt $OUT/s44h/ 2>/dev/null
true
