#!/bin/bash
# Session 49, call 8, with bench/session49/prefetch_next.patch applied (not kept): replayed
# steps' norm-fused kernels asking the next one-row mat-vec's
# weights into L2 before their grid wait (graph_exec::prefetch_rewrite, plan::prefetch_plan:
# Gemma-3's o and down, Llama-1B's o), against LOCKSTEP_CUDA_PREFETCH_NEXT=0 in the same
# binary: check's replayed vs tapped, the same tokens, tg128 alternating.
set -u
B=./.device/lockstep
O=/tmp/s49e; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
OFF="env LOCKSTEP_CUDA_PREFETCH_NEXT=0"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/g3.gguf > /dev/null 2>&1 &
$B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf > /dev/null 2>&1 &
wait
$B bench --backend cuda -m /tmp/g3.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1; el
$B check -m /tmp/g3.gguf --backend cuda > $O/check-g3.txt 2>&1; echo "== check g3: rc $? | $(grep -E 'replayed' $O/check-g3.txt | tr -s ' ' | cut -c1-120)"
h() { $@ run --backend cuda -m /tmp/$M.gguf -p "$P" -n 48 --temp 0 2>/dev/null | md5sum | cut -c1-12; }
P='The quick brown fox'
for M in g3 l1b; do echo "tokens $M: on $(h $B) off $(h $OFF $B)"; done
tg() { timeout 60 $@ bench --backend cuda -m /tmp/$M.gguf -p 0 -n 128 -r 3 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f6 | sed 's/ *± */±/; s/ //g'; }
M=g3; for r in 1 2 3 4; do echo "$M tg128 round $r: on $(tg $B) | off $(tg $OFF $B)"; done
M=l1b; for r in 1 2; do echo "$M tg128 round $r: on $(tg $B) | off $(tg $OFF $B)"; done
el
true
