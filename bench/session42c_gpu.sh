#!/bin/bash
# Session 42, call 3: where the norm-fused decode kernels' time goes before their rows (the
# timeline puts 2.5 us of Gemma-3's 3.4 us q/k/v launch in the norm prologue). Nsight Compute on
# eager steps (graphs off: each kernel alone), the full set with SASS-level samples, for
# norm_mmv3_fast1_6_8 and norm_gate_up_fast1_6; text pages come back.
set -u
B=./.device/lockstep
O=$OUT/s42c; mkdir -p $O
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
NCU=/usr/local/cuda/bin/ncu
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/g3.gguf > /dev/null 2>&1
$B bench --backend cuda -m /tmp/g3.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1
LOCKSTEP_CUDA_GRAPHS=0 timeout 400 $NCU --set full --import-source no -k 'regex:^norm_(mmv3_fast1_6_8|gate_up_fast1_6)$' \
  --launch-skip 40 --launch-count 2 -o /tmp/norm $B bench --backend cuda -m /tmp/g3.gguf -p 0 -n 8 -r 1 > $O/ncu_run.txt 2>&1
echo "ncu rc $?"; tail -3 $O/ncu_run.txt
$NCU -i /tmp/norm.ncu-rep --page details --csv > $O/details.csv 2>&1
$NCU -i /tmp/norm.ncu-rep --page source --print-source sass --csv > $O/source.csv 2>&1
ls -la $O; grep -E '"(Duration|Warp Cycles Per Issued Instruction|Achieved Occupancy|Registers Per Thread)"' $O/details.csv | cut -c1-200 | head -20
true
