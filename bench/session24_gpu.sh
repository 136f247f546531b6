#!/bin/bash
# Session 24: one-row mat-vecs two weight rows a warp (mmv_fast2r, LOCKSTEP_CUDA_TWO_ROWS: 0 off,
# N = from N rows; default 1). The LM heads alone (bench/gemv_lab/head_lab.cu, nvcc), then the
# tokens (must be the standing hashes: the kernel is bitwise mmv_fast1's), check --ops, check
# (replayed steps against tapped ones), and tg128 alternating off / heads only / all.
set -u
B=./.device/lockstep
O=${OUT:-/tmp/s24}; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf | tail -1
( $B bench --backend cuda -m /tmp/smol.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 ) &
$B synth --like smollm2 --type Q4_1 --layers 4 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol4.gguf | tail -1
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/gemma3.gguf | tail -1
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf --layers 3 -o /tmp/g3.gguf | tail -1
$B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf | tail -1
( $B synth --like llama-8b --type Q4_K_M -o /tmp/l8b.gguf > /dev/null 2>&1 ) &
wait
el
for m in smol gemma3 l1b l8b; do [ -f /tmp/$m.gguf ] || { echo "no /tmp/$m.gguf"; exit 1; }; done
for m in smol gemma3 l1b l8b; do
  for x in 0 1; do
    a=$(LOCKSTEP_CUDA_TWO_ROWS=$x $B run --backend cuda -m /tmp/$m.gguf -p "The quick brown fox" -n 48 --temp 0 2>/dev/null | md5sum | cut -c1-12)
    b=$(LOCKSTEP_CUDA_TWO_ROWS=$x $B run --backend cuda -m /tmp/$m.gguf -p "Once upon a time" -n 48 --top-k 40 --seed 7 2>/dev/null | md5sum | cut -c1-12)
    echo "$m two rows $x: greedy $a top-k $b"
  done
done
el
$B check -m /tmp/smol4.gguf --backend cuda > $O/check-smol4.txt 2>&1; echo "== check smol4: rc $? $(grep -iE 'verdict|pass|fail' $O/check-smol4.txt | tail -2 | tr '\n' '|')"
$B check -m /tmp/g3.gguf --backend cuda --tolerance 1e-2 > $O/check-g3.txt 2>&1; echo "== check g3 (1e-2): rc $? $(grep -iE 'verdict|pass|fail' $O/check-g3.txt | tail -2 | tr '\n' '|')"
$B check --ops --backend cuda > $O/ops.txt 2>&1; echo "== check --ops --backend cuda: rc $? $(tail -1 $O/ops.txt)"
el
tg() { env $1 $B bench --backend cuda -m /tmp/$2.gguf -p 0 -n 128 -r 3 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f6; }
for r in 1 2; do
  for m in gemma3 smol l1b; do
    for x in 0 16384 1; do echo "-- $m two rows $x: $(tg LOCKSTEP_CUDA_TWO_ROWS=$x $m)"; done
  done
done
echo "-- l8b: $(tg LOCKSTEP_CUDA_TWO_ROWS=1 l8b)"
el
