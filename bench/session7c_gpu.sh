#!/bin/bash
# Session 7, third call: the build with the faster f16 weight decoding (`deq8`), the decode
# attention chosen by head size, and the row attention kernel quantizing its own output.
# Checked (check --ops, exact, isolation over a 100-token prefill and over 32 decode steps,
# invariances, the attention faults) and timed (the four anchors), then Nsight Compute
# breakdowns of Llama-1B pp512 and decode. Logs in $OUT.
set -u
B=${LOCKSTEP:-./.device/lockstep}
F=${LOCKSTEP_FAULTS:-./.device/lockstep-faults}
O=${OUT:-/tmp/s7c}; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
FAULTS="kv-skip-prefill wrong-kv-head kv-view-offset mask-drift"
for f in $FAULTS; do
  ( LOCKSTEP_CUDA_CACHE=/tmp/cubin-faults LOCKSTEP_CUDA_FAULT=$f $F check --ops --backend cuda --filter add > /tmp/warm-$f.log 2>&1 ) &
done
( $B synth --like llama-8b --type Q4_K_M -o /tmp/l8b.gguf > /tmp/synth8b.log 2>&1 ) &
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
for be in cuda cuda-exact; do
  $B check --ops --backend $be > $O/ops-$be.txt 2>&1
  echo "== check --ops --backend $be: $(tail -1 $O/ops-$be.txt)"; grep -E " FAIL" $O/ops-$be.txt | head -5
done
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf | tail -1
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/gemma3.gguf | tail -1
$B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf | tail -1
IDS100=$(python3 -c "import random; random.seed(7); print(','.join(str(random.randrange(1000, 40000)) for _ in range(100)))")
P="The capital of France is Paris. The capital of Germany is"
for m in /tmp/smol.gguf /tmp/gemma3.gguf /tmp/l1b.gguf; do
  echo "== $(basename $m) isolate 100 + 8: $($B diff -m $m --a ref --b cuda --ids $IDS100 --decode 8 --isolate 2>&1 | grep -E '^isolated verdict' | cut -c1-150)"
  echo "== $(basename $m) isolate 13 + 32: $($B diff -m $m --a ref --b cuda -p "$P" --decode 32 --isolate 2>&1 | grep -E '^isolated verdict' | cut -c1-150)"
  echo "== $(basename $m) whole-run diff 13 + 32: $($B diff -m $m --a ref --b cuda -p "$P" --decode 32 2>&1 | grep -E '^verdict' | cut -c1-150)"
done
for m in /tmp/smol.gguf /tmp/gemma3.gguf; do
  echo "== $(basename $m): exact 100 + 16: $($B diff -m $m --a ref --b cuda-exact --profile exact --ids $IDS100 --decode 16 2>&1 | grep -E '^verdict')"
  echo "== $(basename $m): check: $($B check -m $m --backend cuda 2>&1 | tail -1)"
  echo "== $(basename $m): check --deterministic: $($B check --deterministic -m $m --backend cuda 2>&1 | tail -1)"
done; el
IDS=1022,829,87,183,242,185,818,888,594,40,96,339,442,634,489,270,163,706,750,33,116,462,399,907
for f in .device/tiny/*.gguf; do
  echo "tiny $(basename $f .gguf | sed 's/tiny-llama-//'): $($B diff -m $f --a ref --b cuda --ids $IDS --decode 8 --isolate 2>&1 | grep -E '^isolated verdict' | cut -c1-70)"
done; el
wait; tail -1 /tmp/synth8b.log; el
for m in /tmp/smol.gguf /tmp/gemma3.gguf /tmp/l1b.gguf /tmp/l8b.gguf; do
  echo "-- $(basename $m)"; $B bench --backend cuda -m $m -r 3 2>&1 | grep -E "\| (pp|tg)|memory"
done; el
echo "== l8b isolate 100 + 4: $($B diff -m /tmp/l8b.gguf --a ref --b cuda --ids $IDS100 --decode 4 --isolate 2>&1 | grep -E '^isolated verdict' | cut -c1-150)"; el
export LOCKSTEP_CUDA_CACHE=/tmp/cubin-faults
$F synth --like smollm2 --type Q4_1 --layers 4 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol4.gguf | tail -1
for f in kv-skip-prefill wrong-kv-head kv-view-offset mask-drift; do
  echo "-- $f: $(LOCKSTEP_CUDA_FAULT=$f $F diff -m /tmp/smol4.gguf --a ref --b cuda -p "$P" --decode 4 2>&1 | grep -E "^verdict" | cut -c1-200)"
done
echo "-- mask-drift check: $(LOCKSTEP_CUDA_FAULT=mask-drift $F check -m /tmp/smol4.gguf --backend cuda 2>&1 | grep -A1 'mask vs none' | tail -1 | cut -c1-160)"
el
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
echo "== ncu pp512 l8b"; bash bench/ncu_prefill.sh /tmp/l8b.gguf 400 2>&1 | tail -12; el
echo "== ncu decode l1b"; bash bench/ncu_decode.sh /tmp/l1b.gguf 600 3000 2>&1 | tail -14; el
