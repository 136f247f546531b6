#!/bin/bash
# Session 15, profiling before any change: Nsight Compute (eager, serialized) gives each decode
# kernel's own time and DRAM bandwidth. The call also looked for Nsight Systems (a timeline of
# graph replays); the device has none ("nsys: none"), so that branch never ran and is gone.
set -u
B=${LOCKSTEP:-./.device/lockstep}
O=${OUT:-/tmp/s15}; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
NSYS=$(which nsys 2>/dev/null || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys 2>/dev/null | head -1)
echo "nsys: ${NSYS:-none}"
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf | tail -1
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/gemma3.gguf | tail -1
$B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf | tail -1
$B synth --like llama-8b --type Q4_K_M --layers 4 -o /tmp/l8b4.gguf | tail -1
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader
for m in smol gemma3 l1b; do
  echo "-- $m: $($B bench --backend cuda -m /tmp/$m.gguf -p 0 -n 128 -r 3 2>&1 | grep -E '\| tg' | tr -s ' ')"
done; el
el
for m in gemma3 smol; do
  LOCKSTEP=$B bash bench/ncu_decode.sh /tmp/$m.gguf 250 2000 > $O/ncu-$m.txt 2>&1
  echo "== $m (ncu, eager)"; head -30 $O/ncu-$m.txt
done; el
