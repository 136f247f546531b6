#!/bin/bash
# Session 52, call 5: why the 8B's long norm-fused q/k/v streams at 1.4 TB/s over its launch
# (15.2 MB in 10.8 us) and its gate/up at 2.8: Nsight Compute's throughput, memory and warp-
# stall sections for the cut 8B's decode kernels (eager steps, each kernel alone: no
# programmatic overlap, caches as the kernel before left them).
set -u
B=./.device/lockstep
O=/tmp/s52e; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$B synth --like llama-8b --type Q4_K_M --layers 3 -o /tmp/l8c.gguf > /dev/null 2>&1
$B bench --backend cuda -m /tmp/l8c.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1; el
LOCKSTEP_CUDA_GRAPHS=0 timeout 300 /usr/local/cuda/bin/ncu --cache-control none --clock-control none \
  --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats \
  --section SchedulerStats --section Occupancy --section LaunchStats \
  -k regex:'norm_long_mmv3_12|norm_long_gate_up_12|mmv_fast2r_1[24]|attention_decode_rope|mmv_fast2r_12' \
  --launch-skip 40 --launch-count 10 \
  $B bench --backend cuda -m /tmp/l8c.gguf -p 0 -n 48 -r 1 > $O/ncu.txt 2>&1; echo "ncu rc $?"; el
grep -iE '^  [a-z_0-9]+\(|stalled|Duration|DRAM Throughput|Memory Throughput|L2 Hit Rate|L1/TEX Hit|Achieved Occupancy|Registers Per|Stall|Warp Cycles Per Issued|Issue Slots Busy|Compute \(SM\) Throughput|Mem Busy|Max Bandwidth|One or More Eligible|No Eligible' $O/ncu.txt | head -150
mkdir -p $OUT/s52e && cp $O/*.txt $OUT/s52e/ 2>/dev/null
true
