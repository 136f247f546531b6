#!/bin/bash
# Session 48, call 2: rope_store with its (cos, sin) pairs, cache slot and norm weights read
# before the grid wait (and the Q8_0 planes' prefill decode in one 8-byte load), against call
# 1's build (.device/lockstep_base: the Q8_0 planes alone): check --ops (fast and exact), diff
# --isolate on a cut Gemma-3, check's replayed vs tapped, the same tokens (prompts through the
# prefill too), then tg128 alternating on Gemma-3, pp512 on Gemma-3 and the all-Q8_0 Llama-1B,
# and Gemma-3's timeline.
set -u
B=./.device/lockstep
A=./.device/lockstep_base
O=/tmp/s48b; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
[ -f /tmp/g3.gguf ] || $B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/g3.gguf > /dev/null 2>&1 &
[ -f /tmp/smol.gguf ] || $B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf > /dev/null 2>&1 &
[ -f /tmp/l1b.gguf ] || $B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf > /dev/null 2>&1 &
[ -f /tmp/l1q8.gguf ] || $B synth --like llama-1b --type Q8_0 -o /tmp/l1q8.gguf > /dev/null 2>&1 &
$B synth --like gemma3 --type Q4_K_M --layers 3 --metadata-from .device/gemma3-meta.gguf -o /tmp/g3c.gguf > /dev/null 2>&1 &
wait; el
for b in $A $B; do $b bench --backend cuda -m /tmp/g3c.gguf -p 16 -n 2 -r 1 > /dev/null 2>&1 & done
$B bench --backend cuda-exact -m /tmp/g3c.gguf -p 16 -n 2 -r 1 > /dev/null 2>&1 &
LOCKSTEP_CUDA_TIMELINE=/tmp/x $B bench --backend cuda -m /tmp/g3c.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 &
wait; el
$B check --ops --backend cuda > $O/ops.txt 2>&1; echo "== ops: rc $? $(tail -1 $O/ops.txt)"
grep -E "FAIL|ERROR" $O/ops.txt | head -8
$B check --ops --backend cuda-exact > $O/ops_exact.txt 2>&1; echo "== ops exact: rc $? $(tail -1 $O/ops_exact.txt)"
grep -E "FAIL|ERROR" $O/ops_exact.txt | head -8
$B diff -m /tmp/g3c.gguf --a ref --b cuda --ids $(seq -s, 7 46) --decode 32 --isolate > $O/iso-g3c.txt 2>&1
echo "== diff g3c (40 + 32) --isolate: rc $? | $(grep -E '^isolated verdict|^verdict' $O/iso-g3c.txt | head -2 | cut -c1-110 | tr '\n' '|')"
for b in $A $B; do $b trace -m /tmp/g3c.gguf --backend cuda --ids $(seq -s, 7 46) --decode 16 -o $O/tr_$(basename $b).st > /dev/null 2>&1; done
echo "trace g3c new vs base: $($B diff --profile exact $O/tr_lockstep_base.st $O/tr_lockstep.st 2>&1 | grep -E 'verdict')"
$B check -m /tmp/g3.gguf --backend cuda > $O/check-g3.txt 2>&1; echo "== check g3: rc $? | $(grep -E 'replayed' $O/check-g3.txt | tr -s ' ' | cut -c1-120)"
el
h() { $1 run --backend cuda -m /tmp/$M.gguf -p "$P" -n 48 --temp 0 2>/dev/null | md5sum | cut -c1-12; }
P='The quick brown fox'
for M in g3 smol l1b l1q8; do echo "tokens $M: new $(h $B) base $(h $A)"; done
P=$(seq -s ' ' 1 300)
for M in g3 l1b l1q8; do echo "tokens $M, a 300-number prompt: new $(h $B) base $(h $A)"; done
el
tg() { timeout 60 $1 bench --backend cuda -m /tmp/$M.gguf -p 0 -n 128 -r 3 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f6 | sed 's/ *± */±/; s/ //g'; }
M=g3; for r in 1 2 3; do echo "$M tg128 round $r: new $(tg $B) | base $(tg $A)"; done
el
pp() { timeout 60 $1 bench --backend cuda -m /tmp/$M.gguf -p 512 -n 0 -r 3 2>&1 | grep -E '\| pp' | tr -s ' ' | cut -d'|' -f6 | sed 's/ *± */±/; s/ //g'; }
for M in g3 l1q8 l1b; do echo "$M pp512: new $(pp $B) | base $(pp $A) | new $(pp $B) | base $(pp $A)"; done
el
LOCKSTEP_CUDA_TIMELINE=$O/tl_g3.txt $B bench --backend cuda -m /tmp/g3.gguf -p 0 -n 32 -r 1 2>&1 | grep '| tg'
awk -F'\t' 'NR>1 && $1==0 && $3>=0 && $3<=14' $O/tl_g3.txt | cut -f3-9
awk -F'\t' 'NR>1 && $1==0 {s[$4]+=$6; n[$4]++; t+=$6} END {for (k in s) printf "%-34s %4d x %6.2f us  %5.1f%%\n", k, n[k], s[k]/n[k], 100*s[k]/t; printf "sum of releases %.1f us\n", t}' $O/tl_g3.txt | sort -k4 -n -r
el
mkdir -p $OUT/s48b && cp $O/*.txt $OUT/s48b/ 2>/dev/null
true
