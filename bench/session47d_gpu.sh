#!/bin/bash
# Session 47, call 4: the norm inside its consumer for Llama's long rows (norm_long_*: a block
# of 1024 threads an SM, the norm once a block, rows grid-stride, the first rows' weights asked
# into L2 before the grid wait) against residual_norm then the consumer (LOCKSTEP_CUDA_NORM_LONG=0):
# check --ops on residual_norm_then, the same values (tokens; cut 8B traces exact; check's
# replayed vs tapped), then tg128 alternating on the 8B and Llama-1B, with the prefetch of 0
# and 2 rows a warp (LOCKSTEP_LONG_PF_ROWS) beside, and the 8B's timeline.
set -u
B=./.device/lockstep
O=/tmp/s47d; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
OFF=LOCKSTEP_CUDA_NORM_LONG=0
P0=LOCKSTEP_CUDA_DEFINES=LOCKSTEP_LONG_PF_ROWS=0
P2=LOCKSTEP_CUDA_DEFINES=LOCKSTEP_LONG_PF_ROWS=2
[ -f /tmp/l1b.gguf ] || $B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf > /dev/null 2>&1 &
$B synth --like llama-8b --type Q4_K_M --layers 3 -o /tmp/l8c.gguf > /dev/null 2>&1
for v in X=1 $P0 $P2; do env $v $B bench --backend cuda -m /tmp/l8c.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 & done
LOCKSTEP_CUDA_TIMELINE=/tmp/x $B bench --backend cuda -m /tmp/l8c.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 &
[ -f /tmp/l8b.gguf ] || ( $B synth --like llama-8b --type Q4_K_M -o /tmp/l8b.gguf > /dev/null 2>&1 ) &
wait; el
$B check --ops --backend cuda --filter 'residual_norm_then*' > $O/ops.txt 2>&1; echo "== ops: rc $? $(tail -1 $O/ops.txt)"
grep -E "FAIL|ERROR" $O/ops.txt | head -5
for v in X=1 $OFF; do env $v $B trace -m /tmp/l8c.gguf --backend cuda --ids $(seq -s, 7 46) --decode 16 -o $O/tr_${v%%=*}.st > /dev/null 2>&1; done
echo "trace l8c long vs off: $($B diff --profile exact $O/tr_X.st $O/tr_LOCKSTEP_CUDA_NORM_LONG.st 2>&1 | grep -E 'verdict')"
$B check -m /tmp/l8c.gguf --backend cuda > $O/check-l8c.txt 2>&1; echo "== check l8c: rc $? | $(grep -E 'replayed' $O/check-l8c.txt | tr -s ' ' | cut -c1-120)"
h() { env $1 $B run --backend cuda -m /tmp/$M.gguf -p 'The quick brown fox' -n 48 --temp 0 2>/dev/null | md5sum | cut -c1-12; }
M=l1b; echo "tokens l1b: $(h X=1) off $(h $OFF) pf0 $(h $P0) (4e5bee1ab652)"
M=l8b; echo "tokens l8b: $(h X=1) off $(h $OFF) pf2 $(h $P2) (4aa7e0e30dda)"
echo "stats: $(LOCKSTEP_CUDA_STATS=1 $B bench --backend cuda -m /tmp/l8b.gguf -p 0 -n 4 -r 1 2>&1 | grep -i 'norm_long\|kernels' | head -3 | cut -c1-200)"
el
tg() { timeout 60 env $1 $B bench --backend cuda -m /tmp/$M.gguf -p 0 -n 128 -r 3 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f6 | sed 's/ *± */±/; s/ //g'; }
for M in l8b l1b; do for r in 1 2 3; do echo "$M tg128 round $r: long $(tg X=1) | off $(tg $OFF) | pf0 $(tg $P0) | pf2 $(tg $P2)"; done; done
el
LOCKSTEP_CUDA_TIMELINE=$O/tl_l8b.txt $B bench --backend cuda -m /tmp/l8b.gguf -p 0 -n 32 -r 1 2>&1 | grep '| tg'
awk -F'\t' 'NR>1 && $1==0 && $3>=0 && $3<=14' $O/tl_l8b.txt | cut -f3-9
awk -F'\t' 'NR>1 && $1==0 {s[$4]+=$6; n[$4]++; t+=$6} END {for (k in s) printf "%-34s %4d x %6.2f us  %5.1f%%\n", k, n[k], s[k]/n[k], 100*s[k]/t; printf "sum of releases %.1f us\n", t}' $O/tl_l8b.txt | sort -k4 -n -r
el
mkdir -p $OUT/s47d && cp $O/*.txt $OUT/s47d/ 2>/dev/null
true
