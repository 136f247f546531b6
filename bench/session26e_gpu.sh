#!/bin/bash
# Session 26e: fast numerics' norms and gated activations in f32 (-DLOCKSTEP_FAST_F32, the
# cuda backend's default build; LOCKSTEP_CUDA_FAST_F64=1 keeps f64). 26d measured the norms
# alone (timing only): SmolLM2 +2.6 to +5.1%, Gemma-3 +4.0 to +7.9%. Checked as every kept
# change: check --ops (cuda, and cuda-exact's norms, whose build keeps f64), diff --isolate on
# cut Llama-1B, Gemma-3 and SmolLM2, check's replayed-vs-tapped, the tokens both ways; then
# tg128 alternating on the four shapes.
set -u
B=./.device/lockstep
O=${OUT:-/tmp/s26e}; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$B synth --like smollm2 --type Q4_1 --layers 4 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol4.gguf | tail -1
$B bench --backend cuda -m /tmp/smol4.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 &
LOCKSTEP_CUDA_FAST_F64=1 $B bench --backend cuda -m /tmp/smol4.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 &
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf | tail -1
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/gemma3.gguf | tail -1
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf --layers 3 -o /tmp/g3.gguf | tail -1
$B synth --like llama-1b --type Q4_K_M --layers 3 -o /tmp/l1b3.gguf | tail -1
$B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf | tail -1
( $B synth --like llama-8b --type Q4_K_M -o /tmp/l8b.gguf > /dev/null 2>&1 ) &
wait; el
( $B check --ops --backend cuda > $O/ops.txt 2>&1; echo "== check --ops --backend cuda: rc $? $(tail -1 $O/ops.txt)"
  $B check --ops --backend cuda-exact --filter rms_norm,residual_norm,act_mul,gate_up_act > $O/ops-exact.txt 2>&1; echo "== check --ops --backend cuda-exact (norms, activations): rc $? $(tail -1 $O/ops-exact.txt)" ) &
for m in l1b3 g3 smol4; do
  $B diff -m /tmp/$m.gguf --a ref --b cuda --ids $(seq -s, 7 46) --decode 32 --isolate > $O/iso-$m.txt 2>&1
  echo "== diff $m (40 + 32) --isolate: rc $? | $(grep -E '^isolated verdict|^verdict' $O/iso-$m.txt | head -2 | cut -c1-110 | tr '\n' '|')"
done
$B check -m /tmp/smol4.gguf --backend cuda --tolerance 1e-2 > $O/check-smol4.txt 2>&1; echo "== check smol4 (1e-2): rc $? $(grep -E 'replayed|result' $O/check-smol4.txt | tr -s ' ' | tr '\n' '|')"
$B check -m /tmp/g3.gguf --backend cuda --tolerance 1e-2 > $O/check-g3.txt 2>&1; echo "== check g3 (1e-2): rc $? $(grep -E 'replayed|result' $O/check-g3.txt | tr -s ' ' | tr '\n' '|')"
wait
el
for m in smol gemma3 l1b l8b; do
  a=$($B run --backend cuda -m /tmp/$m.gguf -p "The quick brown fox" -n 48 --temp 0 2>/dev/null | md5sum | cut -c1-12)
  b=$($B run --backend cuda -m /tmp/$m.gguf -p "Once upon a time" -n 48 --top-k 40 --seed 7 2>/dev/null | md5sum | cut -c1-12)
  c=$(LOCKSTEP_CUDA_FAST_F64=1 $B run --backend cuda -m /tmp/$m.gguf -p "The quick brown fox" -n 48 --temp 0 2>/dev/null | md5sum | cut -c1-12)
  echo "$m greedy $a top-k $b | FAST_F64 greedy $c"
done
el
tg() { env $1 $B bench --backend cuda -m /tmp/$2.gguf -p 0 -n 128 -r 3 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f6; }
for r in 1 2 3; do
  for m in smol gemma3 l1b l8b; do
    [ $r -eq 3 ] && [ $m = l8b ] && continue
    for x in "LOCKSTEP_CUDA_FAST_F64=1" "S26_NONE=1"; do echo "-- $m r$r [$x]: $(tg "$x" $m)"; done
  done
  el
done
