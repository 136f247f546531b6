#!/bin/bash
# Session 28e: the rope-fused decode attention's leader blocks without their two extra round
# trips (the row's new slot read before the grid wait, a step table; the row's v for the cache
# loaded with the stage, stored after). Checked first (check --ops, diff --isolate on cut
# Llama-1B and SmolLM2-like, the tokens against session 27's hashes), then tg128 alternating,
# .device/lockstep_base (the build before) against .device/lockstep.
set -u
B=./.device/lockstep
A=./.device/lockstep_base
O=${OUT:-/tmp/s28e}; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$B synth --like llama-1b --type Q4_K_M --layers 3 -o /tmp/l1b3.gguf | tail -1
( $B bench --backend cuda -m /tmp/l1b3.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 ) &
( $A bench --backend cuda -m /tmp/l1b3.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 ) &
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf | tail -1
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf --layers 4 -o /tmp/smol4.gguf | tail -1
$B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf | tail -1
( $B synth --like llama-8b --type Q4_K_M -o /tmp/l8b.gguf > /dev/null 2>&1 ) &
wait; el
$B check --ops --backend cuda > $O/ops.txt 2>&1; echo "== check --ops --backend cuda: rc $? $(tail -1 $O/ops.txt)"
for m in l1b3 smol4; do
  $B diff -m /tmp/$m.gguf --a ref --b cuda --ids $(seq -s, 7 46) --decode 32 --isolate > $O/iso-$m.txt 2>&1
  echo "== diff $m (40 + 32) --isolate: rc $? | $(grep -E '^isolated verdict|^verdict' $O/iso-$m.txt | head -2 | cut -c1-110 | tr '\n' '|')"
done
$B check -m /tmp/smol4.gguf --backend cuda --tolerance 1e-2 > $O/check-smol4.txt 2>&1; echo "== check smol4 (1e-2): rc $? $(grep -E 'replayed|result' $O/check-smol4.txt | tr -s ' ' | tr '\n' '|')"
el
h() { $B run --backend cuda -m /tmp/$1.gguf "${@:2}" 2>/dev/null | md5sum | cut -c1-12; }
for m in smol l1b l8b; do
  echo "$m greedy $(h $m -p 'The quick brown fox' -n 48 --temp 0) top-k $(h $m -p 'Once upon a time' -n 48 --top-k 40 --seed 7)"
done
echo "(s27: smol 10d82d4b9948 d29998751468, l1b 4e5bee1ab652 e3fb11944b54, l8b 4aa7e0e30dda 71249884f2ee)"
el
bn() { $1 bench --backend cuda -m /tmp/$2.gguf -p 0 -n 128 -r 3 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f5,6 | tr '\n' ' '; }
for r in 1 2 3; do
  for m in smol l1b l8b; do
    for x in $A $B; do echo "-- $m r$r [$x]: $(bn $x $m)"; done
  done
  el
done
