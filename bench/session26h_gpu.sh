#!/bin/bash
# Session 26h: the norm-fused consumers' global quantization scales written by block 0 only
# (every block wrote the same scales to the same L2 lines: LOCKSTEP_CUDA_DEFINES=
# LOCKSTEP_ALL_BLOCKS_DS brings that back for the comparison). Same values bitwise: check's
# replayed-vs-tapped, check --ops on residual_norm_then, diff --isolate on cut SmolLM2, tokens;
# tg128 alternating, two rounds.
set -u
B=./.device/lockstep
O=${OUT:-/tmp/s26h}; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$B synth --like smollm2 --type Q4_1 --layers 4 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol4.gguf | tail -1
$B bench --backend cuda -m /tmp/smol4.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 &
LOCKSTEP_CUDA_DEFINES=LOCKSTEP_ALL_BLOCKS_DS $B bench --backend cuda -m /tmp/smol4.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 &
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf | tail -1
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/gemma3.gguf | tail -1
$B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf | tail -1
wait; el
$B check --ops --backend cuda --filter residual_norm_then,rope_store_attention > $O/ops.txt 2>&1; echo "== check --ops (residual_norm_then, rope_store_attention): rc $? $(tail -1 $O/ops.txt)"
$B diff -m /tmp/smol4.gguf --a ref --b cuda --ids $(seq -s, 7 46) --decode 32 --isolate > $O/iso-smol4.txt 2>&1
echo "== diff smol4 --isolate: rc $? | $(grep -E '^isolated verdict|^verdict' $O/iso-smol4.txt | head -2 | cut -c1-110 | tr '\n' '|')"
$B check -m /tmp/smol4.gguf --backend cuda --tolerance 1e-2 > $O/check-smol4.txt 2>&1; echo "== check smol4 (1e-2): rc $? $(grep -E 'replayed|result' $O/check-smol4.txt | tr -s ' ' | tr '\n' '|')"
for m in smol gemma3; do
  a=$($B run --backend cuda -m /tmp/$m.gguf -p "The quick brown fox" -n 48 --temp 0 2>/dev/null | md5sum | cut -c1-12)
  b=$(LOCKSTEP_CUDA_DEFINES=LOCKSTEP_ALL_BLOCKS_DS $B run --backend cuda -m /tmp/$m.gguf -p "The quick brown fox" -n 48 --temp 0 2>/dev/null | md5sum | cut -c1-12)
  echo "$m greedy $a | all blocks $b"
done
el
tg() { env $1 $B bench --backend cuda -m /tmp/$2.gguf -p 0 -n 128 -r 3 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f6; }
for r in 1 2; do
  for m in smol gemma3 l1b; do
    for x in "LOCKSTEP_CUDA_DEFINES=LOCKSTEP_ALL_BLOCKS_DS" "S26_NONE=1"; do echo "-- $m r$r [$x]: $(tg "$x" $m)"; done
  done
done
el
