#!/bin/bash
# Session 53, call 3: session 40's Gemma-3 cluster-layer lab (bench/cluster_lab/gemma_cluster.cu,
# built here with -DLAB_UNROLL=1 -DLAB_Q5P -DLAB_Q6P into .device/lab/) against today's kernels,
# beside today's step: Gemma-3's tg128 and in-graph timeline (the default build).
set -u
B=./.device/lockstep
O=/tmp/s53c; mkdir -p $O
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/g3.gguf > /dev/null 2>&1
$B bench --backend cuda -m /tmp/g3.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 &
LOCKSTEP_CUDA_TIMELINE=/tmp/x $B bench --backend cuda -m /tmp/g3.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 &
timeout 120 ./.device/lab/gemma_cluster 2>&1 | tee $O/gemma_cluster.txt
wait
tg() { timeout 90 $@ bench --backend cuda -m /tmp/g3.gguf -p 0 -n 128 -r 3 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f6 | sed 's/ *± */±/; s/ //g'; }
for r in 1 2; do echo "g3 tg128 round $r: $(tg $B)"; done
echo "== timeline g3: $(LOCKSTEP_CUDA_TIMELINE=$O/tl_g3.txt $B bench --backend cuda -m /tmp/g3.gguf -p 0 -n 64 -r 1 2>&1 | grep '| tg' | tr -s ' ' | cut -d'|' -f6)"
awk -F'\t' 'NR>1 && $1==0 {s[$4]+=$6; n[$4]++; t+=$6} END {for (k in s) printf "%-34s %4d x %6.2f us  %5.1f%%\n", k, n[k], s[k]/n[k], 100*s[k]/t; printf "sum of releases %.1f us\n", t}' $O/tl_g3.txt | sort -k4 -n -r
mkdir -p $OUT/s53c && cp $O/*.txt $OUT/s53c/ 2>/dev/null
true
