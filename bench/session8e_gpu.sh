#!/bin/bash
# Session 8, guard regions: `check --ops` on the cuda backends with every op output between
# canary regions (CudaBackend::with_output_guards), then the seeded `add-overrun` fault (the
# elementwise add writes one value past its output) must fail the add cases with an
# out-of-bounds note. Logs in $OUT.
set -u
B=${LOCKSTEP:-./.device/lockstep}
F=${LOCKSTEP_FAULTS:-./.device/lockstep-faults}
O=${OUT:-/tmp/s8e}; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
( LOCKSTEP_CUDA_CACHE=/tmp/cubin-faults LOCKSTEP_CUDA_FAULT=add-overrun $F check --ops --backend cuda --filter add > $O/ops-add-overrun.txt 2>&1 ) &
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
$B check --ops --backend cuda > $O/ops-cuda.txt 2>&1; echo "== check --ops --backend cuda (guards): $(tail -1 $O/ops-cuda.txt)"
grep -E " FAIL" $O/ops-cuda.txt | head -5; el
$B check --ops --backend cuda-exact > $O/ops-cuda-exact.txt 2>&1; echo "== check --ops --backend cuda-exact (guards): $(tail -1 $O/ops-cuda-exact.txt)"
grep -E " FAIL" $O/ops-cuda-exact.txt | head -5; el
wait
echo "== add-overrun: $(tail -1 $O/ops-add-overrun.txt)"; grep -E "FAIL" $O/ops-add-overrun.txt | head -3 | cut -c1-260
$B synth --like smollm2 --type Q4_1 --layers 4 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol4.gguf | tail -1
echo "== smol4 isolate 13 + 8 (normal, unguarded): $($B diff -m /tmp/smol4.gguf --a ref --b cuda -p "The capital of France is" --decode 8 --isolate 2>&1 | grep -E '^isolated verdict' | cut -c1-150)"
el
