#!/bin/bash
# Session 53, call 2: where the split-down probe's lab gain goes in the step. Alone
# (bench/gemv_lab/down_shape.cu, call 1) session 52's mmv_split2r streams the 8B's downs 18-25%
# faster than mmv_fast2r, Llama-1B's 25%; in the step (session 52 call 6) it lost 1.6% / +0.1%.
# Here the in-graph timelines of both (LOCKSTEP_CUDA_SPLIT2R=8192 against the default) on the
# 8B and Llama-1B, and tg128 alternating again.
set -u
B=./.device/lockstep
O=/tmp/s53; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
S="env LOCKSTEP_CUDA_SPLIT2R=8192"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$B synth --like llama-8b --type Q4_K_M -o /tmp/l8b.gguf > /dev/null 2>&1 &
$B synth --like llama-8b --type Q4_K_M --layers 3 -o /tmp/l8c.gguf > /dev/null 2>&1 &
$B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf > /dev/null 2>&1 &
wait; el
$B bench --backend cuda -m /tmp/l8c.gguf -p 16 -n 2 -r 1 > /dev/null 2>&1 &
LOCKSTEP_CUDA_TIMELINE=/tmp/x $B bench --backend cuda -m /tmp/l8c.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 &
wait; el
summ() { awk -F'\t' 'NR>1 && $1==0 {s[$4]+=$6; n[$4]++; t+=$6} END {for (k in s) printf "%-34s %4d x %6.2f us  %5.1f%%\n", k, n[k], s[k]/n[k], 100*s[k]/t; printf "sum of releases %.1f us\n", t}' $1 | sort -k4 -n -r; }
for M in l8b l1b; do
  for V in default split; do
    if [ $V = split ]; then P="$S"; else P=env; fi
    echo "== timeline $M $V: $(LOCKSTEP_CUDA_TIMELINE=$O/tl_${M}_$V.txt $P $B bench --backend cuda -m /tmp/$M.gguf -p 0 -n 32 -r 1 2>&1 | grep '| tg' | tr -s ' ' | cut -d'|' -f6)"
    summ $O/tl_${M}_$V.txt
    awk -F'\t' 'NR>1 && $1==0 && $3>=5 && $3<=12' $O/tl_${M}_$V.txt | cut -f3-9
  done
done
el
tg() { timeout 90 $@ bench --backend cuda -m /tmp/$M.gguf -p 0 -n 128 -r 3 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f6 | sed 's/ *± */±/; s/ //g'; }
M=l8b; for r in 1 2; do echo "l8b tg128 round $r: split $(tg $S $B) | default $(tg $B)"; done
M=l1b; for r in 1 2; do echo "l1b tg128 round $r: split $(tg $S $B) | default $(tg $B)"; done
el
mkdir -p $OUT/s53 && cp $O/*.txt $OUT/s53/ 2>/dev/null
true
