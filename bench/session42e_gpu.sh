#!/bin/bash
# Session 42, call 5: the rope rewrite against the two kernels again, on a quiet machine (call 4's
# rounds ran beside llama.cpp's build): tg128 -r 3 alternating, four rounds, and the fence in
# every thread once more.
set -u
B=./.device/lockstep
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/g3.gguf > /dev/null 2>&1
$B bench --backend cuda -m /tmp/g3.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 &
LOCKSTEP_CUDA_DEFINES=LOCKSTEP_ROPE_FENCE_ALL $B bench --backend cuda -m /tmp/g3.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 &
wait
F=LOCKSTEP_CUDA_DEFINES=LOCKSTEP_ROPE_FENCE_ALL
tg() { timeout 40 env "$@" $B bench --backend cuda -m /tmp/g3.gguf -p 0 -n 128 -r 3 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f6 | sed 's/ *± */±/; s/ //g'; }
for r in 1 2 3 4; do echo "g3 tg128 round $r: rewrite $(tg X=1) / no rewrite $(tg LOCKSTEP_CUDA_ROPE_QKV=0) / rewrite, every thread's fence $(tg $F)"; done
