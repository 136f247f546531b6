#!/bin/bash
# Session 8, third call: the split-key attention with its loads issued together (each lane's
# K elements before the products, V eight keys at a time, the spans' maxima staged by the
# combination), spans of at least 16 keys, and `check`'s untapped run compared with the same
# steps tapped. Checked, then timed side by side: split against the kernels it replaces
# (LOCKSTEP_CUDA_ATTN=unsplit), span sizes 8/16/32, the four anchors. Logs in $OUT.
set -u
B=${LOCKSTEP:-./.device/lockstep}
F=${LOCKSTEP_FAULTS:-./.device/lockstep-faults}
O=${OUT:-/tmp/s8c}; mkdir -p $O
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
  echo "== $(basename $m) isolate 1 + 48: $($B diff -m $m --a ref --b cuda --ids 4000 --decode 48 --isolate 2>&1 | grep -E '^isolated verdict' | cut -c1-150)"
done
echo "== smol whole-run diff 13 + 32: $($B diff -m /tmp/smol.gguf --a ref --b cuda -p "$P" --decode 32 2>&1 | grep -E '^verdict' | cut -c1-150)"
el
echo "== check smol4 cuda:"; LOCKSTEP_CUDA_STATS=1 $B check -m /tmp/smol4.gguf --backend cuda 2>&1 | grep -E "^  (ok|FAIL)|result|graphs" | tail -9
echo "== check gemma3 cuda:"; $B check -m /tmp/gemma3.gguf --backend cuda 2>&1 | grep -E "^  (ok|FAIL)|result"
echo "== check --deterministic gemma3: $($B check --deterministic -m /tmp/gemma3.gguf --backend cuda 2>&1 | tail -1)"
el
export LOCKSTEP_CUDA_CACHE=/tmp/cubin-faults
for f in $FAULTS; do
  echo "-- $f (1 + 4, split path): $(LOCKSTEP_CUDA_FAULT=$f $F diff -m /tmp/smol4.gguf --a ref --b cuda --ids 4000 --decode 4 2>&1 | grep -E "^verdict" | cut -c1-200)"
done
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
el
for m in /tmp/smol.gguf /tmp/gemma3.gguf /tmp/l1b.gguf; do
  for k in 8 16 32 u 8 16 32 u; do
    if [ $k = u ]; then e="LOCKSTEP_CUDA_ATTN=unsplit"; else e="LOCKSTEP_CUDA_SPLIT_KEYS=$k"; fi
    echo "-- $(basename $m) $e: $(env $e $B bench --backend cuda -m $m -p 0 -n 128 -r 5 2>&1 | grep -E '\| tg' | tr -s ' ')"
  done
done; el
for m in /tmp/smol.gguf /tmp/gemma3.gguf; do
  for e in LOCKSTEP_CUDA_SPLIT_KEYS=16 LOCKSTEP_CUDA_ATTN=unsplit; do
    echo "-- $(basename $m) $e tg1024: $(env $e $B bench --backend cuda -m $m -p 0 -n 1024 -r 2 2>&1 | grep -E '\| tg' | tr -s ' ')"
  done
done; el
wait; tail -1 /tmp/synth8b.log
for m in /tmp/smol.gguf /tmp/gemma3.gguf /tmp/l1b.gguf /tmp/l8b.gguf; do
  echo "-- $(basename $m)"; $B bench --backend cuda -m $m -r 3 2>&1 | grep -E "\| (pp|tg)|GPU memory"
done; el
echo "-- l8b unsplit: $(LOCKSTEP_CUDA_ATTN=unsplit $B bench --backend cuda -m /tmp/l8b.gguf -p 0 -n 128 -r 3 2>&1 | grep -E '\| tg' | tr -s ' ')"
el
