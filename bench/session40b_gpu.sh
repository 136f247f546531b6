#!/bin/bash
# Session 40b: llama.cpp's side of the side-by-side comparison. Builds llama-bench for the card
# (bench/llama_bench_build.sh, from .device/llama.cpp.tar.xz) while synthesizing the four anchor
# shapes (SmolLM2-135M Q4_1, Gemma-3-270M Q4_K_M, Llama-3.2-1B Q4_K_M, Llama-3.1-8B Q4_K_M) and
# warming lockstep's kernel cache; then llama-bench pp512 + tg128 -r 3 -fa 0,1 on each. In
# session 40 its build stopped at 330 s (call 11); calls 12-13 (bench/session40/runs.txt) finished
# it on the same warm machine and ran both tools model by model, one command each.
set -u
B=./.device/lockstep
O=${OUT:-/tmp/out}; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
( $B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf > /dev/null 2>&1
  $B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/g3.gguf > /dev/null 2>&1
  $B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf > /dev/null 2>&1
  $B synth --like llama-8b --type Q4_K_M -o /tmp/l8b.gguf > /dev/null 2>&1
  for m in smol g3 l1b l8b; do nice -n 5 $B bench --backend cuda -m /tmp/$m.gguf -p 8 -n 2 -r 1 > /dev/null 2>&1; done ) &
LB=/tmp/lc/b/bin/llama-bench
bash bench/llama_bench_build.sh $O 330; wait; el
ls -la /tmp/*.gguf | awk '{print $5, $9}'
[ -x $LB ] && $LB --version 2>&1 | tail -1
for m in smol g3 l1b l8b; do
  echo "== llama.cpp $m"
  [ -x $LB ] && timeout 120 $LB -m /tmp/$m.gguf -p 512 -n 128 -ngl 99 -r 3 -fa 0,1 -o md 2>&1 | grep -E '^\| [a-z]' | grep -v model
  el
done
true
