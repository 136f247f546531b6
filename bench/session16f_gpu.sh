#!/bin/bash
# Session 16, sixth script: Gemma-3's pp512 with the host's time per op
# (LOCKSTEP_CUDA_PROFILE=host: no synchronization, each op charged the host time since the
# op before), three processes, SmolLM2 as a control; then the synchronized profile once.
set -u
B=${LOCKSTEP:-./.device/lockstep}
O=${OUT:-/tmp/s16f}; mkdir -p $O
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/gemma3.gguf | tail -1
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf | tail -1
for m in gemma3 smol; do
  for i in 1 2 3; do
    LOCKSTEP_CUDA_PROFILE=host $B bench --backend cuda -m /tmp/$m.gguf -p 512 -n 0 -r 10 > $O/host-$m-$i.txt 2>&1
    echo "-- $m host profile $i: $(grep -E '\| pp' $O/host-$m-$i.txt | tr -s ' ' | cut -d'|' -f6)"
    grep -E '^  ' $O/host-$m-$i.txt | sort -k2 -n -r | head -8
  done
done
LOCKSTEP_CUDA_PROFILE=1 $B bench --backend cuda -m /tmp/gemma3.gguf -p 512 -n 0 -r 10 > $O/sync-gemma3.txt 2>&1
echo "-- gemma3 synchronized profile"; grep -E '^  ' $O/sync-gemma3.txt | sort -k2 -n -r | head -10
