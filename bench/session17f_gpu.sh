#!/bin/bash
# Session 17, sixth script: the submitted build after the grid-wait audit's fixes (every load
# of what the kernel before wrote through L2, the (cos, sin) copy not unrolled). Correctness
# (seeded faults in parallel processes, check --ops, diff --isolate on cut models and the
# tiny-llama zoo, check's invariances, the same tokens as session 16's build and as the knob
# off), then lockstep bench on the four anchor shapes and tg128 with the knob on and off.
set -u
B=${LOCKSTEP:-./.device/lockstep}
F=${LOCKSTEP_FAULTS:-./.device/lockstep-faults}
P0=./.device/lockstep-prev
O=${OUT:-/tmp/s17f}; mkdir -p $O
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
P="The capital of France is Paris. The capital of Germany is"
for f in kv-skip-prefill wrong-kv-head kv-view-offset mask-drift; do
  ( LOCKSTEP_CUDA_CACHE=/tmp/cubin-$f LOCKSTEP_CUDA_FAULT=$f $F diff -m /tmp/smol4.gguf --a ref --b cuda -p "$P" --decode 4 > $O/f-$f.txt 2>&1; echo "exit $?" >> $O/f-$f.txt ) &
done
( LOCKSTEP_CUDA_CACHE=/tmp/cubin-q4k LOCKSTEP_CUDA_FAULT=q4k-wrong-scale $F diff -m .device/tiny/tiny-llama-Q4_K.gguf --a ref --b cuda --ids 1,2,3,4,5,6 --decode 2 > $O/f-q4k.txt 2>&1; echo "exit $?" >> $O/f-q4k.txt ) &
( LOCKSTEP_CUDA_CACHE=/tmp/cubin-f16 LOCKSTEP_CUDA_FAULT=f16-as-f32 $F diff -m .device/tiny/tiny-llama-F16.gguf --a ref --b cuda --ids 1,2,3,4,5,6 --decode 2 > $O/f-f16.txt 2>&1; echo "exit $?" >> $O/f-f16.txt ) &
$B check --ops --backend cuda > $O/ops.txt 2>&1; echo "== check --ops --backend cuda: rc $? $(tail -1 $O/ops.txt)"
grep -E 'FAIL' $O/ops.txt | head -8
echo "rope_store_attention cases: $(grep -c '^  rope_store_attention.* ok$' $O/ops.txt) ok, $(grep -c '^  rope_store_attention.*FAIL' $O/ops.txt) FAIL"
for m in l1b3 g3 smol4; do
  $B diff -m /tmp/$m.gguf --a ref --b cuda --ids $(seq -s, 7 46) --decode 32 --isolate > $O/iso-$m.txt 2>&1
  echo "== diff $m (40 + 32) --isolate: rc $? | $(grep -E '^isolated verdict|^verdict' $O/iso-$m.txt | head -2 | cut -c1-110 | tr '\n' '|')"
done
IDS=1022,829,87,183,242,185,818,888,594,40,96,339,442,634,489,270,163,706,750,33,116,462,399,907
for f in .device/tiny/*.gguf; do
  $B diff -m $f --a ref --b cuda --ids $IDS --decode 32 --isolate > $O/d.txt 2>&1; rc=$?
  echo "$(basename $f) rc $rc: $(grep -E '^verdict|^isolated verdict' $O/d.txt | cut -c1-70 | tr '\n' ' ')"
done
for m in g3 smol4; do
  $B check -m /tmp/$m.gguf --backend cuda --tolerance 1e-2 > $O/c-$m.txt 2>&1
  echo "== check $m: rc $? | $(grep -E '^  (ok|FAIL)' $O/c-$m.txt | tr -s ' ' | cut -c1-50 | tr '\n' '|')"
done
wait
for f in kv-skip-prefill wrong-kv-head kv-view-offset mask-drift q4k f16; do
  echo "== fault $f: $(grep -E '^verdict' $O/f-$f.txt | cut -c1-200) | $(tail -1 $O/f-$f.txt)"
done
LOCKSTEP_CUDA_CACHE=/tmp/cubin-mask-drift LOCKSTEP_CUDA_FAULT=mask-drift $F check -m /tmp/smol4.gguf --backend cuda --tolerance 1e-2 > $O/f-mask-check.txt 2>&1
echo "== fault mask-drift, check: $(grep -E 'FAIL|first break' $O/f-mask-check.txt | tr -s ' ' | cut -c1-120 | head -2 | tr '\n' '|') rc $?"
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
echo "== submitted vs knob off vs session 16's build: $same same, $diff_ different"
el
for m in smol gemma3 l1b l8b; do
  echo "-- $m (submitted):"; $B bench --backend cuda -m /tmp/$m.gguf -r 5 2>&1 | grep -E '\| (pp|tg)|GPU memory' | tr -s ' '
done
for round in 1 2; do
  for m in smol l1b l8b; do
    for knob in "X=1" "LOCKSTEP_CUDA_ROPE_ATTN=0"; do
      echo "-- $m $knob: $(env $knob $B bench --backend cuda -m /tmp/$m.gguf -p 0 -n 128 -r 5 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f6)"
    done
  done
done
el
