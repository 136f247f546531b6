#!/bin/bash
# Session 26b: why the o projection inside the attention lost (26: 1670-1688 against 2032-2074).
# The norm-fused gate/up that sums the parts now has its own kernel (the parts' loads had taken
# every norm-fused consumer from 63 to 106 registers), four parts' loads at a time. Three builds
# alternating: the o mat-vec (ATTN_O=0), the projection in the attention (W_o's units loaded
# before the grid wait), and the same with W_o loaded at the end (LOCKSTEP_ATT_O_LATE); then the
# step timeline of the first two.
set -u
B=./.device/lockstep
O=${OUT:-/tmp/s26b}; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf | tail -1
$B synth --like smollm2 --type Q4_1 --layers 4 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol4.gguf | tail -1
$B bench --backend cuda -m /tmp/smol4.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 &
LOCKSTEP_CUDA_DEFINES=LOCKSTEP_ATT_O_LATE $B bench --backend cuda -m /tmp/smol4.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 &
LOCKSTEP_CUDA_TIMELINE=/tmp/x.tsv $B bench --backend cuda -m /tmp/smol4.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 &
wait; el
$B diff -m /tmp/smol4.gguf --a ref --b cuda --ids $(seq -s, 7 46) --decode 32 --isolate > $O/iso-smol4.txt 2>&1
echo "== diff smol4 --isolate: rc $? | $(grep -E '^isolated verdict|^verdict' $O/iso-smol4.txt | head -2 | cut -c1-110 | tr '\n' '|')"
for x in "LOCKSTEP_NONE=1" "LOCKSTEP_CUDA_ATTN_O=0"; do
  a=$(env $x $B run --backend cuda -m /tmp/smol.gguf -p "The quick brown fox" -n 48 --temp 0 2>/dev/null | md5sum | cut -c1-12)
  echo "smol [$x]: greedy $a"
done
tg() { env $1 $B bench --backend cuda -m /tmp/smol.gguf -p 0 -n 128 -r 3 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f6; }
for r in 1 2 3; do
  for x in "LOCKSTEP_CUDA_ATTN_O=0" "LOCKSTEP_NONE=1" "LOCKSTEP_CUDA_DEFINES=LOCKSTEP_ATT_O_LATE"; do echo "-- smol r$r [$x]: $(tg "$x")"; done
done
el
for x in "LOCKSTEP_CUDA_ATTN_O=0" "LOCKSTEP_NONE=1"; do
  n=$(echo $x | tr -dc 'A-Z0-9_' | tail -c 8)
  env $x LOCKSTEP_CUDA_TIMELINE=$O/tl_$n.tsv $B bench --backend cuda -m /tmp/smol.gguf -p 0 -n 128 -r 2 > $O/tl_$n.txt 2>&1
  echo "== timeline [$x]: $(grep -E '\| tg' $O/tl_$n.txt | tr -s ' ' | cut -d'|' -f6)"
done
el
