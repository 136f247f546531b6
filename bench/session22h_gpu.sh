#!/bin/bash
# Session 22h: the weights' evict-first loads with a 256-byte L2 prefetch size (S22_L2_256:
# `.L2::256B`, through LOCKSTEP_CUDA_DEFINES) against the submitted build: tokens, one round of
# tg128 alternating on the four shapes (the last minutes of the session's device time).
set -u
B=./.device/lockstep
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
def() { case $1 in base) echo "";; pf) echo "S22_L2_256";; esac; }
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf | tail -1
for x in base pf; do ( LOCKSTEP_CUDA_DEFINES="$(def $x)" $B bench --backend cuda -m /tmp/smol.gguf -p 0 -n 4 -r 1 > /dev/null 2>&1 ) & done
( $B synth --like llama-8b --type Q4_K_M -o /tmp/l8b.gguf > /dev/null 2>&1 ) &
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/gemma3.gguf | tail -1
$B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf | tail -1
wait
el
for m in smol gemma3 l1b l8b; do [ -f /tmp/$m.gguf ] || { echo "no /tmp/$m.gguf"; exit 1; }; done
for x in base pf; do
  for m in l1b l8b; do
    echo "$m $x greedy $(LOCKSTEP_CUDA_DEFINES="$(def $x)" $B run --backend cuda -m /tmp/$m.gguf -p "The quick brown fox" -n 48 --temp 0 2>/dev/null | md5sum | cut -c1-12)"
  done
done
tg() { LOCKSTEP_CUDA_DEFINES="$(def $1)" $B bench --backend cuda -m /tmp/$2.gguf -p 0 -n 128 -r 3 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f6; }
for m in l8b l1b gemma3 smol; do
  for x in base pf; do echo "-- $m $x: $(tg $x $m)"; done
done
el
