#!/bin/bash
# Session 23d: the submitted build (logits lent where they land; kernels as session 22): check --ops,
# diff --isolate on cut Llama-1B, Gemma-3 and SmolLM2 and the tiny-llama types with a fast
# kernel, the same tokens as before (the kernels did not change: no faults build this time).
set -u
B=./.device/lockstep
O=${OUT:-/tmp/s23d}; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$B synth --like smollm2 --type Q4_1 --layers 4 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol4.gguf | tail -1
( $B bench --backend cuda -m /tmp/smol4.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 ) &
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf | tail -1
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/gemma3.gguf | tail -1
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf --layers 3 -o /tmp/g3.gguf | tail -1
$B synth --like llama-1b --type Q4_K_M --layers 3 -o /tmp/l1b3.gguf | tail -1
$B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf | tail -1
( $B synth --like llama-8b --type Q4_K_M -o /tmp/l8b.gguf > /dev/null 2>&1 ) &
wait
el
LOCKSTEP_CUDA_STATS=1 $B bench --backend cuda -m /tmp/smol.gguf -p 0 -n 16 -r 1 2>&1 | grep -E 'step graphs' | tr -s ' '
$B check --ops --backend cuda > $O/ops.txt 2>&1; echo "== check --ops --backend cuda: rc $? $(tail -1 $O/ops.txt)"
grep -E 'FAIL' $O/ops.txt | head -8
for m in l1b3 g3 smol4; do
  $B diff -m /tmp/$m.gguf --a ref --b cuda --ids $(seq -s, 7 46) --decode 32 --isolate > $O/iso-$m.txt 2>&1
  echo "== diff $m (40 + 32) --isolate: rc $? | $(grep -E '^isolated verdict|^verdict' $O/iso-$m.txt | head -2 | cut -c1-110 | tr '\n' '|')"
done
IDS=1022,829,87,183,242,185,818,888,594,40,96,339,442,634,489,270,163,706,750,33,116,462,399,907
for t in Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q4_K Q5_K Q6_K; do
  $B diff -m .device/tiny/tiny-llama-$t.gguf --a ref --b cuda --ids $IDS --decode 32 --isolate > $O/zoo-$t.txt 2>&1
  echo "== tiny-llama $t --isolate: rc $? | $(grep -E '^isolated verdict|^verdict' $O/zoo-$t.txt | head -2 | cut -c1-90 | tr '\n' '|')"
done
el
for m in smol gemma3 l1b l8b; do
  a=$($B run --backend cuda -m /tmp/$m.gguf -p "The quick brown fox" -n 48 --temp 0 2>/dev/null | md5sum | cut -c1-12)
  b=$($B run --backend cuda -m /tmp/$m.gguf -p "Once upon a time" -n 48 --top-k 40 --seed 7 2>/dev/null | md5sum | cut -c1-12)
  echo "$m greedy $a top-k $b"
done
el
