#!/bin/bash
# Session 16 (the code is commit 406be12, reverted after): residual_norm at the end of its producer (matmul_residual_norm_then:
# the o and down mat-vecs' last block runs the norm on Llama's rows of 2048 / 4096). Changes no
# value: run with LOCKSTEP_CUDA_NORM_TAIL=0 must give the same tokens. check --ops; diff and
# isolation on cut Llama shapes; check's invariances; tg128 with the knob on and off. (The first
# build's tail, one L2 round trip a value, took the 8B from 344 to 200 tok/s; the second, a
# 128-thread block playing residual_norm's 1024, to 264: see BENCHMARKS. This one: blocks of
# residual_norm's own size.)
set -u
B=${LOCKSTEP:-./.device/lockstep}
O=${OUT:-/tmp/s16}; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf | tail -1
$B synth --like llama-1b --type Q4_K_M --layers 3 -o /tmp/l1b3.gguf | tail -1
$B synth --like llama-8b --type Q4_K_M --layers 3 -o /tmp/l8b3.gguf | tail -1
( $B synth --like llama-8b --type Q4_K_M -o /tmp/l8b.gguf > /dev/null 2>&1 ) &
$B check --ops --backend cuda > $O/ops.txt 2>&1; echo "== check --ops --backend cuda: rc $? $(tail -1 $O/ops.txt)"
grep -E 'FAIL' $O/ops.txt | head -5
grep -c 'matmul_residual_norm_then.* ok' $O/ops.txt
el
for m in l1b3 l8b3; do
  $B diff -m /tmp/$m.gguf --a ref --b cuda --ids $(seq -s, 7 46) --decode 32 --isolate > $O/iso-$m.txt 2>&1
  echo "== diff $m (40 + 32) --isolate: rc $? | $(grep -E '^isolated verdict|^verdict' $O/iso-$m.txt | head -2 | cut -c1-110 | tr '\n' '|')"
done
for m in l1b3; do
  $B check -m /tmp/$m.gguf --backend cuda --tolerance 1e-2 > $O/c-$m.txt 2>&1
  echo "== check $m: rc $? | $(grep -E '^  (ok|FAIL)' $O/c-$m.txt | tr -s ' ' | cut -c1-50 | tr '\n' '|')"
done
el
P="The quick brown fox jumps over the lazy dog. Once upon a time"
same=0; diff_=0
for m in l1b l1b3 l8b3; do
  knob=LOCKSTEP_CUDA_NORM_TAIL=0
  for cfg in "--temp 0" "--temp 1 --top-k 0 --top-p 1 --min-p 0"; do
    a=$($B run -m /tmp/$m.gguf --backend cuda $cfg --seed 4 -n 48 --ignore-eos --no-monitors -p "$P" 2>/dev/null | md5sum)
    b=$(env $knob $B run -m /tmp/$m.gguf --backend cuda $cfg --seed 4 -n 48 --ignore-eos --no-monitors -p "$P" 2>/dev/null | md5sum)
    if [ "$a" == "$b" ]; then same=$((same+1)); else diff_=$((diff_+1)); echo "DIFFER: $m $knob $cfg"; fi
  done
done
echo "== tail vs knob: $same same, $diff_ different"
el
wait
for round in 1 2 3; do
  for m in l1b l8b; do
    for knob in "X=1" "LOCKSTEP_CUDA_NORM_TAIL=0"; do
      echo "-- $m $knob: $(env $knob $B bench --backend cuda -m /tmp/$m.gguf -p 0 -n 128 -r 5 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f6)"
    done
  done
  el
done
mkdir -p $OUT/cubin && cp -r /tmp/cubin/. $OUT/cubin/ 2>/dev/null
