#!/bin/bash
# Session 41, call 1: the Q5_0 repack (plan::q50_repacked, LOCKSTEP_CUDA_Q50_REPACK=1) after
# session 40's fix of the row kernels' block size (plan::device_desc), checked in full before it
# becomes the default: check --ops on every case (fast and exact kernels), diff --isolate on a
# cut Gemma-3 against the reference, check's invariances on the whole synthesized Gemma-3,
# Gemma-3's greedy tokens both ways (session 39's hash), then tg128 -r 3 alternating.
set -u
B=./.device/lockstep
O=/tmp/s41; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/g3.gguf > /dev/null 2>&1
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf --layers 3 -o /tmp/g3c.gguf > /dev/null 2>&1
export LOCKSTEP_CUDA_Q50_REPACK=1
# the other builds' kernels, compiled beside the checks
LOCKSTEP_CUDA_Q50_REPACK=0 $B bench --backend cuda -m /tmp/g3.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 &
$B bench --backend cuda -m /tmp/g3.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 &
wait; el
( $B check --ops --backend cuda > $O/ops.txt 2>&1; echo "== ops cuda: rc $? $(tail -1 $O/ops.txt)"
  $B check --ops --backend cuda-exact > $O/ops-exact.txt 2>&1; echo "== ops cuda-exact: rc $? $(tail -1 $O/ops-exact.txt)" ) > $O/ops_summary.txt 2>&1 &
$B diff -m /tmp/g3c.gguf --a ref --b cuda --ids $(seq -s, 7 46) --decode 32 --isolate > $O/iso-g3c.txt 2>&1
echo "== diff g3 cut to 3 layers (40 + 32) --isolate: rc $? | $(grep -E '^isolated verdict|^verdict' $O/iso-g3c.txt | head -2 | cut -c1-110 | tr '\n' '|')"
$B check -m /tmp/g3.gguf --backend cuda > $O/check-g3.txt 2>&1
echo "== check g3: rc $? | $(grep -E 'replayed|result' $O/check-g3.txt | tr -s ' ' | cut -c1-110 | tr '\n' '|')"
wait; cat $O/ops_summary.txt; grep -E 'FAIL' $O/ops.txt $O/ops-exact.txt | head -20
el
h() { env "$@" $B run --backend cuda -m /tmp/g3.gguf -p 'The quick brown fox' -n 48 --temp 0 2>/dev/null | md5sum | cut -c1-12; }
echo "tokens g3: repacked $(h X=1), GGUF's blocks $(h LOCKSTEP_CUDA_Q50_REPACK=0) (session 39: 64901c8f9708)"
el
tg() { timeout 40 env "$@" $B bench --backend cuda -m /tmp/g3.gguf -p 0 -n 128 -r 3 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f6 | sed 's/ *± */±/; s/ //g'; }
for r in 1 2 3; do echo "g3 tg128 round $r: repacked $(tg X=1) / GGUF's $(tg LOCKSTEP_CUDA_Q50_REPACK=0)"; done
el
mkdir -p $OUT/s41 && cp $O/*.txt $OUT/s41/ 2>/dev/null
true
