#!/bin/bash
# Session 18, eighth script: GRID_LAUNCH followed at once by the grid wait in every kernel that
# loaded before its wait (one-row mat-vecs, the norm-fused consumers, the decode attention):
# the next kernel still launches early, but nothing loads before the wait (.device/lockstep-v),
# against this build, tg128 alternating, and the same tokens.
set -u
B=./.device/lockstep
V=./.device/lockstep-v
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf | tail -1
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/gemma3.gguf | tail -1
$B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf | tail -1
( $B synth --like llama-8b --type Q4_K_M -o /tmp/l8b.gguf > /dev/null 2>&1 ) &
LOCKSTEP_CUDA_CACHE=/tmp/cubin-b $B bench --backend cuda -m /tmp/smol.gguf -p 0 -n 8 -r 1 > /dev/null 2>&1 &
LOCKSTEP_CUDA_CACHE=/tmp/cubin-v $V bench --backend cuda -m /tmp/smol.gguf -p 0 -n 8 -r 1 > /dev/null 2>&1 &
wait
el
P="The quick brown fox jumps over the lazy dog. Once upon a time"
same=0; diff_=0
for m in gemma3 smol l1b; do
  for cfg in "--temp 0" "--temp 0.8 --top-k 40"; do
    a=$(LOCKSTEP_CUDA_CACHE=/tmp/cubin-b $B run -m /tmp/$m.gguf --backend cuda $cfg --seed 4 -n 64 --ignore-eos --no-monitors -p "$P" 2>/dev/null | md5sum)
    c=$(LOCKSTEP_CUDA_CACHE=/tmp/cubin-v $V run -m /tmp/$m.gguf --backend cuda $cfg --seed 4 -n 64 --ignore-eos --no-monitors -p "$P" 2>/dev/null | md5sum)
    if [ "$a" == "$c" ]; then same=$((same+1)); else diff_=$((diff_+1)); echo "DIFFER: $m $cfg ($a / $c)"; fi
  done
done
echo "== no-early-loads vs this build: $same same, $diff_ different"
el
tg() { LOCKSTEP_CUDA_CACHE=$1 $2 bench --backend cuda -m /tmp/$3.gguf -p 0 -n 128 -r 5 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f6; }
for round in 1 2; do
  for m in l8b smol gemma3 l1b; do
    echo "-- $m this: $(tg /tmp/cubin-b $B $m)   no-early-loads: $(tg /tmp/cubin-v $V $m)"
  done
done
el
