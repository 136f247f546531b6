#!/bin/bash
# The tiled attention kernels (attention_tile / attention_tile_wide, issue #12): (a) bitwise
# checks that the per-(row, head) arithmetic is unchanged (exact mode equals the reference; the
# invariances hold), the seeded attention faults still show; (b) pp512 / tg128 with the tiled
# kernels against the one-block-per-(row, head) kernel (LOCKSTEP_CUDA_ATTN=row) and a pp512 sweep
# of the rows per tile (LOCKSTEP_CUDA_ATTN_TILE). Binaries in .device/ (lockstep; lockstep-faults
# optional), models synthesized.
set -u
B=${LOCKSTEP:-./.device/lockstep}
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
OUT=${OUT:-/tmp/attn2-out}; mkdir -p $OUT
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
# (a) correctness
for be in cuda cuda-exact; do
  echo "== check --ops --backend $be"; $B check --ops --backend $be > $OUT/ops-$be.txt 2>&1; echo "exit $?"; tail -1 $OUT/ops-$be.txt
done; el
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf | tail -1
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/gemma3.gguf | tail -1
$B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf | tail -1
IDS100=$(python3 -c "import random; random.seed(7); print(','.join(str(random.randrange(1000, 40000)) for _ in range(100)))")
for m in /tmp/smol.gguf /tmp/gemma3.gguf; do
  echo "== $(basename $m): diff --a ref --b cuda-exact --profile exact, 100 tokens + 16 decode"
  $B diff -m $m --a ref --b cuda-exact --profile exact --ids $IDS100 --decode 16 > /tmp/d.txt 2>&1; echo "exit $?"
  grep -E "^verdict|first" /tmp/d.txt | head -4; cat /tmp/d.txt >> $OUT/exact.txt
  echo "== $(basename $m): check --deterministic --backend cuda (every tap, every invariance)"
  $B check --deterministic -m $m --backend cuda > /tmp/c.txt 2>&1; echo "exit $?"; grep -E "result|break|first" /tmp/c.txt | tail -4
  cat /tmp/c.txt >> $OUT/check.txt
done; el
IDS=1022,829,87,183,242,185,818,888,594,40,96,339,442,634,489,270,163,706,750,33,116,462,399,907
echo "== tiny-llama zoo: diff --a ref --b cuda --decode 32 --isolate"
for f in .device/tiny/*.gguf; do
  $B diff -m $f --a ref --b cuda --ids $IDS --decode 32 --isolate > /tmp/d.txt 2>&1; rc=$?
  echo "$(basename $f) exit $rc: $(grep -E '^verdict|^isolated verdict' /tmp/d.txt | cut -c1-90 | tr '\n' ' ')"
  cat /tmp/d.txt >> $OUT/zoo.txt
done; el
if [ -x .device/lockstep-faults ]; then
  F=.device/lockstep-faults
  $F synth --like smollm2 --type Q4_1 --layers 4 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol4.gguf | tail -1
  P="The capital of France is Paris. The capital of Germany is"
  for f in wrong-kv-head kv-view-offset mask-drift; do
    echo "== fault $f (must NOT be bitwise): $(LOCKSTEP_CUDA_CACHE=/tmp/cubin-faults LOCKSTEP_CUDA_FAULT=$f $F diff -m /tmp/smol4.gguf --a ref --b cuda -p "$P" --decode 4 2>&1 | grep -E '^verdict' | cut -c1-120)"
  done
  echo "== fault mask-drift, check: $(LOCKSTEP_CUDA_CACHE=/tmp/cubin-faults LOCKSTEP_CUDA_FAULT=mask-drift $F check -m /tmp/smol4.gguf --backend cuda 2>&1 | grep -E 'mask' | head -2 | cut -c1-120 | tr '\n' ' ')"
  el
fi
# (b) speed: tiled (default) against the row kernel, then pp512 by rows per tile
for m in /tmp/smol.gguf /tmp/gemma3.gguf /tmp/l1b.gguf; do
  for k in tile row; do
    if [ $k = row ]; then export LOCKSTEP_CUDA_ATTN=row; r=2; else unset LOCKSTEP_CUDA_ATTN; r=3; fi
    echo "-- $(basename $m) attention=$k"; $B bench --backend cuda -m $m -r $r 2>&1 | grep -E "\| (pp|tg)"
  done
done; unset LOCKSTEP_CUDA_ATTN; el
for mt in "smol 2 4 8 16" "gemma3 1 2 4" "l1b 2 4 8 16"; do
  set -- $mt; m=$1; shift
  for t in "$@"; do
    echo "-- $m.gguf pp512, LOCKSTEP_CUDA_ATTN_TILE=$t: $(LOCKSTEP_CUDA_ATTN_TILE=$t $B bench --backend cuda -m /tmp/$m.gguf -r 2 -n 0 2>&1 | grep -E '\| pp' | tr -s ' ')"
  done
done; el
