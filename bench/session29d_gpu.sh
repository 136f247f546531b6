#!/bin/bash
# Session 29d: the 8B's decode attention a block per KV head (LOCKSTEP_CUDA_ATTN_HEADS=group:
# 8 blocks of 4 query heads) against a block per query head (32 blocks), tg128 alternating in
# one call, and that variant's step timeline: with 212 registers a thread, an attention block
# needs an SM the q/k/v mat-vec has nearly left, and 8 blocks need fewer such SMs than 32.
set -u
B=./.device/lockstep
O=${OUT:-/tmp/s29d}; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$B synth --like llama-1b --type Q4_K_M --layers 2 -o /tmp/l1b2.gguf | tail -1
( $B bench --backend cuda -m /tmp/l1b2.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 ) &
( LOCKSTEP_CUDA_TIMELINE=/tmp/x.tsv $B bench --backend cuda -m /tmp/l1b2.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 ) &
$B synth --like llama-8b --type Q4_K_M -o /tmp/l8b.gguf | tail -1
wait; el
bn() { env $1 $B bench --backend cuda -m /tmp/$2.gguf -p 0 -n 128 -r 3 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f6 | tr '\n' ' '; }
for r in 1 2 3; do
  for x in "S29_NONE=1" "LOCKSTEP_CUDA_ATTN_HEADS=group"; do echo "-- l8b r$r [$x]: $(bn "$x" l8b)"; done
done
el
LOCKSTEP_CUDA_ATTN_HEADS=group LOCKSTEP_CUDA_TIMELINE=$O/tl_l8b_group.tsv $B bench --backend cuda -m /tmp/l8b.gguf -p 0 -n 128 -r 2 > $O/tl_l8b_group.txt 2>&1
grep -A10 "graph 0" $O/tl_l8b_group.txt
el
