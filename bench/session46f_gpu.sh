#!/bin/bash
# Session 46, call 7: call 6's build (the wait, then a plain loop over a lane's units: the 8B
# +5.6%, Llama-1B -2%) against its first unit peeled out of the loop (LOCKSTEP_MMV_PEEL, as the
# previous head's SASS ran it) and with two units in flight (LOCKSTEP_MMV_PIPE), and the
# previous head's build (.device/lockstep_old): tokens, tg128 alternating on Gemma-3, Llama-1B
# and the 8B.
set -u
B=./.device/lockstep; BO=./.device/lockstep_old
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/g3.gguf > /dev/null 2>&1
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf --layers 3 -o /tmp/g3c.gguf > /dev/null 2>&1
$B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf > /dev/null 2>&1 &
( $B synth --like llama-8b --type Q4_K_M -o /tmp/l8b.gguf > /dev/null 2>&1 ) &
P8=$!
PE=LOCKSTEP_CUDA_DEFINES=LOCKSTEP_MMV_PEEL; PI=LOCKSTEP_CUDA_DEFINES=LOCKSTEP_MMV_PIPE
for v in X=1 $PE $PI; do env $v $B bench --backend cuda -m /tmp/g3c.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 & done
$BO bench --backend cuda -m /tmp/g3c.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 &
wait $(jobs -p | grep -v -e "^$P8$") 2>/dev/null; el
h() { env $1 $2 run --backend cuda -m /tmp/$M.gguf -p 'The quick brown fox' -n 48 --temp 0 2>/dev/null | md5sum | cut -c1-12; }
for M in g3 l1b; do echo "tokens $M: new $(h X=1 $B) peel $(h $PE $B) pipe $(h $PI $B) old $(h X=1 $BO)"; done
tg() { timeout 60 env $1 $2 bench --backend cuda -m /tmp/$M.gguf -p 0 -n 128 -r 3 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f6 | sed 's/ *± */±/; s/ //g'; }
for M in l1b g3; do for r in 1 2; do echo "$M tg128 round $r: new $(tg X=1 $B) | peel $(tg $PE $B) | pipe $(tg $PI $B) | old $(tg X=1 $BO)"; done; done
el
wait $P8; el
M=l8b; echo "tokens l8b: new $(h X=1 $B) peel $(h $PE $B) pipe $(h $PI $B)"
for r in 1 2; do echo "$M tg128 round $r: new $(tg X=1 $B) | peel $(tg $PE $B) | pipe $(tg $PI $B) | old $(tg X=1 $BO)"; done
el
true
