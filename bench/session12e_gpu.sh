#!/bin/bash
# Session 12, fifth call: the fused kernels with the prologue moved out of fast_rows' restrict
# scope (first weight units preloaded by the kernel, passed in): check on the SmolLM2 and
# Gemma-3 shapes (untapped replayed steps vs tapped, bitwise), generations fused vs not, tg128.
set -u
B=./.device/lockstep
O=${OUT:-/tmp/s12e}; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf | tail -1
$B synth --like smollm2 --type Q4_1 --layers 4 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol4.gguf | tail -1
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/gemma3.gguf | tail -1
$B synth --like gemma3 --type Q4_K_M --layers 4 --metadata-from .device/gemma3-meta.gguf -o /tmp/gemma3-4.gguf | tail -1
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
for m in smol4 gemma3-4 tiny; do
  f=/tmp/$m.gguf; [ $m = tiny ] && f=.device/tiny/tiny-llama-Q4_K.gguf
  $B check -m $f --backend cuda > $O/c-$m.txt 2>&1
  echo "== check $m: $(grep -E 'untapped|repeated|all-true' $O/c-$m.txt | tr -s ' ' | cut -c1-90 | tr '\n' '|')"
done; el
P="The capital of France is Paris. The capital of Germany is"
for m in smol gemma3; do
  for t in 0 0.8; do
    $B run -m /tmp/$m.gguf --backend cuda -p "$P" -n 300 --ignore-eos --temp $t > $O/run-new.txt 2>/dev/null
    LOCKSTEP_CUDA_NORM_FUSE=0 $B run -m /tmp/$m.gguf --backend cuda -p "$P" -n 300 --ignore-eos --temp $t > $O/run-base.txt 2>/dev/null
    echo "== $m temp $t, 300 tokens: fused norm vs residual_norm: $(cmp -s $O/run-new.txt $O/run-base.txt && echo same || echo DIFFER) ($(wc -c < $O/run-new.txt) bytes)"
  done
done; el
for m in smol gemma3; do
  for fz in 1 0; do
    echo "-- $m fuse=$fz: $(LOCKSTEP_CUDA_NORM_FUSE=$fz $B bench --backend cuda -m /tmp/$m.gguf -p 0 -n 128 -r 5 2>&1 | grep -E '\| tg' | tr -s ' ')"
  done
done; el
