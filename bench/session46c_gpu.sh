#!/bin/bash
# Session 46, call 4: the norm-fused kernels' first weight units loaded after the norm
# (LOCKSTEP_FUSED_FIRST_LATE), as the plain one-row mat-vecs' loads in fact run, against the
# default (before the grid wait): same values (lockstep diff --profile exact on cut Gemma-3's
# traces), tokens, tg128 alternating on Gemma-3 (the one anchor shape whose rows they serve);
# SmolLM2 without its cluster step too.
set -u
B=./.device/lockstep
O=/tmp/s46c; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/g3.gguf > /dev/null 2>&1
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf --layers 3 -o /tmp/g3c.gguf > /dev/null 2>&1
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf > /dev/null 2>&1
LATE=LOCKSTEP_CUDA_DEFINES=LOCKSTEP_FUSED_FIRST_LATE
for v in X=1 $LATE; do env "$v" $B bench --backend cuda -m /tmp/g3c.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 & done
wait; el
trc() { env "$2" $B trace -m /tmp/$1.gguf --backend cuda --ids $(seq -s, 7 46) --decode 16 -o $O/tr_$1_$3.st > /dev/null 2>&1; }
trc g3c X=1 a; trc g3c $LATE b; $B diff --profile exact $O/tr_g3c_a.st $O/tr_g3c_b.st 2>&1 | tail -3
h() { env "$@" $B run --backend cuda -m /tmp/$M.gguf -p 'The quick brown fox' -n 48 --temp 0 2>/dev/null | md5sum | cut -c1-12; }
M=g3; echo "tokens g3: $(h X=1) $(h $LATE) (64901c8f9708)"
tg() { timeout 40 env "$@" $B bench --backend cuda -m /tmp/$M.gguf -p 0 -n 128 -r 3 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f6 | sed 's/ *± */±/; s/ //g'; }
M=g3; for r in 1 2 3; do echo "g3 tg128 round $r: early $(tg X=1) | late $(tg $LATE)"; done
M=smol; for r in 1 2; do echo "smol (CLUSTER_STEP=0) tg128 round $r: early $(tg LOCKSTEP_CUDA_CLUSTER_STEP=0) | late $(tg LOCKSTEP_CUDA_CLUSTER_STEP=0 $LATE)"; done
el
true
