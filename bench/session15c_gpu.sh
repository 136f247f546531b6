#!/bin/bash
# Session 15, third call: q/k/v of two types in one launch (one row: a layer whose v is Q6_K
# or Q8_0 beside Q4_K / Q5_0 q and k), on top of the decode attention split. No value changes:
# runs with it off by its knob must give the same token ids. check --ops; diff/isolation on
# cut models (their first layers have such a v); tg128 on and off, and the attention split off.
set -u
B=${LOCKSTEP:-./.device/lockstep}
O=${OUT:-/tmp/s15c}; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf | tail -1
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/gemma3.gguf | tail -1
$B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf | tail -1
$B synth --like llama-1b --type Q4_K_M --layers 3 -o /tmp/l1b3.gguf | tail -1
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf --layers 3 -o /tmp/g3.gguf | tail -1
( $B synth --like llama-8b --type Q4_K_M -o /tmp/l8b.gguf > /dev/null 2>&1 ) &
$B check --ops --backend cuda > $O/ops.txt 2>&1; echo "== check --ops --backend cuda: rc $? $(tail -1 $O/ops.txt)"
grep -E 'FAIL' $O/ops.txt | head -5
el
for m in l1b3 g3; do
  $B diff -m /tmp/$m.gguf --a ref --b cuda --ids $(seq -s, 7 46) --decode 32 --isolate > $O/iso-$m.txt 2>&1
  echo "== diff $m (40 + 32) --isolate: rc $? | $(grep -E '^isolated verdict|^verdict' $O/iso-$m.txt | head -2 | cut -c1-110 | tr '\n' '|')"
done
for m in g3 l1b3; do
  $B check -m /tmp/$m.gguf --backend cuda --deterministic > $O/c-$m.txt 2>&1
  echo "== check $m --deterministic: rc $? | $(grep -E '^  (ok|FAIL)' $O/c-$m.txt | tr -s ' ' | cut -c1-50 | tr '\n' '|')"
  $B check -m /tmp/$m.gguf --backend cuda --tolerance 1e-2 > $O/t-$m.txt 2>&1
  echo "== check $m --tolerance 1e-2: rc $? | $(grep -E '^  (ok|FAIL)' $O/t-$m.txt | tr -s ' ' | cut -c1-50 | tr '\n' '|')"
done
el
P="The quick brown fox jumps over the lazy dog. Once upon a time"
same=0; diff_=0
for m in smol gemma3 l1b; do
  for knob in "LOCKSTEP_CUDA_MIXED_QKV=0" "LOCKSTEP_CUDA_NORM_FUSE=0"; do
    for cfg in "--temp 0" "--temp 1 --top-k 0 --top-p 1 --min-p 0"; do
      a=$($B run -m /tmp/$m.gguf --backend cuda $cfg --seed 4 -n 48 --ignore-eos --no-monitors -p "$P" 2>/dev/null | md5sum)
      b=$(env $knob $B run -m /tmp/$m.gguf --backend cuda $cfg --seed 4 -n 48 --ignore-eos --no-monitors -p "$P" 2>/dev/null | md5sum)
      if [ "$a" == "$b" ]; then same=$((same+1)); else diff_=$((diff_+1)); echo "DIFFER: $m $knob $cfg"; fi
    done
  done
done
echo "== new kernels vs knobs off: $same same, $diff_ different"
el
wait
for round in 1 2; do
  for m in smol gemma3 l1b l8b; do
    for knob in "X=1" "LOCKSTEP_CUDA_MIXED_QKV=0" "LOCKSTEP_CUDA_ATTN_HEADS=group"; do
      echo "-- $m $knob: $(env $knob $B bench --backend cuda -m /tmp/$m.gguf -p 0 -n 128 -r 5 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f6)"
    done
  done
done
el
