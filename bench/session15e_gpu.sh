#!/bin/bash
# Session 15, the submitted build: check --ops (with the two-type q/k/v cases), the tiny-llama
# zoo's diff --isolate, and the four anchor shapes: lockstep bench (pp512, tg128) as submitted,
# and tg128 with the session's two changes off by their knobs (the session start's launches),
# alternating, two rounds.
set -u
B=${LOCKSTEP:-./.device/lockstep}
O=${OUT:-/tmp/s15e}; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf | tail -1
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/gemma3.gguf | tail -1
$B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf | tail -1
( $B synth --like llama-8b --type Q4_K_M -o /tmp/l8b.gguf > /dev/null 2>&1 ) &
$B check --ops --backend cuda > $O/ops.txt 2>&1; echo "== check --ops --backend cuda: rc $? $(tail -1 $O/ops.txt)"
grep -E 'FAIL' $O/ops.txt | head -5
grep -E 'Q5_0/Q5_0/Q8_0|Q5_K/Q5_K/Q6_K|Q4_K/Q4_K/Q6_K \[128' $O/ops.txt | tr -s ' ' | cut -c1-150
el
IDS=1022,829,87,183,242,185,818,888,594,40,96,339,442,634,489,270,163,706,750,33,116,462,399,907
for f in .device/tiny/*.gguf; do
  $B diff -m $f --a ref --b cuda --ids $IDS --decode 32 --isolate > $O/d.txt 2>&1; rc=$?
  echo "$(basename $f) rc $rc: $(grep -E '^verdict|^isolated verdict' $O/d.txt | cut -c1-70 | tr '\n' ' ')"
done
el
wait
for m in smol gemma3 l1b l8b; do
  echo "-- $m (submitted):"; $B bench --backend cuda -m /tmp/$m.gguf -r 5 2>&1 | grep -E '\| (pp|tg)|GPU memory' | tr -s ' '
done
el
for round in 1 2; do
  for m in smol gemma3 l1b l8b; do
    for knob in "X=1" "LOCKSTEP_CUDA_MIXED_QKV=0 LOCKSTEP_CUDA_ATTN_HEADS=group"; do
      echo "-- $m $knob: $(env $knob $B bench --backend cuda -m /tmp/$m.gguf -p 0 -n 128 -r 5 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f6)"
    done
  done
done
el
