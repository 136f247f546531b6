#!/bin/bash
# Session 51, call 4: mmv_fast2r (the 8B's and Llama-1B's down projections; not the LM heads)
# with two units a row in flight for rows of at least N values
# (LOCKSTEP_CUDA_DEFINES=LOCKSTEP_NR_PIPE2=N, N = 8192: both downs, 14336: the 8B's only)
# against the default loop: the same tokens, check's replayed vs tapped, tg128 alternating,
# the 8B's timeline.
set -u
B=./.device/lockstep
O=/tmp/s51d; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
P1="env LOCKSTEP_CUDA_DEFINES=LOCKSTEP_NR_PIPE2=8192"
P2="env LOCKSTEP_CUDA_DEFINES=LOCKSTEP_NR_PIPE2=14336"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$B synth --like llama-8b --type Q4_K_M -o /tmp/l8b.gguf > /dev/null 2>&1 &
$B synth --like llama-8b --type Q4_K_M --layers 3 -o /tmp/l8c.gguf > /dev/null 2>&1 &
$B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf > /dev/null 2>&1 &
wait; el
$B bench --backend cuda -m /tmp/l8c.gguf -p 16 -n 2 -r 1 > /dev/null 2>&1 &
$P1 $B bench --backend cuda -m /tmp/l8c.gguf -p 16 -n 2 -r 1 > /dev/null 2>&1 &
$P2 $B bench --backend cuda -m /tmp/l8c.gguf -p 16 -n 2 -r 1 > /dev/null 2>&1 &
LOCKSTEP_CUDA_TIMELINE=/tmp/x $P1 $B bench --backend cuda -m /tmp/l8c.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 &
wait; el
$P1 $B check -m /tmp/l8c.gguf --backend cuda > $O/check-l8c.txt 2>&1; echo "== check l8c (8192): rc $? | $(grep -E 'replayed' $O/check-l8c.txt | tr -s ' ' | cut -c1-140)"
h() { $@ run --backend cuda -m /tmp/$M.gguf -p "$P" -n 48 --temp 0 2>/dev/null | md5sum | cut -c1-12; }
P='The quick brown fox'
for M in l8b l1b; do echo "tokens $M: 8192 $(h $P1 $B) 14336 $(h $P2 $B) plain $(h $B)"; done
el
tg() { timeout 90 $@ bench --backend cuda -m /tmp/$M.gguf -p 0 -n 128 -r 3 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f6 | sed 's/ *± */±/; s/ //g'; }
M=l8b; for r in 1 2 3 4; do echo "$M tg128 round $r: 8192 $(tg $P1 $B) | 14336 $(tg $P2 $B) | plain $(tg $B)"; done
M=l1b; for r in 1 2 3; do echo "$M tg128 round $r: 8192 $(tg $P1 $B) | plain $(tg $B)"; done
el
LOCKSTEP_CUDA_TIMELINE=$O/tl_l8b.txt $P1 $B bench --backend cuda -m /tmp/l8b.gguf -p 0 -n 32 -r 1 2>&1 | grep '| tg'
awk -F'\t' 'NR>1 && $1==0 && $3>=3 && $3<=7' $O/tl_l8b.txt | cut -f3-9
awk -F'\t' 'NR>1 && $1==0 {s[$4]+=$6; n[$4]++; t+=$6} END {for (k in s) printf "%-34s %4d x %6.2f us  %5.1f%%\n", k, n[k], s[k]/n[k], 100*s[k]/t; printf "sum of releases %.1f us\n", t}' $O/tl_l8b.txt | sort -k4 -n -r
el
mkdir -p $OUT/s51d && cp $O/*.txt $OUT/s51d/ 2>/dev/null
true
