#!/bin/bash
# Session 17, fourth script: the submitted build's correctness. The seeded faults (binary built
# with --features faults; the decode steps of these SmolLM2-shaped and tiny-llama models run the
# fused kernel), each in its own process at once (every fault is its own NVRTC compile), then
# check --ops --backend cuda.
set -u
B=${LOCKSTEP:-./.device/lockstep}
F=${LOCKSTEP_FAULTS:-./.device/lockstep-faults}
O=${OUT:-/tmp/s17d}; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$B synth --like smollm2 --type Q4_1 --layers 4 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol4.gguf | tail -1
P="The capital of France is Paris. The capital of Germany is"
for f in kv-skip-prefill wrong-kv-head kv-view-offset mask-drift; do
  ( LOCKSTEP_CUDA_CACHE=/tmp/cubin-$f LOCKSTEP_CUDA_FAULT=$f $F diff -m /tmp/smol4.gguf --a ref --b cuda -p "$P" --decode 4 > $O/f-$f.txt 2>&1; echo "exit $?" >> $O/f-$f.txt ) &
done
( LOCKSTEP_CUDA_CACHE=/tmp/cubin-q4k LOCKSTEP_CUDA_FAULT=q4k-wrong-scale $F diff -m .device/tiny/tiny-llama-Q4_K.gguf --a ref --b cuda --ids 1,2,3,4,5,6 --decode 2 > $O/f-q4k.txt 2>&1; echo "exit $?" >> $O/f-q4k.txt ) &
( LOCKSTEP_CUDA_CACHE=/tmp/cubin-f16 LOCKSTEP_CUDA_FAULT=f16-as-f32 $F diff -m .device/tiny/tiny-llama-F16.gguf --a ref --b cuda --ids 1,2,3,4,5,6 --decode 2 > $O/f-f16.txt 2>&1; echo "exit $?" >> $O/f-f16.txt ) &
( LOCKSTEP_CUDA_CACHE=/tmp/cubin-clean $F check -m /tmp/smol4.gguf --backend cuda > $O/f-clean.txt 2>&1; echo "exit $?" >> $O/f-clean.txt ) &
wait
el
for f in kv-skip-prefill wrong-kv-head kv-view-offset mask-drift q4k f16; do
  echo "== $f: $(grep -E '^verdict' $O/f-$f.txt | cut -c1-230) | $(tail -1 $O/f-$f.txt)"
done
( LOCKSTEP_CUDA_CACHE=/tmp/cubin-mask-drift LOCKSTEP_CUDA_FAULT=mask-drift $F check -m /tmp/smol4.gguf --backend cuda > $O/f-mask-check.txt 2>&1; echo "exit $?" >> $O/f-mask-check.txt )
echo "== mask-drift, check: $(grep -E 'mask' $O/f-mask-check.txt | tr -s ' ' | cut -c1-120 | head -2 | tr '\n' '|') $(tail -1 $O/f-mask-check.txt)"
echo "== clean, check: $(grep -cE '^  ok' $O/f-clean.txt) ok, $(grep -cE '^  FAIL' $O/f-clean.txt) FAIL, $(tail -1 $O/f-clean.txt)"
el
LOCKSTEP_CUDA_CACHE=/tmp/cubin $B check --ops --backend cuda > $O/ops.txt 2>&1; echo "== check --ops --backend cuda: rc $? $(tail -1 $O/ops.txt)"
grep -E 'FAIL' $O/ops.txt | head -8
echo "rope_store_attention cases: $(grep -c '^  rope_store_attention.* ok$' $O/ops.txt) ok, $(grep -c '^  rope_store_attention.*FAIL' $O/ops.txt) FAIL"
el
