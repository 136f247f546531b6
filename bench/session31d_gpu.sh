#!/bin/bash
# Session 31d: Nsight Compute on the split-key attention at depth 4096 (SmolLM2, the 8B): speed
# of light, memory workload, occupancy, warp stalls; eager steps (graphs off).
set -u
B=./.device/lockstep
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf | tail -1
$B bench --backend cuda -m /tmp/smol.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 &
$B synth --like llama-8b --type Q4_K_M --layers 4 -o /tmp/l8b4.gguf | tail -1
wait; el
mkdir -p /tmp/o
for m in smol l8b4; do
  LOCKSTEP_CUDA_GRAPHS=0 timeout 200 /usr/local/cuda/bin/ncu --kernel-name regex:attention_split --launch-skip 40 --launch-count 2 \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section WarpStateStats --section LaunchStats --section SchedulerStats \
    $B bench --backend cuda -m /tmp/$m.gguf -p 0 -n 8 -d 4096 -r 1 > /tmp/o/ncu_$m.txt 2>&1
  echo "== ncu $m rc $?"; grep -E "Duration|DRAM Throughput|Memory Throughput|Achieved Occupancy|Theoretical Occupancy|Registers Per|Block Limit|Stall|L2 Hit|L1/TEX Hit|Mem Busy|Max Bandwidth|Waves" /tmp/o/ncu_$m.txt | head -30
  el
done
[ -n "${OUT:-}" ] && cp /tmp/o/* $OUT/ 2>/dev/null
true
