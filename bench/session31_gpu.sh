#!/bin/bash
# Session 31: the split-key decode attention rewritten (a span read a chunk of keys a round trip,
# K and V together; the combine over 512 threads): checks (attention ops, diff --isolate past the
# split threshold on SmolLM2, Gemma-3 past its window, an 8B cut), then tg128 at depths 1024 and
# 4096 against session 30's build (.device/lockstep_s30), alternating.
set -u
B=./.device/lockstep
O=./.device/lockstep_s30
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
LIMIT=${LIMIT:-570}
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf --layers 4 -o /tmp/smol4.gguf | tail -1
$B bench --backend cuda -m /tmp/smol4.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 &
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
bn() { $1 bench --backend cuda -m /tmp/$2.gguf $3 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f5,6 | tr '\n' ' '; }
for d in 4096 1024; do for M in smol gemma3 l1b l8b; do
  A="-p 0 -n 128 -d $d -r 2"
  for x in $B $O; do
    left=$(( LIMIT - ($(date +%s) - T0) )); if [ $left -lt 15 ]; then echo "-- $M d$d [$x]: skipped"; continue; fi
    echo "-- $M d$d [$x] $(timeout $left bash -c "$(declare -f bn); bn $x $M '$A'")"
  done
done; done
el
[ -n "${OUT:-}" ] && cp /tmp/ops.txt /tmp/iso_*.txt $OUT/ 2>/dev/null
true
