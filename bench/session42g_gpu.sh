#!/bin/bash
# Session 42, call 7: the norm-fused decode kernels (norm_mmv3_fast1, norm_gate_up_fast1) on
# blocks of 512 or 1024 threads instead of 256 (16 or 32 rows a block: one block an SM or
# fewer, each still running the norm on its first 256 threads): a timing experiment
# (LOCKSTEP_CUDA_EXP_NORM_BLOCK with the matching launch bounds). The tokens (the same sums),
# check on Gemma-3, then tg128 -r 3 alternating, and the timeline with 512.
set -u
B=./.device/lockstep
O=/tmp/s42g; mkdir -p $O
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/g3.gguf > /dev/null 2>&1 &
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf > /dev/null 2>&1 &
wait
V5="LOCKSTEP_CUDA_EXP_NORM_BLOCK=512 LOCKSTEP_CUDA_DEFINES=NORM_FUSED_THREADS=512"
V10="LOCKSTEP_CUDA_EXP_NORM_BLOCK=1024 LOCKSTEP_CUDA_DEFINES=NORM_FUSED_THREADS=1024"
$B bench --backend cuda -m /tmp/g3.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 &
env $V5 $B bench --backend cuda -m /tmp/g3.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 &
env $V10 $B bench --backend cuda -m /tmp/g3.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 &
env $V5 LOCKSTEP_CUDA_TIMELINE=/tmp/x $B bench --backend cuda -m /tmp/g3.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 &
wait
h() { env "$@" $B run --backend cuda -m /tmp/$M.gguf -p 'The quick brown fox' -n 48 --temp 0 2>/dev/null | md5sum | cut -c1-12; }
M=g3; echo "tokens g3: 256 $(h X=1), 512 $(h $V5), 1024 $(h $V10) (64901c8f9708)"
M=smol; echo "tokens smol: 256 $(h X=1), 512 $(h $V5) (10d82d4b9948)"
env $V5 $B check -m /tmp/g3.gguf --backend cuda > $O/check-g3.txt 2>&1
echo "== check g3 512: rc $? | $(grep -E 'replayed' $O/check-g3.txt | tr -s ' ' | cut -c1-110)"
tg() { timeout 40 env "$@" $B bench --backend cuda -m /tmp/$M.gguf -p 0 -n 128 -r 3 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f6 | sed 's/ *± */±/; s/ //g'; }
for r in 1 2 3; do M=g3; echo "g3 tg128 round $r: 256 $(tg X=1) / 512 $(tg $V5) / 1024 $(tg $V10)"; done
for r in 1 2; do M=smol; echo "smol tg128 round $r: 256 $(tg X=1) / 512 $(tg $V5)"; done
env $V5 LOCKSTEP_CUDA_TIMELINE=$O/tl_g3_512.txt $B bench --backend cuda -m /tmp/g3.gguf -p 0 -n 128 -r 1 > /dev/null 2>&1
awk -F'\t' 'NR>1 && $1==0 && $3>=9 && $3<=16' $O/tl_g3_512.txt
mkdir -p $OUT/s42g && cp $O/*.txt $OUT/s42g/ 2>/dev/null
true
