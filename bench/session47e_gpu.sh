#!/bin/bash
# Session 47, call 5: the long norm-fused kernels with rows dealt warp-major (warp w of block b
# first takes row w * gridDim.x + b: fewer rows than warps still spread over every SM) against
# block-major (LOCKSTEP_LONG_BLOCK_MAJOR, call 4's) and against residual_norm then the consumer
# (LOCKSTEP_CUDA_NORM_LONG=0): check --ops, check (default and --deterministic) on the cut 8B,
# tokens, tg128 alternating on the 8B and Llama-1B. Block-major was kept (the final source
# has no switch); the warp-major line is in bench/session47/variants.patch (2).
set -u
B=./.device/lockstep
O=/tmp/s47e; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
OFF=LOCKSTEP_CUDA_NORM_LONG=0
BM=LOCKSTEP_CUDA_DEFINES=LOCKSTEP_LONG_BLOCK_MAJOR
[ -f /tmp/l1b.gguf ] || $B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf > /dev/null 2>&1 &
[ -f /tmp/l8c.gguf ] || $B synth --like llama-8b --type Q4_K_M --layers 3 -o /tmp/l8c.gguf > /dev/null 2>&1
for v in X=1 $BM; do env $v $B bench --backend cuda -m /tmp/l8c.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 & done
$B bench --backend cuda --deterministic -m /tmp/l8c.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 &
[ -f /tmp/l8b.gguf ] || ( $B synth --like llama-8b --type Q4_K_M -o /tmp/l8b.gguf > /dev/null 2>&1 ) &
wait; el
$B check --ops --backend cuda --filter 'residual_norm_then*' > $O/ops.txt 2>&1; echo "== ops: rc $? $(tail -1 $O/ops.txt)"
$B check -m /tmp/l8c.gguf --backend cuda > $O/check-l8c.txt 2>&1; echo "== check l8c: rc $? | $(grep -E 'replayed' $O/check-l8c.txt | tr -s ' ' | cut -c1-120)"
$B check -m /tmp/l8c.gguf --backend cuda --deterministic > $O/check-l8c-det.txt 2>&1; echo "== check l8c --deterministic: rc $?"; grep -E '^ *(ok|FAIL)|result' $O/check-l8c-det.txt
h() { env $1 $B run --backend cuda -m /tmp/$M.gguf -p 'The quick brown fox' -n 48 --temp 0 2>/dev/null | md5sum | cut -c1-12; }
M=l1b; echo "tokens l1b: $(h X=1) bm $(h $BM) off $(h $OFF) (4e5bee1ab652)"
M=l8b; echo "tokens l8b: $(h X=1) bm $(h $BM) (4aa7e0e30dda)"
el
tg() { timeout 60 env $1 $B bench --backend cuda -m /tmp/$M.gguf -p 0 -n 128 -r 3 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f6 | sed 's/ *± */±/; s/ //g'; }
for M in l8b l1b; do for r in 1 2 3; do echo "$M tg128 round $r: warp-major $(tg X=1) | block-major $(tg $BM) | off $(tg $OFF)"; done; done
el
mkdir -p $OUT/s47e && cp $O/*.txt $OUT/s47e/ 2>/dev/null
true
