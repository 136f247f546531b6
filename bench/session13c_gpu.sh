#!/bin/bash
# Session 13: the warp-staged loads kept for Q6_K only (session13b: the 32-value types' one-pass
# rows lost, Gemma-3 slower), and the tile path's one-row remainder fixed (its activation row).
# check --ops, diff/isolation, check's invariances, greedy generations against the session's
# start, then tg128 alternately against it (.device/lockstep-base).
# Build: f3282b5 + bench/session13/staged.patch (Q6_K only), as .device/lockstep; not kept.
set -u
B=${LOCKSTEP:-./.device/lockstep}
BB=./.device/lockstep-base
O=${OUT:-/tmp/s13c}; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf | tail -1
$B synth --like smollm2 --type Q4_1 --layers 4 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol4.gguf | tail -1
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/gemma3.gguf | tail -1
$B synth --like gemma3 --type Q4_K_M --layers 4 --metadata-from .device/gemma3-meta.gguf -o /tmp/gemma3-4.gguf | tail -1
$B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf | tail -1
$B synth --like llama-1b --type Q4_K_M --layers 3 -o /tmp/l1b3.gguf | tail -1
$B synth --like llama-8b --type Q4_K_M --layers 2 -o /tmp/l8b2.gguf | tail -1
( $B synth --like llama-8b --type Q4_K_M -o /tmp/l8b.gguf > /dev/null 2>&1 ) &
( LOCKSTEP_CUDA_CACHE=/tmp/cubin-base $BB bench --backend cuda -m /tmp/smol.gguf -p 0 -n 4 -r 1 > /dev/null 2>&1 ) &
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
$B check --ops --backend cuda > $O/ops-cuda.txt 2>&1; echo "== check --ops --backend cuda: $(tail -1 $O/ops-cuda.txt)"
grep -E "FAIL" $O/ops-cuda.txt | head -5
grep -E "matmul.*x \[1, 4864\].*Q6_K|matmul.*x \[7, 768\].*Q6_K" $O/ops-cuda.txt | tr -s ' ' | cut -c1-150
el
for mn in smol4:40:32 gemma3-4:40:32 l1b3:40:32 l8b2:24:32; do
  IFS=: read m n d <<< "$mn"; IDS=$(seq -s, 7 $((n + 6)))
  $B diff -m /tmp/$m.gguf --a ref --b cuda --ids $IDS --decode $d --isolate > $O/iso-$m.txt 2>&1
  echo "== diff $m ($n + $d) --isolate: rc $? | $(grep -E '^verdict' $O/iso-$m.txt | cut -c1-110) | $(grep -E '^isolated verdict' $O/iso-$m.txt | cut -c1-110)"
done
for t in Q6_K Q4_K Q8_0; do
  $B diff -m .device/tiny/tiny-llama-$t.gguf --a ref --b cuda --ids $(seq -s, 7 30) --decode 8 --isolate > $O/iso-tiny-$t.txt 2>&1
  echo "== diff tiny-llama $t (24 + 8) --isolate: rc $? | $(grep -E '^isolated verdict' $O/iso-tiny-$t.txt | cut -c1-100)"
done; el
for m in smol4 gemma3-4 l1b3; do
  $B check -m /tmp/$m.gguf --backend cuda > $O/c-$m.txt 2>&1
  echo "== check $m: $(grep -E '^  (ok|FAIL)' $O/c-$m.txt | tr -s ' ' | cut -c1-60 | tr '\n' '|')"
done
$B check -m /tmp/l1b3.gguf --backend cuda --deterministic > $O/c-det.txt 2>&1
echo "== check l1b3 --deterministic: $(grep -E '^  (ok|FAIL)' $O/c-det.txt | tr -s ' ' | cut -c1-60 | tr '\n' '|')"; el
P="The capital of France is Paris. The capital of Germany is"
for m in smol gemma3 l1b; do
  $B run -m /tmp/$m.gguf --backend cuda -p "$P" -n 200 --ignore-eos --temp 0 > $O/run-new.txt 2>/dev/null
  LOCKSTEP_CUDA_CACHE=/tmp/cubin-base $BB run -m /tmp/$m.gguf --backend cuda -p "$P" -n 200 --ignore-eos --temp 0 > $O/run-base.txt 2>/dev/null
  echo "== $m greedy 200 tokens, new vs base: $(cmp -s $O/run-new.txt $O/run-base.txt && echo same || echo DIFFER) ($(wc -c < $O/run-new.txt) bytes)"
done; el
wait
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv,noheader
for m in l8b l1b gemma3 smol; do
  for pass in 1 2; do
    echo "-- $m new : $($B bench --backend cuda -m /tmp/$m.gguf -p 0 -n 128 -r 10 2>&1 | grep -E '\| tg' | tr -s ' ')"
    echo "-- $m base: $(LOCKSTEP_CUDA_CACHE=/tmp/cubin-base $BB bench --backend cuda -m /tmp/$m.gguf -p 0 -n 128 -r 10 2>&1 | grep -E '\| tg' | tr -s ' ')"
  done
done; el
