#!/bin/bash
# Session 45, call 12: is the o projection's first parameter read held at its entry too? Mark
# 10 (mmv_fast1 only): a value from its first parameter ready, a few instructions after entry;
# mark 11 the same after about 1.8 KB of code (both as release minus stamp). Gemma-3 and
# Llama-1B, first blocks.
set -u
B=./.device/lockstep
O=/tmp/s45j; mkdir -p $O
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/g3.gguf > /dev/null 2>&1
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf --layers 3 -o /tmp/g3c.gguf > /dev/null 2>&1
LOCKSTEP_CUDA_TIMELINE=/tmp/x $B bench --backend cuda -m /tmp/g3c.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1
LOCKSTEP_CUDA_TIMELINE=$O/tl_g3.txt $B bench --backend cuda -m /tmp/g3.gguf -p 0 -n 32 -r 1 > /dev/null 2>&1
awk -F'\t' 'NR>1 && $1==0 && $3>=4 && $3<=24' $O/tl_g3.txt | cut -f4-9
mkdir -p $OUT/s45j && cp $O/*.txt $OUT/s45j/ 2>/dev/null
true
