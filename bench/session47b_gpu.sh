#!/bin/bash
# Session 47, call 2: side by side on one card in one call, the head's build: llama-bench (built
# in call 1 from .device/llama.cpp.tar.xz) -p 512 -n 128 -r 3 -fa 0,1, then lockstep bench
# --backend cuda -p 512 -n 128 -r 3, on the four anchor shapes (synthesized, Q4_1 / Q4_K_M),
# two rounds.
set -u
B=./.device/lockstep
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
LB=/tmp/lc/b/bin/llama-bench
[ -x $LB ] || { echo "no llama-bench"; exit 1; }
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/g3.gguf > /dev/null 2>&1 &
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf > /dev/null 2>&1 &
$B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf > /dev/null 2>&1 &
[ -f /tmp/l8b.gguf ] || $B synth --like llama-8b --type Q4_K_M -o /tmp/l8b.gguf > /dev/null 2>&1
wait; el
for M in smol g3 l1b l8b; do $B bench --backend cuda -m /tmp/$M.gguf -p 16 -n 2 -r 1 > /dev/null 2>&1; done; el
for r in 1 2; do
  for M in smol g3 l1b l8b; do
    echo "== round $r $M: llama.cpp"
    timeout 150 $LB -m /tmp/$M.gguf -p 512 -n 128 -ngl 99 -r 3 -fa 0,1 -o md 2>&1 | grep -E '^\| [a-z]' | grep -v model | cut -d'|' -f6-
    echo "== round $r $M: lockstep"
    timeout 90 $B bench --backend cuda -m /tmp/$M.gguf -p 512 -n 128 -r 3 2>&1 | grep -E '\| (pp|tg)' | cut -d'|' -f5-
  done
  el
done
true
