#!/bin/bash
# Session 43, call 4: the norms' 1 / g formed before the grid wait (norm_inv, NORM_PIN: the
# fused prologues and rope_store's head norms), checked and measured against forming it at its
# use (LOCKSTEP_NORM_DIV_LATE, the previous commit's placement); then Gemma-3, SmolLM2 and
# Llama-1B beside llama.cpp (built on the device while the checks run).
set -u
B=./.device/lockstep
O=/tmp/s43d; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
LB=/tmp/lc/b/bin/llama-bench
( nice -n 10 bash bench/llama_bench_build.sh $O 300 > $O/lbuild.txt 2>&1 ) &
PB=$!
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/g3.gguf > /dev/null 2>&1
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf --layers 3 -o /tmp/g3c.gguf > /dev/null 2>&1
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf > /dev/null 2>&1 &
$B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf > /dev/null 2>&1 &
LATE=LOCKSTEP_CUDA_DEFINES=LOCKSTEP_NORM_DIV_LATE
for v in X=1 $LATE; do env $v $B bench --backend cuda -m /tmp/g3c.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 & done
$B bench --backend cuda-exact -m /tmp/g3c.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 &
wait $(jobs -p | grep -v "^$PB$") 2>/dev/null; el
( $B check --ops --backend cuda > $O/ops.txt 2>&1; echo "== ops cuda: rc $? $(tail -1 $O/ops.txt)"
  $B check --ops --backend cuda-exact > $O/ops-exact.txt 2>&1; echo "== ops cuda-exact: rc $? $(tail -1 $O/ops-exact.txt)" ) > $O/ops_summary.txt 2>&1 &
PO=$!
h() { env "$@" $B run --backend cuda -m /tmp/$M.gguf -p 'The quick brown fox' -n 48 --temp 0 2>/dev/null | md5sum | cut -c1-12; }
M=g3; echo "tokens g3: $(h X=1), late $(h $LATE) (64901c8f9708)"
M=smol; echo "tokens smol: $(h X=1) (10d82d4b9948)"
M=l1b; echo "tokens l1b: $(h X=1) (4e5bee1ab652)"
$B check -m /tmp/g3.gguf --backend cuda > $O/check-g3.txt 2>&1
echo "== check g3: rc $? | $(grep -E 'replayed' $O/check-g3.txt | tr -s ' ' | cut -c1-110)"
$B check -m /tmp/smol.gguf --backend cuda > $O/check-smol.txt 2>&1
echo "== check smol: rc $? | $(grep -E 'replayed' $O/check-smol.txt | tr -s ' ' | cut -c1-110)"
$B diff -m /tmp/g3c.gguf --a ref --b cuda --ids $(seq -s, 7 46) --decode 32 --isolate > $O/iso.txt 2>&1
echo "== diff g3 cut to 3 layers (40 + 32) --isolate: rc $? | $(grep -E '^isolated verdict|^verdict' $O/iso.txt | head -2 | cut -c1-100 | tr '\n' '|')"
wait $PO; cat $O/ops_summary.txt; grep -E 'FAIL' $O/ops*.txt | head
el
tg() { timeout 40 env "$@" $B bench --backend cuda -m /tmp/$M.gguf -p 0 -n 128 -r 3 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f6 | sed 's/ *± */±/; s/ //g'; }
M=g3; for r in 1 2 3; do echo "g3 tg128 round $r: early $(tg X=1) / late $(tg $LATE)"; done
M=smol; echo "smol tg128: early $(tg X=1) / late $(tg $LATE)"
el
wait $PB; tail -1 $O/lbuild.txt; el
for M in g3 g3 smol l1b; do
  echo "== llama.cpp $M"
  [ -x $LB ] && timeout 120 $LB -m /tmp/$M.gguf -p 512 -n 128 -ngl 99 -r 3 -fa 0,1 -o md 2>&1 | grep -E '^\| [a-z]' | grep -v model
  echo "== lockstep $M"
  timeout 60 $B bench --backend cuda -m /tmp/$M.gguf -p 512 -n 128 -r 3 2>&1 | grep -E '\| (pp|tg)'
  el
done
mkdir -p $OUT/s43d && cp $O/*.txt $OUT/s43d/ 2>/dev/null
true
