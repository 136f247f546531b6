#!/bin/bash
# GPU verification of the cuda backend: check --ops, diff --isolate (prefill + 32 decode) on the
# tiny-llama zoo and synthesized SmolLM2 / gemma3 shapes, check (invariances on every tap).
set -u
B=${LOCKSTEP:-./.device/lockstep}
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
echo "== check --ops --backend cuda"
( time $B check --ops --backend cuda ) > $OUT/ops.txt 2>&1; echo "exit $?"; tail -8 $OUT/ops.txt
IDS=1022,829,87,183,242,185,818,888,594,40,96,339,442,634,489,270,163,706,750,33,116,462,399,907
echo "== tiny-llama zoo: diff --a ref --b cuda --decode 32 --isolate"
for f in .device/tiny/*.gguf; do
  $B diff -m $f --a ref --b cuda --ids $IDS --decode 32 --isolate > /tmp/d.txt 2>&1; rc=$?
  echo "$(basename $f) exit $rc: $(grep -E '^verdict|isolat' /tmp/d.txt | head -3 | tr '\n' ' ')"
  cat /tmp/d.txt >> $OUT/zoo.txt
done
echo "== synthesized models"
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf | tail -1
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/gemma3.gguf | tail -1
$B synth --like llama-1b --type Q4_K_M --layers 4 -o /tmp/l1b.gguf | tail -1
for m in /tmp/smol.gguf /tmp/gemma3.gguf /tmp/l1b.gguf; do
  ( time $B diff -m $m --a ref --b cuda -p "The capital of France is Paris. The capital of Germany is" --decode 32 --isolate ) > /tmp/d.txt 2>&1; rc=$?
  echo "$(basename $m) exit $rc"; grep -E '^verdict|isolat|^real' /tmp/d.txt | head -6
  cat /tmp/d.txt >> $OUT/models.txt
done
echo "== check --backend cuda (every tap, bitwise)"
( time $B check -m /tmp/smol.gguf --backend cuda ) > $OUT/check.txt 2>&1; echo "exit $?"; tail -14 $OUT/check.txt
