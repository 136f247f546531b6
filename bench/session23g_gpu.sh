#!/bin/bash
# Session 23g: Gemma-3's decode attention (heads of 256) with the earlier keys' V rows copied to
# shared memory before its grid wait (cp.async; LOCKSTEP_CUDA_ATT_V_SMEM), against loading them
# after the softmax: tokens, check --ops, diff --isolate and check on cut Gemma-3, timelines,
# tg128 alternating.
set -u
B=./.device/lockstep
O=${OUT:-/tmp/s23g}; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/gemma3.gguf | tail -1
( $B bench --backend cuda -m /tmp/gemma3.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 ) &
( LOCKSTEP_CUDA_CACHE=/tmp/cubin-tl LOCKSTEP_CUDA_TIMELINE=/tmp/warm.tsv $B bench --backend cuda -m /tmp/gemma3.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 ) &
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf --layers 3 -o /tmp/g3.gguf | tail -1
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf | tail -1
wait
el
for x in 0 1; do
  a=$(LOCKSTEP_CUDA_ATT_V_SMEM=$x $B run --backend cuda -m /tmp/gemma3.gguf -p "The quick brown fox" -n 48 --temp 0 2>/dev/null | md5sum | cut -c1-12)
  b=$(LOCKSTEP_CUDA_ATT_V_SMEM=$x $B run --backend cuda -m /tmp/gemma3.gguf -p "Once upon a time" -n 48 --top-k 40 --seed 7 2>/dev/null | md5sum | cut -c1-12)
  echo "gemma3 v smem $x: greedy $a top-k $b"
done
$B check --ops --backend cuda > $O/ops.txt 2>&1; echo "== check --ops --backend cuda: rc $? $(tail -1 $O/ops.txt)"
$B diff -m /tmp/g3.gguf --a ref --b cuda --ids $(seq -s, 7 46) --decode 32 --isolate > $O/iso-g3.txt 2>&1
echo "== diff g3 (40 + 32) --isolate: rc $? | $(grep -E '^isolated verdict|^verdict' $O/iso-g3.txt | head -2 | cut -c1-110 | tr '\n' '|')"
$B check -m /tmp/g3.gguf --backend cuda --tolerance 1e-2 > $O/check-g3.txt 2>&1; echo "== check g3 (1e-2): rc $? $(tail -1 $O/check-g3.txt)"
grep -E "untapped" $O/check-g3.txt
el
for x in 0 1; do
  LOCKSTEP_CUDA_ATT_V_SMEM=$x LOCKSTEP_CUDA_CACHE=/tmp/cubin-tl LOCKSTEP_CUDA_TIMELINE=$O/tl_gemma3_v$x.tsv $B bench --backend cuda -m /tmp/gemma3.gguf -p 0 -n 128 -r 2 > /dev/null 2>&1
  echo "-- timeline v smem $x: attention_decode_256 $(awk -F'\t' '$1==0 && $4=="attention_decode_256"{s+=$6;n++; m=$9} END{printf "%.3f us a layer (%d), marks %s", s/n, n, m}' $O/tl_gemma3_v$x.tsv)"
done
el
tg() { env $1 $B bench --backend cuda -m /tmp/$2.gguf -p 0 -n 128 -r 3 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f6; }
for r in 1 2 3; do
  for x in 0 1; do echo "-- gemma3 v smem $x: $(tg LOCKSTEP_CUDA_ATT_V_SMEM=$x gemma3)"; done
done
echo "-- smol (no heads of 256): $(tg LOCKSTEP_CUDA_ATT_V_SMEM=1 smol)"
el
