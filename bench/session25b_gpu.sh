#!/bin/bash
# Session 25b: the submitted build (session 24's kernels; cp_async_wait now clobbers memory, the
# grid-wait audit counts cp.async) checked as every session's is: check --ops (with Gemma-3's
# decode over 34 sequences, new), diff --isolate on cut Llama-1B, Gemma-3 and SmolLM2, check
# (replayed steps against tapped, bitwise), the standing tokens; then llama.cpp and lockstep side
# by side on this card, two rounds in turn: llama-bench -p 512 -n 128 -ngl 99 -r 10 -fa 0,1 (the
# anchors' own command) and lockstep bench --backend cuda -r 10. llama-bench travels as
# .device/llama-bench.xz.part* (built by bench/session25_gpu.sh in this session's first call).
set -u
B=./.device/lockstep
O=${OUT:-/tmp/s25b}; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
LIMIT=${LIMIT:-570}
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
LB=/tmp/llama-bench
cat .device/llama-bench.xz.part* | xz -d > $LB && chmod +x $LB
$B synth --like smollm2 --type Q4_1 --layers 4 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol4.gguf | tail -1
( $B bench --backend cuda -m /tmp/smol4.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1; $B check --ops --backend cuda > $O/ops.txt 2>&1; echo "== check --ops --backend cuda: rc $? $(tail -1 $O/ops.txt)" ) &
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf | tail -1
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/gemma3.gguf | tail -1
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf --layers 3 -o /tmp/g3.gguf | tail -1
$B synth --like llama-1b --type Q4_K_M --layers 3 -o /tmp/l1b3.gguf | tail -1
$B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf | tail -1
( $B synth --like llama-8b --type Q4_K_M -o /tmp/l8b.gguf > /dev/null 2>&1 ) &
for m in l1b3 g3 smol4; do
  $B diff -m /tmp/$m.gguf --a ref --b cuda --ids $(seq -s, 7 46) --decode 32 --isolate > $O/iso-$m.txt 2>&1
  echo "== diff $m (40 + 32) --isolate: rc $? | $(grep -E '^isolated verdict|^verdict' $O/iso-$m.txt | head -2 | cut -c1-110 | tr '\n' '|')"
done
$B check -m /tmp/smol4.gguf --backend cuda --tolerance 1e-2 > $O/check-smol4.txt 2>&1; echo "== check smol4 (1e-2): rc $? $(grep -E 'replayed|result' $O/check-smol4.txt | tr -s ' ' | tr '\n' '|')"
$B check -m /tmp/g3.gguf --backend cuda --tolerance 1e-2 > $O/check-g3.txt 2>&1; echo "== check g3 (1e-2): rc $? $(grep -E 'replayed|result' $O/check-g3.txt | tr -s ' ' | tr '\n' '|')"
wait
el
for m in smol gemma3 l1b l8b; do
  a=$($B run --backend cuda -m /tmp/$m.gguf -p "The quick brown fox" -n 48 --temp 0 2>/dev/null | md5sum | cut -c1-12)
  b=$($B run --backend cuda -m /tmp/$m.gguf -p "Once upon a time" -n 48 --top-k 40 --seed 7 2>/dev/null | md5sum | cut -c1-12)
  echo "$m greedy $a top-k $b"
done
el
for r in 1 2; do
  for m in smol gemma3 l1b l8b; do
    left=$(( LIMIT - ($(date +%s) - T0) ))
    if [ $left -lt 45 ]; then echo "-- round $r $m: skipped, $left s left"; continue; fi
    echo "== round $r $m" | tee -a $O/side_by_side.txt
    timeout $left $LB -m /tmp/$m.gguf -p 512 -n 128 -ngl 99 -r 10 -fa 0,1 -o md 2>&1 | grep -E '^\| [a-z]' | grep -v model | tee -a $O/side_by_side.txt
    timeout $left $B bench --backend cuda -m /tmp/$m.gguf -r 10 2>&1 | grep -E '^\| [a-z0-9]|GPU memory' | grep -v model | tee -a $O/side_by_side.txt
  done
  el
done
