#!/bin/bash
# Session 21c: the submitted build (mmv_fast1l for long rows by default). check --ops, diff --isolate on
# cut Llama-1B, Gemma-3 and SmolLM2, programmatic edges, same tokens (the 8B and Llama-1B too),
# tg128 against LOCKSTEP_CUDA_MMV_LONG=0 (8B, Llama-1B; two rounds); the seeded CUDA faults.
# Build: not on main: bench/session21/mmv_long_rows.patch.
set -u
B=./.device/lockstep
O=${OUT:-/tmp/s21c}; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf | tail -1
$B synth --like smollm2 --type Q4_1 --layers 4 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol4.gguf | tail -1
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/gemma3.gguf | tail -1
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf --layers 3 -o /tmp/g3.gguf | tail -1
$B synth --like llama-1b --type Q4_K_M --layers 3 -o /tmp/l1b3.gguf | tail -1
$B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf | tail -1
( $B synth --like llama-8b --type Q4_K_M -o /tmp/l8b.gguf > /dev/null 2>&1 ) &
# The faults build's kernels, one NVRTC compile a fault, in parallel.
for f in kv-skip-prefill wrong-kv-head kv-view-offset q4k-wrong-scale f16-as-f32 mask-drift; do
  ( LOCKSTEP_CUDA_CACHE=/tmp/cubin-faults LOCKSTEP_CUDA_FAULT=$f ./.device/lockstep-faults bench --backend cuda -m /tmp/smol4.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 ) &
done
( LOCKSTEP_CUDA_CACHE=/tmp/cubin-faults ./.device/lockstep-faults bench --backend cuda -m /tmp/smol4.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 ) &
LOCKSTEP_CUDA_STATS=1 $B bench --backend cuda -m /tmp/smol.gguf -p 0 -n 16 -r 1 2>&1 | grep -E 'step graphs' | tr -s ' '
$B check --ops --backend cuda > $O/ops.txt 2>&1; echo "== check --ops --backend cuda: rc $? $(tail -1 $O/ops.txt)"
grep -E 'FAIL' $O/ops.txt | head -8
for m in l1b3 g3 smol4; do
  $B diff -m /tmp/$m.gguf --a ref --b cuda --ids $(seq -s, 7 46) --decode 32 --isolate > $O/iso-$m.txt 2>&1
  echo "== diff $m (40 + 32) --isolate: rc $? | $(grep -E '^isolated verdict|^verdict' $O/iso-$m.txt | head -2 | cut -c1-110 | tr '\n' '|')"
done
wait
el
for m in smol gemma3 l1b l8b; do
  a=$($B run --backend cuda -m /tmp/$m.gguf -p "The quick brown fox" -n 48 --temp 0 2>/dev/null | md5sum | cut -c1-12)
  b=$($B run --backend cuda -m /tmp/$m.gguf -p "Once upon a time" -n 48 --top-k 40 --seed 7 2>/dev/null | md5sum | cut -c1-12)
  echo "$m greedy $a top-k $b"
done
for round in 1 2; do
  for m in l8b l1b; do
    for s in 0 1; do
      echo "-- $m long=$s: $(LOCKSTEP_CUDA_MMV_LONG=$s $B bench --backend cuda -m /tmp/$m.gguf -p 0 -n 128 -r 3 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f6)"
    done
  done
done
el
LOCKSTEP_FAULTS=./.device/lockstep-faults bash bench/faults_gpu.sh 2>&1 | grep -v "^/\|^which\|nsys\|ncu" > $O/faults.txt
cat $O/faults.txt
el
