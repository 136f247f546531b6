#!/bin/bash
# Session 33c: step timelines (LOCKSTEP_CUDA_TIMELINE) of the last-block quantizing gate/up
# (late launch) against the separate quantizer, SmolLM2, Llama-1B and the 8B, tg128.
set -u
B=./.device/lockstep
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
[ -s /tmp/smol4.gguf ] || $B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf --layers 4 -o /tmp/smol4.gguf | tail -1
LOCKSTEP_CUDA_TIMELINE=/tmp/y.tsv $B bench --backend cuda -m /tmp/smol4.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 &
[ -s /tmp/smol.gguf ] || $B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf | tail -1
[ -s /tmp/l1b.gguf ] || $B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf | tail -1
[ -s /tmp/l8b.gguf ] || $B synth --like llama-8b --type Q4_K_M -o /tmp/l8b.gguf | tail -1
wait; el
for m in smol l1b l8b; do for v in 0 1; do
  LOCKSTEP_CUDA_GATE_UP_LQ8=$v LOCKSTEP_CUDA_TIMELINE=/tmp/tl_${m}_lq8$v.tsv timeout 60 $B bench --backend cuda -m /tmp/$m.gguf -p 0 -n 128 -r 1 > /tmp/tl_${m}_lq8$v.txt 2>&1
  echo "== $m LQ8=$v"; grep -E 'span|calls' /tmp/tl_${m}_lq8$v.txt | head -12
done; done
el
[ -n "${OUT:-}" ] && cp /tmp/tl_*_lq8*.txt $OUT/ 2>/dev/null
true
