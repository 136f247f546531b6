#!/bin/bash
# Session 49, call 5: the session's final build beside llama.cpp on one card in one call
# (call 4's machine: its llama-bench, models and kernel cache): llama-bench -m F -p 0 -n 128
# -ngl 99 -r 3 -fa 0,1 then lockstep bench --backend cuda -m F -p 0 -n 128 -r 3 on the four
# anchor shapes, a second round of Gemma-3, then pp512 (-p 512 -n 0) the same way.
set -u
B=./.device/lockstep
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
LB=/tmp/lc/b/bin/llama-bench
lc() { timeout 100 $LB -m /tmp/$M.gguf $1 -ngl 99 -r 3 -fa 0,1 -o md 2>&1 | grep -E '^\| [a-z]' | grep -v model | cut -d'|' -f6- | tr '\n' ' '; }
lk() { timeout 80 $B bench --backend cuda -m /tmp/$M.gguf $1 -r 3 2>&1 | grep -E '\| (tg|pp)' | cut -d'|' -f6 | tr -s ' '; }
for M in g3 smol l1b l8b; do echo "tg128 round 1 $M: llama.cpp $(lc '-p 0 -n 128') | lockstep $(lk '-p 0 -n 128')"; done
el
M=g3; echo "tg128 round 2 $M: llama.cpp $(lc '-p 0 -n 128') | lockstep $(lk '-p 0 -n 128')"
el
for M in g3 smol l1b l8b; do echo "pp512 $M: llama.cpp $(lc '-p 512 -n 0') | lockstep $(lk '-p 512 -n 0')"; done
el
true
