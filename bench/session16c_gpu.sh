#!/bin/bash
# Session 16, third script: Gemma-3's pp512, bimodal across processes (session 15). Six
# processes as they come, six pinned to one CPU core (taskset); SmolLM2 as a control.
# pp512 only (-n 0), -r 5 each.
set -u
B=${LOCKSTEP:-./.device/lockstep}
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
nproc
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/gemma3.gguf | tail -1
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf | tail -1
pp() { "$@" bench --backend cuda -m /tmp/$M.gguf -p 512 -n 0 -r 5 2>&1 | grep -E '\| pp' | tr -s ' ' | cut -d'|' -f6; }
for M in gemma3 smol; do
  for i in 1 2 3 4 5 6; do echo "-- $M as they come: $(pp $B)"; done
  for i in 1 2 3 4 5 6; do echo "-- $M taskset -c 3: $(pp taskset -c 3 $B)"; done
done
nvidia-smi --query-gpu=clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv,noheader
