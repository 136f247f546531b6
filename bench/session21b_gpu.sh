#!/bin/bash
# Session 21b: the decode mat-vec's chunks (LOCKSTEP_CUDA_UNROLL=2 with MMV_MINB=8) and the
# gate/up that quantizes in the last block of each 32-row group (LOCKSTEP_CUDA_GATE_UP_LASTQ),
# each alone and together: tokens, then tg128 alternating (8B, Llama-1B; two rounds), the small
# shapes once, and the 8B timeline of the pair.
# Build: not on main. session21_gpu.sh's knobs, plus bench/session21/gate_up_last_warp_q8.patch
# with the block handshake (every thread __threadfence, a barrier, one atomicAdd a block, a
# barrier) in place of the per-warp count (BENCHMARKS.md, session 21).
set -u
B=./.device/lockstep
O=${OUT:-/tmp/s21b}; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
v() { case $1 in
  base) echo "LOCKSTEP_CUDA_UNROLL=1 LOCKSTEP_CUDA_GATE_UP_LASTQ=0";;
  un) echo "LOCKSTEP_CUDA_UNROLL=2 LOCKSTEP_CUDA_MMV_MINB=8 LOCKSTEP_CUDA_GATE_UP_LASTQ=0";;
  lq) echo "LOCKSTEP_CUDA_UNROLL=1 LOCKSTEP_CUDA_GATE_UP_LASTQ=1";;
  both) echo "LOCKSTEP_CUDA_UNROLL=2 LOCKSTEP_CUDA_MMV_MINB=8 LOCKSTEP_CUDA_GATE_UP_LASTQ=1";;
esac; }
$B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf | tail -1
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf | tail -1
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/gemma3.gguf | tail -1
( $B synth --like llama-8b --type Q4_K_M -o /tmp/l8b.gguf > /dev/null 2>&1 ) &
for x in base un; do ( env $(v $x) $B bench --backend cuda -m /tmp/smol.gguf -p 0 -n 4 -r 1 > /dev/null 2>&1 ) & done
( env $(v both) LOCKSTEP_CUDA_TIMELINE=/tmp/warm.tsv $B bench --backend cuda -m /tmp/smol.gguf -p 0 -n 4 -r 1 > /dev/null 2>&1 ) &
wait
el
for m in l1b l8b smol gemma3; do [ -f /tmp/$m.gguf ] || { echo "no /tmp/$m.gguf"; exit 1; }; done
for x in base un lq both; do
  for m in l1b l8b; do
    a=$(env $(v $x) $B run --backend cuda -m /tmp/$m.gguf -p "The quick brown fox" -n 48 --temp 0 2>/dev/null | md5sum | cut -c1-12)
    echo "$m $x greedy $a"
  done
done
el
for round in 1 2; do
  for m in l8b l1b; do
    for x in base un lq both; do
      echo "-- $m $x: $(env $(v $x) $B bench --backend cuda -m /tmp/$m.gguf -p 0 -n 128 -r 3 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f6)"
    done
  done
  el
done
for m in gemma3 smol; do
  for x in base both; do
    echo "-- $m $x: $(env $(v $x) $B bench --backend cuda -m /tmp/$m.gguf -p 0 -n 128 -r 3 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f6)"
  done
done
el
env $(v both) LOCKSTEP_CUDA_TIMELINE=$O/tl_l8b_both.tsv $B bench --backend cuda -m /tmp/l8b.gguf -p 0 -n 128 -r 1 2>&1 | grep -E '\| tg' | tr -s ' '
el
