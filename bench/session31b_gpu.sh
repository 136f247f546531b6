#!/bin/bash
# Session 31b: where the new split-key attention's time goes at depth 4096 (step timelines,
# SmolLM2 and the 8B), and its tuning knobs at depth: more keys a span (SPLIT_KEYS=64), session
# 8's 32 spans, and the f16 KV cache, alternating with the default.
set -u
B=./.device/lockstep
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
LIMIT=${LIMIT:-570}
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf | tail -1
$B bench --backend cuda -m /tmp/smol.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 &
( LOCKSTEP_CUDA_TIMELINE=/tmp/y.tsv $B bench --backend cuda -m /tmp/smol.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 ) &
( LOCKSTEP_CUDA_KV=f16 $B bench --backend cuda -m /tmp/smol.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 ) &
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/gemma3.gguf | tail -1
$B synth --like llama-8b --type Q4_K_M -o /tmp/l8b.gguf | tail -1
wait; el
mkdir -p /tmp/o
for m in smol l8b; do
  LOCKSTEP_CUDA_TIMELINE=/tmp/o/tl_${m}_d4096.tsv $B bench --backend cuda -m /tmp/$m.gguf -p 0 -n 128 -d 4096 -r 1 > /tmp/o/tl_${m}_d4096.txt 2>&1
  echo "== timeline $m d4096: $(grep -E '\| tg' /tmp/o/tl_${m}_d4096.txt | tr -s ' ' | cut -d'|' -f6)"
done
el
bn() { env $1 $B bench --backend cuda -m /tmp/$2.gguf $3 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f5,6 | tr '\n' ' '; }
for d in 4096 1024; do for M in smol gemma3 l8b; do
  A="-p 0 -n 128 -d $d -r 2"
  for x in S31_NONE=1 LOCKSTEP_CUDA_SPLIT_KEYS=64 LOCKSTEP_CUDA_SPLIT_SPANS=32 LOCKSTEP_CUDA_KV=f16; do
    left=$(( LIMIT - ($(date +%s) - T0) )); if [ $left -lt 15 ]; then echo "-- $M d$d [$x]: skipped"; continue; fi
    echo "-- $M d$d [$x] $(timeout $left bash -c "$(declare -f bn); B=$B; bn '$x' $M '$A'")"
  done
done; done
el
[ -n "${OUT:-}" ] && cp /tmp/o/* $OUT/ 2>/dev/null
true
