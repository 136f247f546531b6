#!/bin/bash
# Session 41, call 7 (experiment, not kept; needs .device/lockstep-exp2 built with bench/session41/rope_cl.patch applied): rope_store inside the cluster decode attention (bench/session41/rope_cl.patch) with the edge into it plain (LOCKSTEP_CUDA_EXP_PLAIN_ROPE_CL=1) or programmatic, against the unfused head.
set -u
B=./.device/lockstep-exp2
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/g3.gguf > /dev/null 2>&1
$B bench --backend cuda -m /tmp/g3.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1
h() { env "$@" $B run --backend cuda -m /tmp/g3.gguf -p 'The quick brown fox' -n 48 --temp 0 2>/dev/null | md5sum | cut -c1-12; }
echo "tokens: fused plain edge $(h LOCKSTEP_CUDA_EXP_PLAIN_ROPE_CL=1), fused $(h X=1)"
$B check -m /tmp/g3.gguf --backend cuda 2>&1 | grep replayed
tg() { timeout 40 env "$@" $B bench --backend cuda -m /tmp/g3.gguf -p 0 -n 128 -r 3 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f6 | sed 's/ *± */±/; s/ //g'; }
for r in 1 2 3; do echo "g3 tg128 round $r: fused, plain edge $(tg LOCKSTEP_CUDA_EXP_PLAIN_ROPE_CL=1) / fused, programmatic $(tg X=1) / unfused (the head) $(tg LOCKSTEP_CUDA_ROPE_ATTN=0)"; done
LOCKSTEP_CUDA_EXP_PLAIN_ROPE_CL=1 LOCKSTEP_CUDA_TIMELINE=/tmp/tl.txt $B bench --backend cuda -m /tmp/g3.gguf -p 0 -n 128 -r 1 > /dev/null 2>&1
awk -F'\t' 'NR>1 && $3>=3 && $3<=9 {print $4, $6, $9}' /tmp/tl.txt | head -8
