#!/bin/bash
# Session 24c: a one-row mat-vec that quantizes its own activation (mmv_qin_fast1, Gemma-3's
# down; LOCKSTEP_CUDA_QIN=0 runs quantize_q8_32 first) and two rows a warp under the final rule
# (LOCKSTEP_CUDA_TWO_ROWS=0 off): tokens (standing hashes), check --ops, check (replayed
# against tapped, bitwise), tg128 alternating, the replay clock with both on.
set -u
B=./.device/lockstep
O=${OUT:-/tmp/s24c}; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf | tail -1
( $B bench --backend cuda -m /tmp/smol.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 ) &
$B synth --like smollm2 --type Q4_1 --layers 4 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol4.gguf | tail -1
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/gemma3.gguf | tail -1
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf --layers 3 -o /tmp/g3.gguf | tail -1
$B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf | tail -1
( $B synth --like llama-8b --type Q4_K_M -o /tmp/l8b.gguf > /dev/null 2>&1 ) &
wait
el
for m in smol gemma3 l1b l8b; do [ -f /tmp/$m.gguf ] || { echo "no /tmp/$m.gguf"; exit 1; }; done
for m in gemma3 smol l1b l8b; do
  for x in "LOCKSTEP_CUDA_QIN=0 LOCKSTEP_CUDA_TWO_ROWS=0" "LOCKSTEP_CUDA_QIN=1"; do
    a=$(env $x $B run --backend cuda -m /tmp/$m.gguf -p "The quick brown fox" -n 48 --temp 0 2>/dev/null | md5sum | cut -c1-12)
    b=$(env $x $B run --backend cuda -m /tmp/$m.gguf -p "Once upon a time" -n 48 --top-k 40 --seed 7 2>/dev/null | md5sum | cut -c1-12)
    echo "$m [$x]: greedy $a top-k $b"
  done
done
el
$B check -m /tmp/smol4.gguf --backend cuda --tolerance 1e-2 > $O/check-smol4.txt 2>&1; echo "== check smol4 (1e-2): rc $? $(grep -E 'replayed|result' $O/check-smol4.txt | tr -s ' ' | tr '\n' '|')"
$B check -m /tmp/g3.gguf --backend cuda --tolerance 1e-2 > $O/check-g3.txt 2>&1; echo "== check g3 (1e-2): rc $? $(grep -E 'replayed|result' $O/check-g3.txt | tr -s ' ' | tr '\n' '|')"
$B check --ops --backend cuda > $O/ops.txt 2>&1; echo "== check --ops --backend cuda: rc $? $(tail -1 $O/ops.txt)"
el
tg() { env $1 $B bench --backend cuda -m /tmp/$2.gguf -p 0 -n 128 -r 3 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f6; }
for r in 1 2; do
  for x in "LOCKSTEP_CUDA_QIN=0" "LOCKSTEP_CUDA_QIN=1"; do echo "-- gemma3 [$x]: $(tg "$x" gemma3)"; done
  for m in smol l1b l8b gemma3; do
    for x in "LOCKSTEP_CUDA_TWO_ROWS=0" "LOCKSTEP_CUDA_TWO_ROWS=2048"; do echo "-- $m [$x]: $(tg "$x" $m)"; done
  done
done
el
LOCKSTEP_CUDA_REPLAY_CLOCK=1 $B bench --backend cuda -m /tmp/gemma3.gguf -p 0 -n 128 -r 3 > $O/clock_gemma3.txt 2>&1
echo "== gemma3 clock: $(grep -E '\| tg|  [a-z]+ +[0-9-]' $O/clock_gemma3.txt | tr -s ' ' | tr '\n' '|' | cut -c1-400)"
el
