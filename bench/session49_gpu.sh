#!/bin/bash
# Session 49, call 1: layer 0's embedding scale and norm inside its q/k/v launch
# (Backend::scale_norm_then, scale_norm_mmv3_fast1_* / scale_norm_long_mmv3_*), and
# residual_norm's norm weights loaded before its grid wait. Against the same binary with
# LOCKSTEP_CUDA_SCALE_NORM=0 and LOCKSTEP_CUDA_DEFINES=LOCKSTEP_RN_WEIGHTS_LATE (both old
# paths): check --ops (fast and exact), diff --isolate on cut Gemma-3 and Llama, check's
# replayed vs tapped, traces exact against the old paths, the same tokens, SmolLM2's cluster
# step still planned, then tg128 alternating and Gemma-3's timeline.
set -u
B=./.device/lockstep
O=/tmp/s49; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
OLD="env LOCKSTEP_CUDA_SCALE_NORM=0 LOCKSTEP_CUDA_DEFINES=LOCKSTEP_RN_WEIGHTS_LATE"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
[ -f /tmp/g3.gguf ] || $B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/g3.gguf > /dev/null 2>&1 &
[ -f /tmp/smol.gguf ] || $B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf > /dev/null 2>&1 &
[ -f /tmp/l1b.gguf ] || $B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf > /dev/null 2>&1 &
$B synth --like gemma3 --type Q4_K_M --layers 3 --metadata-from .device/gemma3-meta.gguf -o /tmp/g3c.gguf > /dev/null 2>&1 &
$B synth --like llama-1b --type Q4_K_M --layers 3 -o /tmp/l1c.gguf > /dev/null 2>&1 &
wait; el
# compile both kernel builds (and the exact one, and the timeline's) into the cache at once
$B bench --backend cuda -m /tmp/g3c.gguf -p 16 -n 2 -r 1 > /dev/null 2>&1 &
$OLD $B bench --backend cuda -m /tmp/g3c.gguf -p 16 -n 2 -r 1 > /dev/null 2>&1 &
$B bench --backend cuda-exact -m /tmp/g3c.gguf -p 16 -n 2 -r 1 > /dev/null 2>&1 &
LOCKSTEP_CUDA_TIMELINE=/tmp/x $B bench --backend cuda -m /tmp/g3c.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 &
wait; el
$B check --ops --backend cuda > $O/ops.txt 2>&1; echo "== ops: rc $? $(tail -1 $O/ops.txt)"
grep -E "FAIL|ERROR" $O/ops.txt | head -8; grep -c "scale_norm_then" $O/ops.txt
$B check --ops --backend cuda-exact > $O/ops_exact.txt 2>&1; echo "== ops exact: rc $? $(tail -1 $O/ops_exact.txt)"
grep -E "FAIL|ERROR" $O/ops_exact.txt | head -8
for M in g3c l1c; do
  $B diff -m /tmp/$M.gguf --a ref --b cuda --ids $(seq -s, 7 46) --decode 32 --isolate > $O/iso-$M.txt 2>&1
  echo "== diff $M (40 + 32) --isolate: rc $? | $(grep -E '^isolated verdict|^verdict' $O/iso-$M.txt | head -2 | cut -c1-110 | tr '\n' '|')"
  $B trace -m /tmp/$M.gguf --backend cuda --ids $(seq -s, 7 46) --decode 16 -o $O/tr_new_$M.st > /dev/null 2>&1
  $OLD $B trace -m /tmp/$M.gguf --backend cuda --ids $(seq -s, 7 46) --decode 16 -o $O/tr_old_$M.st > /dev/null 2>&1
  echo "trace $M new vs old: $($B diff --profile exact $O/tr_old_$M.st $O/tr_new_$M.st 2>&1 | grep -E 'verdict')"
done
for M in g3 smol l1b; do
  $B check -m /tmp/$M.gguf --backend cuda > $O/check-$M.txt 2>&1; echo "== check $M: rc $? | $(grep -E 'replayed' $O/check-$M.txt | tr -s ' ' | cut -c1-120)"
done
el
h() { $@ run --backend cuda -m /tmp/$M.gguf -p "$P" -n 48 --temp 0 2>/dev/null | md5sum | cut -c1-12; }
P='The quick brown fox'
for M in g3 smol l1b; do echo "tokens $M: new $(h $B) old $(h $OLD $B)"; done
P=$(seq -s ' ' 1 300)
for M in g3 l1b; do echo "tokens $M, a 300-number prompt: new $(h $B) old $(h $OLD $B)"; done
echo "smol cluster step: $(LOCKSTEP_CUDA_STATS=1 $B bench --backend cuda -m /tmp/smol.gguf -p 0 -n 4 -r 1 2>&1 | grep -i -E 'cluster' | head -3 | tr '\n' '|')"
el
tg() { timeout 60 $@ bench --backend cuda -m /tmp/$M.gguf -p 0 -n 128 -r 3 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f6 | sed 's/ *± */±/; s/ //g'; }
M=g3; for r in 1 2 3 4; do echo "$M tg128 round $r: new $(tg $B) | old $(tg $OLD $B)"; done
M=g3; for r in 1 2; do echo "$M tg128 round $r: scale_norm only $(tg env LOCKSTEP_CUDA_DEFINES=LOCKSTEP_RN_WEIGHTS_LATE $B) | rn weights only $(tg env LOCKSTEP_CUDA_SCALE_NORM=0 $B)"; done
for M in smol l1b; do for r in 1 2; do echo "$M tg128 round $r: new $(tg $B) | old $(tg $OLD $B)"; done; done
el
LOCKSTEP_CUDA_TIMELINE=$O/tl_g3.txt $B bench --backend cuda -m /tmp/g3.gguf -p 0 -n 32 -r 1 2>&1 | grep '| tg'
awk -F'\t' 'NR>1 && $1==0 && ($3<=6 || $3>=126)' $O/tl_g3.txt | cut -f3-9
awk -F'\t' 'NR>1 && $1==0 {s[$4]+=$6; n[$4]++; t+=$6} END {for (k in s) printf "%-34s %4d x %6.2f us  %5.1f%%\n", k, n[k], s[k]/n[k], 100*s[k]/t; printf "sum of releases %.1f us\n", t}' $O/tl_g3.txt | sort -k4 -n -r
el
mkdir -p $OUT/s49 && cp $O/*.txt $OUT/s49/ 2>/dev/null
true
