#!/bin/bash
# Session 43, call 6: the submitted code (78cfdc0). End to end: traces of cut Gemma-3 and SmolLM2
# (40 tokens + 16 steps, every tap) with every session-43 change and with all of them taken back
# by their diagnostic defines (the session-42 arithmetic) must hold the same bits
# (bench/session43/st_same.py). Then Gemma-3 beside llama.cpp, twice.
set -u
B=./.device/lockstep
O=/tmp/s43f; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
LB=/tmp/lc/b/bin/llama-bench
( nice -n 10 bash bench/llama_bench_build.sh $O 300 > $O/lbuild.txt 2>&1 ) &
PB=$!
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/g3.gguf > /dev/null 2>&1
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf --layers 3 -o /tmp/g3c.gguf > /dev/null 2>&1
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf --layers 3 -o /tmp/smolc.gguf > /dev/null 2>&1
OLD="LOCKSTEP_CUDA_DEFINES=LOCKSTEP_Q8_IEEE_DIV LOCKSTEP_Q8_NAN_BRANCH LOCKSTEP_NORM_IEEE_DIV LOCKSTEP_NORM_LEAD_SYNC"
$B bench --backend cuda -m /tmp/g3c.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 &
P1=$!
env "$OLD" $B bench --backend cuda -m /tmp/g3c.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 &
P2=$!
wait $P1 $P2; el
trc() { env "$2" $B trace -m /tmp/$1.gguf --backend cuda --ids $(seq -s, 7 46) --decode 16 -o $O/tr_$1_$3.st > $O/trace_$1_$3.txt 2>&1; }
for M in g3c smolc; do
  trc $M X=1 new; trc $M "$OLD" old
  echo "trace $M, session 43 vs session-42 arithmetic: $(python3 bench/session43/st_same.py $O/tr_${M}_new.st $O/tr_${M}_old.st)"
done
h() { $B run --backend cuda -m /tmp/$M.gguf -p 'The quick brown fox' -n 48 --temp 0 2>/dev/null | md5sum | cut -c1-12; }
M=g3; echo "tokens g3: $(h) (64901c8f9708)"
el
wait $PB; tail -1 $O/lbuild.txt; el
for r in 1 2; do
  echo "== round $r: llama.cpp g3"
  [ -x $LB ] && timeout 120 $LB -m /tmp/g3.gguf -p 512 -n 128 -ngl 99 -r 3 -fa 0,1 -o md 2>&1 | grep -E '^\| [a-z]' | grep -v model
  echo "== round $r: lockstep g3"
  timeout 60 $B bench --backend cuda -m /tmp/g3.gguf -p 512 -n 128 -r 3 2>&1 | grep -E '\| (pp|tg)'
  el
done
mkdir -p $OUT/s43f && cp $O/*.txt $OUT/s43f/ 2>/dev/null
true
