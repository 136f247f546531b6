#!/bin/bash
# Session 22e: where the latency-bound decode kernels' warps stall (Nsight Compute's warp-state
# sampling: WarpStateStats and SchedulerStats, raw metrics, eager steps, caches and clocks left
# as they are). The question: do the large fused kernels (40-55 KB of code) wait on instruction
# fetch ("no instruction") after their grid wait?
set -u
B=./.device/lockstep
O=${OUT:-/tmp/s22e}; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
echo "ncu: $NCU"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf | tail -1
$B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf | tail -1
$B bench --backend cuda -m /tmp/smol.gguf -p 0 -n 4 -r 1 > /dev/null 2>&1
el
for m in smol l1b; do
  LOCKSTEP_CUDA_GRAPHS=0 timeout 200 $NCU --clock-control none --cache-control none --section WarpStateStats --section SchedulerStats --section LaunchStats \
    --page raw --csv --launch-skip 400 --launch-count 24 $B bench --backend cuda -m /tmp/$m.gguf -p 0 -n 16 -r 1 > $O/ncu_$m.csv 2> $O/ncu_$m.err
  echo "$m rc $? $(wc -l < $O/ncu_$m.csv) lines"; tail -3 $O/ncu_$m.err
  el
done
