#!/bin/bash
# Session 41, call 4: the submitted build (the cluster decode attention of heads of 256, 8 blocks
# by default; its shared memory one struct, as bench/attn_emu emulates it) checked again, then
# Gemma-3 side by side with llama.cpp in this one call: llama-bench built from
# .device/llama.cpp.tar.xz while the checks run, then llama-bench -p 512 -n 128 -r 3 -fa 0,1 and
# lockstep bench -p 512 -n 128 -r 3, twice, and tg128 alternating the cluster's sizes.
set -u
B=./.device/lockstep
O=/tmp/s41d; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
LB=/tmp/lc/b/bin/llama-bench
( nice -n 10 bash bench/llama_bench_build.sh $O 420 > $O/lbuild.txt 2>&1 ) &
PB=$!
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/g3.gguf > /dev/null 2>&1
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf --layers 3 -o /tmp/g3c.gguf > /dev/null 2>&1
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf > /dev/null 2>&1
$B bench --backend cuda -m /tmp/g3c.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1; el
( $B check --ops --backend cuda > $O/ops.txt 2>&1; echo "== ops cuda: rc $? $(tail -1 $O/ops.txt)"
  LOCKSTEP_CUDA_ATT_CL=4 $B check --ops --backend cuda --filter 'attention*,rope*,kv*' > $O/ops4.txt 2>&1; echo "== ops cuda attention/rope/kv, ATT_CL=4: rc $? $(tail -1 $O/ops4.txt)"
  LOCKSTEP_CUDA_ATTN_HEADS=group $B check --ops --backend cuda --filter 'attention*,rope*,kv*' > $O/opsg.txt 2>&1; echo "== ops cuda attention/rope/kv, ATTN_HEADS=group: rc $? $(tail -1 $O/opsg.txt)" ) > $O/ops_summary.txt 2>&1
cat $O/ops_summary.txt; grep -E 'FAIL' $O/ops*.txt | head
for v in "X=1" "LOCKSTEP_CUDA_ATT_CL=4" "LOCKSTEP_CUDA_ATTN_HEADS=group"; do
  env $v $B diff -m /tmp/g3c.gguf --a ref --b cuda --ids $(seq -s, 7 46) --decode 32 --isolate > $O/iso.txt 2>&1
  echo "== diff g3 cut to 3 layers (40 + 32) --isolate, $v: rc $? | $(grep -E '^isolated verdict|^verdict' $O/iso.txt | head -2 | cut -c1-100 | tr '\n' '|')"
done
$B check -m /tmp/g3.gguf --backend cuda > $O/check-g3.txt 2>&1
echo "== check g3: rc $? | $(grep -E 'replayed' $O/check-g3.txt | tr -s ' ' | cut -c1-100)"
$B check -m /tmp/smol.gguf --backend cuda > $O/check-smol.txt 2>&1
echo "== check smol: rc $? | $(grep -E 'replayed' $O/check-smol.txt | tr -s ' ' | cut -c1-100)"
h() { env "$@" $B run --backend cuda -m /tmp/$M.gguf -p 'The quick brown fox' -n 48 --temp 0 2>/dev/null | md5sum | cut -c1-12; }
M=g3; echo "tokens g3: $(h X=1), ATT_CL=0 $(h LOCKSTEP_CUDA_ATT_CL=0) (session 39: 64901c8f9708); smol $(M=smol; h X=1) (10d82d4b9948)"
el
tg() { timeout 40 env "$@" $B bench --backend cuda -m /tmp/g3.gguf -p 0 -n 128 -r 3 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f6 | sed 's/ *± */±/; s/ //g'; }
for r in 1 2; do echo "g3 tg128 round $r: ATT_CL=8 $(tg X=1) / 4 $(tg LOCKSTEP_CUDA_ATT_CL=4) / 0 $(tg LOCKSTEP_CUDA_ATT_CL=0) / 8 heads=group $(tg LOCKSTEP_CUDA_ATTN_HEADS=group)"; done
el
wait $PB; cat $O/lbuild.txt; el
for r in 1 2; do
  echo "== round $r: llama.cpp g3"
  [ -x $LB ] && timeout 120 $LB -m /tmp/g3.gguf -p 512 -n 128 -ngl 99 -r 3 -fa 0,1 -o md 2>&1 | grep -E '^\| [a-z]' | grep -v model
  echo "== round $r: lockstep g3"
  timeout 60 $B bench --backend cuda -m /tmp/g3.gguf -p 512 -n 128 -r 3 2>&1 | grep -E '\| (pp|tg)'
  el
done
mkdir -p $OUT/s41d && cp $O/*.txt $OUT/s41d/ 2>/dev/null
true
