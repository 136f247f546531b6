#!/bin/bash
# Session 25d: the run-time choices made on the H100 (sessions 8-19), re-timed on the H200: each
# knob against the default, alternating, two rounds, tg128 -r 3. All but LOCKSTEP_CUDA_ATTN=split
# keep every value bitwise (the knobs' doc comments in lib.rs); none changes the kernels' source.
set -u
B=./.device/lockstep
O=${OUT:-/tmp/s25d}; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf | tail -1
( $B bench --backend cuda -m /tmp/smol.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 ) &
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/gemma3.gguf | tail -1
$B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf | tail -1
$B synth --like llama-8b --type Q4_K_M -o /tmp/l8b.gguf | tail -1
wait
el
tg() { env $1 $B bench --backend cuda -m /tmp/$2.gguf -p 0 -n 128 -r 3 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f6; }
sweep() {
  local m=$1; shift
  for r in 1 2; do
    for x in "LOCKSTEP_NONE=1" "$@"; do echo "-- $m r$r [$x]: $(tg "$x" $m)"; done
  done
}
sweep smol LOCKSTEP_CUDA_ATTN_HEADS=group LOCKSTEP_CUDA_ROPE_ATTN=0 LOCKSTEP_CUDA_GATE_UP_Q8=0 LOCKSTEP_CUDA_NORM_FUSE=0
el
sweep gemma3 LOCKSTEP_CUDA_ATTN_HEADS=group LOCKSTEP_CUDA_MIXED_QKV=0 LOCKSTEP_CUDA_ATTN=split LOCKSTEP_CUDA_NORM_FUSE=0
el
sweep l1b LOCKSTEP_CUDA_ATTN_HEADS=group LOCKSTEP_CUDA_ROPE_ATTN=0 LOCKSTEP_CUDA_NORM_PARTS=0 LOCKSTEP_CUDA_GATE_UP_Q8=0
el
sweep l8b LOCKSTEP_CUDA_ATTN_HEADS=group LOCKSTEP_CUDA_NORM_PARTS=0
el
