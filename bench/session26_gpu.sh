#!/bin/bash
# Session 26: the output projection started inside SmolLM2's decode attention
# (attention_decode_rope_o_64_<id>: each block multiplies its head's quantized values by its
# columns of W_o, the norm-fused gate/up sums the partial rows; LOCKSTEP_CUDA_ATTN_O=0 runs the o
# mat-vec as before). Checked first: check --ops (the new projection cases), diff --isolate on
# cut SmolLM2 (Q4_1 and Q8_0), check's replayed-vs-tapped; the tokens both ways; then tg128
# alternating, three rounds, SmolLM2 Q4_1 and Q8_0.
set -u
B=./.device/lockstep
O=${OUT:-/tmp/s26}; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$B synth --like smollm2 --type Q4_1 --layers 4 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol4.gguf | tail -1
$B synth --like smollm2 --type Q8_0 --layers 4 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol84.gguf | tail -1
$B bench --backend cuda -m /tmp/smol4.gguf -p 0 -n 2 -r 1 > $O/warm.txt 2>&1; echo "== warm: rc $?"; el
( $B check --ops --backend cuda > $O/ops.txt 2>&1; echo "== check --ops --backend cuda: rc $? $(tail -1 $O/ops.txt)"; grep -E "o projection" $O/ops.txt | grep -c ok ) &
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf | tail -1
$B synth --like smollm2 --type Q8_0 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol8.gguf | tail -1
for m in smol4 smol84; do
  $B diff -m /tmp/$m.gguf --a ref --b cuda --ids $(seq -s, 7 46) --decode 32 --isolate > $O/iso-$m.txt 2>&1
  echo "== diff $m (40 + 32) --isolate: rc $? | $(grep -E '^isolated verdict|^verdict' $O/iso-$m.txt | head -2 | cut -c1-110 | tr '\n' '|')"
  grep -E "attn_out" $O/iso-$m.txt | head -3
done
$B check -m /tmp/smol4.gguf --backend cuda --tolerance 1e-2 > $O/check-smol4.txt 2>&1; echo "== check smol4 (1e-2): rc $? $(grep -E 'replayed|result' $O/check-smol4.txt | tr -s ' ' | tr '\n' '|')"
wait
el
for x in "LOCKSTEP_NONE=1" "LOCKSTEP_CUDA_ATTN_O=0"; do
  for m in smol smol8; do
    a=$(env $x $B run --backend cuda -m /tmp/$m.gguf -p "The quick brown fox" -n 48 --temp 0 2>/dev/null | md5sum | cut -c1-12)
    b=$(env $x $B run --backend cuda -m /tmp/$m.gguf -p "Once upon a time" -n 48 --top-k 40 --seed 7 2>/dev/null | md5sum | cut -c1-12)
    echo "$m [$x]: greedy $a top-k $b"
  done
done
el
tg() { env $1 $B bench --backend cuda -m /tmp/$2.gguf -p 0 -n 128 -r 3 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f6; }
for r in 1 2 3; do
  for m in smol smol8; do
    for x in "LOCKSTEP_CUDA_ATTN_O=0" "LOCKSTEP_NONE=1"; do echo "-- $m r$r [$x]: $(tg "$x" $m)"; done
  done
  el
done
