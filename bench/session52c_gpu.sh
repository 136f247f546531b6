#!/bin/bash
# Session 52, call 3: the 8B's q/k/v (norm_long_mmv3: 6144 rows on 4224 warps, 1.45 rows a warp)
# with each warp asking both its rows into L2 before its grid wait (kernel define
# LOCKSTEP_LONG_PF_ROWS_QKV=2; the gate/up keeps one row) against the default; the same values.
# tg128 alternating, replayed vs tapped, tokens, and both builds' timelines.
set -u
B=./.device/lockstep
O=/tmp/s52c; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
Q2="env LOCKSTEP_CUDA_DEFINES=LOCKSTEP_LONG_PF_ROWS_QKV=2"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$B synth --like llama-8b --type Q4_K_M --layers 3 -o /tmp/l8c.gguf > /dev/null 2>&1
$B synth --like llama-8b --type Q4_K_M -o /tmp/l8b.gguf > /dev/null 2>&1 &
$B bench --backend cuda -m /tmp/l8c.gguf -p 16 -n 2 -r 1 > /dev/null 2>&1 &
$Q2 $B bench --backend cuda -m /tmp/l8c.gguf -p 16 -n 2 -r 1 > /dev/null 2>&1 &
LOCKSTEP_CUDA_TIMELINE=/tmp/x $B bench --backend cuda -m /tmp/l8c.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 &
LOCKSTEP_CUDA_TIMELINE=/tmp/y $Q2 $B bench --backend cuda -m /tmp/l8c.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 &
wait; el
$Q2 $B check -m /tmp/l8c.gguf --backend cuda > $O/check-l8c.txt 2>&1; echo "== check l8c (qkv2): $(grep -E 'replayed' $O/check-l8c.txt | tr -s ' ' | cut -c1-140)"
h() { timeout 60 $@ run --backend cuda -m /tmp/l8b.gguf -p 'The quick brown fox' -n 48 --temp 0 2>/dev/null | md5sum | cut -c1-12; }
echo "tokens l8b: qkv2 $(h $Q2 $B) default $(h $B)"; el
tg() { timeout 90 $@ bench --backend cuda -m /tmp/l8b.gguf -p 0 -n 128 -r 3 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f6 | sed 's/ *± */±/; s/ //g'; }
for r in 1 2 3; do echo "l8b tg128 round $r: qkv2 $(tg $Q2 $B) | default $(tg $B)"; echo "l8b tg128 round $r': default $(tg $B) | qkv2 $(tg $Q2 $B)"; done; el
for v in default qkv2; do
  V=""; [ $v = qkv2 ] && V="$Q2"
  LOCKSTEP_CUDA_TIMELINE=$O/tl_$v.txt $V $B bench --backend cuda -m /tmp/l8b.gguf -p 0 -n 32 -r 1 2>&1 | grep '| tg'
  echo "timeline $v:"; awk -F'\t' 'NR>1 && $1==0 && $3>=1 && $3<=6' $O/tl_$v.txt | cut -f3-9
  awk -F'\t' 'NR>1 && $1==0 {s[$4]+=$6; n[$4]++; t+=$6} END {for (k in s) printf "%-34s %4d x %6.2f us  %5.1f%%\n", k, n[k], s[k]/n[k], 100*s[k]/t; printf "sum of releases %.1f us\n", t}' $O/tl_$v.txt | sort -k4 -n -r
done; el
mkdir -p $OUT/s52c && cp $O/*.txt $OUT/s52c/ 2>/dev/null
true
