#!/bin/bash
# Session 9, the clean half of session9f_gpu.sh (which ran out of time after the faults: each
# fault's kernels are compiled afresh): check --ops, check and the isolation of the tiny-llama
# zoo on the session's final build.
set -u
B=${LOCKSTEP:-./.device/lockstep}
O=${OUT:-/tmp/s9g}; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
$B synth --like smollm2 --type Q4_1 --layers 4 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol4.gguf | tail -1
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
$B check --ops --backend cuda > $O/ops-cuda.txt 2>&1
echo "== clean check --ops --backend cuda: $(tail -1 $O/ops-cuda.txt)"
echo "== clean check smol4 cuda:"; $B check -m /tmp/smol4.gguf --backend cuda 2>&1 | grep -E "^  (ok|FAIL)|result" | tail -8
for t in .device/tiny/*.gguf; do
  echo "-- $(basename $t): $($B diff -m $t --a ref --b cuda --ids 1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24 --decode 8 --isolate 2>&1 | grep -E '^isolated verdict' | cut -c1-120)"
done
el
