#!/bin/bash
# Session 6's fused decode ops (rms_norm + quantizer, add + rms_norm, q/k/v in one launch,
# per-head norms + rope + KV store): correctness first (check --ops, bitwise exact mode,
# isolation of the fast mode, batch invariance and replay, the seeded faults), then pp512 /
# tg128 of every anchor shape. Logs to $OUT when set.
set -u
B=${LOCKSTEP:-./.device/lockstep}
F=${LOCKSTEP_FAULTS:-./.device/lockstep-faults}
O=${OUT:-/tmp}
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
( $B synth --like llama-8b --type Q4_K_M -o /tmp/l8b.gguf > /tmp/synth8b.log 2>&1 ) &
S8=$!
for be in cuda-exact cuda; do
  $B check --ops --backend $be > $O/ops-$be.txt 2>&1
  echo "== check --ops --backend $be: $(tail -1 $O/ops-$be.txt)"
  grep -E "FAIL" $O/ops-$be.txt | head -5
done
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf | tail -1
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/gemma3.gguf | tail -1
$B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf | tail -1
IDS100=$(python3 -c "import random; random.seed(7); print(','.join(str(random.randrange(1000, 40000)) for _ in range(100)))")
for m in /tmp/smol.gguf /tmp/gemma3.gguf; do
  echo "== $(basename $m): diff --b cuda-exact --profile exact, 100 tokens + 16 decode"
  $B diff -m $m --a ref --b cuda-exact --profile exact --ids $IDS100 --decode 16 2>&1 | grep -E "^verdict"
  echo "== $(basename $m): diff --b cuda --isolate, 13 tokens + 32 decode"
  $B diff -m $m --a ref --b cuda -p "The capital of France is Paris. The capital of Germany is" --decode 32 --isolate 2>&1 | grep -E "^verdict|^isolated verdict"
  echo "== $(basename $m): check --deterministic: $($B check --deterministic -m $m --backend cuda 2>&1 | tail -1)"
done
for f in .device/tiny/*.gguf; do
  r=$($B diff -m $f --a ref --b cuda --ids 1,2,3,4,5,6,7,8,9,10,11,12 --decode 8 --isolate 2>&1 | grep -E "^isolated verdict" | cut -c1-60)
  echo "tiny $(basename $f .gguf | sed 's/tiny-llama-//'): $r"
done
echo "== faults"
$F synth --like smollm2 --type Q4_1 --layers 4 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol4.gguf | tail -1
P="The capital of France is Paris. The capital of Germany is"
for f in kv-skip-prefill wrong-kv-head kv-view-offset; do
  echo "-- $f: $(LOCKSTEP_CUDA_FAULT=$f $F diff -m /tmp/smol4.gguf --a ref --b cuda -p "$P" --decode 4 2>&1 | grep -E "^verdict" | cut -c1-200)"
done
echo "-- q4k-wrong-scale: $(LOCKSTEP_CUDA_FAULT=q4k-wrong-scale $F diff -m .device/tiny/tiny-llama-Q4_K.gguf --a ref --b cuda --ids 1,2,3,4,5,6 --decode 2 2>&1 | grep -E "^verdict" | cut -c1-200)"
echo "-- f16-as-f32: $(LOCKSTEP_CUDA_FAULT=f16-as-f32 $F diff -m .device/tiny/tiny-llama-F16.gguf --a ref --b cuda --ids 1,2,3,4,5,6 --decode 2 2>&1 | grep -E "^verdict" | cut -c1-200)"
echo "-- mask-drift: $(LOCKSTEP_CUDA_FAULT=mask-drift $F check -m /tmp/smol4.gguf --backend cuda 2>&1 | grep -E "first break" | head -1 | cut -c1-200)"
wait $S8; tail -1 /tmp/synth8b.log
for m in /tmp/smol.gguf /tmp/gemma3.gguf /tmp/l1b.gguf /tmp/l8b.gguf; do
  echo "-- $(basename $m)"; $B bench --backend cuda -m $m -r 3 2>&1 | grep -E "\| (pp|tg)"
done
