#!/bin/bash
# Session 29: step timelines stamped by each grid's last block (LOCKSTEP_TL_LAST, a diagnostic
# define) beside the usual first-block ones, on the 8B, SmolLM2 and Gemma-3: how far a
# kernel's slowest block trails its first (the 8B's attention: 4.85 us to its first block's
# end, 8.7 us to the o projection's release).
set -u
B=./.device/lockstep
O=${OUT:-/tmp/s29}; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf | tail -1
( LOCKSTEP_CUDA_TIMELINE=/tmp/x.tsv $B bench --backend cuda -m /tmp/smol.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 ) &
( LOCKSTEP_CUDA_TIMELINE=/tmp/y.tsv LOCKSTEP_CUDA_DEFINES=LOCKSTEP_TL_LAST $B bench --backend cuda -m /tmp/smol.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 ) &
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/gemma3.gguf | tail -1
$B synth --like llama-8b --type Q4_K_M -o /tmp/l8b.gguf | tail -1
wait; el
for m in l8b smol gemma3; do
  for v in first last; do
    D=""; [ $v = last ] && D=LOCKSTEP_TL_LAST
    LOCKSTEP_CUDA_DEFINES=$D LOCKSTEP_CUDA_TIMELINE=$O/tl_${m}_$v.tsv $B bench --backend cuda -m /tmp/$m.gguf -p 0 -n 128 -r 2 > $O/tl_${m}_$v.txt 2>&1
    echo "== timeline $m $v: $(grep -E '\| tg' $O/tl_${m}_$v.txt | tr -s ' ' | cut -d'|' -f6)"
    grep -A12 "graph 0" $O/tl_${m}_$v.txt
  done
  el
done
