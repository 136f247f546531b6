#!/bin/bash
# Session 46, call 5: the plain one-row mat-vecs (mmv_fast1, mmv3_fast1, gate_up_fast1) with
# the norm-fused kernels' order, their first units loaded in a block of their own before the
# grid wait (LOCKSTEP_MMV_FIRST: decoded before the wait, so the wait follows the loads'
# return), and with the loads issued before the wait and decoded after it (+ LOCKSTEP_MMV_FETCH),
# against the default (ptxas issues the wait first): tokens, tg128 alternating on Gemma-3,
# Llama-1B and the 8B.
set -u
B=./.device/lockstep
O=/tmp/s46d; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/g3.gguf > /dev/null 2>&1
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf --layers 3 -o /tmp/g3c.gguf > /dev/null 2>&1
$B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf > /dev/null 2>&1 &
( $B synth --like llama-8b --type Q4_K_M -o /tmp/l8b.gguf > /dev/null 2>&1 ) &
P8=$!
F=LOCKSTEP_CUDA_DEFINES=LOCKSTEP_MMV_FIRST
FF="LOCKSTEP_CUDA_DEFINES=LOCKSTEP_MMV_FIRST LOCKSTEP_MMV_FETCH"
for v in X=1 $F "$FF"; do env "$v" $B bench --backend cuda -m /tmp/g3c.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 & done
wait $(jobs -p | grep -v -e "^$P8$") 2>/dev/null; el
h() { env "$@" $B run --backend cuda -m /tmp/$M.gguf -p 'The quick brown fox' -n 48 --temp 0 2>/dev/null | md5sum | cut -c1-12; }
M=g3; echo "tokens g3: $(h X=1) $(h $F) $(h "$FF") (64901c8f9708)"
M=l1b; echo "tokens l1b: $(h X=1) $(h $F) $(h "$FF") (4e5bee1ab652)"
tg() { timeout 60 env "$@" $B bench --backend cuda -m /tmp/$M.gguf -p 0 -n 128 -r 3 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f6 | sed 's/ *± */±/; s/ //g'; }
for M in g3 l1b; do for r in 1 2; do echo "$M tg128 round $r: default $(tg X=1) | first $(tg $F) | fetch $(tg "$FF")"; done; done
el
wait $P8; el
M=l8b; echo "tokens l8b: $(h X=1) $(h $F) $(h "$FF")"
for r in 1 2; do echo "$M tg128 round $r: default $(tg X=1) | first $(tg $F) | fetch $(tg "$FF")"; done
el
true
