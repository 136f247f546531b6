#!/bin/bash
# Session 21: the decode mat-vec with several units a lane in flight (LOCKSTEP_CUDA_UNROLL=U)
# and ptxas planning its registers for N blocks an SM (LOCKSTEP_CUDA_MMV_MINB=N): tokens of
# every variant, then tg128 alternating on the 8B and Llama-1B (the long down projections).
# PHASE=1: compile, tokens, round 1; PHASE=2: round 2, the other shapes, the 8B timeline.
# Build: not on main. The chunk of bench/session21/mmv_long_rows.patch as a compile-time
# FAST_UNROLL (default 4) in every one-row mat-vec, LOCKSTEP_CUDA_UNROLL / LOCKSTEP_CUDA_MMV_MINB
# setting it and its __launch_bounds__ minimum (BENCHMARKS.md, session 21).
set -u
B=./.device/lockstep
O=${OUT:-/tmp/s21}; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
VARS=${VARS:-"1:0 2:0 4:0 2:8 4:8 4:6 4:4"}
v() { local u=${1%%:*} b=${1##*:}; if [ "$b" = 0 ]; then echo "LOCKSTEP_CUDA_UNROLL=$u"; else echo "LOCKSTEP_CUDA_UNROLL=$u LOCKSTEP_CUDA_MMV_MINB=$b"; fi; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
if [ "${PHASE:-1}" = 1 ]; then
  $B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf | tail -1
  $B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf | tail -1
  $B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/gemma3.gguf | tail -1
  ( $B synth --like llama-8b --type Q4_K_M -o /tmp/l8b.gguf > /dev/null 2>&1 ) &
  for x in $VARS; do ( env $(v $x) $B bench --backend cuda -m /tmp/l1b.gguf -p 0 -n 4 -r 1 > /dev/null 2>&1 ) & done
  wait
  el
  for x in $VARS; do
    for m in l1b l8b; do
      a=$(env $(v $x) $B run --backend cuda -m /tmp/$m.gguf -p "The quick brown fox" -n 48 --temp 0 2>/dev/null | md5sum | cut -c1-12)
      echo "$m $x greedy $a"
    done
  done
  el
  for m in l8b l1b; do
    for x in $VARS; do
      echo "-- $m $x: $(env $(v $x) $B bench --backend cuda -m /tmp/$m.gguf -p 0 -n 128 -r 3 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f6)"
    done
  done
  el
else
  for x in $VARS; do ( env $(v $x) $B bench --backend cuda -m /tmp/l1b.gguf -p 0 -n 4 -r 1 > /dev/null 2>&1 ) & done
  for x in ${TL_VARS:-1:0}; do ( env $(v $x) LOCKSTEP_CUDA_TIMELINE=/tmp/warm.tsv $B bench --backend cuda -m /tmp/smol.gguf -p 0 -n 4 -r 1 > /dev/null 2>&1 ) & done
  wait
  el
  for x in $VARS; do
    for m in l1b l8b; do
      a=$(env $(v $x) $B run --backend cuda -m /tmp/$m.gguf -p "The quick brown fox" -n 48 --temp 0 2>/dev/null | md5sum | cut -c1-12)
      echo "$m $x greedy $a"
    done
  done
  el
  for m in l8b l1b; do
    for x in $VARS; do
      echo "-- $m $x: $(env $(v $x) $B bench --backend cuda -m /tmp/$m.gguf -p 0 -n 128 -r 3 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f6)"
    done
  done
  el
  for m in gemma3 smol; do
    for x in ${SMALL_VARS:-1:0 4:8}; do
      echo "-- $m $x: $(env $(v $x) $B bench --backend cuda -m /tmp/$m.gguf -p 0 -n 128 -r 3 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f6)"
      a=$(env $(v $x) $B run --backend cuda -m /tmp/$m.gguf -p "The quick brown fox" -n 48 --temp 0 2>/dev/null | md5sum | cut -c1-12); echo "   greedy $a"
    done
  done
  el
  for x in ${TL_VARS:-1:0}; do
    env $(v $x) LOCKSTEP_CUDA_TIMELINE=$O/tl_l8b_${x/:/_}.tsv $B bench --backend cuda -m /tmp/l8b.gguf -p 0 -n 128 -r 1 2>&1 | grep -E '\| tg' | tr -s ' '
  done
  el
fi
