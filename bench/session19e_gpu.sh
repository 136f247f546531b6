#!/bin/bash
# Session 19e: the norms letting the next kernel launch after their loads (default) or at
# entry (LOCKSTEP_CUDA_LAUNCH_AT_ENTRY=1), each with residual_norm on one block or several
# (LOCKSTEP_CUDA_NORM_PARTS=0/1): same tokens; tg128 alternating; the 8B's timeline.
set -u
B=./.device/lockstep
O=${OUT:-/tmp/s19e}; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
[ -f /tmp/smol.gguf ] || $B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf | tail -1
[ -f /tmp/gemma3.gguf ] || $B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/gemma3.gguf | tail -1
[ -f /tmp/l1b.gguf ] || $B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf | tail -1
[ -f /tmp/l8b.gguf ] || ( $B synth --like llama-8b --type Q4_K_M -o /tmp/l8b.gguf > /dev/null 2>&1 ) &
( LOCKSTEP_CUDA_TIMELINE=/tmp/warm.tsv $B bench --backend cuda -m /tmp/smol.gguf -p 0 -n 4 -r 1 > /dev/null 2>&1 ) &
( LOCKSTEP_CUDA_LAUNCH_AT_ENTRY=1 $B bench --backend cuda -m /tmp/smol.gguf -p 0 -n 4 -r 1 > /dev/null 2>&1 ) &
$B bench --backend cuda -m /tmp/smol.gguf -p 0 -n 4 -r 1 > /dev/null 2>&1
wait
el
echo "-- tokens, greedy and top-k: session 18's kernels (entry=1 parts=0) against the new:"
for m in smol gemma3 l1b l8b; do
  for v in "1 0" "0 1"; do
    set -- $v
    LOCKSTEP_CUDA_LAUNCH_AT_ENTRY=$1 LOCKSTEP_CUDA_NORM_PARTS=$2 $B run --backend cuda -m /tmp/$m.gguf -p "The quick brown fox" -n 48 --temp 0 2>/dev/null | md5sum | sed "s/^/$m entry=$1 parts=$2 greedy /"
    LOCKSTEP_CUDA_LAUNCH_AT_ENTRY=$1 LOCKSTEP_CUDA_NORM_PARTS=$2 $B run --backend cuda -m /tmp/$m.gguf -p "Once upon a time" -n 48 --top-k 40 --seed 7 2>/dev/null | md5sum | sed "s/^/$m entry=$1 parts=$2 top-k /"
  done
done
el
for m in l8b l1b smol gemma3; do
  for round in 1 2; do
    for v in "1 0" "0 0" "1 1" "0 1"; do
      set -- $v
      echo "-- $m entry=$1 parts=$2: $(LOCKSTEP_CUDA_LAUNCH_AT_ENTRY=$1 LOCKSTEP_CUDA_NORM_PARTS=$2 $B bench --backend cuda -m /tmp/$m.gguf -p 0 -n 128 -r 3 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f6)"
    done
  done
done
el
for m in l8b smol; do
  echo "-- $m, timeline:"
  LOCKSTEP_CUDA_TIMELINE=$O/tl_$m.tsv $B bench --backend cuda -m /tmp/$m.gguf -p 0 -n 128 -r 2 2>&1 | grep -E '\| tg|timeline|calls' | tr -s ' ' | awk '/graph 1:/{skip=1} /graph 0:/{skip=0} !skip' | head -12
done
el
