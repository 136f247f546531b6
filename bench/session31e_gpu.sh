#!/bin/bash
# Session 31e: the split-key attention's weighted sum of V a float4 of every head a thread (one
# V load from shared memory for the group) against 31c's build (.device/lockstep_v1: a thread
# per (head, element)); with ATT_S_PIPE and ATT_S_KPT=8; checks first.
set -u
B=./.device/lockstep
O=./.device/lockstep_v1
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
LIMIT=${LIMIT:-400}
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf --layers 4 -o /tmp/smol4.gguf | tail -1
for d in "" "ATT_S_PIPE" "ATT_S_KPT=8"; do LOCKSTEP_CUDA_DEFINES="$d" $B bench --backend cuda -m /tmp/smol4.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 & done
$O bench --backend cuda -m /tmp/smol4.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 &
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf | tail -1
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf --layers 3 -o /tmp/g3.gguf | tail -1
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/gemma3.gguf | tail -1
$B synth --like llama-8b --type Q4_K_M --layers 2 -o /tmp/l8b2.gguf | tail -1
$B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf | tail -1
$B synth --like llama-8b --type Q4_K_M -o /tmp/l8b.gguf | tail -1
wait; el
$B check --ops --backend cuda --filter 'attention*' > /tmp/ops.txt 2>&1; echo "== check --ops attention: rc $? $(tail -1 /tmp/ops.txt)"
iso() {
  $B diff -m /tmp/$1.gguf --a ref --b cuda --ids $(seq -s, 7 $2) --decode 8 --isolate > /tmp/iso_$1.txt 2>&1
  echo "== diff $1 (ids 7..$2 + 8) --isolate: rc $? | $(grep -E '^isolated verdict|^verdict' /tmp/iso_$1.txt | head -2 | cut -c1-110 | tr '\n' '|')"
}
iso smol4 306; iso g3 706; iso l8b2 306
el
bn() { LOCKSTEP_CUDA_DEFINES="$1" $4 bench --backend cuda -m /tmp/$2.gguf $3 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f5,6 | tr '\n' ' '; }
run() { # model depth
  A="-p 0 -n 128 -d $2 -r 2"
  for v in "new|$B|" "31c|$O|" "new PIPE|$B|ATT_S_PIPE" "new KPT8|$B|ATT_S_KPT=8"; do
    IFS='|' read -r name bin def <<< "$v"
    left=$(( LIMIT - ($(date +%s) - T0) )); if [ $left -lt 15 ]; then echo "-- $1 d$2 [$name]: skipped"; continue; fi
    echo "-- $1 d$2 [$name] $(timeout $left bash -c "$(declare -f bn); bn '$def' $1 '$A' $bin")"
  done
}
for M in smol gemma3 l8b l1b; do run $M 4096; done
for M in smol gemma3 l8b l1b; do run $M 1024; done
el
[ -n "${OUT:-}" ] && cp /tmp/ops.txt /tmp/iso_*.txt $OUT/ 2>/dev/null
true
