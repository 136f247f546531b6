#!/bin/bash
# Session 31f: the submitted build beside llama.cpp at depth, four shapes: llama-bench -p 0 -n 128
# -d 0,1024,4096 -fa 1 -r 3 (llama.cpp's better setting at every depth in session 30c), then
# lockstep bench --backend cuda -p 0 -n 128 -d D -r 3; a diff --isolate past the split threshold.
set -u
B=./.device/lockstep
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
LIMIT=${LIMIT:-470}
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
LB=/tmp/llama-bench
cat .device/llama-bench.xz.part* | xz -d > $LB && chmod +x $LB
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf | tail -1
$B bench --backend cuda -m /tmp/smol.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 &
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf --layers 4 -o /tmp/smol4.gguf | tail -1
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/gemma3.gguf | tail -1
$B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf | tail -1
( $B synth --like llama-8b --type Q4_K_M -o /tmp/l8b.gguf | tail -1 ) &
echo "== llama.cpp"
for m in smol gemma3 l1b; do $LB -m /tmp/$m.gguf -p 0 -n 128 -d 0,1024,4096 -ngl 99 -r 3 -fa 1 -o md 2>&1 | grep -E '^\| [a-z]' | grep -v model; done
wait; el
$LB -m /tmp/l8b.gguf -p 0 -n 128 -d 0,1024,4096 -ngl 99 -r 3 -fa 1 -o md 2>&1 | grep -E '^\| [a-z]' | grep -v model
el
$B diff -m /tmp/smol4.gguf --a ref --b cuda --ids $(seq -s, 7 306) --decode 8 --isolate > /tmp/iso.txt 2>&1
echo "== diff smol4 (300 + 8) --isolate: rc $? | $(grep -E '^isolated verdict|^verdict' /tmp/iso.txt | head -2 | cut -c1-110 | tr '\n' '|')"
echo "== lockstep"
for m in smol gemma3 l1b l8b; do for d in 0 1024 4096; do
  left=$(( LIMIT - ($(date +%s) - T0) )); [ $left -lt 15 ] && { echo "-- $m d$d skipped"; continue; }
  echo "-- $m $(timeout $left $B bench --backend cuda -m /tmp/$m.gguf -p 0 -n 128 -d $d -r 3 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f5,6)"
done; done
el
[ -n "${OUT:-}" ] && cp /tmp/iso.txt $OUT/ 2>/dev/null
true
