#!/bin/bash
# Session 16, eighth script: rope rows kept across steps (plan::RopeRows). check --ops (the rope
# cases run arbitrary positions), diff/isolation on cut models (prefill, then decode steps one
# position past the rows kept), the same tokens as the build before the session's host fixes
# (.device/lockstep-prev), pp512 of both builds alternating.
set -u
B=${LOCKSTEP:-./.device/lockstep}
P0=./.device/lockstep-prev
O=${OUT:-/tmp/s16h}; mkdir -p $O
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/gemma3.gguf | tail -1
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf | tail -1
$B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf | tail -1
$B synth --like llama-1b --type Q4_K_M --layers 3 -o /tmp/l1b3.gguf | tail -1
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf --layers 3 -o /tmp/g3.gguf | tail -1
$B check --ops --backend cuda > $O/ops.txt 2>&1; echo "== check --ops --backend cuda: rc $? $(tail -1 $O/ops.txt)"
grep -E 'FAIL' $O/ops.txt | head -5
for m in l1b3 g3; do
  $B diff -m /tmp/$m.gguf --a ref --b cuda --ids $(seq -s, 7 46) --decode 32 --isolate > $O/iso-$m.txt 2>&1
  echo "== diff $m (40 + 32) --isolate: rc $? | $(grep -E '^isolated verdict|^verdict' $O/iso-$m.txt | head -2 | cut -c1-110 | tr '\n' '|')"
done
$B check -m /tmp/g3.gguf --backend cuda --tolerance 1e-2 > $O/c-g3.txt 2>&1
echo "== check g3: rc $? | $(grep -E '^  (ok|FAIL)' $O/c-g3.txt | tr -s ' ' | cut -c1-50 | tr '\n' '|')"
P="The quick brown fox jumps over the lazy dog. Once upon a time"
same=0; diff_=0
for m in gemma3 smol l1b; do
  for cfg in "--temp 0" "--temp 0.8 --top-k 40"; do
    a=$($B run -m /tmp/$m.gguf --backend cuda $cfg --seed 4 -n 48 --ignore-eos --no-monitors -p "$P" 2>/dev/null | md5sum)
    b=$($P0 run -m /tmp/$m.gguf --backend cuda $cfg --seed 4 -n 48 --ignore-eos --no-monitors -p "$P" 2>/dev/null | md5sum)
    if [ "$a" == "$b" ]; then same=$((same+1)); else diff_=$((diff_+1)); echo "DIFFER: $m $cfg"; fi
  done
done
echo "== this build vs the session's start: $same same, $diff_ different"
pp() { "$@" bench --backend cuda -m /tmp/$M.gguf -p 512 -n 0 -r 5 2>&1 | grep -E '\| pp' | tr -s ' ' | cut -d'|' -f6; }
M=gemma3
for i in 1 2 3 4; do echo "-- gemma3 pp512 new: $(pp $B) | before: $(pp $P0)"; done
