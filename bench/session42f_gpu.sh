#!/bin/bash
# Session 42, call 6: the launch-point and cache-policy switches again on Gemma-3 since the
# cluster attention changed its chain (session 41): tg128 -r 3, each against the default in
# alternation, two rounds; the greedy tokens with each (the switches change no value).
set -u
B=./.device/lockstep
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/g3.gguf > /dev/null 2>&1
K="LOCKSTEP_CUDA_LAUNCH_AT_ENTRY=1 LOCKSTEP_CUDA_LATE_LAUNCH=0 LOCKSTEP_CUDA_ATTN_PLAIN_LATE=1 LOCKSTEP_CUDA_EVICT_FIRST=0 LOCKSTEP_CUDA_Q8_SHUFFLE=1"
for k in X=1 $K; do env $k $B bench --backend cuda -m /tmp/g3.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 & done; wait
h() { env "$@" $B run --backend cuda -m /tmp/g3.gguf -p 'The quick brown fox' -n 48 --temp 0 2>/dev/null | md5sum | cut -c1-12; }
tg() { timeout 40 env "$@" $B bench --backend cuda -m /tmp/g3.gguf -p 0 -n 128 -r 3 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f6 | sed 's/ *± */±/; s/ //g'; }
for k in $K; do
  echo "$k: tokens $(h $k); tg128 $(tg $k) / default $(tg X=1) / $(tg $k) / default $(tg X=1)"
done
