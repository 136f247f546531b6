#!/bin/bash
# Session 21d: the gate/up that quantizes in the last warp of each 32-row group (per-warp
# release-acquire counts; LOCKSTEP_CUDA_GATE_UP_LASTQ=0 runs quantize_q8_32): tokens, check
# --ops, diff --isolate on cut Llama-1B, then tg128 alternating on the 8B and Llama-1B.
# Build: not on main: bench/session21/gate_up_last_warp_q8.patch with atom.acq_rel.gpu where
# the saved patch has atom.release.gpu (the release-only count was not run).
set -u
B=./.device/lockstep
O=${OUT:-/tmp/s21d}; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
( $B synth --like llama-8b --type Q4_K_M -o /tmp/l8b.gguf > /dev/null 2>&1 ) &
$B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf | tail -1
$B synth --like llama-1b --type Q4_K_M --layers 3 -o /tmp/l1b3.gguf | tail -1
$B check --ops --backend cuda > $O/ops.txt 2>&1; echo "== check --ops --backend cuda: rc $? $(tail -1 $O/ops.txt)"
$B diff -m /tmp/l1b3.gguf --a ref --b cuda --ids $(seq -s, 7 46) --decode 32 --isolate > $O/iso-l1b3.txt 2>&1
echo "== diff l1b3 (40 + 32) --isolate: rc $? | $(grep -E '^isolated verdict|^verdict' $O/iso-l1b3.txt | head -2 | cut -c1-110 | tr '\n' '|')"
wait
el
[ -f /tmp/l8b.gguf ] || { echo "no 8B"; exit 1; }
for s in 0 1; do
  for m in l1b l8b; do
    a=$(LOCKSTEP_CUDA_GATE_UP_LASTQ=$s $B run --backend cuda -m /tmp/$m.gguf -p "The quick brown fox" -n 48 --temp 0 2>/dev/null | md5sum | cut -c1-12)
    b=$(LOCKSTEP_CUDA_GATE_UP_LASTQ=$s $B run --backend cuda -m /tmp/$m.gguf -p "Once upon a time" -n 48 --top-k 40 --seed 7 2>/dev/null | md5sum | cut -c1-12)
    echo "$m lastq=$s greedy $a top-k $b"
  done
done
el
for round in 1 2; do
  for m in l8b l1b; do
    for s in 0 1; do
      echo "-- $m lastq=$s: $(LOCKSTEP_CUDA_GATE_UP_LASTQ=$s $B bench --backend cuda -m /tmp/$m.gguf -p 0 -n 128 -r 3 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f6)"
    done
  done
done
el
