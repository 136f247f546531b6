#!/bin/bash
# Session 12, second call: the norm inside its consumer (residual_norm_then: norm_mmv3_fast1,
# norm_gate_up_fast1). check --ops on the device (its new residual_norm_then cases among
# them), diff and isolation on four shapes (Gemma-3's post norms included), 300-token
# generations against the separate residual_norm (LOCKSTEP_CUDA_NORM_FUSE=0), a Q4_K scale
# fault walked back through the fused kernel, then tg128 with and without the fusion.
set -u
B=${LOCKSTEP:-./.device/lockstep}
F=${LOCKSTEP_FAULTS:-./.device/lockstep-faults}
O=${OUT:-/tmp/s12b}; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf | tail -1
$B synth --like smollm2 --type Q4_1 --layers 4 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol4.gguf | tail -1
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/gemma3.gguf | tail -1
$B synth --like gemma3 --type Q4_K_M --layers 4 --metadata-from .device/gemma3-meta.gguf -o /tmp/gemma3-4.gguf | tail -1
$B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf | tail -1
$B synth --like llama-1b --type Q4_K_M --layers 3 -o /tmp/l1b3.gguf | tail -1
$B synth --like llama-8b --type Q4_K_M --layers 2 -o /tmp/l8b2.gguf | tail -1
( LOCKSTEP_CUDA_CACHE=/tmp/cubin-f LOCKSTEP_CUDA_FAULT=q4k-wrong-scale $F diff -m /tmp/l1b3.gguf --a ref --b cuda --ids 7 --decode 3 > $O/fault-q4k.txt 2>&1 ) &
( $B synth --like llama-8b --type Q4_K_M -o /tmp/l8b.gguf > /dev/null 2>&1 ) &
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
$B check --ops --backend cuda > $O/ops-cuda.txt 2>&1; echo "== check --ops --backend cuda: $(tail -1 $O/ops-cuda.txt)"
grep -E "residual_norm_then" $O/ops-cuda.txt | grep -vE " ok$" | head -5
grep -E "residual_norm_then \[1, (576|4096)\].*: (norm|q|gate|down) " $O/ops-cuda.txt | head -6
el
for mn in smol4:40:32 gemma3-4:40:32 l1b3:40:32 l8b2:24:32; do
  IFS=: read m n d <<< "$mn"; IDS=$(seq -s, 7 $((n + 6)))
  $B diff -m /tmp/$m.gguf --a ref --b cuda --ids $IDS --decode $d --isolate > $O/iso-$m.txt 2>&1
  echo "== diff $m ($n + $d) --isolate: rc $? | $(grep -E '^verdict' $O/iso-$m.txt | cut -c1-110) | $(grep -E '^isolated verdict' $O/iso-$m.txt | cut -c1-110)"
done; el
P="The capital of France is Paris. The capital of Germany is"
for m in smol gemma3 l1b; do
  for t in 0 0.8; do
    $B run -m /tmp/$m.gguf --backend cuda -p "$P" -n 300 --ignore-eos --temp $t > $O/run-new.txt 2>/dev/null
    LOCKSTEP_CUDA_NORM_FUSE=0 $B run -m /tmp/$m.gguf --backend cuda -p "$P" -n 300 --ignore-eos --temp $t > $O/run-base.txt 2>/dev/null
    echo "== $m temp $t, 300 tokens: fused norm vs residual_norm: $(cmp -s $O/run-new.txt $O/run-base.txt && echo same || echo DIFFER) ($(wc -c < $O/run-new.txt) bytes)"
  done
done; el
wait
echo "== fault q4k-wrong-scale (l1b3, one token + 3): $(grep -E '^verdict' $O/fault-q4k.txt | cut -c1-300)"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader
for m in smol gemma3 l1b l8b; do
  for fz in 1 0; do
    echo "-- $m fuse=$fz: $(LOCKSTEP_CUDA_NORM_FUSE=$fz $B bench --backend cuda -m /tmp/$m.gguf -p 0 -n 128 -r 5 2>&1 | grep -E '\| tg' | tr -s ' ')"
  done
done; el
