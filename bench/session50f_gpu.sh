#!/bin/bash
# Session 50, call 6: the o projection after the decode attention with every weight unit loaded
# before its grid wait (mmv_pre2r_12, graph_exec::preload_rewrite, LOCKSTEP_CUDA_O_PRELOAD=1),
# against the same binary without (mmv_fast2r_12): check's replayed vs tapped on the cut 8B,
# the same tokens, tg128 alternating on the 8B and Llama-1B (also with the attention launching
# the o at its grid wait, LOCKSTEP_EARLY_LAUNCH), then the 8B's timeline.
set -u
B=./.device/lockstep
O=/tmp/s50f; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
NEW="env LOCKSTEP_CUDA_O_PRELOAD=1"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
[ -f /tmp/l8b.gguf ] || $B synth --like llama-8b --type Q4_K_M -o /tmp/l8b.gguf > /dev/null 2>&1 &
[ -f /tmp/l1b.gguf ] || $B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf > /dev/null 2>&1 &
$B synth --like llama-8b --type Q4_K_M --layers 3 -o /tmp/l8c.gguf > /dev/null 2>&1 &
$B synth --like llama-1b --type Q4_K_M --layers 3 -o /tmp/l1c.gguf > /dev/null 2>&1 &
wait; el
$B bench --backend cuda -m /tmp/l1c.gguf -p 16 -n 2 -r 1 > /dev/null 2>&1 &
LOCKSTEP_CUDA_DEFINES=LOCKSTEP_EARLY_LAUNCH $B bench --backend cuda -m /tmp/l1c.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 &
LOCKSTEP_CUDA_TIMELINE=/tmp/x $B bench --backend cuda -m /tmp/l1c.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 &
wait; el
for M in l8c l1c; do
  $NEW $B check -m /tmp/$M.gguf --backend cuda > $O/check-$M.txt 2>&1; echo "== check $M (preload): rc $? | $(grep -E 'replayed' $O/check-$M.txt | tr -s ' ' | cut -c1-140)"
done
el
h() { $@ run --backend cuda -m /tmp/$M.gguf -p "$P" -n 48 --temp 0 2>/dev/null | md5sum | cut -c1-12; }
P='The quick brown fox'
for M in l8b l1b; do echo "tokens $M: preload $(h $NEW $B) plain $(h $B)"; done
el
tg() { timeout 90 $@ bench --backend cuda -m /tmp/$M.gguf -p 0 -n 128 -r 3 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f6 | sed 's/ *± */±/; s/ //g'; }
E="env LOCKSTEP_CUDA_DEFINES=LOCKSTEP_EARLY_LAUNCH"
M=l8b; for r in 1 2 3; do echo "$M tg128 round $r: preload $(tg $NEW $B) | plain $(tg $B) | preload+early $(tg $NEW $E $B) | early $(tg $E $B)"; done
el
M=l1b; for r in 1 2; do echo "$M tg128 round $r: preload $(tg $NEW $B) | plain $(tg $B)"; done
el
LOCKSTEP_CUDA_TIMELINE=$O/tl_l8b.txt $NEW $B bench --backend cuda -m /tmp/l8b.gguf -p 0 -n 32 -r 1 2>&1 | grep '| tg'
awk -F'\t' 'NR>1 && $1==0 && $3<=12' $O/tl_l8b.txt | cut -f3-9
awk -F'\t' 'NR>1 && $1==0 {s[$4]+=$6; n[$4]++; t+=$6} END {for (k in s) printf "%-34s %4d x %6.2f us  %5.1f%%\n", k, n[k], s[k]/n[k], 100*s[k]/t; printf "sum of releases %.1f us\n", t}' $O/tl_l8b.txt | sort -k4 -n -r
el
mkdir -p $OUT/s50f && cp $O/*.txt $OUT/s50f/ 2>/dev/null
true
