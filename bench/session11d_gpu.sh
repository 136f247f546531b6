#!/bin/bash
# Session 11, fourth call: the short decode attention for heads of 256 (Gemma-3: 4 query heads
# on one KV head, blocks of 512 threads) replaces the split-key kernels on short contexts.
# Faults planted in the short decode kernel localized (one-token prompts: every step is a
# decode step), in the background while the rest runs; check --ops; diff and isolation of a cut
# Gemma-3; tg128 of Gemma-3 with the short decode kernel against LOCKSTEP_CUDA_ATTN=split.
set -u
B=${LOCKSTEP:-./.device/lockstep}
F=${LOCKSTEP_FAULTS:-./.device/lockstep-faults}
O=${OUT:-/tmp/s11d}; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
$B synth --like smollm2 --type Q4_1 --layers 4 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol4.gguf | tail -1
$B synth --like llama-8b --type Q4_K_M --layers 2 -o /tmp/l8b2.gguf | tail -1
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/gemma3.gguf | tail -1
$B synth --like gemma3 --type Q4_K_M --layers 4 --metadata-from .device/gemma3-meta.gguf -o /tmp/gemma3-4.gguf | tail -1
for f in wrong-kv-head kv-view-offset; do
  for m in smol4 l8b2; do
    ( LOCKSTEP_CUDA_CACHE=/tmp/cubin-$f LOCKSTEP_CUDA_FAULT=$f $F diff -m /tmp/$m.gguf --a ref --b cuda --ids 7 --decode 6 > $O/fault-$f-$m.txt 2>&1 ) &
  done
done
( LOCKSTEP_CUDA_CACHE=/tmp/cubin-mask-drift LOCKSTEP_CUDA_FAULT=mask-drift $F check -m /tmp/smol4.gguf --backend cuda > $O/fault-mask-drift.txt 2>&1 ) &
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
$B check --ops --backend cuda > $O/ops-cuda.txt 2>&1; echo "== check --ops --backend cuda: $(tail -1 $O/ops-cuda.txt)"
grep -E "short decode" $O/ops-cuda.txt | grep -v kv_store
el
for mn in gemma3-4:40:32 gemma3-4:7:60; do
  IFS=: read m n d <<< "$mn"; IDS=$(seq -s, 7 $((n + 6)))
  $B diff -m /tmp/$m.gguf --a ref --b cuda --ids $IDS --decode $d --isolate > $O/iso-$m-$n.txt 2>&1
  echo "== diff $m ($n + $d) --isolate: rc $? | $(grep -E '^verdict' $O/iso-$m-$n.txt | cut -c1-110) | $(grep -E '^isolated verdict' $O/iso-$m-$n.txt | cut -c1-110)"
  el
done
for round in 1 2; do
  for a in auto split; do
    echo "-- gemma3 $a: $(LOCKSTEP_CUDA_ATTN=$a $B bench --backend cuda -m /tmp/gemma3.gguf -p 0 -n 128 -r 3 2>&1 | grep -E '\| tg' | tr -s ' ')"
  done
done; el
wait
for f in wrong-kv-head kv-view-offset; do
  for m in smol4 l8b2; do
    echo "== fault $f ($m, 1 + 6): $(grep -E '^verdict' $O/fault-$f-$m.txt | cut -c1-250)"
  done
done
echo "== fault mask-drift (check smol4):"; grep -E "mask|result" $O/fault-mask-drift.txt | head -4
el
