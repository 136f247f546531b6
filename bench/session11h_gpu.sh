#!/bin/bash
# (.device/lockstep-qkv was build K plus the dropped q/k/v + rope fusion: bench/session11f_gpu.sh.)
# Session 11, an extra call: why the dropped q/k/v + rope fusion was slower (graph captures
# and replays counted with LOCKSTEP_CUDA_STATS=1, .device/lockstep-qkv = build K plus the
# fusion); the tiny-llama zoo (15 types, heads of 64: decode steps now run the short decode
# kernel) diffed and isolated on build K; the seeded add-overrun fault against the guards.
set -u
B=${LOCKSTEP:-./.device/lockstep}
Q=./.device/lockstep-qkv
F=${LOCKSTEP_FAULTS:-./.device/lockstep-faults}
O=${OUT:-/tmp/s11h}; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf | tail -1
( LOCKSTEP_CUDA_CACHE=/tmp/cubin-faults LOCKSTEP_CUDA_FAULT=add-overrun $F check --ops --backend cuda --filter add > $O/ops-add-overrun.txt 2>&1 ) &
LOCKSTEP_CUDA_CACHE=/tmp/cubin $B bench --backend cuda -m /tmp/smol.gguf -p 0 -n 4 -r 1 > /dev/null 2>&1 &
LOCKSTEP_CUDA_CACHE=/tmp/cubin-qkv $Q bench --backend cuda -m /tmp/smol.gguf -p 0 -n 4 -r 1 > /dev/null 2>&1 &
wait
el
for q in 1 0 1 0; do
  echo "-- qkv build, QKV_ROPE=$q:"
  LOCKSTEP_CUDA_STATS=1 LOCKSTEP_CUDA_QKV_ROPE=$q LOCKSTEP_CUDA_CACHE=/tmp/cubin-qkv $Q bench --backend cuda -m /tmp/smol.gguf -p 0 -n 128 -r 3 > $O/stats-$q.txt 2>&1
  grep -E "\| tg|captur|replay|graph" $O/stats-$q.txt | head -6
done
el
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
for t in .device/tiny/*.gguf; do
  echo "-- $(basename $t): $($B diff -m $t --a ref --b cuda --ids 1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24 --decode 8 --isolate 2>&1 | grep -E '^(verdict|isolated verdict)' | cut -c1-90 | tr '\n' ' ')"
done
el
echo "== add-overrun: $(tail -1 $O/ops-add-overrun.txt)"; grep -E "FAIL" $O/ops-add-overrun.txt | head -3 | cut -c1-260
