#!/bin/bash
# Session 45, call 14: where in the o projection's first 1.9 KB of code its block waits: mark 14
# (mmv_fast1 only) stamps just before the row pointer's first use, after the blockDim read and
# the branch (release minus stamp); 10 the first parameter at entry, 11 the row pointer.
set -u
B=./.device/lockstep
O=/tmp/s45l; mkdir -p $O
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/g3.gguf > /dev/null 2>&1
LOCKSTEP_CUDA_TIMELINE=$O/tl_g3.txt $B bench --backend cuda -m /tmp/g3.gguf -p 0 -n 32 -r 1 2>&1 | grep '| tg'
awk -F'\t' 'NR>1 && $1==0 && $3>=4 && $3<=17' $O/tl_g3.txt | cut -f4-9
mkdir -p $OUT/s45l && cp $O/*.txt $OUT/s45l/ 2>/dev/null
true
