#!/bin/bash
# Session 11, fifth call: the one-row fused gate/up that also quantizes its activation for the
# down projection (gate_up_q8_fast1: 32-row blocks, SmolLM2's and Gemma-3's feed-forwards),
# checked bitwise against the separate quantizer (LOCKSTEP_CUDA_GATE_UP_Q8=0) in generations,
# diff and isolation, timed against it; the RoPE walk-back of the diff verdict rerun on the
# device (a seeded Q4_K scale fault on one-token prompts); then the session's figures: pp512
# and tg128 on the four anchor shapes.
set -u
B=${LOCKSTEP:-./.device/lockstep}
F=${LOCKSTEP_FAULTS:-./.device/lockstep-faults}
O=${OUT:-/tmp/s11e}; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
( $B synth --like llama-8b --type Q4_K_M -o /tmp/l8b.gguf > /tmp/synth8b.log 2>&1 ) &
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf | tail -1
$B synth --like smollm2 --type Q4_1 --layers 4 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol4.gguf | tail -1
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/gemma3.gguf | tail -1
$B synth --like gemma3 --type Q4_K_M --layers 4 --metadata-from .device/gemma3-meta.gguf -o /tmp/gemma3-4.gguf | tail -1
$B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf | tail -1
$B synth --like llama-1b --type Q4_K_M --layers 3 -o /tmp/l1b3.gguf | tail -1
for m in l1b3; do
  ( LOCKSTEP_CUDA_CACHE=/tmp/cubin-q4k LOCKSTEP_CUDA_FAULT=q4k-wrong-scale $F diff -m /tmp/$m.gguf --a ref --b cuda --ids 7 --decode 4 > $O/fault-q4k-$m.txt 2>&1 ) &
done
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
$B bench --backend cuda -m /tmp/smol4.gguf -p 0 -n 4 -r 1 > /dev/null 2>&1
el
P="The capital of France is Paris. The capital of Germany is"
for m in /tmp/smol.gguf /tmp/gemma3.gguf; do
  for t in 0 0.8; do
    $B run -m $m --backend cuda -p "$P" -n 300 --ignore-eos --temp $t > $O/run-new.txt 2>/dev/null
    LOCKSTEP_CUDA_GATE_UP_Q8=0 $B run -m $m --backend cuda -p "$P" -n 300 --ignore-eos --temp $t > $O/run-base.txt 2>/dev/null
    echo "== $(basename $m) temp $t, 300 tokens: fused q8 vs separate quantizer: $(cmp -s $O/run-new.txt $O/run-base.txt && echo same || echo DIFFER) ($(wc -c < $O/run-new.txt) bytes)"
  done
done; el
for mn in smol4:40:32 gemma3-4:40:32; do
  IFS=: read m n d <<< "$mn"; IDS=$(seq -s, 7 $((n + 6)))
  $B diff -m /tmp/$m.gguf --a ref --b cuda --ids $IDS --decode $d --isolate > $O/iso-$m-$n.txt 2>&1
  echo "== diff $m ($n + $d) --isolate: rc $? | $(grep -E '^verdict' $O/iso-$m-$n.txt | cut -c1-110) | $(grep -E '^isolated verdict' $O/iso-$m-$n.txt | cut -c1-110)"
done; el
$B check --ops --backend cuda > $O/ops-cuda.txt 2>&1; echo "== check --ops --backend cuda: $(tail -1 $O/ops-cuda.txt)"
for m in /tmp/smol.gguf /tmp/gemma3.gguf; do
  for round in 1 2; do
    for q in 1 0; do
      echo "-- $(basename $m) GATE_UP_Q8=$q: $(LOCKSTEP_CUDA_GATE_UP_Q8=$q $B bench --backend cuda -m $m -p 0 -n 128 -r 3 2>&1 | grep -E '\| tg' | tr -s ' ')"
    done
  done
done; el
wait; tail -1 /tmp/synth8b.log
echo "== fault q4k-wrong-scale (l1b3, 1 + 4): $(grep -E '^verdict' $O/fault-q4k-l1b3.txt | cut -c1-300)"
for m in smol gemma3 l1b l8b; do
  echo "-- $m"; $B bench --backend cuda -m /tmp/$m.gguf -r 3 2>&1 | grep -E "\| (pp|tg)|GPU memory"
done; el
