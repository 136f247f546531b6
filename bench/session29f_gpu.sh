#!/bin/bash
# Session 29f: Gemma-3's decode attention (heads of 256, no rope fused) letting the next kernel
# launch at its grid wait (the new default) against after its scores (LOCKSTEP_CUDA_ATTN_PLAIN_
# LATE=1, the kernel as before, the same SASS) and against every late launcher at its wait
# (LOCKSTEP_CUDA_LATE_LAUNCH=0, session 29e's +2.1-2.4%). A launch point moves no value: the
# checks say so (check --ops, replayed vs tapped, the tokens), then tg128 alternating.
set -u
B=./.device/lockstep
O=${OUT:-/tmp/s29f}; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
V=("S29_NONE=1" "LOCKSTEP_CUDA_ATTN_PLAIN_LATE=1" "LOCKSTEP_CUDA_LATE_LAUNCH=0")
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf --layers 3 -o /tmp/g3.gguf | tail -1
for x in "${V[@]}"; do ( env $x $B bench --backend cuda -m /tmp/g3.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 ) & done
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/gemma3.gguf | tail -1
wait; el
$B check --ops --backend cuda --filter 'attention*' > $O/ops.txt 2>&1; echo "== check --ops attention: rc $? $(tail -1 $O/ops.txt)"
$B check -m /tmp/g3.gguf --backend cuda --tolerance 1e-2 > $O/check-g3.txt 2>&1; echo "== check g3 (1e-2): rc $? $(grep -E 'replayed|result' $O/check-g3.txt | tr -s ' ' | tr '\n' '|')"
h() { env $1 $B run --backend cuda -m /tmp/$2.gguf "${@:3}" 2>/dev/null | md5sum | cut -c1-12; }
for x in "${V[@]}"; do echo "gemma3 [$x] greedy $(h "$x" gemma3 -p 'The quick brown fox' -n 48 --temp 0) top-k $(h "$x" gemma3 -p 'Once upon a time' -n 48 --top-k 40 --seed 7) (s28: 64901c8f9708 6ed04893ed86)"; done
el
bn() { env $1 $B bench --backend cuda -m /tmp/$2.gguf -p 0 -n 128 -r 3 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f6 | tr '\n' ' '; }
for r in 1 2 3; do
  for x in "${V[@]}"; do echo "-- gemma3 r$r [$x]: $(bn "$x" gemma3)"; done
done
el
