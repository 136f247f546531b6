#!/bin/bash
# GPU verification of the cuda backend in all three modes: `cuda` (fast quant8 mat-vecs, TF32
# tensor-core prefill, step graphs), `cuda-det` (--deterministic: no tensor-core path) and
# `cuda-exact` (bitwise the reference). Reference on the device's CPU.
set -u
B=${LOCKSTEP:-./.device/lockstep}
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for be in cuda cuda-exact; do
  echo "== check --ops --backend $be"; $B check --ops --backend $be > $OUT/ops-$be.txt 2>&1; echo "exit $?"; tail -1 $OUT/ops-$be.txt; el
done
IDS=1022,829,87,183,242,185,818,888,594,40,96,339,442,634,489,270,163,706,750,33,116,462,399,907
echo "== tiny-llama zoo: diff --a ref --b cuda --decode 32 --isolate"
for f in .device/tiny/*.gguf; do
  $B diff -m $f --a ref --b cuda --ids $IDS --decode 32 --isolate > /tmp/d.txt 2>&1; rc=$?
  echo "$(basename $f) exit $rc: $(grep -E '^verdict|^isolated verdict' /tmp/d.txt | cut -c1-90 | tr '\n' ' ')"
  cat /tmp/d.txt >> $OUT/zoo.txt
done; el
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf | tail -1
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/gemma3.gguf | tail -1
$B synth --like llama-1b --type Q4_K_M --layers 4 -o /tmp/l1b4.gguf | tail -1
IDS100=$(python3 -c "import random; random.seed(7); print(','.join(str(random.randrange(1000, 40000)) for _ in range(100)))")
for m in /tmp/smol.gguf /tmp/gemma3.gguf /tmp/l1b4.gguf; do
  echo "== $(basename $m): diff --b cuda, 13-token prompt + 32 decode, --isolate"
  $B diff -m $m --a ref --b cuda -p "The capital of France is Paris. The capital of Germany is" --decode 32 --isolate > /tmp/d.txt 2>&1; echo "exit $?"
  grep -E '^verdict|^isolated verdict|^isolated ops' /tmp/d.txt | cut -c1-200; cat /tmp/d.txt >> $OUT/models.txt
done; el
for m in /tmp/smol.gguf /tmp/gemma3.gguf; do
  echo "== $(basename $m): diff --b cuda, 100-token prompt (TF32 prefill) + 8 decode, --isolate"
  $B diff -m $m --a ref --b cuda --ids $IDS100 --decode 8 --isolate > /tmp/d.txt 2>&1; echo "exit $?"
  grep -E '^verdict|^isolated verdict|^isolated ops|matmul' /tmp/d.txt | cut -c1-200 | head -5; cat /tmp/d.txt >> $OUT/models.txt
done; el
for m in /tmp/smol.gguf /tmp/gemma3.gguf; do
  echo "== $(basename $m): check --deterministic --backend cuda (every tap, every invariance)"
  LOCKSTEP_CUDA_STATS=1 $B check --deterministic -m $m --backend cuda > /tmp/c.txt 2>&1; echo "exit $?"; grep -E "^  |result|graphs" /tmp/c.txt | tail -10
done; el
