#!/bin/bash
# Session 30b: the f16 KV cache against f32 (LOCKSTEP_CUDA_KV=f32), tg128 from an empty cache
# and at depths 1024 and 4096 (bench -d, llama-bench's depth: the decode steps' attention reads
# 1024-1151 / 4096-4223 keys, the split-key kernels), alternating in one call; the f32 build's
# own value loaded as in session 29 (the f16 build's from the rope stage's shared copy).
set -u
B=./.device/lockstep
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
LIMIT=${LIMIT:-560}
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf | tail -1
$B bench --backend cuda -m /tmp/smol.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 &
LOCKSTEP_CUDA_KV=f32 $B bench --backend cuda -m /tmp/smol.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 &
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/gemma3.gguf | tail -1
$B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf | tail -1
$B synth --like llama-8b --type Q4_K_M -o /tmp/l8b.gguf | tail -1
wait; el
h() { env $1 $B run --backend cuda -m /tmp/$2.gguf "${@:3}" 2>/dev/null | md5sum | cut -c1-12; }
for x in "LOCKSTEP_CUDA_KV=f32" "S30_NONE=1"; do
  echo "smol [$x] greedy $(h $x smol -p 'The quick brown fox' -n 48 --temp 0) top-k $(h $x smol -p 'Once upon a time' -n 48 --top-k 40 --seed 7)"
done
bn() { env $1 $B bench --backend cuda -m /tmp/$2.gguf $3 2>&1 | grep -E '\| (tg|pp)|GPU memory' | tr -s ' ' | sed -E 's/.*\| (tg[^|]*)\| ([^|]*)\|.*/\1 \2/; s/GPU memory in use.*max after each test: /mem /' | tr '\n' ' '; }
run_ab() {
  for x in "LOCKSTEP_CUDA_KV=f32" "S30_NONE=1"; do
    left=$(( LIMIT - ($(date +%s) - T0) )); if [ $left -lt 25 ]; then echo "-- $1 $2 [$x]: skipped"; continue; fi
    echo "-- $1 [$x] $2: $(timeout $left bash -c "$(declare -f bn); B=$B; bn '$x' $1 '$2'")"
  done
}
for m in smol gemma3 l1b l8b; do run_ab $m "-p 0 -n 128 -r 3"; done
el
for m in smol gemma3 l1b l8b; do run_ab $m "-p 0 -n 128 -d 4096 -r 2"; done
el
for m in smol gemma3 l1b l8b; do run_ab $m "-p 0 -n 128 -r 3"; done
el
for m in l8b smol; do run_ab $m "-p 0 -n 128 -d 1024 -r 2"; done
el
