#!/bin/bash
# Session 7, final call: the submitted build (f16 tensor-core prefill, decode attention chosen
# by head size, both attention kernels quantizing their own output). Checked (check --ops,
# isolation over a 100-token prefill and over 32 decode steps, whole-run diffs, exact mode,
# the invariances with their full table, the attention faults) and timed side by side (the
# four anchors). Logs in $OUT.
set -u
B=${LOCKSTEP:-./.device/lockstep}
F=${LOCKSTEP_FAULTS:-./.device/lockstep-faults}
O=${OUT:-/tmp/s7d}; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
FAULTS="kv-skip-prefill wrong-kv-head kv-view-offset mask-drift"
for f in $FAULTS; do
  ( LOCKSTEP_CUDA_CACHE=/tmp/cubin-faults LOCKSTEP_CUDA_FAULT=$f $F check --ops --backend cuda --filter add > /tmp/warm-$f.log 2>&1 ) &
done
( $B synth --like llama-8b --type Q4_K_M -o /tmp/l8b.gguf > /tmp/synth8b.log 2>&1 ) &
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
$B check --ops --backend cuda > $O/ops-cuda.txt 2>&1
echo "== check --ops --backend cuda: $(tail -1 $O/ops-cuda.txt)"; grep -E " FAIL" $O/ops-cuda.txt | head -5
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf | tail -1
$B synth --like smollm2 --type Q4_1 --layers 4 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol4.gguf | tail -1
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/gemma3.gguf | tail -1
$B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf | tail -1
IDS100=$(python3 -c "import random; random.seed(7); print(','.join(str(random.randrange(1000, 40000)) for _ in range(100)))")
P="The capital of France is Paris. The capital of Germany is"
for m in /tmp/smol.gguf /tmp/gemma3.gguf /tmp/l1b.gguf; do
  echo "== $(basename $m) isolate 13 + 32: $($B diff -m $m --a ref --b cuda -p "$P" --decode 32 --isolate 2>&1 | grep -E '^isolated verdict' | cut -c1-150)"
  echo "== $(basename $m) whole-run diff 13 + 32: $($B diff -m $m --a ref --b cuda -p "$P" --decode 32 2>&1 | grep -E '^verdict' | cut -c1-150)"
done
echo "== gemma3 isolate 100 + 8: $($B diff -m /tmp/gemma3.gguf --a ref --b cuda --ids $IDS100 --decode 8 --isolate 2>&1 | grep -E '^isolated verdict' | cut -c1-150)"
echo "== gemma3 exact 100 + 16: $($B diff -m /tmp/gemma3.gguf --a ref --b cuda-exact --profile exact --ids $IDS100 --decode 16 2>&1 | grep -E '^verdict')"
echo "== check smol4 cuda:"; $B check -m /tmp/smol4.gguf --backend cuda 2>&1 | tail -10
echo "== check smol4 cuda graphs off:"; LOCKSTEP_CUDA_GRAPHS=0 $B check -m /tmp/smol4.gguf --backend cuda 2>&1 | tail -9
echo "== check --deterministic gemma3:"; $B check --deterministic -m /tmp/gemma3.gguf --backend cuda 2>&1 | tail -9
el
wait; tail -1 /tmp/synth8b.log; el
for m in /tmp/smol.gguf /tmp/gemma3.gguf /tmp/l1b.gguf /tmp/l8b.gguf; do
  echo "-- $(basename $m)"; $B bench --backend cuda -m $m -r 3 2>&1 | grep -E "\| (pp|tg)|GPU memory"
done; el
export LOCKSTEP_CUDA_CACHE=/tmp/cubin-faults
for f in $FAULTS; do
  echo "-- $f: $(LOCKSTEP_CUDA_FAULT=$f $F diff -m /tmp/smol4.gguf --a ref --b cuda -p "$P" --decode 4 2>&1 | grep -E "^verdict" | cut -c1-200)"
done
echo "-- mask-drift check: $(LOCKSTEP_CUDA_FAULT=mask-drift $F check -m /tmp/smol4.gguf --backend cuda 2>&1 | grep -A1 'mask vs none' | tail -1 | cut -c1-160)"
el
