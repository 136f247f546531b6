#!/bin/bash
# Session 31g: the submitted kernel (31f's, with room for 8 query heads of 512 values: q rows in
# 28.8 KB of static shared memory instead of 16.5): checks and tg128 at depths 1024 and 4096.
set -u
B=./.device/lockstep
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
LIMIT=${LIMIT:-300}
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf --layers 4 -o /tmp/smol4.gguf | tail -1
$B bench --backend cuda -m /tmp/smol4.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 &
WARM=$!
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf | tail -1
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf --layers 3 -o /tmp/g3.gguf | tail -1
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/gemma3.gguf | tail -1
$B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf | tail -1
( $B synth --like llama-8b --type Q4_K_M -o /tmp/l8b.gguf | tail -1 ) &
wait $WARM; el
$B check --ops --backend cuda --filter 'attention*' > /tmp/ops.txt 2>&1; echo "== check --ops attention: rc $? $(tail -1 /tmp/ops.txt)"
iso() {
  $B diff -m /tmp/$1.gguf --a ref --b cuda --ids $(seq -s, 7 $2) --decode 8 --isolate > /tmp/iso_$1.txt 2>&1
  echo "== diff $1 (ids 7..$2 + 8) --isolate: rc $? | $(grep -E '^isolated verdict|^verdict' /tmp/iso_$1.txt | head -2 | cut -c1-110 | tr '\n' '|')"
}
iso smol4 306; iso g3 706
wait; el
for m in smol gemma3 l1b l8b; do for d in 1024 4096; do
  left=$(( LIMIT - ($(date +%s) - T0) )); [ $left -lt 15 ] && { echo "-- $m d$d skipped"; continue; }
  echo "-- $m $(timeout $left $B bench --backend cuda -m /tmp/$m.gguf -p 0 -n 128 -d $d -r 3 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f5,6)"
done; done
el
[ -n "${OUT:-}" ] && cp /tmp/ops.txt /tmp/iso_*.txt $OUT/ 2>/dev/null
true
