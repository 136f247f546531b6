#!/bin/bash
# Session 17, seventh script: where SmolLM2's and Gemma-3's decode steps go now (Nsight Compute,
# eager steps, bench/ncu_decode.sh, clocks and caches left alone), the fused kernel and the two
# kernels (LOCKSTEP_CUDA_ROPE_ATTN=0).
set -u
B=${LOCKSTEP:-./.device/lockstep}
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf | tail -1
export NCU_FLAGS="--clock-control none --cache-control none"
echo "== SmolLM2, fused"; bash bench/ncu_decode.sh /tmp/smol.gguf 400 3000 | head -14
echo "== SmolLM2, LOCKSTEP_CUDA_ROPE_ATTN=0"; LOCKSTEP_CUDA_ROPE_ATTN=0 bash bench/ncu_decode.sh /tmp/smol.gguf 400 3000 | head -14
