#!/bin/bash
# Session 9, faults call: every seeded fault of the CUDA kernels on the session's final build
# (programmatic launches, logits reduction, q8_parts), localized by diff or check; the split
# path forced for the attention faults; add-overrun caught by the guards. Then the clean build:
# check --ops and the isolation of the tiny-llama zoo.
set -u
B=${LOCKSTEP:-./.device/lockstep}
F=${LOCKSTEP_FAULTS:-./.device/lockstep-faults}
O=${OUT:-/tmp/s9f}; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
$B synth --like smollm2 --type Q4_1 --layers 4 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol4.gguf | tail -1
P="The capital of France is Paris. The capital of Germany is"
export LOCKSTEP_CUDA_CACHE=/tmp/cubin-faults
for f in kv-skip-prefill wrong-kv-head kv-view-offset; do
  echo "== $f (smollm2 shape, 4 layers, 13 + 4): $(LOCKSTEP_CUDA_FAULT=$f $F diff -m /tmp/smol4.gguf --a ref --b cuda -p "$P" --decode 4 2>&1 | grep -E '^verdict' | cut -c1-260)"
done
for f in wrong-kv-head kv-view-offset mask-drift; do
  echo "== $f (split forced, 1 + 4): $(LOCKSTEP_CUDA_ATTN=split LOCKSTEP_CUDA_FAULT=$f $F diff -m /tmp/smol4.gguf --a ref --b cuda --ids 4000 --decode 4 2>&1 | grep -E '^verdict' | cut -c1-260)"
done
echo "== q4k-wrong-scale (tiny-llama Q4_K): $(LOCKSTEP_CUDA_FAULT=q4k-wrong-scale $F diff -m .device/tiny/tiny-llama-Q4_K.gguf --a ref --b cuda --ids 1,2,3,4,5,6 --decode 2 2>&1 | grep -E '^verdict' | cut -c1-260)"
echo "== f16-as-f32 (tiny-llama F16): $(LOCKSTEP_CUDA_FAULT=f16-as-f32 $F diff -m .device/tiny/tiny-llama-F16.gguf --a ref --b cuda --ids 1,2,3,4,5,6 --decode 2 2>&1 | grep -E '^verdict' | cut -c1-260)"
echo "== mask-drift: check (all-true mask vs none, bitwise):"
LOCKSTEP_CUDA_FAULT=mask-drift $F check -m /tmp/smol4.gguf --backend cuda 2>&1 | grep -E "mask|result" | head -4
echo "== mask-drift, split forced: check:"
LOCKSTEP_CUDA_ATTN=split LOCKSTEP_CUDA_FAULT=mask-drift $F check -m /tmp/smol4.gguf --backend cuda 2>&1 | grep -E "mask|result" | head -4
echo "== add-overrun: $(LOCKSTEP_CUDA_FAULT=add-overrun $F check --ops --backend cuda --filter add 2>&1 | tail -1)"
LOCKSTEP_CUDA_FAULT=add-overrun $F check --ops --backend cuda --filter add 2>&1 | grep FAIL | head -1
el
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
$B check --ops --backend cuda > $O/ops-cuda.txt 2>&1
echo "== clean check --ops --backend cuda: $(tail -1 $O/ops-cuda.txt)"
echo "== clean check smol4 cuda:"; $B check -m /tmp/smol4.gguf --backend cuda 2>&1 | grep -E "^  (ok|FAIL)|result" | tail -8
for t in .device/tiny/*.gguf; do
  echo "-- $(basename $t): $($B diff -m $t --a ref --b cuda --ids 1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24 --decode 8 --isolate 2>&1 | grep -E '^isolated verdict' | cut -c1-120)"
done
el
