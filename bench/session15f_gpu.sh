#!/bin/bash
# Session 15, last call: Gemma-3's pp512 in three builds, alternating, three rounds (the
# submitted build, it with the session's two knobs off, the session's start: .device/
# lockstep-base). Run as one command line on the device; kept here as run.
export LOCKSTEP_CUDA_CACHE=/tmp/cubin; B=.device/lockstep
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/gemma3.gguf | tail -1
for i in 1 2 3; do
  echo "on: $($B bench --backend cuda -m /tmp/gemma3.gguf -p 512 -n 0 -r 10 2>&1 | grep -E '\| pp' | tr -s ' ' | cut -d'|' -f6)" \
       "off: $(LOCKSTEP_CUDA_ATTN_HEADS=group LOCKSTEP_CUDA_MIXED_QKV=0 $B bench --backend cuda -m /tmp/gemma3.gguf -p 512 -n 0 -r 10 2>&1 | grep -E '\| pp' | tr -s ' ' | cut -d'|' -f6)" \
       "base: $(.device/lockstep-base bench --backend cuda -m /tmp/gemma3.gguf -p 512 -n 0 -r 10 2>&1 | grep -E '\| pp' | tr -s ' ' | cut -d'|' -f6)"
done
