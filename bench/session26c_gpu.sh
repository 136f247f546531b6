#!/bin/bash
# Session 26c, timing only: what a decode step would gain without the down projection's separate
# quantizer (quantize_q8_32, 1.9 us a layer in SmolLM2's timeline, 26b): the upper bound for a
# down mat-vec that reads its activation in f32. .device/lockstep_skip is the submitted build
# plus bench/session26/skip_quantizer_timing.patch (never committed: the replayed steps' down
# projections read the last eager step's quantization, so the values are wrong). Its tokens are
# printed to show they differ; tg128 -r 3 alternating, three rounds, SmolLM2 and Gemma-3.
set -u
B=./.device/lockstep
S=./.device/lockstep_skip
O=${OUT:-/tmp/s26c}; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf | tail -1
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/gemma3.gguf | tail -1
$B bench --backend cuda -m /tmp/smol.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1
el
for m in smol gemma3; do
  a=$($B run --backend cuda -m /tmp/$m.gguf -p "The quick brown fox" -n 48 --temp 0 2>/dev/null | md5sum | cut -c1-12)
  b=$(S26_SKIP_Q=1 $S run --backend cuda -m /tmp/$m.gguf -p "The quick brown fox" -n 48 --temp 0 2>/dev/null | md5sum | cut -c1-12)
  echo "$m greedy: build $a, skip $b"
done
tg() { env $1 $2 bench --backend cuda -m /tmp/$3.gguf -p 0 -n 128 -r 3 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f6; }
for r in 1 2 3; do
  for m in smol gemma3; do
    echo "-- $m r$r [build]: $(tg S26_NONE=1 $B $m)"
    echo "-- $m r$r [skip_q]: $(tg S26_SKIP_Q=1 $S $m)"
  done
done
el
