#!/bin/bash
# Session 47, call 6: the final source (the long norm-fused kernels for Llama's rows: rows
# block-major, each warp's first row asked into L2 before the wait) against residual_norm then
# the consumer (LOCKSTEP_CUDA_NORM_LONG=0): check --ops, tokens of the four shapes, tg128
# alternating on the 8B and Llama-1B, Gemma-3 and SmolLM2 (rows of 640 / 576: untouched), and
# the 8B's timeline.
set -u
B=./.device/lockstep
O=/tmp/s47f; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
OFF=LOCKSTEP_CUDA_NORM_LONG=0
[ -f /tmp/l1b.gguf ] || $B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf > /dev/null 2>&1 &
[ -f /tmp/g3.gguf ] || $B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/g3.gguf > /dev/null 2>&1 &
[ -f /tmp/smol.gguf ] || $B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf > /dev/null 2>&1
$B bench --backend cuda -m /tmp/smol.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 &
LOCKSTEP_CUDA_TIMELINE=/tmp/x $B bench --backend cuda -m /tmp/smol.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 &
[ -f /tmp/l8b.gguf ] || ( $B synth --like llama-8b --type Q4_K_M -o /tmp/l8b.gguf > /dev/null 2>&1 ) &
wait; el
$B check --ops --backend cuda --filter 'residual_norm_then*' > $O/ops.txt 2>&1; echo "== ops: rc $? $(tail -1 $O/ops.txt)"
h() { env $1 $B run --backend cuda -m /tmp/$M.gguf -p 'The quick brown fox' -n 48 --temp 0 2>/dev/null | md5sum | cut -c1-12; }
M=l1b; echo "tokens l1b: $(h X=1) off $(h $OFF) (4e5bee1ab652)"
M=l8b; echo "tokens l8b: $(h X=1) off $(h $OFF) (4aa7e0e30dda)"
M=g3; echo "tokens g3: $(h X=1) (64901c8f9708)"
M=smol; echo "tokens smol: $(h X=1) (10d82d4b9948)"
el
tg() { timeout 60 env $1 $B bench --backend cuda -m /tmp/$M.gguf -p 0 -n 128 -r 3 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f6 | sed 's/ *± */±/; s/ //g'; }
for M in l8b l1b; do for r in 1 2; do echo "$M tg128 round $r: long $(tg X=1) | off $(tg $OFF)"; done; done
for M in g3 smol; do echo "$M tg128: $(tg X=1)"; done
el
LOCKSTEP_CUDA_TIMELINE=$O/tl_l8b.txt $B bench --backend cuda -m /tmp/l8b.gguf -p 0 -n 32 -r 1 2>&1 | grep '| tg'
awk -F'\t' 'NR>1 && $1==0 && $3>=2 && $3<=9' $O/tl_l8b.txt | cut -f3-9
awk -F'\t' 'NR>1 && $1==0 {s[$4]+=$6; n[$4]++; t+=$6} END {for (k in s) printf "%-34s %4d x %6.2f us  %5.1f%%\n", k, n[k], s[k]/n[k], 100*s[k]/t; printf "sum of releases %.1f us\n", t}' $O/tl_l8b.txt | sort -k4 -n -r
el
mkdir -p $OUT/s47f && cp $O/*.txt $OUT/s47f/ 2>/dev/null
true
