#!/bin/bash
# Session 14, fifth call: the seeded fault `draw-libm-exp` (the device's draws and top-p totals
# weigh logits with CUDA's exp instead of the sampler's det_exp) against check --ops's pick
# cases, then the same cases on the clean build; and `run` with the fault, on the device against
# --full-logits.
set -u
B=${LOCKSTEP:-./.device/lockstep}
F=./.device/lockstep-faults
O=${OUT:-/tmp/s14e}; mkdir -p $O
nvidia-smi --query-gpu=name --format=csv,noheader
( LOCKSTEP_CUDA_CACHE=/tmp/cubin-faults LOCKSTEP_CUDA_FAULT=draw-libm-exp $F check --ops --backend cuda --filter logits_top > $O/ops-fault.txt 2>&1 ) &
LOCKSTEP_CUDA_CACHE=/tmp/cubin $B check --ops --backend cuda --filter logits_top > $O/ops-clean.txt 2>&1
wait
echo "== draw-libm-exp: $(tail -1 $O/ops-fault.txt)"; grep -E "FAIL" $O/ops-fault.txt | head -9 | cut -c1-230
echo "== clean: $(tail -1 $O/ops-clean.txt)"
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf | tail -1
P="The quick brown fox jumps over the lazy dog. Once upon a time"
for seed in 1 2 3 4; do
  a=$(LOCKSTEP_CUDA_CACHE=/tmp/cubin-faults LOCKSTEP_CUDA_FAULT=draw-libm-exp $F run -m /tmp/smol.gguf --backend cuda --temp 1 --top-k 0 --top-p 1 --min-p 0 --seed $seed -n 128 --ignore-eos --no-monitors -p "$P" 2>/dev/null | md5sum)
  b=$(LOCKSTEP_CUDA_CACHE=/tmp/cubin-faults LOCKSTEP_CUDA_FAULT=draw-libm-exp $F run -m /tmp/smol.gguf --backend cuda --temp 1 --top-k 0 --top-p 1 --min-p 0 --seed $seed -n 128 --ignore-eos --no-monitors --full-logits -p "$P" 2>/dev/null | md5sum)
  echo "-- seed $seed, draw-libm-exp, device vs host draw: $([ "$a" == "$b" ] && echo same || echo DIFFERENT)"
done
