#!/bin/bash
# Session 6 in one device call: the fused decode ops, the tiled attention and the two-units
# mat-vec loop. Correctness first (check --ops, bitwise exact mode, isolation of the fast mode,
# batch invariance and replay, the tiny-llama zoo, the seeded faults), then pp512 / tg128 of
# every anchor shape, tiled attention against the row kernel on the small shapes. Logs in $OUT.
set -u
B=${LOCKSTEP:-./.device/lockstep}
F=${LOCKSTEP_FAULTS:-./.device/lockstep-faults}
O=${OUT:-/tmp/s6}; mkdir -p $O
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
( $B synth --like llama-8b --type Q4_K_M -o /tmp/l8b.gguf > /tmp/synth8b.log 2>&1 ) &
S8=$!
for be in cuda-exact cuda; do
  $B check --ops --backend $be > $O/ops-$be.txt 2>&1
  echo "== check --ops --backend $be: $(tail -1 $O/ops-$be.txt)"; grep -E " FAIL" $O/ops-$be.txt | head -5
done
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf | tail -1
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/gemma3.gguf | tail -1
$B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf | tail -1
IDS100=$(python3 -c "import random; random.seed(7); print(','.join(str(random.randrange(1000, 40000)) for _ in range(100)))")
P="The capital of France is Paris. The capital of Germany is"
for m in /tmp/smol.gguf /tmp/gemma3.gguf; do
  echo "== $(basename $m): diff --b cuda-exact --profile exact, 100 tokens + 16 decode: $($B diff -m $m --a ref --b cuda-exact --profile exact --ids $IDS100 --decode 16 2>&1 | grep -E '^verdict')"
  $B diff -m $m --a ref --b cuda -p "$P" --decode 32 --isolate > $O/iso-$(basename $m).txt 2>&1
  echo "== $(basename $m): diff --b cuda --isolate, 13 tokens + 32 decode (exit $?):"; grep -E "^verdict|^isolated verdict" $O/iso-$(basename $m).txt
  echo "== $(basename $m): check --deterministic: $($B check --deterministic -m $m --backend cuda 2>&1 | tail -1)"
done; el
wait $S8; tail -1 /tmp/synth8b.log
for m in /tmp/smol.gguf /tmp/gemma3.gguf /tmp/l1b.gguf /tmp/l8b.gguf; do
  echo "-- $(basename $m)"; $B bench --backend cuda -m $m -r 3 2>&1 | grep -E "\| (pp|tg)"
done; el
for m in /tmp/smol.gguf /tmp/l1b.gguf; do
  echo "-- $(basename $m) attention=row: $(LOCKSTEP_CUDA_ATTN=row $B bench --backend cuda -m $m -r 2 -n 0 2>&1 | grep -E '\| pp' | tr -s ' ')"
done
IDS=1022,829,87,183,242,185,818,888,594,40,96,339,442,634,489,270,163,706,750,33,116,462,399,907
for f in .device/tiny/*.gguf; do
  r=$($B diff -m $f --a ref --b cuda --ids $IDS --decode 16 --isolate 2>&1 | grep -E "^isolated verdict" | cut -c1-70)
  echo "tiny $(basename $f .gguf | sed 's/tiny-llama-//'): $r"
done; el
$F synth --like smollm2 --type Q4_1 --layers 4 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol4.gguf | tail -1
export LOCKSTEP_CUDA_CACHE=/tmp/cubin-faults
for f in kv-skip-prefill wrong-kv-head kv-view-offset mask-drift; do
  echo "-- $f: $(LOCKSTEP_CUDA_FAULT=$f $F diff -m /tmp/smol4.gguf --a ref --b cuda -p "$P" --decode 4 2>&1 | grep -E "^verdict" | cut -c1-220)"
done
echo "-- q4k-wrong-scale: $(LOCKSTEP_CUDA_FAULT=q4k-wrong-scale $F diff -m .device/tiny/tiny-llama-Q4_K.gguf --a ref --b cuda --ids 1,2,3,4,5,6 --decode 2 2>&1 | grep -E "^verdict" | cut -c1-220)"
echo "-- f16-as-f32: $(LOCKSTEP_CUDA_FAULT=f16-as-f32 $F diff -m .device/tiny/tiny-llama-F16.gguf --a ref --b cuda --ids 1,2,3,4,5,6 --decode 2 2>&1 | grep -E "^verdict" | cut -c1-220)"
echo "-- mask-drift check:"; LOCKSTEP_CUDA_FAULT=mask-drift $F check -m /tmp/smol4.gguf --backend cuda 2>&1 | grep -A1 "mask vs none"
el
