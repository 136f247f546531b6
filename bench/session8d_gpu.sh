#!/bin/bash
# Session 8, final call: the submitted build. Split-key attention for decode steps with heads of
# more than 128 values, or whose longest sequence has 128 keys or more (the context class is
# part of the step graphs' key); spans of at least 8 keys. Checked (check --ops, isolation on
# the row and split paths, whole-run diffs, invariances, exact mode, faults on the split path),
# then timed side by side: the four anchors, tg1024, and the kernels it replaces. Logs in $OUT.
set -u
B=${LOCKSTEP:-./.device/lockstep}
F=${LOCKSTEP_FAULTS:-./.device/lockstep-faults}
O=${OUT:-/tmp/s8d}; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
FAULTS="wrong-kv-head kv-view-offset"
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
P="The capital of France is Paris. The capital of Germany is"
for m in /tmp/smol.gguf /tmp/gemma3.gguf /tmp/l1b.gguf; do
  echo "== $(basename $m) isolate 13 + 32: $($B diff -m $m --a ref --b cuda -p "$P" --decode 32 --isolate 2>&1 | grep -E '^isolated verdict' | cut -c1-150)"
done
echo "== gemma3 isolate 1 + 48 (split): $($B diff -m /tmp/gemma3.gguf --a ref --b cuda --ids 4000 --decode 48 --isolate 2>&1 | grep -E '^isolated verdict' | cut -c1-150)"
echo "== smol4 isolate 1 + 160 (row, then split from 128 keys): $($B diff -m /tmp/smol4.gguf --a ref --b cuda --ids 4000 --decode 160 --isolate 2>&1 | grep -E '^isolated verdict' | cut -c1-150)"
echo "== gemma3 whole-run diff 13 + 32: $($B diff -m /tmp/gemma3.gguf --a ref --b cuda -p "$P" --decode 32 2>&1 | grep -E '^verdict' | cut -c1-150)"
echo "== smol4 whole-run diff 1 + 160: $($B diff -m /tmp/smol4.gguf --a ref --b cuda --ids 4000 --decode 160 2>&1 | grep -E '^verdict' | cut -c1-150)"
IDS100=$(python3 -c "import random; random.seed(7); print(','.join(str(random.randrange(1000, 40000)) for _ in range(100)))")
echo "== gemma3 exact 100 + 16: $($B diff -m /tmp/gemma3.gguf --a ref --b cuda-exact --profile exact --ids $IDS100 --decode 16 2>&1 | grep -E '^verdict')"
el
echo "== check smol4 cuda:"; LOCKSTEP_CUDA_STATS=1 $B check -m /tmp/smol4.gguf --backend cuda 2>&1 | grep -E "^  (ok|FAIL)|result|graphs" | tail -9
echo "== check gemma3 cuda:"; $B check -m /tmp/gemma3.gguf --backend cuda 2>&1 | grep -E "^  (ok|FAIL)|result"
echo "== check --deterministic gemma3: $($B check --deterministic -m /tmp/gemma3.gguf --backend cuda 2>&1 | tail -1)"
el
export LOCKSTEP_CUDA_CACHE=/tmp/cubin-faults
for f in $FAULTS; do
  echo "-- $f (1 + 4, split forced): $(LOCKSTEP_CUDA_ATTN=split LOCKSTEP_CUDA_FAULT=$f $F diff -m /tmp/smol4.gguf --a ref --b cuda --ids 4000 --decode 4 2>&1 | grep -E "^verdict" | cut -c1-200)"
done
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
el
for m in /tmp/smol.gguf /tmp/gemma3.gguf /tmp/l1b.gguf; do
  for e in LOCKSTEP_CUDA_ATTN=auto LOCKSTEP_CUDA_ATTN=unsplit LOCKSTEP_CUDA_ATTN=auto LOCKSTEP_CUDA_ATTN=unsplit; do
    echo "-- $(basename $m) $e: $(env $e $B bench --backend cuda -m $m -p 0 -n 128 -r 5 2>&1 | grep -E '\| tg' | tr -s ' ')"
  done
  for e in LOCKSTEP_CUDA_ATTN=auto LOCKSTEP_CUDA_ATTN=unsplit; do
    echo "-- $(basename $m) $e tg256: $(env $e $B bench --backend cuda -m $m -p 0 -n 256 -r 3 2>&1 | grep -E '\| tg' | tr -s ' ')"
    echo "-- $(basename $m) $e tg1024: $(env $e $B bench --backend cuda -m $m -p 0 -n 1024 -r 2 2>&1 | grep -E '\| tg' | tr -s ' ')"
  done
done; el
wait; tail -1 /tmp/synth8b.log
for m in /tmp/smol.gguf /tmp/gemma3.gguf /tmp/l1b.gguf /tmp/l8b.gguf; do
  echo "-- $(basename $m)"; $B bench --backend cuda -m $m -r 3 2>&1 | grep -E "\| (pp|tg)|GPU memory"
done; el
for e in LOCKSTEP_CUDA_ATTN=auto LOCKSTEP_CUDA_ATTN=unsplit; do
  echo "-- l8b $e tg1024: $(env $e $B bench --backend cuda -m /tmp/l8b.gguf -p 0 -n 1024 -r 1 2>&1 | grep -E '\| tg' | tr -s ' ')"
done; el
