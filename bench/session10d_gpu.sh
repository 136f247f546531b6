#!/bin/bash
# Session 10, fourth call (the session's build: one-row mat-vecs, flash prefill attention):
# check --ops (with the long-prefill cases), diff and isolation with prompts of 150 to 200
# tokens (the flash kernels over several 64-key chunks), then the four anchor shapes timed
# (pp512, tg128, -r 3).
set -u
B=${LOCKSTEP:-./.device/lockstep}
O=${OUT:-/tmp/s10d}; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
( $B synth --like llama-8b --type Q4_K_M -o /tmp/l8b.gguf > /tmp/synth8b.log 2>&1 ) &
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf | tail -1
$B synth --like smollm2 --type Q4_1 --layers 4 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol4.gguf | tail -1
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/gemma3.gguf | tail -1
$B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf | tail -1
$B synth --like llama-1b --type Q4_K_M --layers 3 -o /tmp/l1b3.gguf | tail -1
$B synth --like llama-8b --type Q4_K_M --layers 2 -o /tmp/l8b2.gguf | tail -1
el
$B check --ops --backend cuda > $O/ops-cuda.txt 2>&1; echo "== check --ops --backend cuda: $(tail -1 $O/ops-cuda.txt)"
grep -E "long prefill" $O/ops-cuda.txt | grep -v kv_store
el
for mn in smol4:200 l1b3:200 l8b2:150; do
  m=${mn%%:*}; n=${mn##*:}; IDS=$(seq -s, 7 $((n + 6)))
  $B diff -m /tmp/$m.gguf --a ref --b cuda --ids $IDS --decode 4 --isolate > $O/iso-$m.txt 2>&1
  echo "== diff $m ($n + 4) --isolate: rc $? | $(grep -E '^verdict' $O/iso-$m.txt | cut -c1-120) | $(grep -E '^isolated verdict' $O/iso-$m.txt | cut -c1-120)"
  el
done
wait; tail -1 /tmp/synth8b.log
for m in smol gemma3 l1b l8b; do
  echo "-- $m"; $B bench --backend cuda -m /tmp/$m.gguf -r 3 2>&1 | grep -E "\| (pp|tg)|GPU memory"
done; el
