#!/bin/bash
# Session 32e: the submitted build beside llama.cpp in one call, four shapes: llama-bench -p 0
# -n 128 -d 0,1024,4096 -ngl 99 -r 3 -fa 1, then lockstep bench --backend cuda -p 0 -n 128 -d D
# -r 3; greedy and top-k generations (48 tokens: short decode kernels only) against session 28's
# hashes.
set -u
B=./.device/lockstep
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
LIMIT=${LIMIT:-560}
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
LB=/tmp/llama-bench
cat .device/llama-bench.xz.part* | xz -d > $LB && chmod +x $LB
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf | tail -1
$B bench --backend cuda -m /tmp/smol.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 &
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/gemma3.gguf | tail -1
$B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf | tail -1
$B synth --like llama-8b --type Q4_K_M -o /tmp/l8b.gguf | tail -1
wait; el
echo "== llama.cpp"
for m in smol gemma3 l1b l8b; do $LB -m /tmp/$m.gguf -p 0 -n 128 -d 0,1024,4096 -ngl 99 -r 3 -fa 1 -o md 2>&1 | grep -E '^\| [a-z]' | grep -v model; done
el
echo "== lockstep"
for m in smol gemma3 l1b l8b; do for d in 0 1024 4096; do
  left=$(( LIMIT - ($(date +%s) - T0) )); [ $left -lt 15 ] && { echo "-- $m d$d skipped"; continue; }
  echo "-- $m d$d $(timeout $left $B bench --backend cuda -m /tmp/$m.gguf -p 0 -n 128 -d $d -r 3 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f5,6)"
done; done
el
h() { $B run --backend cuda -m /tmp/$1.gguf "${@:2}" 2>/dev/null | md5sum | cut -c1-12; }
echo "smol greedy $(h smol -p 'The quick brown fox' -n 48 --temp 0) top-k $(h smol -p 'Once upon a time' -n 48 --top-k 40 --seed 7) (s28: 10d82d4b9948 d29998751468)"
echo "gemma3 greedy $(h gemma3 -p 'The quick brown fox' -n 48 --temp 0) top-k $(h gemma3 -p 'Once upon a time' -n 48 --top-k 40 --seed 7) (s28: 64901c8f9708 6ed04893ed86)"
el
true
