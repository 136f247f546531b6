#!/bin/bash
# Session 25e: SmolLM2's gate/up without the 32-row quantizing blocks (LOCKSTEP_CUDA_GATE_UP_Q8=0:
# norm_gate_up_fast1 then quantize_q8_32, as Gemma-3 runs), which session25d found faster on the
# H200 (2125.5, 2131.2 against 2092.4, 2049.2): four more rounds alternating, on the Q4_1 shape and
# a Q8_0 one, with the tokens both ways (the knob keeps every value).
set -u
B=./.device/lockstep
O=${OUT:-/tmp/s25e}; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf | tail -1
$B synth --like smollm2 --type Q8_0 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol8.gguf | tail -1
for x in "LOCKSTEP_NONE=1" "LOCKSTEP_CUDA_GATE_UP_Q8=0"; do
  for m in smol smol8; do
    a=$(env $x $B run --backend cuda -m /tmp/$m.gguf -p "The quick brown fox" -n 48 --temp 0 2>/dev/null | md5sum | cut -c1-12)
    b=$(env $x $B run --backend cuda -m /tmp/$m.gguf -p "Once upon a time" -n 48 --top-k 40 --seed 7 2>/dev/null | md5sum | cut -c1-12)
    echo "$m [$x]: greedy $a top-k $b"
  done
done
el
tg() { env $1 $B bench --backend cuda -m /tmp/$2.gguf -p 0 -n 128 -r 3 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f6; }
for r in 1 2 3 4; do
  for m in smol smol8; do
    for x in "LOCKSTEP_NONE=1" "LOCKSTEP_CUDA_GATE_UP_Q8=0"; do echo "-- $m r$r [$x]: $(tg "$x" $m)"; done
  done
done
el
