#!/bin/bash
# Session 14: whole-row draws on the device (`LogitsOut::TopDraw`). For each model and
# sampling setting (temperature without top-k or top-p, with and without min-p), `run`
# generates the same prompt with the draw made on the device and with --full-logits (the row
# copied to the host and drawn there by the sampler): the token ids must be the same. Then the
# two modes' speed.
set -u
B=${LOCKSTEP:-./.device/lockstep}
O=${OUT:-/tmp/s14}; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf | tail -1
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/gemma3.gguf | tail -1
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader
P="The quick brown fox jumps over the lazy dog. Once upon a time"
same=0; diff_=0
for m in smol gemma3; do
  for cfg in "--temp 1 --top-k 0 --top-p 1 --min-p 0" "--temp 0.7 --top-k 0 --top-p 1 --min-p 0" "--temp 1.3 --top-k 0 --top-p 1 --min-p 0.02"; do
    for seed in 1 2 3; do
      a=$($B run -m /tmp/$m.gguf --backend cuda $cfg --seed $seed -n 64 --ignore-eos --no-monitors -p "$P" 2>/dev/null | md5sum)
      b=$($B run -m /tmp/$m.gguf --backend cuda $cfg --seed $seed -n 64 --ignore-eos --no-monitors --full-logits -p "$P" 2>/dev/null | md5sum)
      if [ "$a" == "$b" ]; then same=$((same+1)); else diff_=$((diff_+1)); echo "DIFFER: $m $cfg seed $seed"; fi
    done
  done
  el
done
echo "== device draw vs host draw: $same same, $diff_ different"
$B run -m /tmp/smol.gguf --backend cuda --temp 1 --top-k 0 --top-p 1 --min-p 0 --seed 1 -n 24 --ignore-eos --no-monitors -p "$P" 2>&1 | tail -3
for m in smol gemma3; do
  for mode in "" "--full-logits"; do
    for r in 1 2 3; do
      echo "-- $m ${mode:-device-draw} r$r: $($B run -m /tmp/$m.gguf --backend cuda --temp 1 --top-k 0 --top-p 1 --min-p 0 --seed $r -n 256 --ignore-eos --no-monitors --verbose $mode -p "$P" 2>&1 >/dev/null | grep -iE 'gen|tok/s|t/s' | tr '\n' ' ' | cut -c1-200)"
    done
  done
done
el
