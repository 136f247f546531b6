#!/bin/bash
# Session 16, fourth script: Gemma-3's pp512 pinned to each of several CPU cores (two
# processes a core), and the cores' clock as the kernel reports it. If one core gives the fast
# mode every time, the prefill is bound by the host's launches.
set -u
B=${LOCKSTEP:-./.device/lockstep}
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/gemma3.gguf | tail -1
grep -m1 "model name" /proc/cpuinfo
grep "MHz" /proc/cpuinfo | tr -s ' ' | cut -d: -f2 | tr '\n' ' '; echo
pp() { "$@" bench --backend cuda -m /tmp/gemma3.gguf -p 512 -n 0 -r 5 2>&1 | grep -E '\| pp' | tr -s ' ' | cut -d'|' -f6; }
for c in 0 1 4 7 8 11 12 15; do
  echo "-- core $c: $(pp taskset -c $c $B) | $(pp taskset -c $c $B)"
done
for i in 1 2 3 4 5 6; do echo "-- as they come: $(pp $B)"; done
