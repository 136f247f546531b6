#!/bin/bash
# Session 50, call 1 (and calls 2-5 through session50b_gpu.sh .. session50e_gpu.sh, with the
# kernel of each call's build; the argument names the output folder): Gemma-3's cluster
# attention and o projection as one kernel in replayed steps (attention_decode_cl8_256_o_12,
# graph_exec::att_o_rewrite; bench/session50/att_o.patch), against the same binary
# with LOCKSTEP_CUDA_ATT_O=0 (the two launches): the pairs fused (LOCKSTEP_CUDA_STATS),
# check's replayed vs tapped on whole and cut Gemma-3, the same tokens, tg128 alternating,
# then the timeline.
set -u
B=./.device/lockstep
S=${1:-s50}
O=/tmp/$S; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
OLD="env LOCKSTEP_CUDA_ATT_O=0"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
[ -f /tmp/g3.gguf ] || $B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/g3.gguf > /dev/null 2>&1 &
[ -f /tmp/smol.gguf ] || $B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf > /dev/null 2>&1 &
$B synth --like gemma3 --type Q4_K_M --layers 3 --metadata-from .device/gemma3-meta.gguf -o /tmp/g3c.gguf > /dev/null 2>&1 &
wait; el
$B bench --backend cuda -m /tmp/g3c.gguf -p 16 -n 2 -r 1 > /dev/null 2>&1 &
LOCKSTEP_CUDA_TIMELINE=/tmp/x $B bench --backend cuda -m /tmp/g3c.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 &
wait; el
echo "stats g3: $(LOCKSTEP_CUDA_STATS=1 $B bench --backend cuda -m /tmp/g3.gguf -p 0 -n 4 -r 1 2>&1 | grep -o 'cuda step graphs.*' | cut -c1-200)"
echo "stats g3 off: $(LOCKSTEP_CUDA_STATS=1 $OLD $B bench --backend cuda -m /tmp/g3.gguf -p 0 -n 4 -r 1 2>&1 | grep -o 'cuda step graphs.*' | cut -c1-200)"
for M in g3 g3c smol; do
  $B check -m /tmp/$M.gguf --backend cuda > $O/check-$M.txt 2>&1; echo "== check $M: rc $? | $(grep -E 'replayed' $O/check-$M.txt | tr -s ' ' | cut -c1-140)"
done
el
h() { $@ run --backend cuda -m /tmp/$M.gguf -p "$P" -n 48 --temp 0 2>/dev/null | md5sum | cut -c1-12; }
P='The quick brown fox'
for M in g3 smol; do echo "tokens $M: new $(h $B) old $(h $OLD $B)"; done
P=$(seq -s ' ' 1 300)
for M in g3; do echo "tokens $M, a 300-number prompt: new $(h $B) old $(h $OLD $B)"; done
el
tg() { timeout 60 $@ bench --backend cuda -m /tmp/$M.gguf -p 0 -n 128 -r 3 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f6 | sed 's/ *± */±/; s/ //g'; }
M=g3; for r in 1 2 3 4; do echo "$M tg128 round $r: fused $(tg $B) | two launches $(tg $OLD $B)"; done
el
LOCKSTEP_CUDA_TIMELINE=$O/tl_g3.txt $B bench --backend cuda -m /tmp/g3.gguf -p 0 -n 32 -r 1 2>&1 | grep '| tg'
awk -F'\t' 'NR>1 && $1==0 && ($3<=8 || $3>=120)' $O/tl_g3.txt | cut -f3-9
awk -F'\t' 'NR>1 && $1==0 {s[$4]+=$6; n[$4]++; t+=$6} END {for (k in s) printf "%-34s %4d x %6.2f us  %5.1f%%\n", k, n[k], s[k]/n[k], 100*s[k]/t; printf "sum of releases %.1f us\n", t}' $O/tl_g3.txt | sort -k4 -n -r
LOCKSTEP_CUDA_TIMELINE=$O/tl_g3_old.txt $OLD $B bench --backend cuda -m /tmp/g3.gguf -p 0 -n 32 -r 1 2>&1 | grep '| tg'
awk -F'\t' 'NR>1 && $1==0 {s[$4]+=$6; n[$4]++; t+=$6} END {for (k in s) printf "%-34s %4d x %6.2f us  %5.1f%%\n", k, n[k], s[k]/n[k], 100*s[k]/t; printf "sum of releases %.1f us\n", t}' $O/tl_g3_old.txt | sort -k4 -n -r
el
mkdir -p $OUT/$S && cp $O/*.txt $OUT/$S/ 2>/dev/null
true
