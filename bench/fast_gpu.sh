#!/bin/bash
# GPU run of the cuda backend's fast numerics (`cuda`, quant8) next to its bitwise twin
# (`cuda-exact`): check --ops on both, diff --isolate against the reference (tiny-llama zoo and
# synthesized SmolLM2 / gemma3 / Llama-1B), check (every invariance bitwise) on `cuda`, then
# bench tg128 / pp512 of both modes on synthesized SmolLM2 Q4_1, gemma3 Q4_K_M, Llama-1B Q4_K_M
# and Llama-8B Q4_K_M, and a per-op profile of the 8B decode. Binaries and inputs as for
# bench/verify_gpu.sh (.device/lockstep, .device/tiny/*.gguf, .device/{smollm2,gemma3}-meta.gguf).
# About 7 minutes on an H100 (the 8B synth alone ~90 s on 16 cores).
set -u
B=${LOCKSTEP:-./.device/lockstep}
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
OUT=${OUT:-/tmp/fast_out}
mkdir -p "$OUT"
T0=$(date +%s)
el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader

for be in cuda cuda-exact; do
  echo "== check --ops --backend $be"
  ( time $B check --ops --backend $be ) > $OUT/ops-$be.txt 2>&1; echo "exit $?"
  grep -vE " ok$" $OUT/ops-$be.txt | tail -15; el
done

IDS=1022,829,87,183,242,185,818,888,594,40,96,339,442,634,489,270,163,706,750,33,116,462,399,907
echo "== tiny-llama zoo: diff --a ref --b cuda --decode 32 --isolate"
for f in .device/tiny/*.gguf; do
  $B diff -m $f --a ref --b cuda --ids $IDS --decode 32 --isolate > /tmp/d.txt 2>&1; rc=$?
  echo "$(basename $f) exit $rc: $(grep -E '^verdict|isolat' /tmp/d.txt | head -3 | tr '\n' ' ')"
  cat /tmp/d.txt >> $OUT/zoo.txt
done
el

echo "== synthesized models"
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf | tail -1
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/gemma3.gguf | tail -1
$B synth --like llama-1b --type Q4_K_M --layers 4 -o /tmp/l1b4.gguf | tail -1
$B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf | tail -1
el
# The reference runs on the device's CPU: Llama-1B cut to 4 layers keeps the diff short.
for m in /tmp/smol.gguf /tmp/gemma3.gguf /tmp/l1b4.gguf; do
  ( time timeout 150 $B diff -m $m --a ref --b cuda -p "The capital of France is Paris. The capital of Germany is" --decode 32 --isolate ) > /tmp/d.txt 2>&1; rc=$?
  echo "$(basename $m) exit $rc"; grep -E '^verdict|isolat|worst|^real' /tmp/d.txt | head -6
  cat /tmp/d.txt >> $OUT/models.txt
done
el

echo "== check --backend cuda (every tap, every invariance, bitwise)"
( time timeout 180 $B check -m /tmp/smol.gguf --backend cuda ) > $OUT/check.txt 2>&1; echo "exit $?"; tail -14 $OUT/check.txt
el

echo "== llama-8b synth"
$B synth --like llama-8b --type Q4_K_M -o /tmp/l8b.gguf | tail -1
el

echo "== bench (pp512, tg128, 3 reps): cuda vs cuda-exact"
for m in /tmp/smol.gguf /tmp/gemma3.gguf /tmp/l1b.gguf /tmp/l8b.gguf; do
  for be in cuda cuda-exact; do
    echo "-- $(basename $m) $be"
    timeout 120 $B bench --backend $be -m $m -r 3 > /tmp/b.txt 2>&1; echo "exit $?"
    grep -E "pp512|tg128|error|memory" /tmp/b.txt | tail -4
    { echo "== $m $be"; cat /tmp/b.txt; } >> $OUT/bench.txt
  done
  el
done

echo "== per-op profile, 8B decode (synchronized after every op)"
LOCKSTEP_CUDA_PROFILE=1 timeout 90 $B bench --backend cuda -m /tmp/l8b.gguf -p 0 -n 32 -r 1 > $OUT/profile8b.txt 2>&1
grep -E "matmul|gate_up|quantize|total" $OUT/profile8b.txt | head -8
el
