#!/bin/bash
# Session 16, second script: the upper bound of taking the decode norm off the critical path in
# the submitted build (session 15's kernels). bench/session16/upper_bound.patch (timing only,
# never committed): LOCKSTEP_TIMING_SKIP_NORM skips one-row residual_norm launches (Llama's
# rows) and runs the norm-fused kernels with no norm work (nt = 0: SmolLM2, Gemma-3). Wrong
# numbers; tg128 only, alternating with the build as it is, in one call.
set -u
B=${LOCKSTEP:-./.device/lockstep}
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf | tail -1
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/gemma3.gguf | tail -1
$B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf | tail -1
$B synth --like llama-8b --type Q4_K_M -o /tmp/l8b.gguf | tail -1
el
for round in 1 2 3; do
  for m in smol gemma3 l1b l8b; do
    for knob in "X=1" "LOCKSTEP_TIMING_SKIP_NORM=1"; do
      echo "-- $m $knob: $(env $knob $B bench --backend cuda -m /tmp/$m.gguf -p 0 -n 128 -r 5 2>&1 | grep -E '\| tg|rror' | tr -s ' ' | cut -d'|' -f6 | head -2)"
    done
  done
  el
done
