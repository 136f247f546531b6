#!/bin/bash
# Session 25f: the submitted build, whose norm-fused gate/up runs the 8-row blocks and
# quantize_q8_32 by default (LOCKSTEP_CUDA_NORM_GATE_UP_Q8=1 brings back the 32-row quantizing
# blocks): the tokens (standing hashes), check --ops, diff --isolate and check on cut SmolLM2,
# tg128 alternating against the knob, and SmolLM2 beside llama.cpp (llama-bench carried).
set -u
B=./.device/lockstep
O=${OUT:-/tmp/s25f}; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
LB=/tmp/llama-bench
cat .device/llama-bench.xz.part* | xz -d > $LB && chmod +x $LB
$B synth --like smollm2 --type Q4_1 --layers 4 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol4.gguf | tail -1
( $B bench --backend cuda -m /tmp/smol4.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1; $B check --ops --backend cuda > $O/ops.txt 2>&1; echo "== check --ops --backend cuda: rc $? $(tail -1 $O/ops.txt)" ) &
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf | tail -1
$B synth --like smollm2 --type Q8_0 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol8.gguf | tail -1
wait
$B diff -m /tmp/smol4.gguf --a ref --b cuda --ids $(seq -s, 7 46) --decode 32 --isolate > $O/iso-smol4.txt 2>&1
echo "== diff smol4 (40 + 32) --isolate: rc $? | $(grep -E '^isolated verdict|^verdict' $O/iso-smol4.txt | head -2 | cut -c1-110 | tr '\n' '|')"
$B check -m /tmp/smol4.gguf --backend cuda --tolerance 1e-2 > $O/check-smol4.txt 2>&1; echo "== check smol4 (1e-2): rc $? $(grep -E 'replayed|result' $O/check-smol4.txt | tr -s ' ' | tr '\n' '|')"
for x in "LOCKSTEP_NONE=1" "LOCKSTEP_CUDA_NORM_GATE_UP_Q8=1"; do
  for m in smol smol8; do
    a=$(env $x $B run --backend cuda -m /tmp/$m.gguf -p "The quick brown fox" -n 48 --temp 0 2>/dev/null | md5sum | cut -c1-12)
    b=$(env $x $B run --backend cuda -m /tmp/$m.gguf -p "Once upon a time" -n 48 --top-k 40 --seed 7 2>/dev/null | md5sum | cut -c1-12)
    echo "$m [$x]: greedy $a top-k $b"
  done
done
el
tg() { env $1 $B bench --backend cuda -m /tmp/$2.gguf -p 0 -n 128 -r 3 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f6; }
for r in 1 2 3; do
  for m in smol smol8; do
    for x in "LOCKSTEP_CUDA_NORM_GATE_UP_Q8=1" "LOCKSTEP_NONE=1"; do echo "-- $m r$r [$x]: $(tg "$x" $m)"; done
  done
done
el
for m in smol smol8; do
  echo "== $m"
  $LB -m /tmp/$m.gguf -p 512 -n 128 -ngl 99 -r 10 -fa 0,1 -o md 2>&1 | grep -E '^\| [a-z]' | grep -v model
  $B bench --backend cuda -m /tmp/$m.gguf -r 10 2>&1 | grep -E '^\| [a-z0-9]|GPU memory' | grep -v model
done
el
