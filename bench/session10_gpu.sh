#!/bin/bash
# Session 10, first call: decode mat-vecs in their own one-row builds (_fast1: no 8-row tile
# paths, so far fewer registers and more warps resident) with the next unit's weights loaded
# before the current unit's dot. Checked first (generations of the new build against the
# session-9 build, bitwise), then tg128 of base / new / new without the prefetch, interleaved,
# on the four anchor shapes. Binaries: .device/lockstep (new), lockstep-base (session 9's
# head), lockstep-nopipe (new, MMV_PIPELINE 0).
set -u
B=${LOCKSTEP:-./.device/lockstep}
O=${OUT:-/tmp/s10}; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
( $B synth --like llama-8b --type Q4_K_M -o /tmp/l8b.gguf > /tmp/synth8b.log 2>&1 ) &
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf | tail -1
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/gemma3.gguf | tail -1
$B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf | tail -1
pids=""
for b in lockstep lockstep-base lockstep-nopipe; do  # compile each build's kernels, in parallel
  LOCKSTEP_CUDA_CACHE=/tmp/cubin-$b ./.device/$b bench --backend cuda -m /tmp/smol.gguf -p 0 -n 4 -r 1 > $O/warm-$b.txt 2>&1 &
  pids="$pids $!"
done; wait $pids
el
P="The capital of France is Paris. The capital of Germany is"
for m in /tmp/smol.gguf /tmp/gemma3.gguf /tmp/l1b.gguf; do
  for t in 0 0.8; do
    LOCKSTEP_CUDA_CACHE=/tmp/cubin-lockstep $B run -m $m --backend cuda -p "$P" -n 300 --ignore-eos --temp $t > $O/run-new.txt 2>/dev/null
    LOCKSTEP_CUDA_CACHE=/tmp/cubin-lockstep-base ./.device/lockstep-base run -m $m --backend cuda -p "$P" -n 300 --ignore-eos --temp $t > $O/run-base.txt 2>/dev/null
    echo "== $(basename $m) temp $t, 300 tokens: new vs base: $(cmp -s $O/run-new.txt $O/run-base.txt && echo same || echo DIFFER) ($(wc -c < $O/run-new.txt) bytes)"
  done
done; el
wait; tail -1 /tmp/synth8b.log
for m in /tmp/smol.gguf /tmp/gemma3.gguf /tmp/l1b.gguf /tmp/l8b.gguf; do
  for round in 1 2; do
    for b in lockstep-base lockstep lockstep-nopipe; do
      echo "-- $(basename $m) $b: $(LOCKSTEP_CUDA_CACHE=/tmp/cubin-$b ./.device/$b bench --backend cuda -m $m -p 0 -n 128 -r 5 2>&1 | grep -E '\| tg' | tr -s ' ')"
    done
  done
done; el
