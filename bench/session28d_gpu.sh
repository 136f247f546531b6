#!/bin/bash
# Session 28d: the submitted build's step timelines (LOCKSTEP_CUDA_TIMELINE) on SmolLM2, Gemma-3
# and the 8B, for the next session; and Gemma-3 with its heads of 256 rope-fused
# (.device/lockstep256: the build with bench/session28/rope_attn_256.patch, ROPE_ATTN_256=1),
# to see where that variant loses in the step.
set -u
B=./.device/lockstep
O=${OUT:-/tmp/s28d}; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf | tail -1
( LOCKSTEP_CUDA_TIMELINE=/tmp/x.tsv $B bench --backend cuda -m /tmp/smol.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 ) &
( LOCKSTEP_CUDA_TIMELINE=/tmp/y.tsv LOCKSTEP_CUDA_ROPE_ATTN_256=1 ./.device/lockstep256 bench --backend cuda -m /tmp/smol.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 ) &
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/gemma3.gguf | tail -1
$B synth --like llama-8b --type Q4_K_M -o /tmp/l8b.gguf | tail -1
wait; el
for m in smol gemma3 l8b; do
  LOCKSTEP_CUDA_TIMELINE=$O/tl_$m.tsv $B bench --backend cuda -m /tmp/$m.gguf -p 0 -n 128 -r 2 > $O/tl_$m.txt 2>&1
  echo "== timeline $m: $(grep -E '\| tg' $O/tl_$m.txt | tr -s ' ' | cut -d'|' -f6)"
  grep -A14 "graph 0" $O/tl_$m.txt
done
LOCKSTEP_CUDA_TIMELINE=$O/tl_gemma3_rope256.tsv LOCKSTEP_CUDA_ROPE_ATTN_256=1 ./.device/lockstep256 bench --backend cuda -m /tmp/gemma3.gguf -p 0 -n 128 -r 2 > $O/tl_gemma3_rope256.txt 2>&1
echo "== timeline gemma3, heads of 256 rope-fused: $(grep -E '\| tg' $O/tl_gemma3_rope256.txt | tr -s ' ' | cut -d'|' -f6)"
grep -A14 "graph 0" $O/tl_gemma3_rope256.txt
el
