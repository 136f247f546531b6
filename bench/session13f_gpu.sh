#!/bin/bash
# Session 13: `check --backend cuda` (fast numerics) prints its note on the undeclared
# invariances; with --deterministic every invariance holds and no note is printed.
set -u
B=${LOCKSTEP:-./.device/lockstep}
$B synth --like smollm2 --type Q4_1 --layers 4 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol4.gguf | tail -1
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
$B check -m /tmp/smol4.gguf --backend cuda; echo "rc $?"
$B check -m /tmp/smol4.gguf --backend cuda --deterministic | tail -2; echo "rc $?"
