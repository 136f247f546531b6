#!/bin/bash
# Session 30f: the split-key spans' keys growing with the row (ceil(sqrt(n) / 2), at least 8) and
# empty spans leaving at once, against session 8's rule (LOCKSTEP_CUDA_SPLIT_SPANS=32, which
# keeps the new per-span rule's floor of 8 keys but 32 spans): checks, then tg128 at depths.
set -u
B=./.device/lockstep
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
LIMIT=${LIMIT:-200}
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf --layers 4 -o /tmp/smol4.gguf | tail -1
$B bench --backend cuda -m /tmp/smol4.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 &
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf | tail -1
$B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf | tail -1
wait; el
$B check --ops --backend cuda --filter 'attention*' > /tmp/ops.txt 2>&1; echo "== check --ops attention: rc $? $(tail -1 /tmp/ops.txt)"
$B diff -m /tmp/smol4.gguf --a ref --b cuda --ids $(seq -s, 7 306) --decode 8 --isolate > /tmp/iso.txt 2>&1
echo "== diff smol4 (300 + 8) --isolate: rc $? | $(grep -E '^isolated verdict|^verdict' /tmp/iso.txt | head -2 | cut -c1-110 | tr '\n' '|')"
el
bn() { env $1 $B bench --backend cuda -m /tmp/$2.gguf $3 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f5,6 | tr '\n' ' '; }
ab() {
  for x in "$@"; do
    left=$(( LIMIT - ($(date +%s) - T0) )); if [ $left -lt 10 ]; then echo "-- $M $A [$x]: skipped"; continue; fi
    echo "-- $M [$x] $(timeout $left bash -c "$(declare -f bn); B=$B; bn '$x' $M '$A'")"
  done
}
for d in 256 1024 4096; do for M in smol l1b; do A="-p 0 -n 128 -d $d -r 2"; ab LOCKSTEP_CUDA_SPLIT_SPANS=32 S30_NONE=1; done; done
M=smol; A="-p 0 -n 128 -r 3"; ab LOCKSTEP_CUDA_SPLIT_SPANS=32 S30_NONE=1
el
[ -n "${OUT:-}" ] && cp /tmp/ops.txt /tmp/iso.txt $OUT/ 2>/dev/null
true
