#!/bin/bash
# Session 30d: the split-key decode attention over more spans (8 blocks an SM, at most 128:
# LOCKSTEP_CUDA_SPLIT_SPANS=32 is session 8's 2 an SM, at most 32). Checks (check --ops
# attention, diff --isolate with 300-token prompts so decode runs the split kernels), then
# tg128 at depths 0, 1024, 4096 alternating, and the f16 cache at depth 4096.
set -u
B=./.device/lockstep
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
LIMIT=${LIMIT:-540}
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf --layers 4 -o /tmp/smol4.gguf | tail -1
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf --layers 3 -o /tmp/g3.gguf | tail -1
$B bench --backend cuda -m /tmp/smol4.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 &
LOCKSTEP_CUDA_KV=f16 $B bench --backend cuda -m /tmp/smol4.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 &
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf | tail -1
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/gemma3.gguf | tail -1
$B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf | tail -1
wait; el
$B synth --like llama-8b --type Q4_K_M -o /tmp/l8b.gguf > /dev/null 2>&1 &
P8=$!
$B check --ops --backend cuda --filter 'attention*' > /tmp/ops.txt 2>&1; echo "== check --ops attention: rc $? $(tail -1 /tmp/ops.txt)"
LOCKSTEP_CUDA_KV=f16 $B check --ops --backend cuda --filter 'attention*,rope*,kv*' > /tmp/ops16.txt 2>&1; echo "== check --ops attention/rope/kv, KV=f16: rc $? $(tail -1 /tmp/ops16.txt)"
for m in smol4 g3; do
  $B diff -m /tmp/$m.gguf --a ref --b cuda --ids $(seq -s, 7 306) --decode 8 --isolate > /tmp/iso-$m.txt 2>&1
  echo "== diff $m (300 + 8) --isolate: rc $? | $(grep -E '^isolated verdict|^verdict' /tmp/iso-$m.txt | head -2 | cut -c1-110 | tr '\n' '|')"
done
LOCKSTEP_CUDA_KV=f16 $B diff -m /tmp/smol4.gguf --a ref --b cuda --ids $(seq -s, 7 306) --decode 8 --isolate > /tmp/iso16.txt 2>&1
echo "== diff smol4 KV=f16 (300 + 8) --isolate: rc $? | $(grep -E '^isolated verdict|^verdict' /tmp/iso16.txt | head -2 | cut -c1-110 | tr '\n' '|')"
wait $P8; el
bn() { env $1 $B bench --backend cuda -m /tmp/$2.gguf $3 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f5,6 | tr '\n' ' '; }
ab() {
  for x in "$@"; do
    left=$(( LIMIT - ($(date +%s) - T0) )); if [ $left -lt 20 ]; then echo "-- $M $A [$x]: skipped"; continue; fi
    echo "-- $M [$x] $(timeout $left bash -c "$(declare -f bn); B=$B; bn '$x' $M '$A'")"
  done
}
for M in smol l8b gemma3 l1b; do
  A="-p 0 -n 128 -d 4096 -r 2"; ab LOCKSTEP_CUDA_SPLIT_SPANS=32 S30_NONE=1 LOCKSTEP_CUDA_KV=f16
  A="-p 0 -n 128 -d 1024 -r 2"; ab LOCKSTEP_CUDA_SPLIT_SPANS=32 S30_NONE=1
done
el
for M in smol l8b; do A="-p 0 -n 128 -r 3"; ab LOCKSTEP_CUDA_SPLIT_SPANS=32 S30_NONE=1; done
el
[ -n "${OUT:-}" ] && cp /tmp/ops.txt /tmp/iso-smol4.txt /tmp/iso-g3.txt /tmp/iso16.txt $OUT/ 2>/dev/null
true
