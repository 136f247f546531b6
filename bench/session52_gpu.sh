#!/bin/bash
# Session 52, call 1: L2 prefetch nodes beside the replayed step's chain (LOCKSTEP_CUDA_L2PF,
# graph_exec::l2_prefetch_rewrite; the same values) on the 8B, Llama-1B and Gemma-3; and session
# 51's prepared knobs on Gemma-3 (LOCKSTEP_CUDA_DOWN_PRELOAD=1: the same values;
# LOCKSTEP_CUDA_NORM_WIDE=1: other bits, held to the reference by check and diff).
# All runtime knobs of one binary: one kernel build.
set -u
B=./.device/lockstep
O=/tmp/s52; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
pf() { echo "env LOCKSTEP_CUDA_L2PF=$1"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$B synth --like gemma3 --type Q4_K_M --layers 3 --metadata-from .device/gemma3-meta.gguf -o /tmp/g3c.gguf > /dev/null 2>&1
$B bench --backend cuda -m /tmp/g3c.gguf -p 16 -n 2 -r 1 > /dev/null 2>&1 &
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/g3.gguf > /dev/null 2>&1 &
$B synth --like llama-8b --type Q4_K_M -o /tmp/l8b.gguf > /dev/null 2>&1 &
$B synth --like llama-8b --type Q4_K_M --layers 3 -o /tmp/l8c.gguf > /dev/null 2>&1 &
$B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf > /dev/null 2>&1 &
wait; el
LOCKSTEP_CUDA_STATS=1 $(pf gu=16,head=32) $B bench --backend cuda -m /tmp/l8b.gguf -p 0 -n 4 -r 1 2>&1 | grep -E "prefetch nodes|error|Error" | sort | uniq -c
LOCKSTEP_CUDA_STATS=1 $(pf gu=2,down=1,head=40,hl=2) $B bench --backend cuda -m /tmp/g3.gguf -p 0 -n 4 -r 1 2>&1 | grep -E "prefetch nodes|error|Error" | sort | uniq -c
LOCKSTEP_CUDA_STATS=1 LOCKSTEP_CUDA_DOWN_PRELOAD=1 $B bench --backend cuda -m /tmp/g3.gguf -p 0 -n 4 -r 1 2>&1 | grep -oE "[0-9]+ o projections with early weights" | sort | uniq -c
$(pf gu=16,head=32,down=8) $B check -m /tmp/l8c.gguf --backend cuda > $O/check-l8c.txt 2>&1; echo "== check l8c (pf): rc $? | $(grep -E 'replayed' $O/check-l8c.txt | tr -s ' ' | cut -c1-140)"
h() { timeout 60 $@ run --backend cuda -m /tmp/$M.gguf -p 'The quick brown fox' -n 48 --temp 0 2>/dev/null | md5sum | cut -c1-12; }
M=l8b; echo "tokens l8b: pf $(h $(pf gu=16,head=32,down=8) $B) default $(h $B)"
M=g3; echo "tokens g3: pf $(h $(pf gu=2,down=1,head=40,hl=2) $B) down preload $(h env LOCKSTEP_CUDA_DOWN_PRELOAD=1 $B) norm wide $(h env LOCKSTEP_CUDA_NORM_WIDE=1 $B) default $(h $B)"
el
tg() { timeout 90 $@ bench --backend cuda -m /tmp/$M.gguf -p 0 -n 128 -r 3 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f6 | sed 's/ *± */±/; s/ //g'; }
M=l8b; for r in 1 2 3; do echo "l8b tg128 round $r: gu8 $(tg $(pf gu=8) $B) | gu16 $(tg $(pf gu=16) $B) | gu16last $(tg $(pf gu=16,last) $B) | head32 $(tg $(pf head=32) $B) | gu16head32 $(tg $(pf gu=16,head=32) $B) | default $(tg $B)"; done; el
M=g3; for r in 1 2 3; do echo "g3 tg128 round $r: head40 $(tg $(pf head=40,hl=2) $B) | gu2down1 $(tg $(pf gu=2,down=1) $B) | down preload $(tg env LOCKSTEP_CUDA_DOWN_PRELOAD=1 $B) | norm wide $(tg env LOCKSTEP_CUDA_NORM_WIDE=1 $B) | default $(tg $B)"; done; el
M=l1b; for r in 1 2 3; do echo "l1b tg128 round $r: gu8 $(tg $(pf gu=8) $B) | head32 $(tg $(pf head=32) $B) | default $(tg $B)"; done; el
LOCKSTEP_CUDA_NORM_WIDE=1 $B check -m /tmp/g3c.gguf --backend cuda > $O/check-g3c-nw.txt 2>&1; echo "== check g3c (norm wide): rc $? | $(grep -E 'replayed' $O/check-g3c-nw.txt | tr -s ' ' | cut -c1-140)"
LOCKSTEP_CUDA_NORM_WIDE=1 timeout 120 $B diff -m /tmp/g3c.gguf --a ref --b cuda --ids 7,8,9,10,11,12,13,14 --decode 8 > $O/diff-g3c-nw.txt 2>&1; echo "== diff g3c ref/cuda (norm wide): rc $?"; tail -3 $O/diff-g3c-nw.txt
el
mkdir -p $OUT/s52 && cp $O/*.txt $OUT/s52/ 2>/dev/null
true
