#!/bin/bash
# Session 24d: two rows a warp for the one-row q/k/v (mmv3_fast2r; LOCKSTEP_CUDA_TWO_ROWS_QKV)
# and gate/up (gate_up_fast2r; LOCKSTEP_CUDA_TWO_ROWS_GU) launches of Llama-1B and the 8B (the
# small models' q/k/v and gate/up are norm-fused kernels): tokens, check --ops, tg128 alternating.
set -u
B=./.device/lockstep
O=${OUT:-/tmp/s24d}; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf | tail -1
( $B bench --backend cuda -m /tmp/l1b.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1; $B check --ops --backend cuda > $O/ops.txt 2>&1; echo "== check --ops --backend cuda: rc $? $(tail -1 $O/ops.txt)" ) &
$B synth --like llama-8b --type Q4_K_M -o /tmp/l8b.gguf | tail -1
wait
el
for m in l1b l8b; do
  for x in "LOCKSTEP_CUDA_TWO_ROWS_QKV=0 LOCKSTEP_CUDA_TWO_ROWS_GU=0" "LOCKSTEP_CUDA_TWO_ROWS_QKV=1"; do
    a=$(env $x $B run --backend cuda -m /tmp/$m.gguf -p "The quick brown fox" -n 48 --temp 0 2>/dev/null | md5sum | cut -c1-12)
    b=$(env $x $B run --backend cuda -m /tmp/$m.gguf -p "Once upon a time" -n 48 --top-k 40 --seed 7 2>/dev/null | md5sum | cut -c1-12)
    echo "$m [$x]: greedy $a top-k $b"
  done
done
el
tg() { env $1 $B bench --backend cuda -m /tmp/$2.gguf -p 0 -n 128 -r 3 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f6; }
for r in 1 2; do
  for m in l1b l8b; do
    for x in "LOCKSTEP_CUDA_TWO_ROWS_QKV=0 LOCKSTEP_CUDA_TWO_ROWS_GU=0" "LOCKSTEP_CUDA_TWO_ROWS_QKV=1 LOCKSTEP_CUDA_TWO_ROWS_GU=0" "LOCKSTEP_CUDA_TWO_ROWS_QKV=0 LOCKSTEP_CUDA_TWO_ROWS_GU=1" "LOCKSTEP_CUDA_TWO_ROWS_QKV=1 LOCKSTEP_CUDA_TWO_ROWS_GU=1"; do
      echo "-- $m [$x]: $(tg "$x" $m)"
    done
  done
done
el
