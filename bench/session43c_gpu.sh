#!/bin/bash
# Session 43, call 3: three more cuts of the quantization's and the norms' dependent chains,
# each bitwise: q8_block's NaN vote and branch as selects; the fast norms' mean ss / g in f64
# (no f32 division branch); the norm-fused prologue's two reductions without the leading
# barrier. Checks with all three; then tg128 -r 3 with all three, none, and each one taken back
# (diagnostic defines), and Gemma-3's timeline.
set -u
B=./.device/lockstep
O=/tmp/s43c; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/g3.gguf > /dev/null 2>&1
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf --layers 3 -o /tmp/g3c.gguf > /dev/null 2>&1
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf > /dev/null 2>&1 &
$B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf > /dev/null 2>&1 &
OLD="LOCKSTEP_CUDA_DEFINES=LOCKSTEP_Q8_NAN_BRANCH LOCKSTEP_NORM_IEEE_DIV LOCKSTEP_NORM_LEAD_SYNC"
NAN=LOCKSTEP_CUDA_DEFINES=LOCKSTEP_Q8_NAN_BRANCH
DIV=LOCKSTEP_CUDA_DEFINES=LOCKSTEP_NORM_IEEE_DIV
SYN=LOCKSTEP_CUDA_DEFINES=LOCKSTEP_NORM_LEAD_SYNC
for v in X=1 "$OLD" $NAN $DIV $SYN LOCKSTEP_CUDA_TIMELINE=/tmp/x; do
  env "$v" $B bench --backend cuda -m /tmp/g3c.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 &
done
$B bench --backend cuda-exact -m /tmp/g3c.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 &
wait; el
( $B check --ops --backend cuda > $O/ops.txt 2>&1; echo "== ops cuda: rc $? $(tail -1 $O/ops.txt)"
  $B check --ops --backend cuda-exact > $O/ops-exact.txt 2>&1; echo "== ops cuda-exact: rc $? $(tail -1 $O/ops-exact.txt)" ) > $O/ops_summary.txt 2>&1 &
h() { env "$@" $B run --backend cuda -m /tmp/$M.gguf -p 'The quick brown fox' -n 48 --temp 0 2>/dev/null | md5sum | cut -c1-12; }
M=g3; echo "tokens g3: $(h X=1), old $(h "$OLD") (64901c8f9708)"
M=smol; echo "tokens smol: $(h X=1), old $(h "$OLD") (10d82d4b9948)"
M=l1b; echo "tokens l1b: $(h X=1), old $(h "$OLD") (4e5bee1ab652)"
$B check -m /tmp/g3.gguf --backend cuda > $O/check-g3.txt 2>&1
echo "== check g3: rc $? | $(grep -E 'replayed' $O/check-g3.txt | tr -s ' ' | cut -c1-110)"
$B check -m /tmp/smol.gguf --backend cuda > $O/check-smol.txt 2>&1
echo "== check smol: rc $? | $(grep -E 'replayed' $O/check-smol.txt | tr -s ' ' | cut -c1-110)"
$B diff -m /tmp/g3c.gguf --a ref --b cuda --ids $(seq -s, 7 46) --decode 32 --isolate > $O/iso.txt 2>&1
echo "== diff g3 cut to 3 layers (40 + 32) --isolate: rc $? | $(grep -E '^isolated verdict|^verdict' $O/iso.txt | head -2 | cut -c1-100 | tr '\n' '|')"
wait; cat $O/ops_summary.txt; grep -E 'FAIL' $O/ops*.txt | head
el
tg() { timeout 40 env "$@" $B bench --backend cuda -m /tmp/$M.gguf -p 0 -n 128 -r 3 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f6 | sed 's/ *± */±/; s/ //g'; }
M=g3
for r in 1 2; do echo "g3 tg128 round $r: new $(tg X=1) / old $(tg "$OLD") / nan branch $(tg $NAN) / ieee div $(tg $DIV) / lead sync $(tg $SYN)"; done
echo "g3 tg128 round 3: new $(tg X=1) / old $(tg "$OLD")"
for r in 1 2; do M=smol; echo "smol tg128 round $r: new $(tg X=1) / old $(tg "$OLD")"; M=l1b; echo "l1b tg128 round $r: new $(tg X=1) / old $(tg "$OLD")"; done
el
LOCKSTEP_CUDA_TIMELINE=$O/tl_g3.txt $B bench --backend cuda -m /tmp/g3.gguf -p 0 -n 128 -r 1 > /dev/null 2>&1
awk -F'\t' 'NR>1 && $1==0 && $3>=9 && $3<=16' $O/tl_g3.txt | cut -f4-9
el
mkdir -p $OUT/s43c && cp $O/*.txt $OUT/s43c/ 2>/dev/null
true
