#!/bin/bash
# Session 52, call 6: a speed probe. Replayed steps' two-rows-a-warp mat-vecs of rows of at
# least 8192 values (the 8B's and Llama-1B's down projections) on blocks of 8 warps, each row
# pair's units split between two warps (LOCKSTEP_CUDA_SPLIT2R=8192, graph_exec::split_rewrite,
# kernels.cu mmv_split2r_<id>): twice the warps an SM. Not bitwise mmv_fast2r (another order
# of the sums), so the tokens may differ; tg128 alternating.
set -u
B=./.device/lockstep
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
S="env LOCKSTEP_CUDA_SPLIT2R=8192"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$B synth --like llama-8b --type Q4_K_M --layers 3 -o /tmp/l8c.gguf > /dev/null 2>&1
$B synth --like llama-8b --type Q4_K_M -o /tmp/l8b.gguf > /dev/null 2>&1 &
$B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf > /dev/null 2>&1 &
$B bench --backend cuda -m /tmp/l8c.gguf -p 16 -n 2 -r 1 > /dev/null 2>&1 &
wait; el
LOCKSTEP_CUDA_STATS=1 $S $B bench --backend cuda -m /tmp/l8b.gguf -p 0 -n 4 -r 1 2>&1 | grep -E "split across|rror" | sort | uniq -c
h() { timeout 60 $@ run --backend cuda -m /tmp/$M.gguf -p 'The quick brown fox' -n 48 --temp 0 2>/dev/null | md5sum | cut -c1-12; }
M=l8b; echo "tokens l8b: split $(h $S $B) default $(h $B)"; el
tg() { timeout 90 $@ bench --backend cuda -m /tmp/$M.gguf -p 0 -n 128 -r 3 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f6 | sed 's/ *± */±/; s/ //g'; }
M=l8b; for r in 1 2 3; do echo "l8b tg128 round $r: split $(tg $S $B) | default $(tg $B)"; echo "l8b tg128 round $r': default $(tg $B) | split $(tg $S $B)"; done; el
M=l1b; for r in 1 2; do echo "l1b tg128 round $r: split $(tg $S $B) | default $(tg $B)"; echo "l1b tg128 round $r': default $(tg $B) | split $(tg $S $B)"; done; el
true
