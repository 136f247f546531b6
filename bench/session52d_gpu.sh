#!/bin/bash
# Session 52, call 4: the 8B's long norm-fused rows (k = 4096: two units a lane) with both of a
# lane's units loaded before either dot (kernel define LOCKSTEP_LONG_PIPE: 1 the q/k/v, 2 the
# gate/up too; the same dots in the same order, so the same values) against the default.
# tg128 alternating, replayed vs tapped, tokens, the PIPE=2 timeline.
set -u
B=./.device/lockstep
O=/tmp/s52d; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
P1="env LOCKSTEP_CUDA_DEFINES=LOCKSTEP_LONG_PIPE=1"
P2="env LOCKSTEP_CUDA_DEFINES=LOCKSTEP_LONG_PIPE=2"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$B synth --like llama-8b --type Q4_K_M --layers 3 -o /tmp/l8c.gguf > /dev/null 2>&1
$B synth --like llama-8b --type Q4_K_M -o /tmp/l8b.gguf > /dev/null 2>&1 &
$B bench --backend cuda -m /tmp/l8c.gguf -p 16 -n 2 -r 1 > /dev/null 2>&1 &
$P1 $B bench --backend cuda -m /tmp/l8c.gguf -p 16 -n 2 -r 1 > /dev/null 2>&1 &
$P2 $B bench --backend cuda -m /tmp/l8c.gguf -p 16 -n 2 -r 1 > /dev/null 2>&1 &
LOCKSTEP_CUDA_TIMELINE=/tmp/y $P2 $B bench --backend cuda -m /tmp/l8c.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 &
wait; el
$P2 $B check -m /tmp/l8c.gguf --backend cuda > $O/check-l8c.txt 2>&1; echo "== check l8c (pipe 2): $(grep -E 'replayed' $O/check-l8c.txt | tr -s ' ' | cut -c1-140)"
h() { timeout 60 $@ run --backend cuda -m /tmp/l8b.gguf -p 'The quick brown fox' -n 48 --temp 0 2>/dev/null | md5sum | cut -c1-12; }
echo "tokens l8b: pipe1 $(h $P1 $B) pipe2 $(h $P2 $B) default $(h $B)"; el
tg() { timeout 90 $@ bench --backend cuda -m /tmp/l8b.gguf -p 0 -n 128 -r 3 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f6 | sed 's/ *± */±/; s/ //g'; }
for r in 1 2 3 4; do echo "l8b tg128 round $r: pipe1 $(tg $P1 $B) | pipe2 $(tg $P2 $B) | default $(tg $B)"; done; el
LOCKSTEP_CUDA_TIMELINE=$O/tl_pipe2.txt $P2 $B bench --backend cuda -m /tmp/l8b.gguf -p 0 -n 32 -r 1 2>&1 | grep '| tg'
awk -F'\t' 'NR>1 && $1==0 && $3>=1 && $3<=6' $O/tl_pipe2.txt | cut -f3-9
awk -F'\t' 'NR>1 && $1==0 {s[$4]+=$6; n[$4]++; t+=$6} END {for (k in s) printf "%-34s %4d x %6.2f us  %5.1f%%\n", k, n[k], s[k]/n[k], 100*s[k]/t; printf "sum of releases %.1f us\n", t}' $O/tl_pipe2.txt | sort -k4 -n -r
el
mkdir -p $OUT/s52d && cp $O/*.txt $OUT/s52d/ 2>/dev/null
true
