#!/bin/bash
# Session 51, call 3: the two-rows-a-warp mat-vecs (fast_rows_nr: the 8B's and Llama-1B's
# downs, the LM heads) with two units a row in flight (LOCKSTEP_CUDA_DEFINES=LOCKSTEP_NR_PIPE2)
# against the default loop: the same tokens, check's replayed vs tapped, tg128 alternating,
# the 8B's timeline.
set -u
B=./.device/lockstep
O=/tmp/s51c; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
NEW="env LOCKSTEP_CUDA_DEFINES=LOCKSTEP_NR_PIPE2"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$B synth --like llama-8b --type Q4_K_M -o /tmp/l8b.gguf > /dev/null 2>&1 &
$B synth --like llama-8b --type Q4_K_M --layers 3 -o /tmp/l8c.gguf > /dev/null 2>&1 &
$B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf > /dev/null 2>&1 &
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/g3.gguf > /dev/null 2>&1 &
wait; el
$B bench --backend cuda -m /tmp/l8c.gguf -p 16 -n 2 -r 1 > /dev/null 2>&1 &
$NEW $B bench --backend cuda -m /tmp/l8c.gguf -p 16 -n 2 -r 1 > /dev/null 2>&1 &
LOCKSTEP_CUDA_TIMELINE=/tmp/x $NEW $B bench --backend cuda -m /tmp/l8c.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 &
wait; el
$NEW $B check -m /tmp/l8c.gguf --backend cuda > $O/check-l8c.txt 2>&1; echo "== check l8c (pipe): rc $? | $(grep -E 'replayed' $O/check-l8c.txt | tr -s ' ' | cut -c1-140)"
h() { $@ run --backend cuda -m /tmp/$M.gguf -p "$P" -n 48 --temp 0 2>/dev/null | md5sum | cut -c1-12; }
P='The quick brown fox'
for M in l8b l1b g3; do echo "tokens $M: pipe $(h $NEW $B) plain $(h $B)"; done
el
tg() { timeout 90 $@ bench --backend cuda -m /tmp/$M.gguf -p 0 -n 128 -r 3 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f6 | sed 's/ *± */±/; s/ //g'; }
M=l8b; for r in 1 2 3; do echo "$M tg128 round $r: pipe $(tg $NEW $B) | plain $(tg $B)"; done
M=l1b; for r in 1 2 3; do echo "$M tg128 round $r: pipe $(tg $NEW $B) | plain $(tg $B)"; done
M=g3; for r in 1 2; do echo "$M tg128 round $r: pipe $(tg $NEW $B) | plain $(tg $B)"; done
el
LOCKSTEP_CUDA_TIMELINE=$O/tl_l8b.txt $NEW $B bench --backend cuda -m /tmp/l8b.gguf -p 0 -n 32 -r 1 2>&1 | grep '| tg'
awk -F'\t' 'NR>1 && $1==0 && $3>=1 && $3<=12' $O/tl_l8b.txt | cut -f3-9
awk -F'\t' 'NR>1 && $1==0 {s[$4]+=$6; n[$4]++; t+=$6} END {for (k in s) printf "%-34s %4d x %6.2f us  %5.1f%%\n", k, n[k], s[k]/n[k], 100*s[k]/t; printf "sum of releases %.1f us\n", t}' $O/tl_l8b.txt | sort -k4 -n -r
el
mkdir -p $OUT/s51c && cp $O/*.txt $OUT/s51c/ 2>/dev/null
true
