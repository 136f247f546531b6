#!/bin/bash
# (The fused kernel this script timed was dropped: it was correct but slower; the knob
# LOCKSTEP_CUDA_QKV_ROPE is gone with it. Kept as the record of the measurement in BENCHMARKS.md.)
# Session 11, sixth call: q, k and v of a decode row with their rotation and K/V store in one
# launch (qkv_rope_store -> mmv3_rope_fast1; heads without per-head norms, adjacent-pair
# rotation: SmolLM2 and Llama), checked bitwise against the two ops (LOCKSTEP_CUDA_QKV_ROPE=0)
# in generations, diff and isolation, check's invariances, then timed against them.
set -u
B=${LOCKSTEP:-./.device/lockstep}
O=${OUT:-/tmp/s11f}; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf | tail -1
$B synth --like smollm2 --type Q4_1 --layers 4 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol4.gguf | tail -1
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/gemma3.gguf | tail -1
$B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf | tail -1
$B synth --like llama-1b --type Q4_K_M --layers 3 -o /tmp/l1b3.gguf | tail -1
$B synth --like llama-8b --type Q4_K_M --layers 2 -o /tmp/l8b2.gguf | tail -1
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
$B bench --backend cuda -m /tmp/smol4.gguf -p 0 -n 4 -r 1 > /dev/null 2>&1
el
P="The capital of France is Paris. The capital of Germany is"
for m in /tmp/smol.gguf /tmp/l1b.gguf /tmp/gemma3.gguf; do
  for t in 0 0.8; do
    $B run -m $m --backend cuda -p "$P" -n 300 --ignore-eos --temp $t > $O/run-new.txt 2>/dev/null
    LOCKSTEP_CUDA_QKV_ROPE=0 $B run -m $m --backend cuda -p "$P" -n 300 --ignore-eos --temp $t > $O/run-base.txt 2>/dev/null
    echo "== $(basename $m) temp $t, 300 tokens: fused vs two ops: $(cmp -s $O/run-new.txt $O/run-base.txt && echo same || echo DIFFER) ($(wc -c < $O/run-new.txt) bytes)"
  done
done; el
for mn in smol4:40:32 l1b3:40:32 l8b2:24:32 smol4:1:40; do
  IFS=: read m n d <<< "$mn"; IDS=$(seq -s, 7 $((n + 6)))
  $B diff -m /tmp/$m.gguf --a ref --b cuda --ids $IDS --decode $d --isolate > $O/iso-$m-$n.txt 2>&1
  echo "== diff $m ($n + $d) --isolate: rc $? | $(grep -E '^verdict' $O/iso-$m-$n.txt | cut -c1-110) | $(grep -E '^isolated verdict' $O/iso-$m-$n.txt | cut -c1-110)"
done; el
$B check -m /tmp/smol4.gguf --backend cuda > $O/check-smol4.txt 2>&1; echo "== check smol4 --backend cuda: rc $?"; grep -E "^\s+(PASS|FAIL)|result" $O/check-smol4.txt | cut -c1-120
el
for m in /tmp/smol.gguf /tmp/l1b.gguf; do
  for round in 1 2; do
    for q in 1 0; do
      echo "-- $(basename $m) QKV_ROPE=$q: $(LOCKSTEP_CUDA_QKV_ROPE=$q $B bench --backend cuda -m $m -p 0 -n 128 -r 3 2>&1 | grep -E '\| tg' | tr -s ' ')"
    done
  done
done; el
