#!/bin/bash
# Session 12, fourth call: where the replayed-step break of session12c comes from: check on the
# SmolLM2 shape (4 layers) with the fused norm on and off, programmatic launch on and off,
# graphs off, and the session's start.
set -u
B=./.device/lockstep
O=${OUT:-/tmp/s12d}; mkdir -p $O
[ -f /tmp/smol4.gguf ] || $B synth --like smollm2 --type Q4_1 --layers 4 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol4.gguf | tail -1
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
for v in "NORM_FUSE=1" "NORM_FUSE=0" "NORM_FUSE=1 PDL=0" "NORM_FUSE=0 PDL=0" "NORM_FUSE=1 GRAPHS=0"; do
  env $(for kv in $v; do echo LOCKSTEP_CUDA_$kv; done) $B check -m /tmp/smol4.gguf --backend cuda > $O/c.txt 2>&1
  echo "== $v: $(grep -E 'untapped' -A1 $O/c.txt | tr -s ' ' | tr '\n' ' ' | cut -c1-200)"
done
LOCKSTEP_CUDA_CACHE=/tmp/cubin-base ./.device/lockstep-base check -m /tmp/smol4.gguf --backend cuda > $O/c.txt 2>&1
echo "== base: $(grep -E 'untapped' -A1 $O/c.txt | tr -s ' ' | tr '\n' ' ' | cut -c1-200)"
