#!/bin/bash
# Session 42, call 4: the submitted build (the rope rewrite: rope_store's work in the q/k/v
# launch of replayed steps, thread 0's fence only) checked, its fence compared with every
# thread's (LOCKSTEP_CUDA_DEFINES=LOCKSTEP_ROPE_FENCE_ALL) and with no rewrite, then Gemma-3 side
# by side with llama.cpp in this one call: llama-bench built from .device/llama.cpp.tar.xz while
# the checks run, then llama-bench -p 512 -n 128 -r 3 -fa 0,1 and lockstep bench -p 512 -n 128
# -r 3, twice.
set -u
B=./.device/lockstep
O=/tmp/s42d; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
LB=/tmp/lc/b/bin/llama-bench
( nice -n 10 bash bench/llama_bench_build.sh $O 420 > $O/lbuild.txt 2>&1 ) &
PB=$!
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/g3.gguf > /dev/null 2>&1
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf --layers 3 -o /tmp/g3c.gguf > /dev/null 2>&1
$B bench --backend cuda -m /tmp/g3c.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 &
W1=$!
LOCKSTEP_CUDA_DEFINES=LOCKSTEP_ROPE_FENCE_ALL $B bench --backend cuda -m /tmp/g3c.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 &
W2=$!
wait $W1 $W2; el
F=LOCKSTEP_CUDA_DEFINES=LOCKSTEP_ROPE_FENCE_ALL
h() { env "$@" $B run --backend cuda -m /tmp/g3.gguf -p 'The quick brown fox' -n 48 --temp 0 2>/dev/null | md5sum | cut -c1-12; }
echo "tokens g3: $(h X=1), fence all $(h $F), no rewrite $(h LOCKSTEP_CUDA_ROPE_QKV=0) (64901c8f9708)"
echo "== stats: $(LOCKSTEP_CUDA_STATS=1 $B bench --backend cuda -m /tmp/g3.gguf -p 0 -n 8 -r 1 2>&1 | grep 'step graphs' | cut -c1-200)"
$B check -m /tmp/g3.gguf --backend cuda > $O/check-g3.txt 2>&1
echo "== check g3: rc $? | $(grep -E 'replayed' $O/check-g3.txt | tr -s ' ' | cut -c1-110)"
$B check --ops --backend cuda --filter 'rope*,kv*,attention*,residual*' > $O/ops.txt 2>&1; echo "== ops: rc $? $(tail -1 $O/ops.txt)"
el
tg() { timeout 40 env "$@" $B bench --backend cuda -m /tmp/g3.gguf -p 0 -n 128 -r 3 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f6 | sed 's/ *± */±/; s/ //g'; }
for r in 1 2; do echo "g3 tg128 round $r: thread 0 fence $(tg X=1) / every thread $(tg $F) / no rewrite $(tg LOCKSTEP_CUDA_ROPE_QKV=0)"; done
el
wait $PB; tail -2 $O/lbuild.txt; el
for r in 1 2; do
  echo "== round $r: llama.cpp g3"
  [ -x $LB ] && timeout 120 $LB -m /tmp/g3.gguf -p 512 -n 128 -ngl 99 -r 3 -fa 0,1 -o md 2>&1 | grep -E '^\| [a-z]' | grep -v model
  echo "== round $r: lockstep g3"
  timeout 60 $B bench --backend cuda -m /tmp/g3.gguf -p 512 -n 128 -r 3 2>&1 | grep -E '\| (pp|tg)'
  el
done
mkdir -p $OUT/s42d && cp $O/*.txt $OUT/s42d/ 2>/dev/null
true
