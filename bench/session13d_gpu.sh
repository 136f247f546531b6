#!/bin/bash
# Session 13: the one-row mat-vecs' first weight loads held ahead of the grid wait
# (hold_before_wait: ptxas had sunk them below it) as build V1 (.device/lockstep), and V1 with
# the unit loop unrolled 4 times as V2 (.device/lockstep-v2), against the session's start
# (.device/lockstep-base): check --ops, diff/isolation and check's invariances on V1 and V2,
# then tg128 -r 10 in rounds (base, V1, V2) on the four anchor shapes.
# Builds: V1 = f3282b5 + bench/session13/hold_before_wait.patch; V2 = V1 with `#pragma
# unroll 4` on fast_rows' unit loop; base = f3282b5. Not kept.
set -u
B=./.device/lockstep; B2=./.device/lockstep-v2; BB=./.device/lockstep-base
O=${OUT:-/tmp/s13d}; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf | tail -1
$B synth --like smollm2 --type Q4_1 --layers 4 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol4.gguf | tail -1
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/gemma3.gguf | tail -1
$B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf | tail -1
$B synth --like llama-8b --type Q4_K_M --layers 2 -o /tmp/l8b2.gguf | tail -1
( $B synth --like llama-8b --type Q4_K_M -o /tmp/l8b.gguf > /dev/null 2>&1 ) &
( LOCKSTEP_CUDA_CACHE=/tmp/cubin-base $BB bench --backend cuda -m /tmp/smol.gguf -p 0 -n 4 -r 1 > /dev/null 2>&1 ) &
( LOCKSTEP_CUDA_CACHE=/tmp/cubin-v2 $B2 bench --backend cuda -m /tmp/smol.gguf -p 0 -n 4 -r 1 > /dev/null 2>&1 ) &
for v in 1 2; do
  X=$B; C=/tmp/cubin; [ $v = 2 ] && X=$B2 && C=/tmp/cubin-v2
  export LOCKSTEP_CUDA_CACHE=$C
  $X check --ops --backend cuda > $O/ops-v$v.txt 2>&1; echo "== V$v check --ops --backend cuda: $(tail -1 $O/ops-v$v.txt)"
  grep FAIL $O/ops-v$v.txt | head -3
  for mn in smol4:40:32 l8b2:24:32; do
    IFS=: read m n d <<< "$mn"; IDS=$(seq -s, 7 $((n + 6)))
    $X diff -m /tmp/$m.gguf --a ref --b cuda --ids $IDS --decode $d --isolate > $O/iso-$m-v$v.txt 2>&1
    echo "== V$v diff $m ($n + $d) --isolate: rc $? | $(grep -E '^verdict' $O/iso-$m-v$v.txt | cut -c1-90) | $(grep -E '^isolated verdict' $O/iso-$m-v$v.txt | cut -c1-90)"
  done
  for t in Q4_0 Q8_0 Q4_K Q6_K; do
    $X diff -m .device/tiny/tiny-llama-$t.gguf --a ref --b cuda --ids $(seq -s, 7 30) --decode 8 --isolate > $O/iso-tiny-$t-v$v.txt 2>&1
    echo "== V$v diff tiny-llama $t --isolate: rc $? | $(grep -E '^isolated verdict' $O/iso-tiny-$t-v$v.txt | cut -c1-90)"
  done
  $X check -m /tmp/smol4.gguf --backend cuda > $O/c-smol4-v$v.txt 2>&1
  echo "== V$v check smol4: $(grep -E '^  (ok|FAIL)' $O/c-smol4-v$v.txt | tr -s ' ' | cut -c1-50 | tr '\n' '|')"
  el
done
wait
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv,noheader
for m in l8b l1b gemma3 smol; do
  for pass in 1 2; do
    echo "-- $m base: $(LOCKSTEP_CUDA_CACHE=/tmp/cubin-base $BB bench --backend cuda -m /tmp/$m.gguf -p 0 -n 128 -r 10 2>&1 | grep -E '\| tg' | tr -s ' ')"
    echo "-- $m V1  : $(LOCKSTEP_CUDA_CACHE=/tmp/cubin $B bench --backend cuda -m /tmp/$m.gguf -p 0 -n 128 -r 10 2>&1 | grep -E '\| tg' | tr -s ' ')"
    echo "-- $m V2  : $(LOCKSTEP_CUDA_CACHE=/tmp/cubin-v2 $B2 bench --backend cuda -m /tmp/$m.gguf -p 0 -n 128 -r 10 2>&1 | grep -E '\| tg' | tr -s ' ')"
  done
done; el
