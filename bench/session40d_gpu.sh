#!/bin/bash
# Session 40d: Q5_0 weights on the device as 24-byte blocks with qh's bits permuted
# (plan::q50_repacked, kernels.cu Q50_BYTES; opt-in: LOCKSTEP_CUDA_Q50_REPACK=1). Correct first:
# check --ops on every Q5_0 case (fast and exact kernels), check on synthesized Gemma-3
# (replayed vs tapped), Gemma-3's greedy tokens with and without (session 39's hash); then
# tg128 -r 3 alternating. (Call 14 ran this with the repack the default, before the fix of the
# row kernels' block size: bench/session40/runs.txt.)
set -u
B=./.device/lockstep
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/g3.gguf > /dev/null 2>&1
export LOCKSTEP_CUDA_Q50_REPACK=1
# the other build's kernels, compiled beside the checks
LOCKSTEP_CUDA_Q50_REPACK=0 $B bench --backend cuda -m /tmp/g3.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 &
echo "== ops cuda:       $($B check --ops --backend cuda --filter '*Q5_0*' 2>&1 | tail -1)"
echo "== ops cuda-exact: $($B check --ops --backend cuda-exact --filter '*Q5_0*' 2>&1 | tail -1)"
el
$B check -m /tmp/g3.gguf --backend cuda > /tmp/check_g3.txt 2>&1
echo "== check g3: rc $? | $(grep -E 'replayed' /tmp/check_g3.txt | tr -s ' ' | cut -c1-100)"
wait
h() { env "$@" $B run --backend cuda -m /tmp/g3.gguf -p 'The quick brown fox' -n 48 --temp 0 2>/dev/null | md5sum | cut -c1-12; }
echo "tokens g3: repacked $(h X=1), GGUF's blocks $(h LOCKSTEP_CUDA_Q50_REPACK=0) (session 39: 64901c8f9708)"
el
tg() { timeout 40 env "$@" $B bench --backend cuda -m /tmp/g3.gguf -p 0 -n 128 -r 3 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f6 | sed 's/ *± */±/; s/ //g'; }
for r in 1 2 3; do echo "g3 tg128 round $r: repacked $(tg X=1) / GGUF's $(tg LOCKSTEP_CUDA_Q50_REPACK=0)"; done
el
true
