#!/bin/bash
# Session 10, third call: the flash prefill attention (attention_flash_64/128: TF32 tensor
# cores, 3-term split, f32 online softmax). Checked first: check --ops, check (invariances),
# diff against the reference and its isolation on SmolLM2 / Llama-1B / 8B shapes cut to a few
# layers; then pp512 with it against the tiled kernel (LOCKSTEP_CUDA_ATTN=tile), interleaved,
# and the warps-per-block knob.
set -u
B=${LOCKSTEP:-./.device/lockstep}
O=${OUT:-/tmp/s10c}; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
( $B synth --like llama-8b --type Q4_K_M -o /tmp/l8b.gguf > /tmp/synth8b.log 2>&1 ) &
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf | tail -1
$B synth --like smollm2 --type Q4_1 --layers 4 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol4.gguf | tail -1
$B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf | tail -1
$B synth --like llama-1b --type Q4_K_M --layers 3 -o /tmp/l1b3.gguf | tail -1
$B synth --like llama-8b --type Q4_K_M --layers 2 -o /tmp/l8b2.gguf | tail -1
el
$B check --ops --backend cuda > $O/ops-cuda.txt 2>&1; echo "== check --ops --backend cuda: $(tail -1 $O/ops-cuda.txt)"
grep -iE "attention.*(FAIL|flash)" $O/ops-cuda.txt | head -5
echo "== check smol4 cuda:"; $B check -m /tmp/smol4.gguf --backend cuda 2>&1 | grep -E "^  (ok|FAIL)|result" | tail -9
el
P="The capital of France is Paris. The capital of Germany is Berlin, and the capital of Italy is"
IDS=$(seq -s, 1 40)
for m in smol4 l1b3 l8b2; do
  $B diff -m /tmp/$m.gguf --a ref --b cuda --ids $IDS --decode 8 > $O/diff-$m.txt 2>&1; echo "== diff $m (40 + 8): rc $? $(grep -E '^verdict' $O/diff-$m.txt | cut -c1-200)"
  $B diff -m /tmp/$m.gguf --a ref --b cuda --ids $IDS --decode 8 --isolate > $O/iso-$m.txt 2>&1; echo "   isolate: rc $? $(grep -E '^isolated verdict' $O/iso-$m.txt | cut -c1-200)"
done
el
for m in smol l1b; do
  for round in 1 2; do
    for a in auto tile; do
      echo "-- $m $a: $(LOCKSTEP_CUDA_ATTN=$a $B bench --backend cuda -m /tmp/$m.gguf -p 512 -n 0 -r 3 2>&1 | grep -E '\| pp' | tr -s ' ')"
    done
  done
  for w in 1 2 3 4; do
    echo "-- $m flash warps $w: $(LOCKSTEP_CUDA_FLASH_WARPS=$w $B bench --backend cuda -m /tmp/$m.gguf -p 512 -n 0 -r 3 2>&1 | grep -E '\| pp' | tr -s ' ')"
  done
done
el
wait; tail -1 /tmp/synth8b.log
for round in 1 2; do
  for a in auto tile; do
    echo "-- l8b $a: $(LOCKSTEP_CUDA_ATTN=$a $B bench --backend cuda -m /tmp/l8b.gguf -p 512 -n 0 -r 3 2>&1 | grep -E '\| pp' | tr -s ' ')"
  done
done
el
