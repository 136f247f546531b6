#!/bin/bash
# Session 11, first call: the one-row (decode) mat-vecs load their first weights before waiting
# for the kernel before them (GRID_WAIT after the first unit's loads, in the programmatic step
# graph). Checked first (generations of the new build against the session-10 build, bitwise;
# diff and isolation on a cut SmolLM2), then tg128 of base / new interleaved on the four anchor
# shapes. Binaries: .device/lockstep (new), .device/lockstep-base (session 10's head).
set -u
B=${LOCKSTEP:-./.device/lockstep}
O=${OUT:-/tmp/s11}; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
( $B synth --like llama-8b --type Q4_K_M -o /tmp/l8b.gguf > /tmp/synth8b.log 2>&1 ) &
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf | tail -1
$B synth --like smollm2 --type Q4_1 --layers 4 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol4.gguf | tail -1
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/gemma3.gguf | tail -1
$B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf | tail -1
pids=""
for b in lockstep lockstep-base; do  # compile each build's kernels, in parallel
  LOCKSTEP_CUDA_CACHE=/tmp/cubin-$b ./.device/$b bench --backend cuda -m /tmp/smol.gguf -p 0 -n 4 -r 1 > $O/warm-$b.txt 2>&1 &
  pids="$pids $!"
done; wait $pids
el
export LOCKSTEP_CUDA_CACHE=/tmp/cubin-lockstep
P="The capital of France is Paris. The capital of Germany is"
for m in /tmp/smol.gguf /tmp/gemma3.gguf /tmp/l1b.gguf; do
  for t in 0 0.8; do
    $B run -m $m --backend cuda -p "$P" -n 300 --ignore-eos --temp $t > $O/run-new.txt 2>/dev/null
    LOCKSTEP_CUDA_CACHE=/tmp/cubin-lockstep-base ./.device/lockstep-base run -m $m --backend cuda -p "$P" -n 300 --ignore-eos --temp $t > $O/run-base.txt 2>/dev/null
    echo "== $(basename $m) temp $t, 300 tokens: new vs base: $(cmp -s $O/run-new.txt $O/run-base.txt && echo same || echo DIFFER) ($(wc -c < $O/run-new.txt) bytes)"
  done
done; el
$B diff -m /tmp/smol4.gguf --a ref --b cuda --ids $(seq -s, 7 46) --decode 8 --isolate > $O/iso-smol4.txt 2>&1
echo "== diff smol4 (40 + 8) --isolate: rc $? | $(grep -E '^verdict' $O/iso-smol4.txt | cut -c1-120) | $(grep -E '^isolated verdict' $O/iso-smol4.txt | cut -c1-120)"
el
wait; tail -1 /tmp/synth8b.log
for m in /tmp/smol.gguf /tmp/gemma3.gguf /tmp/l1b.gguf /tmp/l8b.gguf; do
  for round in 1 2; do
    for b in lockstep-base lockstep; do
      echo "-- $(basename $m) $b: $(LOCKSTEP_CUDA_CACHE=/tmp/cubin-$b ./.device/$b bench --backend cuda -m $m -p 0 -n 128 -r 3 2>&1 | grep -E '\| tg' | tr -s ' ')"
    done
  done
done; el
