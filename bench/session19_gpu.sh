#!/bin/bash
# Session 19: the step timeline (LOCKSTEP_CUDA_TIMELINE) on the four anchor shapes' decode.
set -u
B=./.device/lockstep
O=${OUT:-/tmp/s19}; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf | tail -1
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/gemma3.gguf | tail -1
$B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf | tail -1
( $B synth --like llama-8b --type Q4_K_M -o /tmp/l8b.gguf > /dev/null 2>&1 ) &
# Both builds of the kernels compiled (in parallel) before anything is timed.
( LOCKSTEP_CUDA_TIMELINE=/tmp/warm.tsv $B bench --backend cuda -m /tmp/smol.gguf -p 0 -n 4 -r 1 > /dev/null 2>&1 ) &
$B bench --backend cuda -m /tmp/smol.gguf -p 0 -n 4 -r 1 > /dev/null 2>&1
wait
el
for m in smol gemma3 l1b l8b; do
  echo "-- $m, tg128 plain:"; $B bench --backend cuda -m /tmp/$m.gguf -p 0 -n 128 -r 3 2>&1 | grep -E '\| tg' | tr -s ' '
  echo "-- $m, timeline:"
  LOCKSTEP_CUDA_TIMELINE=$O/tl_$m.tsv $B bench --backend cuda -m /tmp/$m.gguf -p 0 -n 128 -r 3 2>&1 | grep -E '\| tg|timeline|calls' | tr -s ' ' | head -40
done
el
