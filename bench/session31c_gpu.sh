#!/bin/bash
# Session 31c: the new split-key attention's variants at depth (LOCKSTEP_CUDA_DEFINES):
# ATT_S_PIPE (the next chunk's K and V loaded while this one is summed), ATT_S_KPT=8 (chunks
# of twice the keys), ATT_S_ALIGN (spans a whole number of chunks), with SPLIT_KEYS=64; and
# timelines of the default at depth 4096 with its marks (first and last block).
set -u
B=./.device/lockstep
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
LIMIT=${LIMIT:-580}
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf | tail -1
V=("" "ATT_S_PIPE" "ATT_S_KPT=8" "ATT_S_PIPE ATT_S_ALIGN")
for d in "${V[@]}"; do LOCKSTEP_CUDA_DEFINES="$d" $B bench --backend cuda -m /tmp/smol.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 & done
( LOCKSTEP_CUDA_TIMELINE=/tmp/y.tsv $B bench --backend cuda -m /tmp/smol.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 ) &
( LOCKSTEP_CUDA_DEFINES=LOCKSTEP_TL_LAST LOCKSTEP_CUDA_TIMELINE=/tmp/y2.tsv $B bench --backend cuda -m /tmp/smol.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 ) &
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/gemma3.gguf | tail -1
$B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf | tail -1
$B synth --like llama-8b --type Q4_K_M -o /tmp/l8b.gguf | tail -1
wait; el
mkdir -p /tmp/o
for v in first last; do
  D=""; [ $v = last ] && D=LOCKSTEP_TL_LAST
  LOCKSTEP_CUDA_DEFINES=$D LOCKSTEP_CUDA_TIMELINE=/tmp/o/tl_smol_$v.tsv $B bench --backend cuda -m /tmp/smol.gguf -p 0 -n 128 -d 4096 -r 1 > /tmp/o/tl_smol_$v.txt 2>&1
  echo "== timeline smol d4096 $v: $(grep -E 'attention_(split|combine)' /tmp/o/tl_smol_$v.txt | tr -s ' ' | tr '\n' '|')"
done
el
bn() { LOCKSTEP_CUDA_DEFINES="$1" env $4 $B bench --backend cuda -m /tmp/$2.gguf $3 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f5,6 | tr '\n' ' '; }
run() { # model depth
  A="-p 0 -n 128 -d $2 -r 2"
  for i in 0 1 2 3 4; do
    if [ $i = 4 ]; then x="ATT_S_PIPE"; k=LOCKSTEP_CUDA_SPLIT_KEYS=64; else x="${V[$i]}"; k=S31_NONE=1; fi
    left=$(( LIMIT - ($(date +%s) - T0) )); if [ $left -lt 15 ]; then echo "-- $1 d$2 [$x $k]: skipped"; continue; fi
    echo "-- $1 d$2 [$x $k] $(timeout $left bash -c "$(declare -f bn); B=$B; bn '$x' $1 '$A' $k")"
  done
}
for M in smol gemma3 l8b l1b; do run $M 4096; done
for M in smol gemma3 l8b; do run $M 1024; done
el
[ -n "${OUT:-}" ] && cp /tmp/o/* $OUT/ 2>/dev/null
true
