#!/bin/bash
# Session 28b: the submitted build. The exact matmul no longer stages Q6_K rows it decodes from
# global memory (check --ops cuda-exact, diff --isolate with cuda-exact on cut Llama-1B, whose
# v, downs and tied head are Q6_K); check --ops cuda (the mixed q/k/v launch); the tokens
# against session 27's hashes; then llama.cpp and lockstep side by side on this card as
# session 27d: llama-bench -p 512 -n 128 -ngl 99 -r 10 -fa 0,1 and lockstep bench -r 10.
set -u
B=./.device/lockstep
O=${OUT:-/tmp/s28b}; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
LIMIT=${LIMIT:-570}
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
LB=/tmp/llama-bench
cat .device/llama-bench.xz.part* | xz -d > $LB && chmod +x $LB
$B synth --like llama-1b --type Q4_K_M --layers 3 -o /tmp/l1b3.gguf | tail -1
( $B bench --backend cuda -m /tmp/l1b3.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 ) &
( $B bench --backend cuda-exact -m /tmp/l1b3.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 ) &
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf | tail -1
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/gemma3.gguf | tail -1
$B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf | tail -1
$B synth --like llama-8b --type Q4_K_M -o /tmp/l8b.gguf | tail -1
wait; el
$B check --ops --backend cuda-exact > $O/ops-exact.txt 2>&1; echo "== check --ops --backend cuda-exact: rc $? $(tail -1 $O/ops-exact.txt)"
$B check --ops --backend cuda > $O/ops.txt 2>&1; echo "== check --ops --backend cuda: rc $? $(tail -1 $O/ops.txt)"
$B diff -m /tmp/l1b3.gguf --a ref --b cuda-exact --ids $(seq -s, 7 46) --decode 8 --isolate > $O/iso-exact-l1b3.txt 2>&1
echo "== diff l1b3 cuda-exact (40 + 8) --isolate: rc $? | $(grep -E '^isolated verdict|^verdict' $O/iso-exact-l1b3.txt | head -2 | cut -c1-110 | tr '\n' '|')"
el
h() { $B run --backend cuda -m /tmp/$1.gguf "${@:2}" 2>/dev/null | md5sum | cut -c1-12; }
for m in smol gemma3 l1b l8b; do
  echo "$m greedy $(h $m -p 'The quick brown fox' -n 48 --temp 0) top-k $(h $m -p 'Once upon a time' -n 48 --top-k 40 --seed 7)"
done
echo "(s27: smol 10d82d4b9948 d29998751468, gemma3 64901c8f9708 6ed04893ed86, l1b 4e5bee1ab652 e3fb11944b54, l8b 4aa7e0e30dda 71249884f2ee)"
el
for m in smol gemma3 l1b l8b; do
  left=$(( LIMIT - ($(date +%s) - T0) ))
  if [ $left -lt 45 ]; then echo "-- $m: skipped, $left s left"; continue; fi
  echo "== $m" | tee -a $O/side_by_side.txt
  timeout $left $LB -m /tmp/$m.gguf -p 512 -n 128 -ngl 99 -r 10 -fa 0,1 -o md 2>&1 | grep -E '^\| [a-z]' | grep -v model | tee -a $O/side_by_side.txt
  timeout $left $B bench --backend cuda -m /tmp/$m.gguf -r 10 2>&1 | grep -E '^\| [a-z0-9]|GPU memory' | grep -v model | tee -a $O/side_by_side.txt
done
el
