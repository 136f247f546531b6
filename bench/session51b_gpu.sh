#!/bin/bash
# Session 51, call 2: the rope-fused q/k/v's modes (LOCKSTEP_CUDA_ROPE_QKV=<mode>, kernels.cu
# norm_mmv3_rope_cl_body: bits 0-1 where the attention may launch, 0 after the rows, 2 after
# the slot; bit 2 the slot on one warp) against the two kernels (=off): check's replayed vs
# tapped for each mode, tokens, tg128 alternating, timelines of modes 4 and 6.
set -u
B=./.device/lockstep
O=/tmp/s51b; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/g3.gguf > /dev/null 2>&1 &
$B synth --like gemma3 --type Q4_K_M --layers 3 --metadata-from .device/gemma3-meta.gguf -o /tmp/g3c.gguf > /dev/null 2>&1 &
wait; el
$B bench --backend cuda -m /tmp/g3c.gguf -p 16 -n 2 -r 1 > /dev/null 2>&1 &
LOCKSTEP_CUDA_TIMELINE=/tmp/x $B bench --backend cuda -m /tmp/g3c.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 &
wait; el
for m in 2 4 6; do
  LOCKSTEP_CUDA_ROPE_QKV=$m LOCKSTEP_CUDA_STATS=1 $B bench --backend cuda -m /tmp/g3.gguf -p 0 -n 4 -r 1 2>&1 | grep -E "step graphs" | grep -oE "[0-9]+ q/k/v launches with rope_store inside" | sed "s/^/mode $m: /"
  for M in g3 g3c; do
    LOCKSTEP_CUDA_ROPE_QKV=$m $B check -m /tmp/$M.gguf --backend cuda > $O/check-$M-$m.txt 2>&1; echo "== check $M mode $m: rc $? | $(grep -E 'replayed' $O/check-$M-$m.txt | tr -s ' ' | cut -c1-140)"
  done
done
h() { $@ run --backend cuda -m /tmp/$M.gguf -p "$P" -n 48 --temp 0 2>/dev/null | md5sum | cut -c1-12; }
P='The quick brown fox'
M=g3; echo "tokens $M: 0 $(h $B) 2 $(h env LOCKSTEP_CUDA_ROPE_QKV=2 $B) 4 $(h env LOCKSTEP_CUDA_ROPE_QKV=4 $B) 6 $(h env LOCKSTEP_CUDA_ROPE_QKV=6 $B) off $(h env LOCKSTEP_CUDA_ROPE_QKV=off $B)"
el
tg() { timeout 60 env LOCKSTEP_CUDA_ROPE_QKV=$1 $B bench --backend cuda -m /tmp/$M.gguf -p 0 -n 128 -r 3 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f6 | sed 's/ *± */±/; s/ //g'; }
M=g3; for r in 1 2 3 4 5 6; do echo "$M tg128 round $r: 0 $(tg 0) | 2 $(tg 2) | 4 $(tg 4) | 6 $(tg 6) | off $(tg off)"; done
el
for m in 4 6; do
LOCKSTEP_CUDA_ROPE_QKV=$m LOCKSTEP_CUDA_TIMELINE=$O/tl_g3_$m.txt $B bench --backend cuda -m /tmp/g3.gguf -p 0 -n 32 -r 1 2>&1 | grep '| tg'
awk -F'\t' 'NR>1 && $1==0 && $3>=7 && $3<=10' $O/tl_g3_$m.txt | cut -f3-9
awk -F'\t' 'NR>1 && $1==0 {s[$4]+=$6; n[$4]++; t+=$6} END {for (k in s) printf "%-34s %4d x %6.2f us  %5.1f%%\n", k, n[k], s[k]/n[k], 100*s[k]/t; printf "sum of releases %.1f us\n", t}' $O/tl_g3_$m.txt | sort -k4 -n -r | head -6
done
el
mkdir -p $OUT/s51b && cp $O/*.txt $OUT/s51b/ 2>/dev/null
true
