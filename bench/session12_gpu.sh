#!/bin/bash
# Session 12, first call: upper bounds of the fusions on the table. An experiment build (a
# temporary patch, not kept: LOCKSTEP_EXP_SKIP=norm,rope,att,quant skipped those launches in
# lib.rs; wrong numbers, timing only) times tg128 with each kind of launch left out.
set -u
B=./.device/lockstep-exp
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf | tail -1
$B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf | tail -1
$B synth --like llama-8b --type Q4_K_M -o /tmp/l8b.gguf | tail -1
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
$B bench --backend cuda -m /tmp/smol.gguf -p 0 -n 4 -r 1 > /dev/null 2>&1
el
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader
for m in smol l1b l8b; do
  for s in none norm rope att quant norm,rope norm,rope,quant; do
    echo "-- $m skip=$s: $(LOCKSTEP_EXP_SKIP=$s $B bench --backend cuda -m /tmp/$m.gguf -p 0 -n 128 -r 3 2>&1 | grep -E '\| tg' | tr -s ' ')"
  done
done; el
