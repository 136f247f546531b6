#!/bin/bash
# Session 19b: the step timeline with marks inside the kernels (TL_MARK), four anchor shapes.
set -u
B=./.device/lockstep
O=${OUT:-/tmp/s19b}; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
[ -f /tmp/smol.gguf ] || $B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf | tail -1
[ -f /tmp/gemma3.gguf ] || $B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/gemma3.gguf | tail -1
[ -f /tmp/l1b.gguf ] || $B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf | tail -1
[ -f /tmp/l8b.gguf ] || $B synth --like llama-8b --type Q4_K_M -o /tmp/l8b.gguf > /dev/null 2>&1
el
for m in smol gemma3 l1b l8b; do
  echo "-- $m, timeline:"
  LOCKSTEP_CUDA_TIMELINE=$O/tl_$m.tsv $B bench --backend cuda -m /tmp/$m.gguf -p 0 -n 128 -r 2 2>&1 | grep -E '\| tg|timeline|calls' | tr -s ' ' | awk '/graph 1:/{skip=1} /graph 0:/{skip=0} !skip' | head -24
done
el
