#!/bin/bash
# Session 12, after the norm fusion: the short decode attention loading the step's tables and
# the K/V rows of earlier steps' keys before its grid wait (through L2). check --ops, diff and
# isolation, check's invariances (replayed vs tapped bitwise), the attention faults in the
# decode kernel, then tg128 against the previous build (.device/lockstep-prev) and the
# session's start (.device/lockstep-base), in one call.
set -u
B=${LOCKSTEP:-./.device/lockstep}
F=${LOCKSTEP_FAULTS:-./.device/lockstep-faults}
O=${OUT:-/tmp/s12g}; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf | tail -1
$B synth --like smollm2 --type Q4_1 --layers 4 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol4.gguf | tail -1
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/gemma3.gguf | tail -1
$B synth --like gemma3 --type Q4_K_M --layers 4 --metadata-from .device/gemma3-meta.gguf -o /tmp/gemma3-4.gguf | tail -1
$B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf | tail -1
$B synth --like llama-1b --type Q4_K_M --layers 3 -o /tmp/l1b3.gguf | tail -1
$B synth --like llama-8b --type Q4_K_M --layers 2 -o /tmp/l8b2.gguf | tail -1
( for f in wrong-kv-head kv-view-offset; do
    LOCKSTEP_CUDA_CACHE=/tmp/cubin-$f LOCKSTEP_CUDA_FAULT=$f $F diff -m /tmp/smol4.gguf --a ref --b cuda --ids 7 --decode 4 > $O/fault-$f.txt 2>&1
  done
  LOCKSTEP_CUDA_CACHE=/tmp/cubin-md LOCKSTEP_CUDA_FAULT=mask-drift $F check -m /tmp/smol4.gguf --backend cuda > $O/fault-mask-drift.txt 2>&1 ) &
( $B synth --like llama-8b --type Q4_K_M -o /tmp/l8b.gguf > /dev/null 2>&1 ) &
( LOCKSTEP_CUDA_CACHE=/tmp/cubin-base ./.device/lockstep-base bench --backend cuda -m /tmp/smol.gguf -p 0 -n 4 -r 1 > /dev/null 2>&1
  LOCKSTEP_CUDA_CACHE=/tmp/cubin-prev ./.device/lockstep-prev bench --backend cuda -m /tmp/smol.gguf -p 0 -n 4 -r 1 > /dev/null 2>&1 ) &
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
$B check --ops --backend cuda > $O/ops-cuda.txt 2>&1; echo "== check --ops --backend cuda: $(tail -1 $O/ops-cuda.txt)"
grep -E "attention.*decode" $O/ops-cuda.txt | head -4
el
for mn in smol4:7:64 smol4:40:32 gemma3-4:7:64 gemma3-4:40:32 l1b3:40:32 l8b2:24:32; do
  IFS=: read m n d <<< "$mn"; IDS=$(seq -s, 7 $((n + 6)))
  $B diff -m /tmp/$m.gguf --a ref --b cuda --ids $IDS --decode $d --isolate > $O/iso-$m-$n.txt 2>&1
  echo "== diff $m ($n + $d) --isolate: rc $? | $(grep -E '^verdict' $O/iso-$m-$n.txt | cut -c1-100) | $(grep -E '^isolated verdict' $O/iso-$m-$n.txt | cut -c1-100)"
done; el
for m in smol4 gemma3-4 tiny; do
  f=/tmp/$m.gguf; [ $m = tiny ] && f=.device/tiny/tiny-llama-Q4_K.gguf
  $B check -m $f --backend cuda > $O/c-$m.txt 2>&1
  echo "== check $m: $(grep -E '^  (ok|FAIL)' $O/c-$m.txt | tr -s ' ' | cut -c1-60 | tr '\n' '|')"
done; el
P="The capital of France is Paris. The capital of Germany is"
for m in smol gemma3; do
  for t in 0 0.8; do
    $B run -m /tmp/$m.gguf --backend cuda -p "$P" -n 120 --ignore-eos --temp $t > $O/run-new.txt 2>/dev/null
    LOCKSTEP_CUDA_CACHE=/tmp/cubin-prev ./.device/lockstep-prev run -m /tmp/$m.gguf --backend cuda -p "$P" -n 120 --ignore-eos --temp $t > $O/run-prev.txt 2>/dev/null
    echo "== $m temp $t, 120 tokens (all in the short decode kernel): this build vs the previous: $(cmp -s $O/run-new.txt $O/run-prev.txt && echo same || echo DIFFER) ($(wc -c < $O/run-new.txt) bytes)"
  done
done; el
wait
for f in wrong-kv-head kv-view-offset; do echo "== fault $f (smol4, one token + 4): $(grep -E '^verdict' $O/fault-$f.txt | cut -c1-220)"; done
echo "== fault mask-drift (check smol4): $(grep -E 'all-true' -A1 $O/fault-mask-drift.txt | tr -s ' ' | tr '\n' ' ' | cut -c1-200)"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv,noheader
for m in smol gemma3 l1b l8b; do
  echo "-- $m"; $B bench --backend cuda -m /tmp/$m.gguf -r 5 2>&1 | grep -E "\| (pp|tg)|GPU memory"
  echo "-- $m previous build: $(LOCKSTEP_CUDA_CACHE=/tmp/cubin-prev ./.device/lockstep-prev bench --backend cuda -m /tmp/$m.gguf -p 0 -n 128 -r 5 2>&1 | grep -E '\| tg' | tr -s ' ')"
  echo "-- $m session start: $(LOCKSTEP_CUDA_CACHE=/tmp/cubin-base ./.device/lockstep-base bench --backend cuda -m /tmp/$m.gguf -p 0 -n 128 -r 5 2>&1 | grep -E '\| tg' | tr -s ' ')"
done; el
