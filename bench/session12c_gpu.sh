#!/bin/bash
# Session 12, third call: the norm inside its consumer, now for rows of at most 1024 values,
# each warp's first weight unit and the norm weights loaded before the grid wait; residual_norm
# letting the next kernel launch at once and prefetching its weights. check --ops (the
# residual_norm_then cases: fused and not), diff and isolation on four shapes, 300-token
# generations against LOCKSTEP_CUDA_NORM_FUSE=0, the Q4_K scale fault walked back, then tg128:
# this build fused and not, and the session's start (.device/lockstep-base), in one call.
set -u
B=${LOCKSTEP:-./.device/lockstep}
F=${LOCKSTEP_FAULTS:-./.device/lockstep-faults}
O=${OUT:-/tmp/s12c}; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf | tail -1
$B synth --like smollm2 --type Q4_1 --layers 4 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol4.gguf | tail -1
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/gemma3.gguf | tail -1
$B synth --like gemma3 --type Q4_K_M --layers 4 --metadata-from .device/gemma3-meta.gguf -o /tmp/gemma3-4.gguf | tail -1
$B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf | tail -1
$B synth --like llama-1b --type Q4_K_M --layers 3 -o /tmp/l1b3.gguf | tail -1
$B synth --like llama-8b --type Q4_K_M --layers 2 -o /tmp/l8b2.gguf | tail -1
( LOCKSTEP_CUDA_CACHE=/tmp/cubin-f LOCKSTEP_CUDA_FAULT=q4k-wrong-scale $F diff -m .device/tiny/tiny-llama-Q4_K.gguf --a ref --b cuda --ids 7 --decode 3 > $O/fault-q4k.txt 2>&1 ) &
( $B synth --like llama-8b --type Q4_K_M -o /tmp/l8b.gguf > /dev/null 2>&1 ) &
( LOCKSTEP_CUDA_CACHE=/tmp/cubin-base ./.device/lockstep-base bench --backend cuda -m /tmp/smol.gguf -p 0 -n 4 -r 1 > /dev/null 2>&1 ) &
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
$B check --ops --backend cuda > $O/ops-cuda.txt 2>&1; echo "== check --ops --backend cuda: $(tail -1 $O/ops-cuda.txt)"
grep -E "residual_norm_then" $O/ops-cuda.txt | grep -vE " ok$" | head -5
grep -E "residual_norm_then \[1, (576|640)\].*: (norm|q|gate|down) " $O/ops-cuda.txt | head -6
el
for mn in smol4:40:32 gemma3-4:40:32 l1b3:40:32 l8b2:24:32; do
  IFS=: read m n d <<< "$mn"; IDS=$(seq -s, 7 $((n + 6)))
  $B diff -m /tmp/$m.gguf --a ref --b cuda --ids $IDS --decode $d --isolate > $O/iso-$m.txt 2>&1
  echo "== diff $m ($n + $d) --isolate: rc $? | $(grep -E '^verdict' $O/iso-$m.txt | cut -c1-110) | $(grep -E '^isolated verdict' $O/iso-$m.txt | cut -c1-110)"
done; el
$B check -m /tmp/smol4.gguf --backend cuda > $O/check-smol4.txt 2>&1; echo "== check smol4 --backend cuda: rc $? | $(grep -E '^result' $O/check-smol4.txt | cut -c1-160)"
$B check -m /tmp/smol4.gguf --backend cuda --deterministic > $O/check-smol4-det.txt 2>&1; echo "== check smol4 --backend cuda --deterministic: rc $? | $(grep -E '^result' $O/check-smol4-det.txt | cut -c1-160)"
P="The capital of France is Paris. The capital of Germany is"
for m in smol gemma3; do
  for t in 0 0.8; do
    $B run -m /tmp/$m.gguf --backend cuda -p "$P" -n 300 --ignore-eos --temp $t > $O/run-new.txt 2>/dev/null
    LOCKSTEP_CUDA_NORM_FUSE=0 $B run -m /tmp/$m.gguf --backend cuda -p "$P" -n 300 --ignore-eos --temp $t > $O/run-base.txt 2>/dev/null
    echo "== $m temp $t, 300 tokens: fused norm vs residual_norm: $(cmp -s $O/run-new.txt $O/run-base.txt && echo same || echo DIFFER) ($(wc -c < $O/run-new.txt) bytes)"
  done
done; el
wait
echo "== fault q4k-wrong-scale (tiny-llama Q4_K, rows of 256: the fused kernels; one token + 3): $(grep -E '^verdict' $O/fault-q4k.txt | cut -c1-400)"
for t in Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q4_K Q5_K Q6_K; do
  $B diff -m .device/tiny/tiny-llama-$t.gguf --a ref --b cuda --ids $(seq -s, 7 30) --decode 8 --isolate > $O/iso-tiny-$t.txt 2>&1
  echo "== diff tiny-llama $t (24 + 8) --isolate: rc $? | $(grep -E '^isolated verdict' $O/iso-tiny-$t.txt | cut -c1-100)"
done; el
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader
for m in smol gemma3 l1b l8b; do
  for fz in 1 0; do
    echo "-- $m fuse=$fz: $(LOCKSTEP_CUDA_NORM_FUSE=$fz $B bench --backend cuda -m /tmp/$m.gguf -p 0 -n 128 -r 5 2>&1 | grep -E '\| tg' | tr -s ' ')"
  done
  echo "-- $m base: $(LOCKSTEP_CUDA_CACHE=/tmp/cubin-base ./.device/lockstep-base bench --backend cuda -m /tmp/$m.gguf -p 0 -n 128 -r 5 2>&1 | grep -E '\| tg' | tr -s ' ')"
done; el
