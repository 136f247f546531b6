#!/bin/bash
# Session 38e: the submitted build beside llama.cpp and session 37's build in one call. Builds
# llama-bench for the card (session 36b's recipe, from .device/llama.cpp.tar.xz); on synthesized
# SmolLM2-135M Q4_1, Gemma-3-270M Q4_K_M and Llama-3.2-1B Q4_K_M: llama-bench -p 0 -n 128 -r 3
# -fa 0,1, then lockstep tg128 -r 3, session 37's build (.device/lockstep-s37) and this one
# alternating (SmolLM2 ROUNDS rounds, the others 2); check on each (replayed vs tapped).
set -u
B=./.device/lockstep
O=${OUT:-/tmp/out}; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
LIMIT=${LIMIT:-585}
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
( $B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf > /dev/null 2>&1
  $B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/g3.gguf > /dev/null 2>&1
  $B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf > /dev/null 2>&1
  for m in smol g3 l1b; do
    nice -n 5 $B bench --backend cuda -m /tmp/$m.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1
    nice -n 5 .device/lockstep-s37 bench --backend cuda -m /tmp/$m.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1
  done ) &
LB=/tmp/lc/b/bin/llama-bench
bash bench/llama_bench_build.sh $O 300; wait; el
[ -x $LB ] && $LB --version 2>&1 | tail -1
for m in smol g3 l1b; do
  echo "== llama.cpp $m"
  [ -x $LB ] && $LB -m /tmp/$m.gguf -p 0 -n 128 -ngl 99 -r 3 -fa 0,1 -o md 2>&1 | grep -E '^\| [a-z]' | grep -v model
done
el
tg() { left=$(( LIMIT - ($(date +%s) - T0) )); [ $left -lt 15 ] && { echo skipped; return; }
  timeout $left ${BIN:-$B} bench --backend cuda -m /tmp/$1.gguf -p 0 -n 128 -r 3 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f6 | sed 's/ *± */±/; s/ //g'; }
for m in smol g3 l1b; do
  echo "== lockstep tg128 -r 3 $m: session 37's build / this build"
  n=2; [ $m = smol ] && n=${ROUNDS:-3}
  for r in $(seq $n); do echo "round $r  $(BIN=.device/lockstep-s37 tg $m) / $(tg $m)"; done
done
el
for m in smol g3 l1b; do
  left=$(( LIMIT - ($(date +%s) - T0) )); [ $left -lt 20 ] && break
  timeout $left $B check -m /tmp/$m.gguf --backend cuda > $O/check_$m.txt 2>&1
  echo "== check $m: rc $? | $(grep -E 'replayed' $O/check_$m.txt | tr -s ' ' | cut -c1-100)"
done
el
true
