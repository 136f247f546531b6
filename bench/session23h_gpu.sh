#!/bin/bash
# Session 23h: the submitted build's figures (pp512, tg128, bench -r 3) and `check` on cut
# SmolLM2 with a tolerance for the invariances fast numerics do not declare bitwise.
set -u
B=./.device/lockstep
O=${OUT:-/tmp/s23h}; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf | tail -1
( $B bench --backend cuda -m /tmp/smol.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 ) &
$B synth --like smollm2 --type Q4_1 --layers 4 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol4.gguf | tail -1
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/gemma3.gguf | tail -1
$B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf | tail -1
( $B synth --like llama-8b --type Q4_K_M -o /tmp/l8b.gguf > /dev/null 2>&1 ) &
wait
el
for m in smol gemma3 l1b l8b; do [ -f /tmp/$m.gguf ] || { echo "no /tmp/$m.gguf"; exit 1; }; done
$B check -m /tmp/smol4.gguf --backend cuda --tolerance 1e-2 > $O/check-smol4.txt 2>&1; echo "== check smol4 (1e-2): rc $? $(tail -1 $O/check-smol4.txt)"
grep -E "untapped" $O/check-smol4.txt
for m in smol gemma3 l1b l8b; do
  r=$($B bench --backend cuda -m /tmp/$m.gguf -r 3 2>&1)
  echo "== $m $(echo "$r" | grep -E '\| pp512' | tr -s ' ' | cut -d'|' -f5,6) $(echo "$r" | grep -E '\| tg128' | tr -s ' ' | cut -d'|' -f5,6) $(echo "$r" | grep -E 'peak' | tr -s ' ')"
done
el
