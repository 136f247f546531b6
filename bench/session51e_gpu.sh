#!/bin/bash
# Session 51, call 5: how much of the down projections' time is on the replayed step's path.
# A diagnostic build keeps every warp 1000 ns past its rows (LOCKSTEP_CUDA_DEFINES=
# LOCKSTEP_DELAY_MMV1=1000: mmv_fast1, Gemma-3's downs in replays; LOCKSTEP_DELAY_MMV2R=1000:
# mmv_fast2r, the 8B's downs): tg128 against the default build, alternating. On the path one
# for one, Gemma-3 loses 18 us a step and the 8B 32 us.
set -u
B=./.device/lockstep
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
D1="env LOCKSTEP_CUDA_DEFINES=LOCKSTEP_DELAY_MMV1=1000"
D2="env LOCKSTEP_CUDA_DEFINES=LOCKSTEP_DELAY_MMV2R=1000"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$B synth --like llama-8b --type Q4_K_M -o /tmp/l8b.gguf > /dev/null 2>&1 &
$B synth --like llama-8b --type Q4_K_M --layers 3 -o /tmp/l8c.gguf > /dev/null 2>&1 &
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/g3.gguf > /dev/null 2>&1 &
wait; el
$B bench --backend cuda -m /tmp/l8c.gguf -p 16 -n 2 -r 1 > /dev/null 2>&1 &
$D1 $B bench --backend cuda -m /tmp/l8c.gguf -p 16 -n 2 -r 1 > /dev/null 2>&1 &
$D2 $B bench --backend cuda -m /tmp/l8c.gguf -p 16 -n 2 -r 1 > /dev/null 2>&1 &
wait; el
tg() { timeout 90 $@ bench --backend cuda -m /tmp/$M.gguf -p 0 -n 128 -r 3 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f6 | sed 's/ *± */±/; s/ //g'; }
M=g3; for r in 1 2 3; do echo "$M tg128 round $r: delay mmv_fast1 $(tg $D1 $B) | plain $(tg $B)"; done
M=l8b; for r in 1 2 3; do echo "$M tg128 round $r: delay mmv_fast2r $(tg $D2 $B) | plain $(tg $B)"; done
el
true
