#!/bin/bash
# Session 11, second call: the launch floor of a step graph (bench/pdl_floor: 300 dependent
# kernels, with and without programmatic launch), then Nsight Compute over SmolLM2 and 8B decode
# steps with clocks and caches left alone (closer to a replayed graph than the default).
set -u
B=${LOCKSTEP:-./.device/lockstep}
O=${OUT:-/tmp/s11b}; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
nvcc -arch=sm_90 -O2 -o /tmp/pdl_floor bench/pdl_floor/pdl_floor.cu && /tmp/pdl_floor
el
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf | tail -1
$B synth --like llama-8b --type Q4_K_M --layers 4 -o /tmp/l8b4.gguf | tail -1
export NCU_FLAGS="--clock-control none --cache-control none"
echo "== SmolLM2 decode"; bash bench/ncu_decode.sh /tmp/smol.gguf 580 3000
el
echo "== 8B (4 layers) decode"; bash bench/ncu_decode.sh /tmp/l8b4.gguf 160 1000
el
