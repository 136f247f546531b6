#!/bin/bash
# Session 13, the submitted build (kernels as build L but for a comment): `check` on the
# Llama-shaped files that failed "KV cache full" before the checks sized their caches
# (Llama-1B cut to 3 layers, the 8B cut to 2), fast and --deterministic; check --ops; a
# diff/isolation; tg128 -r 10 on the four anchor shapes.
set -u
B=${LOCKSTEP:-./.device/lockstep}
O=${OUT:-/tmp/s13e}; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf | tail -1
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/gemma3.gguf | tail -1
$B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf | tail -1
$B synth --like llama-1b --type Q4_K_M --layers 3 -o /tmp/l1b3.gguf | tail -1
$B synth --like llama-8b --type Q4_K_M --layers 2 -o /tmp/l8b2.gguf | tail -1
( $B synth --like llama-8b --type Q4_K_M -o /tmp/l8b.gguf > /dev/null 2>&1 ) &
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
$B check --ops --backend cuda > $O/ops.txt 2>&1; echo "== check --ops --backend cuda: $(tail -1 $O/ops.txt)"
el
for m in l1b3 l8b2; do
  $B check -m /tmp/$m.gguf --backend cuda > $O/c-$m.txt 2>&1
  echo "== check $m: rc $? | $(head -1 $O/c-$m.txt | cut -c1-90) | $(grep -E '^  (ok|FAIL)' $O/c-$m.txt | tr -s ' ' | cut -c1-58 | tr '\n' '|')"
  $B check -m /tmp/$m.gguf --backend cuda --deterministic > $O/d-$m.txt 2>&1
  echo "== check $m --deterministic: rc $? | $(grep -E '^  (ok|FAIL)' $O/d-$m.txt | tr -s ' ' | cut -c1-58 | tr '\n' '|')"
  el
done
$B diff -m /tmp/l1b3.gguf --a ref --b cuda --ids $(seq -s, 7 46) --decode 32 --isolate > $O/iso-l1b3.txt 2>&1
echo "== diff l1b3 (40 + 32) --isolate: rc $? | $(grep -E '^isolated verdict' $O/iso-l1b3.txt | cut -c1-100)"
wait
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv,noheader
for m in smol gemma3 l1b l8b; do
  echo "-- $m: $($B bench --backend cuda -m /tmp/$m.gguf -p 0 -n 128 -r 10 2>&1 | grep -E '\| tg' | tr -s ' ')"
done; el
