#!/bin/bash
# Session 10, last call: the tiny-llama zoo (heads of 64: its 24-token prompts run the flash
# prefill kernel) diffed and isolated on all 15 types, and the two seeded faults outside the
# attention (q4k-wrong-scale now also in the one-row mat-vecs, f16-as-f32) on the final build.
set -u
B=${LOCKSTEP:-./.device/lockstep}
F=${LOCKSTEP_FAULTS:-./.device/lockstep-faults}
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
for t in .device/tiny/*.gguf; do
  echo "-- $(basename $t): $($B diff -m $t --a ref --b cuda --ids 1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24 --decode 8 --isolate 2>&1 | grep -E '^(verdict|isolated verdict)' | cut -c1-90 | tr '\n' ' ')"
done
el
export LOCKSTEP_CUDA_CACHE=/tmp/cubin-faults
echo "== q4k-wrong-scale (tiny-llama Q4_K): $(LOCKSTEP_CUDA_FAULT=q4k-wrong-scale $F diff -m .device/tiny/tiny-llama-Q4_K.gguf --a ref --b cuda --ids 1,2,3,4,5,6 --decode 2 2>&1 | grep -E '^verdict' | cut -c1-260)"
echo "== q4k-wrong-scale, one-token prompt (decode mat-vecs only): $(LOCKSTEP_CUDA_FAULT=q4k-wrong-scale $F diff -m .device/tiny/tiny-llama-Q4_K.gguf --a ref --b cuda --ids 1 --decode 2 2>&1 | grep -E '^verdict' | cut -c1-260)"
echo "== f16-as-f32 (tiny-llama F16): $(LOCKSTEP_CUDA_FAULT=f16-as-f32 $F diff -m .device/tiny/tiny-llama-F16.gguf --a ref --b cuda --ids 1,2,3,4,5,6 --decode 2 2>&1 | grep -E '^verdict' | cut -c1-260)"
el
