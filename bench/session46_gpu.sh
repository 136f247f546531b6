#!/bin/bash
# Session 46, call 1: (a) the parameter-hold lab with the mat-vecs' uniform-datapath prologue
# (flag U, bench/pdl_lab/run_u.sh, prepared in session 45); (b) the engine's timeline with two
# more stamps in mmv_fast1: mark 3 once m is in a register before the exit test, mark 2 once
# k is, after the ULDC of m, its compare and the exit (release minus stamp, as 10, 11, 13-15).
set -u
B=./.device/lockstep
O=/tmp/s46; mkdir -p $O
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
echo "== lab U"; bash bench/pdl_lab/run_u.sh 2>&1 | tee $O/lab_u.txt
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/g3.gguf > /dev/null 2>&1
echo "== engine timeline"
LOCKSTEP_CUDA_TIMELINE=$O/tl_g3.txt $B bench --backend cuda -m /tmp/g3.gguf -p 0 -n 32 -r 1 2>&1 | grep '| tg'
awk -F'\t' 'NR>1 && $1==0 && $3>=4 && $3<=17' $O/tl_g3.txt | cut -f4-9
echo "== o rows, all layers"
awk -F'\t' 'NR>1 && $1==0 && $4 ~ /^mmv_fast1_12/' $O/tl_g3.txt | cut -f4-9 | head -40
mkdir -p $OUT/s46 && cp $O/*.txt $OUT/s46/ 2>/dev/null
true
