#!/bin/bash
# Session 47, call 3: does residual_norm wait on DRAM? The residual row it reads (written two
# kernels back and more) and its norm weights asked into L2 before its grid wait
# (LOCKSTEP_CUDA_DEFINES=LOCKSTEP_RN_PREFETCH) against the default: the timeline's marks of the
# 8B's residual_norm (1: loads in, 2: reduced, 9: done), tokens, tg128 alternating on the 8B
# and Llama-1B. Not kept: the switch is in bench/session47/variants.patch (1).
set -u
B=./.device/lockstep
O=/tmp/s47c; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
F=LOCKSTEP_CUDA_DEFINES=LOCKSTEP_RN_PREFETCH
[ -f /tmp/l1b.gguf ] || $B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf > /dev/null 2>&1
[ -f /tmp/l8b.gguf ] || $B synth --like llama-8b --type Q4_K_M -o /tmp/l8b.gguf > /dev/null 2>&1
$B bench --backend cuda -m /tmp/l1b.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 &
env $F $B bench --backend cuda -m /tmp/l1b.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 &
LOCKSTEP_CUDA_TIMELINE=/tmp/x $B bench --backend cuda -m /tmp/l1b.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 &
LOCKSTEP_CUDA_TIMELINE=/tmp/x env $F $B bench --backend cuda -m /tmp/l1b.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 &
wait; el
h() { env $1 $B run --backend cuda -m /tmp/$M.gguf -p 'The quick brown fox' -n 48 --temp 0 2>/dev/null | md5sum | cut -c1-12; }
M=l1b; echo "tokens l1b: $(h X=1) $(h $F) (4e5bee1ab652)"
M=l8b; echo "tokens l8b: $(h X=1) $(h $F)"
for v in X=1 $F; do
  LOCKSTEP_CUDA_TIMELINE=$O/tl_l8b_${v%%=*}.txt env $v $B bench --backend cuda -m /tmp/l8b.gguf -p 0 -n 32 -r 1 2>&1 | grep '| tg'
  echo "== $v: residual_norm, gate_up, mmv3 means"
  awk -F'\t' 'NR>1 && $1==0 && ($4=="residual_norm" || $4=="mmv3_fast2r_12_14" || $4=="gate_up_fast1_12") && $3>=2 && $3<=14' $O/tl_l8b_${v%%=*}.txt | cut -f3-9
done
el
tg() { timeout 60 env $1 $B bench --backend cuda -m /tmp/$M.gguf -p 0 -n 128 -r 3 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f6 | sed 's/ *± */±/; s/ //g'; }
for M in l8b l1b; do for r in 1 2 3; do echo "$M tg128 round $r: default $(tg X=1) | prefetch $(tg $F)"; done; done
el
mkdir -p $OUT/s47c && cp $O/*.txt $OUT/s47c/ 2>/dev/null
true
