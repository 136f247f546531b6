#!/bin/bash
# Session 15, fourth call: Nsight Compute's full sections on Gemma-3's decode kernels (the
# Q8_0 LM head and v, the hd-256 decode attention, the fused norm + gate/up), eager steps.
set -u
B=${LOCKSTEP:-./.device/lockstep}
O=${OUT:-/tmp/s15d}; mkdir -p $O
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/gemma3.gguf | tail -1
$B bench --backend cuda -m /tmp/gemma3.gguf -p 0 -n 8 -r 1 > /dev/null 2>&1
LOCKSTEP_CUDA_GRAPHS=0 /usr/local/cuda/bin/ncu --set full \
  --kernel-name regex:"mmv_fast1_8|attention_decode_256|norm_gate_up_q8_fast1_6" \
  --launch-skip 300 --launch-count 8 \
  $B bench --backend cuda -m /tmp/gemma3.gguf -p 0 -n 16 -r 1 > $O/ncu-full.txt 2>&1
grep -E '^  [a-z_0-9]+\(|Duration|Memory Throughput|DRAM Throughput|L1/TEX Hit|Achieved Occupancy|Theoretical Occupancy|Registers Per|Block Limit Reg|Warp Cycles Per Issued|Issue Slots Busy|One or More Eligible|L1/TEX Cache Throughput|Stall|Grid Size|Block Size' $O/ncu-full.txt | head -150
