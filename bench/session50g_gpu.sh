#!/bin/bash
# Session 50, call 7: the o projection after the decode attention with its weights loaded
# before its grid wait, now also Gemma-3's and Llama-1B's one-row form (mmv_pre1r_12 for
# mmv_fast1_12; o_preload.patch as saved), against the same binary without
# (LOCKSTEP_CUDA_O_PRELOAD unset): check's replayed vs tapped, the same tokens, tg128
# alternating, Gemma-3's timeline.
set -u
B=./.device/lockstep
O=/tmp/s50g; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
NEW="env LOCKSTEP_CUDA_O_PRELOAD=1"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/g3.gguf > /dev/null 2>&1 &
$B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf > /dev/null 2>&1 &
$B synth --like gemma3 --type Q4_K_M --layers 3 --metadata-from .device/gemma3-meta.gguf -o /tmp/g3c.gguf > /dev/null 2>&1 &
wait; el
$B bench --backend cuda -m /tmp/g3c.gguf -p 16 -n 2 -r 1 > /dev/null 2>&1 &
LOCKSTEP_CUDA_TIMELINE=/tmp/x $B bench --backend cuda -m /tmp/g3c.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 &
wait; el
for M in g3 g3c; do
  $NEW $B check -m /tmp/$M.gguf --backend cuda > $O/check-$M.txt 2>&1; echo "== check $M (preload): rc $? | $(grep -E 'replayed' $O/check-$M.txt | tr -s ' ' | cut -c1-140)"
done
h() { $@ run --backend cuda -m /tmp/$M.gguf -p "$P" -n 48 --temp 0 2>/dev/null | md5sum | cut -c1-12; }
P='The quick brown fox'
for M in g3 l1b; do echo "tokens $M: preload $(h $NEW $B) plain $(h $B)"; done
el
tg() { timeout 60 $@ bench --backend cuda -m /tmp/$M.gguf -p 0 -n 128 -r 3 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f6 | sed 's/ *± */±/; s/ //g'; }
M=g3; for r in 1 2 3 4; do echo "$M tg128 round $r: preload $(tg $NEW $B) | plain $(tg $B)"; done
M=l1b; for r in 1 2 3; do echo "$M tg128 round $r: preload $(tg $NEW $B) | plain $(tg $B)"; done
el
LOCKSTEP_CUDA_TIMELINE=$O/tl_g3.txt $NEW $B bench --backend cuda -m /tmp/g3.gguf -p 0 -n 32 -r 1 2>&1 | grep '| tg'
awk -F'\t' 'NR>1 && $1==0 && $3<=8' $O/tl_g3.txt | cut -f3-9
awk -F'\t' 'NR>1 && $1==0 {s[$4]+=$6; n[$4]++; t+=$6} END {for (k in s) printf "%-34s %4d x %6.2f us  %5.1f%%\n", k, n[k], s[k]/n[k], 100*s[k]/t; printf "sum of releases %.1f us\n", t}' $O/tl_g3.txt | sort -k4 -n -r
el
mkdir -p $OUT/s50g && cp $O/*.txt $OUT/s50g/ 2>/dev/null
true
