#!/bin/bash
# Session 40c: lockstep's side, right after session40b_gpu.sh on the same (warm) machine and
# files: bench --backend cuda pp512 + tg128 -r 3 on the four anchor shapes, SmolLM2 and Gemma-3
# twice more (tg128 only), and the 8B's check (replayed vs tapped).
set -u
B=./.device/lockstep
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
[ -f /tmp/l8b.gguf ] || { echo "no /tmp/l8b.gguf: the machine is not session40b's"; exit 1; }
for m in smol g3 l1b l8b; do
  echo "== lockstep $m"
  timeout 150 $B bench --backend cuda -m /tmp/$m.gguf -p 512 -n 128 -r 3 2>&1 | grep -E '^\| [a-z/]|peak'
  el
done
for m in smol g3 smol g3; do
  echo "$m tg128 -r 3: $(timeout 60 $B bench --backend cuda -m /tmp/$m.gguf -p 0 -n 128 -r 3 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f6)"
done
el
true
