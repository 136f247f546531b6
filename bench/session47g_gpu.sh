#!/bin/bash
# Session 47, call 7: the long norm-fused gate/up also quantizing the down projection's
# activation (norm_long_gate_up_q8_*: the last of a pass's 32 warps quantizes the block, no
# barrier) against the long gate/up then quantize_q8_32 (LOCKSTEP_CUDA_NORM_LONG_Q8=0): check
# --ops on residual_norm_then, tokens, tg128 alternating on Llama-1B and the 8B. Not kept: the
# kernels are in bench/session47/long_gate_up_q8.patch (git apply it to run this again).
set -u
B=./.device/lockstep
O=/tmp/s47g; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
OFF=LOCKSTEP_CUDA_NORM_LONG_Q8=0
( $B synth --like llama-8b --type Q4_K_M -o /tmp/l8b.gguf > /dev/null 2>&1 ) &
P8=$!
$B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf > /dev/null 2>&1
$B bench --backend cuda -m /tmp/l1b.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1; el
$B check --ops --backend cuda --filter 'residual_norm_then*' > $O/ops.txt 2>&1; echo "== ops: rc $? $(tail -1 $O/ops.txt)"
grep -E "FAIL|ERROR" $O/ops.txt | head -5
h() { env $1 $B run --backend cuda -m /tmp/$M.gguf -p 'The quick brown fox' -n 48 --temp 0 2>/dev/null | md5sum | cut -c1-12; }
M=l1b; echo "tokens l1b: $(h X=1) q8 off $(h $OFF) (4e5bee1ab652)"
tg() { timeout 40 env $1 $B bench --backend cuda -m /tmp/$M.gguf -p 0 -n 128 -r 3 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f6 | sed 's/ *± */±/; s/ //g'; }
M=l1b; for r in 1 2; do echo "$M tg128 round $r: q8 $(tg X=1) | q8 off $(tg $OFF)"; done
el
wait $P8; el
M=l8b; echo "tokens l8b: $(h X=1) (4aa7e0e30dda)"
for r in 1 2; do echo "$M tg128 round $r: q8 $(tg X=1) | q8 off $(tg $OFF)"; done
el
mkdir -p $OUT/s47g && cp $O/*.txt $OUT/s47g/ 2>/dev/null
true
