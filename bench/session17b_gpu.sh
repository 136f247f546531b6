#!/bin/bash
# Session 17, second script (same machine as session17_gpu.sh, models in /tmp): which ops a
# decode step runs (LOCKSTEP_CUDA_PROFILE=1) with the fused kernel and without; the same tokens
# with the knob off and as session 16's build; tg128 with LOCKSTEP_CUDA_ROPE_ATTN on and off,
# alternating.
set -u
B=${LOCKSTEP:-./.device/lockstep}
P0=./.device/lockstep-prev
O=${OUT:-/tmp/s17}; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
[ -f /tmp/smol.gguf ] || $B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf | tail -1
[ -f /tmp/gemma3.gguf ] || $B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/gemma3.gguf | tail -1
[ -f /tmp/l1b.gguf ] || $B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf | tail -1
P="The quick brown fox jumps over the lazy dog. Once upon a time"
for knob in "X=1" "LOCKSTEP_CUDA_ROPE_ATTN=0"; do
  env $knob LOCKSTEP_CUDA_PROFILE=1 $B run -m /tmp/smol.gguf --backend cuda --temp 0 -n 16 --ignore-eos --no-monitors -p "$P" > $O/prof-$knob.txt 2>&1
  echo "== profile, $knob: $(grep -iE 'rope|kv_store|attention' $O/prof-$knob.txt | tr -s ' ' | head -6 | tr '\n' '|')"
done
el
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
for round in 1 2; do
  for m in smol gemma3 l1b; do
    for knob in "X=1" "LOCKSTEP_CUDA_ROPE_ATTN=0"; do
      echo "-- $m $knob: $(env $knob $B bench --backend cuda -m /tmp/$m.gguf -p 0 -n 128 -r 5 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f6)"
    done
  done
done
el
