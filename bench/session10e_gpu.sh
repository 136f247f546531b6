#!/bin/bash
# Session 10, faults call: the attention faults now reach the flash prefill kernels (a
# 13-token prompt is a prefill of 13 rows), plus kv-skip-prefill; localized by diff, and
# mask-drift by check's all-true mask vs none.
set -u
F=${LOCKSTEP_FAULTS:-./.device/lockstep-faults}
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
$F synth --like smollm2 --type Q4_1 --layers 4 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol4.gguf | tail -1
P="The capital of France is Paris. The capital of Germany is"
export LOCKSTEP_CUDA_CACHE=/tmp/cubin-faults
for f in kv-skip-prefill wrong-kv-head kv-view-offset; do
  echo "== $f (smollm2 shape, 4 layers, 13 + 4): $(LOCKSTEP_CUDA_FAULT=$f $F diff -m /tmp/smol4.gguf --a ref --b cuda -p "$P" --decode 4 2>&1 | grep -E '^verdict' | cut -c1-300)"
  el
done
echo "== mask-drift: check (all-true mask vs none, bitwise):"
LOCKSTEP_CUDA_FAULT=mask-drift $F check -m /tmp/smol4.gguf --backend cuda 2>&1 | grep -E "mask|result" | head -4
el
