#!/bin/bash
# Session 28: two launches fewer on the decode chain, both bitwise the kernels they replace.
#  - MIXED_QKV_2R: a q/k/v whose norm runs on its own (Llama's rows of 2048 / 4096) with v of
#    another type (Q4_K_M: Q6_K in half the layers) in one launch, mmv3_fast2r_<q>_<v>, instead
#    of q/k, then v alone (LOCKSTEP_CUDA_MIXED_QKV_2R=0).
#  - ROPE_ATTN_256: Gemma-3's heads of 256 take the rope-fused decode attention
#    (attention_decode_rope_256, its per-head norms all at once) instead of rope_store then
#    attention_decode_256 (LOCKSTEP_CUDA_ROPE_ATTN_256=1; off by default until measured).
# Checked first (check --ops with each on, diff --isolate, the tokens against session 27's
# hashes), then tg128 alternating in one call.
set -u
B=./.device/lockstep
O=${OUT:-/tmp/s28}; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
[ -d .device/cubin ] && cp -r .device/cubin /tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$B synth --like llama-1b --type Q4_K_M --layers 3 -o /tmp/l1b3.gguf | tail -1
$B bench --backend cuda -m /tmp/l1b3.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 &
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/gemma3.gguf | tail -1
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf --layers 3 -o /tmp/g3.gguf | tail -1
$B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf | tail -1
( $B synth --like llama-8b --type Q4_K_M -o /tmp/l8b.gguf > /dev/null 2>&1 ) &
wait; el
mkdir -p $O/cubin; cp -r /tmp/cubin/. $O/cubin/ 2>/dev/null
( $B check --ops --backend cuda > $O/ops.txt 2>&1; echo "== check --ops --backend cuda: rc $? $(tail -1 $O/ops.txt)"
  LOCKSTEP_CUDA_ROPE_ATTN_256=1 $B check --ops --backend cuda --filter 'rope*,attention*' > $O/ops-256.txt 2>&1; echo "== check --ops rope/attention, ROPE_ATTN_256=1: rc $? $(tail -1 $O/ops-256.txt)"
  LOCKSTEP_CUDA_ROPE_ATTN_256=1 LOCKSTEP_CUDA_ATTN_HEADS=group $B check --ops --backend cuda --filter 'rope*,attention*' > $O/ops-256-group.txt 2>&1; echo "== check --ops rope/attention, ROPE_ATTN_256=1 ATTN_HEADS=group: rc $? $(tail -1 $O/ops-256-group.txt)" ) &
$B diff -m /tmp/l1b3.gguf --a ref --b cuda --ids $(seq -s, 7 46) --decode 32 --isolate > $O/iso-l1b3.txt 2>&1
echo "== diff l1b3 (40 + 32) --isolate: rc $? | $(grep -E '^isolated verdict|^verdict' $O/iso-l1b3.txt | head -2 | cut -c1-110 | tr '\n' '|')"
LOCKSTEP_CUDA_ROPE_ATTN_256=1 $B diff -m /tmp/g3.gguf --a ref --b cuda --ids $(seq -s, 7 46) --decode 32 --isolate > $O/iso-g3-256.txt 2>&1
echo "== diff g3 ROPE_ATTN_256=1 (40 + 32) --isolate: rc $? | $(grep -E '^isolated verdict|^verdict' $O/iso-g3-256.txt | head -2 | cut -c1-110 | tr '\n' '|')"
LOCKSTEP_CUDA_ROPE_ATTN_256=1 $B check -m /tmp/g3.gguf --backend cuda --tolerance 1e-2 > $O/check-g3-256.txt 2>&1; echo "== check g3 ROPE_ATTN_256=1 (1e-2): rc $? $(grep -E 'replayed|result' $O/check-g3-256.txt | tr -s ' ' | tr '\n' '|')"
wait
el
h() { env $1 $B run --backend cuda -m /tmp/$2.gguf "${@:3}" 2>/dev/null | md5sum | cut -c1-12; }
for x in "LOCKSTEP_CUDA_ROPE_ATTN_256=1" "S28_NONE=1"; do
  echo "gemma3 [$x] greedy $(h $x gemma3 -p 'The quick brown fox' -n 48 --temp 0) top-k $(h $x gemma3 -p 'Once upon a time' -n 48 --top-k 40 --seed 7) (s27: 64901c8f9708 6ed04893ed86)"
done
for m in l1b l8b; do
  for x in "LOCKSTEP_CUDA_MIXED_QKV_2R=0" "S28_NONE=1"; do
    echo "$m [$x] greedy $(h $x $m -p 'The quick brown fox' -n 48 --temp 0) top-k $(h $x $m -p 'Once upon a time' -n 48 --top-k 40 --seed 7)"
  done
done
echo "(s27: l1b 4e5bee1ab652 e3fb11944b54, l8b 4aa7e0e30dda 71249884f2ee)"
el
bn() { env $1 $B bench --backend cuda -m /tmp/$2.gguf $3 -r 3 2>&1 | grep -E '\| (tg|pp)' | tr -s ' ' | cut -d'|' -f5,6 | tr '\n' ' '; }
for r in 1 2 3; do
  for x in "S28_NONE=1" "LOCKSTEP_CUDA_ROPE_ATTN_256=1"; do echo "-- gemma3 r$r [$x]: $(bn "$x" gemma3 "-p 0 -n 128")"; done
  for m in l1b l8b; do
    for x in "LOCKSTEP_CUDA_MIXED_QKV_2R=0" "S28_NONE=1"; do echo "-- $m r$r [$x]: $(bn "$x" $m "-p 0 -n 128")"; done
  done
  el
done
