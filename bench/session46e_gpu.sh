#!/bin/bash
# Session 46, call 6: the one-row mat-vecs written in the order ptxas ran them (the grid wait,
# then every weight load; the timeline build's stamps on loaded weights gone, so it runs that
# order too), .device/lockstep, against the previous head's build (.device/lockstep_old, its
# source loading a first unit before the wait): the same values (lockstep diff --profile exact
# on cut Gemma-3 and SmolLM2 traces, tokens), check --ops, tg128 alternating on the four
# shapes, the timeline build's cost (tg32 in it against plain tg32) and a Gemma-3 layer.
set -u
B=./.device/lockstep; BO=./.device/lockstep_old
O=/tmp/s46e; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/g3.gguf > /dev/null 2>&1
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf --layers 3 -o /tmp/g3c.gguf > /dev/null 2>&1
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf > /dev/null 2>&1 &
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf --layers 3 -o /tmp/smolc.gguf > /dev/null 2>&1 &
$B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf > /dev/null 2>&1 &
( $B synth --like llama-8b --type Q4_K_M -o /tmp/l8b.gguf > /dev/null 2>&1 ) &
P8=$!
for b in $B $BO; do $b bench --backend cuda -m /tmp/g3c.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 & done
LOCKSTEP_CUDA_TIMELINE=/tmp/x $B bench --backend cuda -m /tmp/g3c.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 &
wait $(jobs -p | grep -v -e "^$P8$") 2>/dev/null; el
for M in g3c smolc; do
  for b in $B $BO; do $b trace -m /tmp/$M.gguf --backend cuda --ids $(seq -s, 7 46) --decode 16 -o $O/tr_${M}_$(basename $b).st > /dev/null 2>&1; done
  echo "trace $M new vs old: $($B diff --profile exact $O/tr_${M}_lockstep.st $O/tr_${M}_lockstep_old.st 2>&1 | grep -E 'verdict')"
done
h() { $1 run --backend cuda -m /tmp/$M.gguf -p 'The quick brown fox' -n 48 --temp 0 2>/dev/null | md5sum | cut -c1-12; }
for M in g3 smol l1b; do echo "tokens $M: new $(h $B) old $(h $BO)"; done
$B check --ops --backend cuda > $O/ops.txt 2>&1; echo "== ops cuda: rc $? $(tail -1 $O/ops.txt)"
el
tg() { timeout 60 $1 bench --backend cuda -m /tmp/$M.gguf -p 0 -n 128 -r 3 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f6 | sed 's/ *± */±/; s/ //g'; }
for M in g3 l1b smol; do for r in 1 2; do echo "$M tg128 round $r: new $(tg $B) | old $(tg $BO)"; done; done
el
M=g3; echo "g3 tg32 plain $(timeout 60 $B bench --backend cuda -m /tmp/g3.gguf -p 0 -n 32 -r 3 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f6)"
LOCKSTEP_CUDA_TIMELINE=$O/tl_g3.txt $B bench --backend cuda -m /tmp/g3.gguf -p 0 -n 32 -r 1 2>&1 | grep '| tg'
awk -F'\t' 'NR>1 && $1==0 && $3>=4 && $3<=17' $O/tl_g3.txt | cut -f4-9
wait $P8; el
M=l8b; echo "tokens l8b: new $(h $B) old $(h $BO)"
for r in 1 2; do echo "$M tg128 round $r: new $(tg $B) | old $(tg $BO)"; done
el
mkdir -p $OUT/s46e && cp $O/*.txt $OUT/s46e/ 2>/dev/null
true
