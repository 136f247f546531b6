#!/bin/bash
# Session 19f: the submitted build. check --ops (guard regions; the new [1, 4096] norm cases run
# residual_norm over four blocks), diff --isolate on cut Llama-1B (rows of 2048: the several-
# block residual_norm in every decode step), Gemma-3 and SmolLM2; bench on the four shapes;
# tg128 against the knobs off (session 18's residual_norm) on Llama-1B and the 8B.
set -u
B=./.device/lockstep
O=${OUT:-/tmp/s19f}; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf | tail -1
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/gemma3.gguf | tail -1
$B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf | tail -1
$B synth --like llama-1b --type Q4_K_M --layers 3 -o /tmp/l1b3.gguf | tail -1
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf --layers 3 -o /tmp/g3.gguf | tail -1
$B synth --like smollm2 --type Q4_1 --layers 4 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol4.gguf | tail -1
( $B synth --like llama-8b --type Q4_K_M -o /tmp/l8b.gguf > /dev/null 2>&1 ) &
( LOCKSTEP_CUDA_LAUNCH_AT_ENTRY=1 $B bench --backend cuda -m /tmp/smol4.gguf -p 0 -n 4 -r 1 > /dev/null 2>&1 ) &
$B check --ops --backend cuda > $O/ops.txt 2>&1; echo "== check --ops --backend cuda: rc $? $(tail -1 $O/ops.txt)"
grep -E 'FAIL' $O/ops.txt | head -8
echo "residual_norm [1, 4096] cases: $(grep -c '^  residual_norm.*\[1, 4096\].* ok$' $O/ops.txt) ok, $(grep -c '^  residual_norm.*\[1, 4096\].*FAIL' $O/ops.txt) FAIL"
el
for m in l1b3 g3 smol4; do
  $B diff -m /tmp/$m.gguf --a ref --b cuda --ids $(seq -s, 7 46) --decode 32 --isolate > $O/iso-$m.txt 2>&1
  echo "== diff $m (40 + 32) --isolate: rc $? | $(grep -E '^isolated verdict|^verdict' $O/iso-$m.txt | head -2 | cut -c1-110 | tr '\n' '|')"
done
el
wait
for m in smol gemma3 l1b l8b; do
  echo "-- $m (submitted):"; $B bench --backend cuda -m /tmp/$m.gguf -r 3 2>&1 | grep -E '\| (pp|tg)|GPU memory' | tr -s ' '
done
el
for round in 1 2; do
  for m in l1b l8b; do
    for v in "0 1" "1 0"; do
      set -- $v
      echo "-- $m entry=$1 parts=$2: $(LOCKSTEP_CUDA_LAUNCH_AT_ENTRY=$1 LOCKSTEP_CUDA_NORM_PARTS=$2 $B bench --backend cuda -m /tmp/$m.gguf -p 0 -n 128 -r 3 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f6)"
    done
  done
done
el
