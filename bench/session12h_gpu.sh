#!/bin/bash
# Session 12, closing figures: tg128 -r 10 of the submitted build on the four anchor shapes (a
# quieter repeat of session12g's), then where a decode step's time goes now (Nsight Compute,
# clocks and caches left alone) on SmolLM2 and on the 8B shape cut to 4 layers.
set -u
B=${LOCKSTEP:-./.device/lockstep}
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf | tail -1
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/gemma3.gguf | tail -1
$B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf | tail -1
$B synth --like llama-8b --type Q4_K_M -o /tmp/l8b.gguf | tail -1
$B synth --like llama-8b --type Q4_K_M --layers 4 -o /tmp/l8b4.gguf | tail -1
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
$B bench --backend cuda -m /tmp/smol.gguf -p 0 -n 4 -r 1 > /dev/null 2>&1
el
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv,noheader
for m in smol gemma3 l1b l8b; do
  echo "-- $m: $($B bench --backend cuda -m /tmp/$m.gguf -p 0 -n 128 -r 10 2>&1 | grep -E '\| tg' | tr -s ' ')"
done; el
export NCU_FLAGS="--clock-control none --cache-control none"
echo "== SmolLM2 decode"; bash bench/ncu_decode.sh /tmp/smol.gguf 500 3000 | head -14
echo "== 8B (4 layers) decode"; bash bench/ncu_decode.sh /tmp/l8b4.gguf 160 1000 | head -14
el
