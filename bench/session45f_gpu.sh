#!/bin/bash
# Session 45, call 7: the o projection's held parameters with the next step's graph not launched
# during this one (LOCKSTEP_CUDA_PRELAUNCH=0, and =gate: the gate alone), against the default.
set -u
B=./.device/lockstep
O=/tmp/s45f; mkdir -p $O
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
[ -f /tmp/g3.gguf ] || $B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/g3.gguf > /dev/null 2>&1
tl() { env "$@" $B bench --backend cuda -m /tmp/g3.gguf -p 0 -n 32 -r 1 > /dev/null 2>&1; }
tl X=1 LOCKSTEP_CUDA_TIMELINE=$O/tl_g3.txt
tl LOCKSTEP_CUDA_PRELAUNCH=0 LOCKSTEP_CUDA_TIMELINE=$O/tl_g3_noprelaunch.txt
tl LOCKSTEP_CUDA_PRELAUNCH=gate LOCKSTEP_CUDA_TIMELINE=$O/tl_g3_gate.txt
for f in tl_g3 tl_g3_noprelaunch tl_g3_gate; do echo "== $f"; awk -F'\t' 'NR>1 && $1==0 && $3>=4 && $3<=10' $O/$f.txt | cut -f4-9; done
mkdir -p $OUT/s45f && cp $O/*.txt $OUT/s45f/ 2>/dev/null
true
