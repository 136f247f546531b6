#!/bin/bash
# Session 48, call 5: the session's final build beside llama.cpp on one card in one call:
# llama-bench (built here from .device/llama.cpp.tar.xz while the models are synthesized and
# the kernels compiled) -p 0 -n 128 -r 3 -fa 0,1, then lockstep bench --backend cuda -p 0 -n
# 128 -r 3, on the four anchor shapes; a second round on Gemma-3. Lines go to
# $OUT/side.txt as they come.
set -u
B=./.device/lockstep
O=/tmp/s48e; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]" | tee -a $OUT/side.txt; }
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/side.txt
( bash bench/llama_bench_build.sh $O 330 > $O/lbuild.txt 2>&1 ) &
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/g3.gguf > /dev/null 2>&1 &
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf > /dev/null 2>&1 &
$B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf > /dev/null 2>&1 &
$B synth --like llama-8b --type Q4_K_M -o /tmp/l8b.gguf > /dev/null 2>&1
$B bench --backend cuda -m /tmp/smol.gguf -p 16 -n 2 -r 1 > /dev/null 2>&1
wait; cat $O/lbuild.txt | tee -a $OUT/side.txt; el
LB=/tmp/lc/b/bin/llama-bench
lc() { timeout 100 $LB -m /tmp/$M.gguf -p 0 -n 128 -ngl 99 -r 3 -fa 0,1 -o md 2>&1 | grep -E '^\| [a-z]' | grep -v model | cut -d'|' -f6- | tr '\n' ' '; }
lk() { timeout 60 $B bench --backend cuda -m /tmp/$M.gguf -p 0 -n 128 -r 3 2>&1 | grep -E '\| tg' | cut -d'|' -f6 | tr -s ' '; }
for M in g3 smol l1b l8b; do echo "round 1 $M: llama.cpp $(lc) | lockstep $(lk)" | tee -a $OUT/side.txt; done
el
for M in g3; do echo "round 2 $M: llama.cpp $(lc) | lockstep $(lk)" | tee -a $OUT/side.txt; done
el
true
