#!/bin/bash
# Session 51, call 1: rope_store's work inside the norm-fused q/k/v launch of replayed steps,
# on clusters of one head slot (kernels.cu norm_mmv3_rope_cl_<id>, graph_exec::rope_rewrite;
# LOCKSTEP_CUDA_ROPE_QKV=0 keeps the two kernels, =entry launches the attention at the fused
# kernel's entry): check's replayed vs tapped, the rewrite's count, the same tokens, tg128
# alternating, Gemma-3's timeline.
set -u
B=./.device/lockstep
O=/tmp/s51; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
OFF="env LOCKSTEP_CUDA_ROPE_QKV=0"
ENTRY="env LOCKSTEP_CUDA_ROPE_QKV=entry"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/g3.gguf > /dev/null 2>&1 &
$B synth --like gemma3 --type Q4_K_M --layers 3 --metadata-from .device/gemma3-meta.gguf -o /tmp/g3c.gguf > /dev/null 2>&1 &
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf > /dev/null 2>&1 &
wait; el
$B bench --backend cuda -m /tmp/g3c.gguf -p 16 -n 2 -r 1 > /dev/null 2>&1 &
LOCKSTEP_CUDA_TIMELINE=/tmp/x $B bench --backend cuda -m /tmp/g3c.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 &
wait; el
LOCKSTEP_CUDA_STATS=1 $B bench --backend cuda -m /tmp/g3.gguf -p 0 -n 4 -r 1 2>&1 | grep -E "step graphs|error|Error" | cut -c1-400
for M in g3 g3c; do
  $B check -m /tmp/$M.gguf --backend cuda > $O/check-$M.txt 2>&1; echo "== check $M (fused): rc $? | $(grep -E 'replayed' $O/check-$M.txt | tr -s ' ' | cut -c1-140)"
done
h() { $@ run --backend cuda -m /tmp/$M.gguf -p "$P" -n 48 --temp 0 2>/dev/null | md5sum | cut -c1-12; }
P='The quick brown fox'
for M in g3 smol; do echo "tokens $M: fused $(h $B) off $(h $OFF $B) entry $(h $ENTRY $B)"; done
el
tg() { timeout 60 $@ bench --backend cuda -m /tmp/$M.gguf -p 0 -n 128 -r 3 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f6 | sed 's/ *± */±/; s/ //g'; }
M=g3; for r in 1 2 3 4; do echo "$M tg128 round $r: fused $(tg $B) | off $(tg $OFF $B) | entry $(tg $ENTRY $B)"; done
el
LOCKSTEP_CUDA_TIMELINE=$O/tl_g3.txt $B bench --backend cuda -m /tmp/g3.gguf -p 0 -n 32 -r 1 2>&1 | grep '| tg'
awk -F'\t' 'NR>1 && $1==0 && $3<=8' $O/tl_g3.txt | cut -f3-9
awk -F'\t' 'NR>1 && $1==0 {s[$4]+=$6; n[$4]++; t+=$6} END {for (k in s) printf "%-34s %4d x %6.2f us  %5.1f%%\n", k, n[k], s[k]/n[k], 100*s[k]/t; printf "sum of releases %.1f us\n", t}' $O/tl_g3.txt | sort -k4 -n -r
el
mkdir -p $OUT/s51 && cp $O/*.txt $OUT/s51/ 2>/dev/null
true
