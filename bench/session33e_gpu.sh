#!/bin/bash
# Session 33e: mmv_fq with its activation read through L1 (plain loads), against the quantizer
# first (LOCKSTEP_CUDA_FQ=0); tokens, then tg128 alternating.
set -u
B=./.device/lockstep
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
LIMIT=${LIMIT:-400}
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
[ -s /tmp/smol.gguf ] || $B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf | tail -1
$B bench --backend cuda -m /tmp/smol.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 &
[ -s /tmp/gemma3.gguf ] || $B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/gemma3.gguf | tail -1
[ -s /tmp/l1b.gguf ] || $B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf | tail -1
wait; el
h() { $B run --backend cuda -m /tmp/$1.gguf "${@:2}" 2>/dev/null | md5sum | cut -c1-12; }
hh() { echo "$(h $1 -p 'The quick brown fox' -n 48 --temp 0) $(h $1 -p 'Once upon a time' -n 48 --top-k 40 --seed 7)"; }
echo "smol $(hh smol) gemma3 $(hh gemma3) l1b(FQ=8) $(LOCKSTEP_CUDA_FQ=8 hh l1b)"
el
tg() { # model: tok/s
  left=$(( LIMIT - ($(date +%s) - T0) )); [ $left -lt 12 ] && { echo skipped; return; }
  timeout $left $B bench --backend cuda -m /tmp/$1.gguf -p 0 -n 128 -r 3 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f6 | sed 's/ *±.*//; s/ //g'
}
echo "== tg128 -r 3: FQ=0 / default (l1b: FQ=8)"
for r in 1 2 3; do
  echo "round $r smol $(LOCKSTEP_CUDA_FQ=0 tg smol) / $(tg smol)  gemma3 $(LOCKSTEP_CUDA_FQ=0 tg gemma3) / $(tg gemma3)"
done
echo "l1b $(LOCKSTEP_CUDA_FQ=0 tg l1b) / $(LOCKSTEP_CUDA_FQ=8 tg l1b) / $(LOCKSTEP_CUDA_FQ=0 tg l1b) / $(LOCKSTEP_CUDA_FQ=8 tg l1b)"
el
true
