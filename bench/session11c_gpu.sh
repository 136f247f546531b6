#!/bin/bash
# Session 11, third call: the short decode attention (`attention_decode_<D>`: one block per row
# and KV head, f32, each stage one memory round trip) for decode steps of short contexts in
# `cuda` fast mode. Checked first (check --ops, diff and isolation on cut SmolLM2, Llama-1B and
# 8B shapes, whose decode steps now run it), then tg128 of base (session 10's head) / new
# interleaved on the four anchor shapes, then the decode profile of SmolLM2 and 8B.
set -u
B=${LOCKSTEP:-./.device/lockstep}
O=${OUT:-/tmp/s11c}; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
( $B synth --like llama-8b --type Q4_K_M -o /tmp/l8b.gguf > /tmp/synth8b.log 2>&1 ) &
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf | tail -1
$B synth --like smollm2 --type Q4_1 --layers 4 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol4.gguf | tail -1
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/gemma3.gguf | tail -1
$B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf | tail -1
$B synth --like llama-1b --type Q4_K_M --layers 3 -o /tmp/l1b3.gguf | tail -1
$B synth --like llama-8b --type Q4_K_M --layers 2 -o /tmp/l8b2.gguf | tail -1
pids=""
for b in lockstep lockstep-base; do  # compile each build's kernels, in parallel
  LOCKSTEP_CUDA_CACHE=/tmp/cubin-$b ./.device/$b bench --backend cuda -m /tmp/smol.gguf -p 0 -n 4 -r 1 > $O/warm-$b.txt 2>&1 &
  pids="$pids $!"
done; wait $pids
el
export LOCKSTEP_CUDA_CACHE=/tmp/cubin-lockstep
$B check --ops --backend cuda > $O/ops-cuda.txt 2>&1; echo "== check --ops --backend cuda: $(tail -1 $O/ops-cuda.txt)"
el
for mn in smol4:40:32 l1b3:40:32 l8b2:24:32 l8b2:100:20; do
  IFS=: read m n d <<< "$mn"; IDS=$(seq -s, 7 $((n + 6)))
  $B diff -m /tmp/$m.gguf --a ref --b cuda --ids $IDS --decode $d --isolate > $O/iso-$m-$n.txt 2>&1
  echo "== diff $m ($n + $d) --isolate: rc $? | $(grep -E '^verdict' $O/iso-$m-$n.txt | cut -c1-110) | $(grep -E '^isolated verdict' $O/iso-$m-$n.txt | cut -c1-110)"
  el
done
$B check -m /tmp/smol4.gguf --backend cuda > $O/check-smol4.txt 2>&1; echo "== check smol4 --backend cuda: rc $? $(grep -cE 'PASS|holds' $O/check-smol4.txt) lines pass; $(grep -E 'FAIL|BROKEN' $O/check-smol4.txt | head -3 | cut -c1-150)"
el
wait; tail -1 /tmp/synth8b.log
for m in /tmp/smol.gguf /tmp/gemma3.gguf /tmp/l1b.gguf /tmp/l8b.gguf; do
  for round in 1 2; do
    for b in lockstep-base lockstep; do
      echo "-- $(basename $m) $b: $(LOCKSTEP_CUDA_CACHE=/tmp/cubin-$b ./.device/$b bench --backend cuda -m $m -p 0 -n 128 -r 3 2>&1 | grep -E '\| tg' | tr -s ' ')"
    done
  done
done; el
export NCU_FLAGS="--clock-control none --cache-control none"
echo "== SmolLM2 decode"; bash bench/ncu_decode.sh /tmp/smol.gguf 580 3000 | head -8
el
