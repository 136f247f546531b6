#!/bin/bash
# Session 10, second call: where the time goes after the one-row mat-vecs. Nsight Compute on
# the 8B shape's decode (bench/ncu_decode.sh: per kernel, time and DRAM read bandwidth) and on
# Llama-1B's pp512 (bench/ncu_prefill.sh).
set -u
B=${LOCKSTEP:-./.device/lockstep}
O=${OUT:-/tmp/s10b}; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
( $B synth --like llama-8b --type Q4_K_M -o /tmp/l8b.gguf > /tmp/synth8b.log 2>&1 ) &
$B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf | tail -1
echo "== Llama-1B pp512, per kernel:"; bash bench/ncu_prefill.sh /tmp/l1b.gguf 2000 | head -24; el
echo "== Llama-1B decode, per kernel:"; bash bench/ncu_decode.sh /tmp/l1b.gguf 300 3000 | head -24; el
wait; tail -1 /tmp/synth8b.log
echo "== 8B decode, per kernel:"; bash bench/ncu_decode.sh /tmp/l8b.gguf 600 3000 | head -30; el
