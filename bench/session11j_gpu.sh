#!/bin/bash
# Session 11, review recheck: the attention kernels' seeded kv-view-offset and mask-drift faults
# planted once (att_layer_base, att_score_path) and the short decode and flash launches built
# by one host branch. check --ops, diff and isolation through both kernels, tg128/pp512 on
# SmolLM2, and the three attention faults localized in the decode kernel (one-token prompts)
# and the flash kernel (13-token prompt).
set -u
B=${LOCKSTEP:-./.device/lockstep}
F=${LOCKSTEP_FAULTS:-./.device/lockstep-faults}
O=${OUT:-/tmp/s11j}; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf | tail -1
$B synth --like smollm2 --type Q4_1 --layers 4 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol4.gguf | tail -1
$B synth --like llama-8b --type Q4_K_M --layers 2 -o /tmp/l8b2.gguf | tail -1
P="The capital of France is Paris. The capital of Germany is"
for f in wrong-kv-head kv-view-offset; do
  ( export LOCKSTEP_CUDA_CACHE=/tmp/cubin-$f LOCKSTEP_CUDA_FAULT=$f
    $F diff -m /tmp/smol4.gguf --a ref --b cuda --ids 7 --decode 4 > $O/fault-$f-decode.txt 2>&1
    $F diff -m /tmp/smol4.gguf --a ref --b cuda -p "$P" --decode 4 > $O/fault-$f-flash.txt 2>&1 ) &
done
( LOCKSTEP_CUDA_CACHE=/tmp/cubin-mask-drift LOCKSTEP_CUDA_FAULT=mask-drift $F check -m /tmp/smol4.gguf --backend cuda > $O/fault-mask-drift.txt 2>&1 ) &
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
$B check --ops --backend cuda > $O/ops-cuda.txt 2>&1; echo "== check --ops --backend cuda: $(tail -1 $O/ops-cuda.txt)"
for mn in smol4:200:32 l8b2:100:20; do
  IFS=: read m n d <<< "$mn"; IDS=$(seq -s, 7 $((n + 6)))
  $B diff -m /tmp/$m.gguf --a ref --b cuda --ids $IDS --decode $d --isolate > $O/iso-$m-$n.txt 2>&1
  echo "== diff $m ($n + $d) --isolate: rc $? | $(grep -E '^verdict' $O/iso-$m-$n.txt | cut -c1-110) | $(grep -E '^isolated verdict' $O/iso-$m-$n.txt | cut -c1-110)"
done; el
wait
echo "-- smol: $($B bench --backend cuda -m /tmp/smol.gguf -r 3 2>&1 | grep -E '\| (pp|tg)' | tr -s ' ' | tr '\n' ' ')"
for f in wrong-kv-head kv-view-offset; do
  for k in decode flash; do
    echo "== fault $f ($k): $(grep -E '^verdict' $O/fault-$f-$k.txt | cut -c1-200)"
  done
done
echo "== fault mask-drift (check smol4):"; grep -E "all-true|first break|result" $O/fault-mask-drift.txt | head -3
el
