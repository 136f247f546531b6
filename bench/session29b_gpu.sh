#!/bin/bash
# Session 29b: Gemma-3's decode attention (heads of 256) with V copied into shared memory before
# its grid wait (cp.async; LOCKSTEP_CUDA_ATT_V_SMEM=0 reads V after the softmax, as before).
# The same values bitwise: checked first (check --ops both ways, cuda and cuda-exact; diff
# --isolate on cut Gemma-3; replayed vs tapped; the tokens against session 28's hashes), then
# tg128 alternating in one call, then the step timeline.
set -u
B=./.device/lockstep
O=${OUT:-/tmp/s29b}; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf --layers 3 -o /tmp/g3.gguf | tail -1
$B bench --backend cuda -m /tmp/g3.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 &
$B bench --backend cuda-exact -m /tmp/g3.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 &
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/gemma3.gguf | tail -1
wait; el
( $B check --ops --backend cuda > $O/ops.txt 2>&1; echo "== check --ops --backend cuda: rc $? $(tail -1 $O/ops.txt)"
  $B check --ops --backend cuda-exact > $O/ops-exact.txt 2>&1; echo "== check --ops --backend cuda-exact: rc $? $(tail -1 $O/ops-exact.txt)"
  LOCKSTEP_CUDA_ATT_V_SMEM=0 $B check --ops --backend cuda --filter 'attention*' > $O/ops-off.txt 2>&1; echo "== check --ops attention, ATT_V_SMEM=0: rc $? $(tail -1 $O/ops-off.txt)"
  LOCKSTEP_CUDA_ATTN_HEADS=group $B check --ops --backend cuda --filter 'attention*' > $O/ops-group.txt 2>&1; echo "== check --ops attention, ATTN_HEADS=group: rc $? $(tail -1 $O/ops-group.txt)" ) &
$B diff -m /tmp/g3.gguf --a ref --b cuda --ids $(seq -s, 7 46) --decode 32 --isolate > $O/iso-g3.txt 2>&1
echo "== diff g3 (40 + 32) --isolate: rc $? | $(grep -E '^isolated verdict|^verdict' $O/iso-g3.txt | head -2 | cut -c1-110 | tr '\n' '|')"
$B check -m /tmp/g3.gguf --backend cuda --tolerance 1e-2 > $O/check-g3.txt 2>&1; echo "== check g3 (1e-2): rc $? $(grep -E 'replayed|result' $O/check-g3.txt | tr -s ' ' | tr '\n' '|')"
wait
el
h() { env $1 $B run --backend cuda -m /tmp/$2.gguf "${@:3}" 2>/dev/null | md5sum | cut -c1-12; }
for x in "LOCKSTEP_CUDA_ATT_V_SMEM=0" "S29_NONE=1"; do
  echo "gemma3 [$x] greedy $(h $x gemma3 -p 'The quick brown fox' -n 48 --temp 0) top-k $(h $x gemma3 -p 'Once upon a time' -n 48 --top-k 40 --seed 7) (s28: 64901c8f9708 6ed04893ed86)"
done
el
bn() { env $1 $B bench --backend cuda -m /tmp/$2.gguf $3 -r 3 2>&1 | grep -E '\| (tg|pp)' | tr -s ' ' | cut -d'|' -f5,6 | tr '\n' ' '; }
for r in 1 2 3; do
  for x in "LOCKSTEP_CUDA_ATT_V_SMEM=0" "S29_NONE=1"; do echo "-- gemma3 r$r [$x]: $(bn "$x" gemma3 "-p 0 -n 128")"; done
done
el
LOCKSTEP_CUDA_TIMELINE=$O/tl_gemma3.tsv $B bench --backend cuda -m /tmp/gemma3.gguf -p 0 -n 128 -r 2 > $O/tl_gemma3.txt 2>&1
echo "== timeline gemma3: $(grep -E '\| tg' $O/tl_gemma3.txt | tr -s ' ' | cut -d'|' -f6)"
grep -A13 "graph 0" $O/tl_gemma3.txt
el
