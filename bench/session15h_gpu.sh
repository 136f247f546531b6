#!/bin/bash
# Session 15, a diagnostic: Gemma-3's pp512 in six processes, each followed by a process with
# LOCKSTEP_CUDA_PROFILE=1 (synchronized after every op: the GPU time of each op). Run as one
# command line on the device; kept here as run.
export LOCKSTEP_CUDA_CACHE=/tmp/cubin; B=.device/lockstep
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/gemma3.gguf | tail -1
for i in 1 2 3 4 5 6; do
  echo "== process $i: $($B bench --backend cuda -m /tmp/gemma3.gguf -p 512 -n 0 -r 5 2>&1 | grep -E '\| pp' | tr -s ' ' | cut -d'|' -f6)"
  LOCKSTEP_CUDA_PROFILE=1 $B bench --backend cuda -m /tmp/gemma3.gguf -p 512 -n 0 -r 3 2>&1 | grep -E '\| pp|^ ' | head -9
done
