#!/bin/bash
# Session 46, call 8: with the one-row mat-vecs' loop as it now runs (the wait, then every unit
# alike), where two weight rows a warp pay (a run-time knob, the same values bitwise):
# Llama-1B's down (2048 rows of 128 units) two a warp (LOCKSTEP_CUDA_TWO_ROWS=1024), none
# anywhere (=0; the 8B too), Gemma-3's o and down (640 rows) two a warp (=512); tokens, tg128
# alternating.
set -u
B=./.device/lockstep
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/g3.gguf > /dev/null 2>&1
$B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf > /dev/null 2>&1
( $B synth --like llama-8b --type Q4_K_M -o /tmp/l8b.gguf > /dev/null 2>&1 ) &
P8=$!
$B bench --backend cuda -m /tmp/g3.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1; el
h() { env $1 $B run --backend cuda -m /tmp/$M.gguf -p 'The quick brown fox' -n 48 --temp 0 2>/dev/null | md5sum | cut -c1-12; }
M=l1b; echo "tokens l1b: $(h X=1) $(h LOCKSTEP_CUDA_TWO_ROWS=1024) $(h LOCKSTEP_CUDA_TWO_ROWS=0) (4e5bee1ab652)"
M=g3; echo "tokens g3: $(h X=1) $(h LOCKSTEP_CUDA_TWO_ROWS=512) (64901c8f9708)"
tg() { timeout 60 env $1 $B bench --backend cuda -m /tmp/$M.gguf -p 0 -n 128 -r 3 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f6 | sed 's/ *± */±/; s/ //g'; }
M=l1b; for r in 1 2; do echo "l1b tg128 round $r: default $(tg X=1) | 1024 $(tg LOCKSTEP_CUDA_TWO_ROWS=1024) | none $(tg LOCKSTEP_CUDA_TWO_ROWS=0)"; done
M=g3; for r in 1 2; do echo "g3 tg128 round $r: default $(tg X=1) | 512 $(tg LOCKSTEP_CUDA_TWO_ROWS=512)"; done
el
wait $P8; el
M=l8b; for r in 1 2; do echo "l8b tg128 round $r: default $(tg X=1) | none $(tg LOCKSTEP_CUDA_TWO_ROWS=0)"; done
el
true
