#!/bin/bash
# Session 16, seventh script: the rope table no longer cloned and compared per layer
# (stage_rope_table returns when the table for these positions is staged). Same tokens as the
# build before (.device/lockstep-prev); pp512 alternating the two builds, Gemma-3 in six
# processes each; the host-time profile of the new build.
set -u
B=${LOCKSTEP:-./.device/lockstep}
P0=./.device/lockstep-prev
O=${OUT:-/tmp/s16g}; mkdir -p $O
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/gemma3.gguf | tail -1
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf | tail -1
$B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf | tail -1
P="The quick brown fox jumps over the lazy dog. Once upon a time"
same=0; diff_=0
for m in gemma3 smol l1b; do
  for cfg in "--temp 0" "--temp 0.8 --top-k 40"; do
    a=$($B run -m /tmp/$m.gguf --backend cuda $cfg --seed 4 -n 32 --ignore-eos --no-monitors -p "$P" 2>/dev/null | md5sum)
    b=$($P0 run -m /tmp/$m.gguf --backend cuda $cfg --seed 4 -n 32 --ignore-eos --no-monitors -p "$P" 2>/dev/null | md5sum)
    if [ "$a" == "$b" ]; then same=$((same+1)); else diff_=$((diff_+1)); echo "DIFFER: $m $cfg"; fi
  done
done
echo "== new build vs the build before: $same same, $diff_ different"
pp() { "$@" bench --backend cuda -m /tmp/$M.gguf -p 512 -n 0 -r 5 2>&1 | grep -E '\| pp' | tr -s ' ' | cut -d'|' -f6; }
M=gemma3
for i in 1 2 3 4 5 6; do echo "-- gemma3 pp512 new: $(pp $B) | before: $(pp $P0)"; done
for M in smol l1b; do
  for i in 1 2; do echo "-- $M pp512 new: $(pp $B) | before: $(pp $P0)"; done
done
LOCKSTEP_CUDA_PROFILE=host $B bench --backend cuda -m /tmp/gemma3.gguf -p 512 -n 0 -r 10 > $O/host-gemma3.txt 2>&1
echo "-- gemma3 host profile (new): $(grep -E '\| pp' $O/host-gemma3.txt | tr -s ' ' | cut -d'|' -f6)"
grep -E '^  ' $O/host-gemma3.txt | sort -k2 -n -r | head -8
for M in gemma3 smol; do echo "-- $M tg128 new: $($B bench --backend cuda -m /tmp/$M.gguf -p 0 -n 128 -r 5 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f6)"; done
