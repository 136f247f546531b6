#!/bin/bash
# Session 27c: Q4_K weights on the device in planes too (plan::q4k_planar, kernels.cu q4p_at; the
# lab, session 27: the 8B's gate/up alone 19.8 -> 18.0 us, its Q4_K down 16.1 -> 13.3). Checked
# as every kept change: check --ops (cuda, cuda-exact), diff --isolate on cut Llama-1B and
# Gemma-3, check's replayed-vs-tapped, the tokens of all four shapes (session 26's hashes); then
# tg128, LOCKSTEP_CUDA_Q4K_PLANAR=0 against the planes, alternating (Q6_K in planes both ways).
set -u
B=./.device/lockstep
O=${OUT:-/tmp/s27c}; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$B synth --like llama-1b --type Q4_K_M --layers 3 -o /tmp/l1b3.gguf | tail -1
$B bench --backend cuda -m /tmp/l1b3.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 &
LOCKSTEP_CUDA_Q4K_PLANAR=0 $B bench --backend cuda -m /tmp/l1b3.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 &
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf | tail -1
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/gemma3.gguf | tail -1
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf --layers 3 -o /tmp/g3.gguf | tail -1
$B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf | tail -1
( $B synth --like llama-8b --type Q4_K_M -o /tmp/l8b.gguf > /dev/null 2>&1 ) &
wait; el
( $B check --ops --backend cuda > $O/ops.txt 2>&1; echo "== check --ops --backend cuda: rc $? $(tail -1 $O/ops.txt)"
  $B check --ops --backend cuda-exact > $O/ops-exact.txt 2>&1; echo "== check --ops --backend cuda-exact: rc $? $(tail -1 $O/ops-exact.txt)" ) &
for m in l1b3 g3; do
  $B diff -m /tmp/$m.gguf --a ref --b cuda --ids $(seq -s, 7 46) --decode 32 --isolate > $O/iso-$m.txt 2>&1
  echo "== diff $m (40 + 32) --isolate: rc $? | $(grep -E '^isolated verdict|^verdict' $O/iso-$m.txt | head -2 | cut -c1-110 | tr '\n' '|')"
done
$B diff -m /tmp/l1b3.gguf --a ref --b cuda-exact --ids $(seq -s, 7 46) --decode 8 --isolate > $O/iso-exact-l1b3.txt 2>&1
echo "== diff l1b3 cuda-exact (40 + 8) --isolate: rc $? | $(grep -E '^isolated verdict|^verdict' $O/iso-exact-l1b3.txt | head -2 | cut -c1-110 | tr '\n' '|')"
$B check -m /tmp/l1b3.gguf --backend cuda --tolerance 1e-2 > $O/check-l1b3.txt 2>&1; echo "== check l1b3 (1e-2): rc $? $(grep -E 'replayed|result' $O/check-l1b3.txt | tr -s ' ' | tr '\n' '|')"
wait
el
for m in smol gemma3 l1b l8b; do
  a=$($B run --backend cuda -m /tmp/$m.gguf -p "The quick brown fox" -n 48 --temp 0 2>/dev/null | md5sum | cut -c1-12)
  b=$($B run --backend cuda -m /tmp/$m.gguf -p "Once upon a time" -n 48 --top-k 40 --seed 7 2>/dev/null | md5sum | cut -c1-12)
  echo "$m greedy $a top-k $b"
done
el
bn() { env $1 $B bench --backend cuda -m /tmp/$2.gguf $3 -r 3 2>&1 | grep -E '\| (tg|pp)' | tr -s ' ' | cut -d'|' -f5,6 | tr '\n' ' '; }
for m in gemma3 l1b l8b; do
  for x in "LOCKSTEP_CUDA_Q4K_PLANAR=0" "S27_NONE=1"; do echo "-- $m r1 [$x]: $(bn "$x" $m "-p 512 -n 128")"; done
done
el
for r in 2 3; do
  for m in gemma3 l1b l8b; do
    for x in "LOCKSTEP_CUDA_Q4K_PLANAR=0" "S27_NONE=1"; do echo "-- $m r$r [$x]: $(bn "$x" $m "-p 0 -n 128")"; done
  done
  el
done
