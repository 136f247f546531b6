#!/bin/bash
# Session 25c: what a kernel boundary would cost inside a persistent kernel
# (bench/grid_barrier_lab/grid_barrier.cu: one phase of the same work as PDL kernels in a graph,
# as phases of one cooperative kernel behind a counter barrier, and behind grid.sync()); then the
# replay clock of the submitted build (the host's share of a decode step) on the four shapes.
set -u
B=./.device/lockstep
O=${OUT:-/tmp/s25c}; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
( $B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf > /dev/null 2>&1
  $B bench --backend cuda -m /tmp/smol.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1
  $B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/gemma3.gguf > /dev/null 2>&1
  $B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf > /dev/null 2>&1
  $B synth --like llama-8b --type Q4_K_M -o /tmp/l8b.gguf > /dev/null 2>&1 ) &
nvcc -arch=sm_90 -O3 -std=c++17 -o /tmp/grid_barrier bench/grid_barrier_lab/grid_barrier.cu > $O/nvcc.log 2>&1 || { cat $O/nvcc.log; }
el
[ -x /tmp/grid_barrier ] && /tmp/grid_barrier 2>&1 | tee $O/grid_barrier.txt
el
wait
el
for m in smol gemma3 l1b l8b; do
  LOCKSTEP_CUDA_REPLAY_CLOCK=1 $B bench --backend cuda -m /tmp/$m.gguf -p 0 -n 128 -r 3 > $O/clock_$m.txt 2>&1
  echo "== $m clock: $(grep -E '\| tg|^  [a-z]+ +[0-9-]' $O/clock_$m.txt | tr -s ' ' | tr '\n' '|' | cut -c1-420)"
done
el
