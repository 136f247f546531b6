#!/bin/bash
# After the attention kernel's visible-range / shared-memory change: bitwise checks of the
# exact mode, the fast mode's isolation, then pp512 / tg128 of every anchor shape.
set -u
B=${LOCKSTEP:-./.device/lockstep}
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
for be in cuda-exact cuda; do echo "== check --ops --backend $be: $($B check --ops --backend $be 2>&1 | tail -1)"; done
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf | tail -1
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/gemma3.gguf | tail -1
$B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf | tail -1
IDS100=$(python3 -c "import random; random.seed(7); print(','.join(str(random.randrange(1000, 40000)) for _ in range(100)))")
for m in /tmp/smol.gguf /tmp/gemma3.gguf; do
  echo "== $(basename $m): diff --b cuda-exact --profile exact, 100 tokens + 16 decode"
  $B diff -m $m --a ref --b cuda-exact --profile exact --ids $IDS100 --decode 16 2>&1 | grep -E "^verdict"
  echo "== $(basename $m): diff --b cuda --isolate, 100 tokens + 16 decode"
  $B diff -m $m --a ref --b cuda --ids $IDS100 --decode 16 --isolate 2>&1 | grep -E "^verdict|^isolated verdict"
  echo "== $(basename $m): check --deterministic: $($B check --deterministic -m $m --backend cuda 2>&1 | tail -1)"
done
$B synth --like llama-8b --type Q4_K_M -o /tmp/l8b.gguf | tail -1
for m in /tmp/smol.gguf /tmp/gemma3.gguf /tmp/l1b.gguf /tmp/l8b.gguf; do
  echo "-- $m"; $B bench --backend cuda -m $m -r 3 2>&1 | grep -E "\| (pp|tg)"
done
$B bench --deterministic --backend cuda -m /tmp/l8b.gguf -r 2 -n 0 2>&1 | grep -E "\| (pp|tg)"
