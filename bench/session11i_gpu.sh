#!/bin/bash
# (The kernel this script timed was dropped: bitwise the same, no faster; LOCKSTEP_CUDA_MMV_STRIDE
# is gone with it. Kept as the record of the measurement in BENCHMARKS.md.)
# Session 11, another call: LM heads (tens of thousands of rows) in mmv_long_fast1, whose warps
# stride over the rows in one wave of blocks, against mmv_fast1's block per 4 rows
# (LOCKSTEP_CUDA_MMV_STRIDE=0, same binary): generations bitwise, diff and isolation, then
# tg128 interleaved on the four anchor shapes (models synthesized first, nothing in the
# background).
set -u
B=${LOCKSTEP:-./.device/lockstep}
O=${OUT:-/tmp/s11i}; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf | tail -1
$B synth --like smollm2 --type Q4_1 --layers 4 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol4.gguf | tail -1
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/gemma3.gguf | tail -1
$B synth --like gemma3 --type Q4_K_M --layers 4 --metadata-from .device/gemma3-meta.gguf -o /tmp/gemma3-4.gguf | tail -1
$B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf | tail -1
$B synth --like llama-8b --type Q4_K_M -o /tmp/l8b.gguf | tail -1
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
$B bench --backend cuda -m /tmp/smol4.gguf -p 0 -n 4 -r 1 > /dev/null 2>&1
el
P="The capital of France is Paris. The capital of Germany is"
for m in /tmp/smol.gguf /tmp/gemma3.gguf; do
  for t in 0 0.8; do
    $B run -m $m --backend cuda -p "$P" -n 300 --ignore-eos --temp $t > $O/run-new.txt 2>/dev/null
    LOCKSTEP_CUDA_MMV_STRIDE=0 $B run -m $m --backend cuda -p "$P" -n 300 --ignore-eos --temp $t > $O/run-base.txt 2>/dev/null
    echo "== $(basename $m) temp $t, 300 tokens: long vs block-per-4-rows: $(cmp -s $O/run-new.txt $O/run-base.txt && echo same || echo DIFFER) ($(wc -c < $O/run-new.txt) bytes)"
  done
done; el
for mn in smol4:40:8 gemma3-4:40:8; do
  IFS=: read m n d <<< "$mn"; IDS=$(seq -s, 7 $((n + 6)))
  $B diff -m /tmp/$m.gguf --a ref --b cuda --ids $IDS --decode $d --isolate > $O/iso-$m-$n.txt 2>&1
  echo "== diff $m ($n + $d) --isolate: rc $? | $(grep -E '^verdict' $O/iso-$m-$n.txt | cut -c1-110) | $(grep -E '^isolated verdict' $O/iso-$m-$n.txt | cut -c1-110)"
done; el
for m in smol gemma3 l1b l8b; do
  for round in 1 2; do
    for q in 1 0; do
      echo "-- $m STRIDE=$q: $(LOCKSTEP_CUDA_MMV_STRIDE=$q $B bench --backend cuda -m /tmp/$m.gguf -p 0 -n 128 -r 5 2>&1 | grep -E '\| tg' | tr -s ' ')"
    done
  done
done; el
