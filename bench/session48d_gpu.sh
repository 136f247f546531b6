#!/bin/bash
# Session 48, call 4: Gemma-3's cluster decode attention (attention_decode_cl8_256) with each
# block storing its m, l and the combiners' O slices into their shared memory before one cluster
# barrier (the combine then reads only its own; no second barrier before a block leaves),
# against call 2's build (.device/lockstep_base): check --ops, the same tokens and traces
# (cut Gemma-3, exact), diff --isolate, check's replayed vs tapped, tg128 alternating on
# Gemma-3 (the one shape that runs it; ATT_CL=4 too), and Gemma-3's timeline.
set -u
B=./.device/lockstep
A=./.device/lockstep_base
O=/tmp/s48d; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/g3.gguf > /dev/null 2>&1 &
$B synth --like gemma3 --type Q4_K_M --layers 3 --metadata-from .device/gemma3-meta.gguf -o /tmp/g3c.gguf > /dev/null 2>&1 &
wait; el
for b in $A $B; do $b bench --backend cuda -m /tmp/g3c.gguf -p 16 -n 2 -r 1 > /dev/null 2>&1 & done
LOCKSTEP_CUDA_TIMELINE=/tmp/x $B bench --backend cuda -m /tmp/g3c.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 &
wait; el
$B check --ops --backend cuda --filter 'attention*' > $O/ops.txt 2>&1; echo "== ops attention*: rc $? $(tail -1 $O/ops.txt)"
grep -E "FAIL|ERROR" $O/ops.txt | head -8
for c in 8 4; do
  for b in $A $B; do LOCKSTEP_CUDA_ATT_CL=$c $b trace -m /tmp/g3c.gguf --backend cuda --ids $(seq -s, 7 46) --decode 32 -o $O/tr_${c}_$(basename $b).st > /dev/null 2>&1; done
  echo "trace g3c ATT_CL=$c new vs base: $($B diff --profile exact $O/tr_${c}_lockstep_base.st $O/tr_${c}_lockstep.st 2>&1 | grep -E 'verdict')"
done
$B diff -m /tmp/g3c.gguf --a ref --b cuda --ids $(seq -s, 7 46) --decode 32 --isolate > $O/iso-g3c.txt 2>&1
echo "== diff g3c (40 + 32) --isolate: rc $? | $(grep -E '^isolated verdict|^verdict' $O/iso-g3c.txt | head -2 | cut -c1-110 | tr '\n' '|')"
$B check -m /tmp/g3.gguf --backend cuda > $O/check-g3.txt 2>&1; echo "== check g3: rc $? | $(grep -E 'replayed' $O/check-g3.txt | tr -s ' ' | cut -c1-120)"
h() { $1 run --backend cuda -m /tmp/g3.gguf -p "$P" -n 48 --temp 0 2>/dev/null | md5sum | cut -c1-12; }
P='The quick brown fox'; echo "tokens g3: new $(h $B) base $(h $A) (64901c8f9708)"
P=$(seq -s ' ' 1 300); echo "tokens g3, a 300-number prompt: new $(h $B) base $(h $A) (002d958e5196)"
el
tg() { timeout 60 $1 bench --backend cuda -m /tmp/g3.gguf -p 0 -n 128 -r 3 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f6 | sed 's/ *± */±/; s/ //g'; }
for r in 1 2 3 4; do echo "g3 tg128 round $r: new $(tg $B) | base $(tg $A)"; done
el
LOCKSTEP_CUDA_TIMELINE=$O/tl_g3.txt $B bench --backend cuda -m /tmp/g3.gguf -p 0 -n 32 -r 1 2>&1 | grep '| tg'
awk -F'\t' 'NR>1 && $1==0 && $3>=10 && $3<=14' $O/tl_g3.txt | cut -f3-9
awk -F'\t' 'NR>1 && $1==0 {s[$4]+=$6; n[$4]++; t+=$6} END {for (k in s) printf "%-34s %4d x %6.2f us  %5.1f%%\n", k, n[k], s[k]/n[k], 100*s[k]/t; printf "sum of releases %.1f us\n", t}' $O/tl_g3.txt | sort -k4 -n -r | head -8
el
mkdir -p $OUT/s48d && cp $O/*.txt $OUT/s48d/ 2>/dev/null
true
