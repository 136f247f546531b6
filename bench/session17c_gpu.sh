#!/bin/bash
# Session 17, third script: the fused kernel with its early loads (the row's (cos, sin) pairs
# and the norm weights before the grid wait, every head loaded at once, the row's own V with the
# others). Correctness (check --ops, diff --isolate on cut models, check's invariances, the same
# tokens with the knob off and as session 16's build), then tg128 with LOCKSTEP_CUDA_ROPE_ATTN
# on and off, alternating, three rounds, and the 8B once each.
set -u
B=${LOCKSTEP:-./.device/lockstep}
P0=./.device/lockstep-prev
O=${OUT:-/tmp/s17c}; mkdir -p $O
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
$B check --ops --backend cuda > $O/ops.txt 2>&1; echo "== check --ops --backend cuda: rc $? $(tail -1 $O/ops.txt)"
grep -E 'FAIL' $O/ops.txt | head -8
echo "rope_store_attention cases: $(grep -c '^  rope_store_attention.* ok$' $O/ops.txt) ok, $(grep -c '^  rope_store_attention.*FAIL' $O/ops.txt) FAIL"
el
for m in l1b3 g3 smol4; do
  $B diff -m /tmp/$m.gguf --a ref --b cuda --ids $(seq -s, 7 46) --decode 32 --isolate > $O/iso-$m.txt 2>&1
  echo "== diff $m (40 + 32) --isolate: rc $? | $(grep -E '^isolated verdict|^verdict' $O/iso-$m.txt | head -2 | cut -c1-110 | tr '\n' '|')"
done
for m in g3 smol4; do
  $B check -m /tmp/$m.gguf --backend cuda --tolerance 1e-2 > $O/c-$m.txt 2>&1
  echo "== check $m: rc $? | $(grep -E '^  (ok|FAIL)' $O/c-$m.txt | tr -s ' ' | cut -c1-50 | tr '\n' '|')"
done
el
P="The quick brown fox jumps over the lazy dog. Once upon a time"
same=0; diff_=0
for m in gemma3 smol l1b; do
  for cfg in "--temp 0" "--temp 0.8 --top-k 40"; do
    a=$($B run -m /tmp/$m.gguf --backend cuda $cfg --seed 4 -n 100 --ignore-eos --no-monitors -p "$P" 2>/dev/null | md5sum)
    b=$(LOCKSTEP_CUDA_ROPE_ATTN=0 $B run -m /tmp/$m.gguf --backend cuda $cfg --seed 4 -n 100 --ignore-eos --no-monitors -p "$P" 2>/dev/null | md5sum)
    c=$($P0 run -m /tmp/$m.gguf --backend cuda $cfg --seed 4 -n 100 --ignore-eos --no-monitors -p "$P" 2>/dev/null | md5sum)
    if [ "$a" == "$b" ] && [ "$a" == "$c" ]; then same=$((same+1)); else diff_=$((diff_+1)); echo "DIFFER: $m $cfg ($a / $b / $c)"; fi
  done
done
echo "== fused vs knob off vs session 16's build: $same same, $diff_ different"
el
for round in 1 2 3; do
  for m in smol gemma3 l1b; do
    for knob in "X=1" "LOCKSTEP_CUDA_ROPE_ATTN=0"; do
      echo "-- $m $knob: $(env $knob $B bench --backend cuda -m /tmp/$m.gguf -p 0 -n 128 -r 5 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f6)"
    done
  done
done
el
wait
for knob in "X=1" "LOCKSTEP_CUDA_ROPE_ATTN=0" "X=1" "LOCKSTEP_CUDA_ROPE_ATTN=0"; do
  echo "-- l8b $knob: $(env $knob $B bench --backend cuda -m /tmp/l8b.gguf -p 0 -n 128 -r 5 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f6)"
done
el
