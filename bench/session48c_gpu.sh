#!/bin/bash
# Session 48, call 3: the norms' quantization with q8_block's chains side by side (q8_blocks in
# norm_regs_w: the same bits, one chain's latency instead of one per value a thread holds)
# against call 2's build (.device/lockstep_base): check --ops, the same tokens and traces
# (cut Gemma-3 and cut 8B, exact), check's replayed vs tapped, then tg128 alternating on the
# four shapes, and Gemma-3's timeline.
set -u
B=./.device/lockstep
A=./.device/lockstep_base
O=/tmp/s48c; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
[ -f /tmp/g3.gguf ] || $B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/g3.gguf > /dev/null 2>&1 &
[ -f /tmp/smol.gguf ] || $B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf > /dev/null 2>&1 &
[ -f /tmp/l1b.gguf ] || $B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf > /dev/null 2>&1 &
[ -f /tmp/g3c.gguf ] || $B synth --like gemma3 --type Q4_K_M --layers 3 --metadata-from .device/gemma3-meta.gguf -o /tmp/g3c.gguf > /dev/null 2>&1 &
$B synth --like llama-8b --type Q4_K_M --layers 3 -o /tmp/l8c.gguf > /dev/null 2>&1 &
wait; el
( $B synth --like llama-8b --type Q4_K_M -o /tmp/l8b.gguf > /dev/null 2>&1 ) &
for b in $A $B; do $b bench --backend cuda -m /tmp/g3c.gguf -p 16 -n 2 -r 1 > /dev/null 2>&1 & done
$B bench --backend cuda-exact -m /tmp/g3c.gguf -p 16 -n 2 -r 1 > /dev/null 2>&1 &
LOCKSTEP_CUDA_TIMELINE=/tmp/x $B bench --backend cuda -m /tmp/g3c.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 &
wait; el
$B check --ops --backend cuda > $O/ops.txt 2>&1; echo "== ops: rc $? $(tail -1 $O/ops.txt)"
grep -E "FAIL|ERROR" $O/ops.txt | head -8
$B check --ops --backend cuda-exact > $O/ops_exact.txt 2>&1; echo "== ops exact: rc $? $(tail -1 $O/ops_exact.txt)"
for M in g3c l8c; do
  for b in $A $B; do $b trace -m /tmp/$M.gguf --backend cuda --ids $(seq -s, 7 46) --decode 16 -o $O/tr_${M}_$(basename $b).st > /dev/null 2>&1; done
  echo "trace $M new vs base: $($B diff --profile exact $O/tr_${M}_lockstep_base.st $O/tr_${M}_lockstep.st 2>&1 | grep -E 'verdict')"
done
$B check -m /tmp/g3.gguf --backend cuda > $O/check-g3.txt 2>&1; echo "== check g3: rc $? | $(grep -E 'replayed' $O/check-g3.txt | tr -s ' ' | cut -c1-120)"
$B check -m /tmp/smol.gguf --backend cuda > $O/check-smol.txt 2>&1; echo "== check smol: rc $? | $(grep -E 'replayed' $O/check-smol.txt | tr -s ' ' | cut -c1-120)"
$B check -m /tmp/l8c.gguf --backend cuda --deterministic > $O/check-l8c-det.txt 2>&1; echo "== check l8c --deterministic: rc $?"
el
h() { $1 run --backend cuda -m /tmp/$M.gguf -p "$P" -n 48 --temp 0 2>/dev/null | md5sum | cut -c1-12; }
P='The quick brown fox'
for M in g3 smol l1b; do echo "tokens $M: new $(h $B) base $(h $A)"; done
P=$(seq -s ' ' 1 300)
for M in g3 l1b; do echo "tokens $M, a 300-number prompt: new $(h $B) base $(h $A)"; done
wait; el
P='The quick brown fox'; M=l8b; echo "tokens l8b: new $(h $B) base $(h $A) (4aa7e0e30dda)"
tg() { timeout 60 $1 bench --backend cuda -m /tmp/$M.gguf -p 0 -n 128 -r 3 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f6 | sed 's/ *± */±/; s/ //g'; }
for r in 1 2; do for M in g3 smol l1b l8b; do echo "$M tg128 round $r: new $(tg $B) | base $(tg $A)"; done; done
M=g3; echo "$M tg128 round 3: new $(tg $B) | base $(tg $A)"
el
LOCKSTEP_CUDA_TIMELINE=$O/tl_g3.txt $B bench --backend cuda -m /tmp/g3.gguf -p 0 -n 32 -r 1 2>&1 | grep '| tg'
awk -F'\t' 'NR>1 && $1==0 && $3>=4 && $3<=12' $O/tl_g3.txt | cut -f3-9
awk -F'\t' 'NR>1 && $1==0 {s[$4]+=$6; n[$4]++; t+=$6} END {for (k in s) printf "%-34s %4d x %6.2f us  %5.1f%%\n", k, n[k], s[k]/n[k], 100*s[k]/t; printf "sum of releases %.1f us\n", t}' $O/tl_g3.txt | sort -k4 -n -r
el
mkdir -p $OUT/s48c && cp $O/*.txt $OUT/s48c/ 2>/dev/null
true
