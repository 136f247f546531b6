#!/bin/bash
# Session 22: four latency cuts, each a compile-time switch (LOCKSTEP_CUDA_DEFINES), all
# bitwise-neutral by construction: S22_NORM_BAR (a fused norm's reductions barrier only its own
# warps), S22_Q8_ILP (a norm thread's 32-value quantizations issued together), S22_V_PREFETCH
# (heads of 256: the V rows asked of L2 before the grid wait), S22_ROPE_EARLY (rope_store reads
# its norm weights, slot and cos/sin before the grid wait). Tokens (must not change), tg128
# alternating, timelines of SmolLM2 and Gemma-3.
set -u
B=./.device/lockstep
O=${OUT:-/tmp/s22}; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
ALL="S22_NORM_BAR S22_Q8_ILP S22_V_PREFETCH S22_ROPE_EARLY"
def() { case $1 in base) echo "";; all) echo "$ALL";; nq) echo "S22_NORM_BAR S22_Q8_ILP";; vr) echo "S22_V_PREFETCH S22_ROPE_EARLY";; esac; }
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf | tail -1
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/gemma3.gguf | tail -1
$B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf | tail -1
( $B synth --like llama-8b --type Q4_K_M -o /tmp/l8b.gguf > /dev/null 2>&1 ) &
for x in base all nq vr; do ( LOCKSTEP_CUDA_DEFINES="$(def $x)" $B bench --backend cuda -m /tmp/smol.gguf -p 0 -n 4 -r 1 > /dev/null 2>&1 ) & done
for x in base all; do ( LOCKSTEP_CUDA_DEFINES="$(def $x)" LOCKSTEP_CUDA_TIMELINE=/tmp/warm$x.tsv $B bench --backend cuda -m /tmp/smol.gguf -p 0 -n 4 -r 1 > /dev/null 2>&1 ) & done
wait
el
for m in smol gemma3 l1b l8b; do [ -f /tmp/$m.gguf ] || { echo "no /tmp/$m.gguf"; exit 1; }; done
for x in base all; do
  for m in smol gemma3 l1b l8b; do
    a=$(LOCKSTEP_CUDA_DEFINES="$(def $x)" $B run --backend cuda -m /tmp/$m.gguf -p "The quick brown fox" -n 48 --temp 0 2>/dev/null | md5sum | cut -c1-12)
    b=$(LOCKSTEP_CUDA_DEFINES="$(def $x)" $B run --backend cuda -m /tmp/$m.gguf -p "Once upon a time" -n 48 --top-k 40 --seed 7 2>/dev/null | md5sum | cut -c1-12)
    echo "$m $x greedy $a top-k $b"
  done
done
el
tg() { LOCKSTEP_CUDA_DEFINES="$(def $1)" $B bench --backend cuda -m /tmp/$2.gguf -p 0 -n 128 -r 3 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f6; }
for round in 1 2; do
  for m in smol gemma3; do
    for x in base all nq vr; do echo "-- $m $x: $(tg $x $m)"; done
  done
  for m in l1b l8b; do
    for x in base all; do echo "-- $m $x: $(tg $x $m)"; done
  done
  el
done
for x in base all; do
  for m in smol gemma3; do
    LOCKSTEP_CUDA_DEFINES="$(def $x)" LOCKSTEP_CUDA_TIMELINE=$O/tl_${m}_$x.tsv $B bench --backend cuda -m /tmp/$m.gguf -p 0 -n 128 -r 2 > $O/tl_${m}_$x.txt 2>&1
  done
done
el
