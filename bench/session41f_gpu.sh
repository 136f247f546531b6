#!/bin/bash
# Session 41, call 8 (needs the build with bench/session41/rope_warp.patch; not kept): rope_store for heads of 256 a warp a head (kernels.cu rope_store_w256,
# LOCKSTEP_CUDA_ROPE_WARP=1; bitwise rope_store in bench/attn_emu): the tokens, the rope cases of
# check --ops with it, tg128 -r 3 alternating on a synthesized Gemma-3.
set -u
B=./.device/lockstep
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/g3.gguf > /dev/null 2>&1
$B bench --backend cuda -m /tmp/g3.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1
h() { env "$@" $B run --backend cuda -m /tmp/g3.gguf -p 'The quick brown fox' -n 48 --temp 0 2>/dev/null | md5sum | cut -c1-12; }
echo "tokens g3: ROPE_WARP=1 $(h LOCKSTEP_CUDA_ROPE_WARP=1), default $(h X=1) (session 39: 64901c8f9708)"
echo "== ops rope/attention/kv, ROPE_WARP=1: $(LOCKSTEP_CUDA_ROPE_WARP=1 $B check --ops --backend cuda --filter 'rope*,attention*,kv*' 2>&1 | tail -1)"
echo "== check g3, ROPE_WARP=1: $(LOCKSTEP_CUDA_ROPE_WARP=1 $B check -m /tmp/g3.gguf --backend cuda 2>&1 | grep replayed | tr -s ' ')"
tg() { timeout 40 env "$@" $B bench --backend cuda -m /tmp/g3.gguf -p 0 -n 128 -r 3 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f6 | sed 's/ *± */±/; s/ //g'; }
for r in 1 2 3; do echo "g3 tg128 round $r: ROPE_WARP=1 $(tg LOCKSTEP_CUDA_ROPE_WARP=1) / default $(tg X=1)"; done
true
