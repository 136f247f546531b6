#!/bin/bash
# Session 8, first call: the split-key decode attention (`attention_split` + `attention_combine`,
# `cuda` decode steps). Checked first (check --ops, isolation with prefill + 32 decode steps and
# with a one-token prompt, where every step is a decode step, whole-run diffs, the invariances,
# the attention faults on the split path), then timed against the kernels it replaces
# (LOCKSTEP_CUDA_ATTN=unsplit), tg128 and tg1024, and with other span sizes. Logs in $OUT.
set -u
B=${LOCKSTEP:-./.device/lockstep}
F=${LOCKSTEP_FAULTS:-./.device/lockstep-faults}
O=${OUT:-/tmp/s8}; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
FAULTS="wrong-kv-head kv-view-offset"
for f in $FAULTS; do
  ( LOCKSTEP_CUDA_CACHE=/tmp/cubin-faults LOCKSTEP_CUDA_FAULT=$f $F check --ops --backend cuda --filter add > /tmp/warm-$f.log 2>&1 ) &
done
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
$B check --ops --backend cuda > $O/ops-cuda.txt 2>&1
echo "== check --ops --backend cuda: $(tail -1 $O/ops-cuda.txt)"; grep -E " FAIL" $O/ops-cuda.txt | head -5
grep -E "long decode|decode, 2 seqs|decode, 3 seqs" $O/ops-cuda.txt | grep attention | cut -c1-20,100-
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf | tail -1
$B synth --like smollm2 --type Q4_1 --layers 4 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol4.gguf | tail -1
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/gemma3.gguf | tail -1
$B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf | tail -1
el
P="The capital of France is Paris. The capital of Germany is"
for m in /tmp/smol.gguf /tmp/gemma3.gguf /tmp/l1b.gguf; do
  echo "== $(basename $m) isolate 13 + 32: $($B diff -m $m --a ref --b cuda -p "$P" --decode 32 --isolate 2>&1 | grep -E '^isolated verdict' | cut -c1-150)"
  echo "== $(basename $m) isolate 1 + 48: $($B diff -m $m --a ref --b cuda --ids 4000 --decode 48 --isolate 2>&1 | grep -E '^isolated verdict' | cut -c1-150)"
  echo "== $(basename $m) whole-run diff 13 + 32: $($B diff -m $m --a ref --b cuda -p "$P" --decode 32 2>&1 | grep -E '^verdict' | cut -c1-150)"
done
$B diff -m /tmp/gemma3.gguf --a ref --b cuda --ids 4000 --decode 48 --isolate > $O/gemma3-iso-1-48.txt 2>&1
grep -E "kq_softmax|not exposed|hidden" $O/gemma3-iso-1-48.txt | head -4
el
echo "== check smol4 cuda:"; $B check -m /tmp/smol4.gguf --backend cuda 2>&1 | tail -10
echo "== check --deterministic gemma3:"; $B check --deterministic -m /tmp/gemma3.gguf --backend cuda 2>&1 | tail -3
el
export LOCKSTEP_CUDA_CACHE=/tmp/cubin-faults
for f in $FAULTS; do
  echo "-- $f (1 + 4, split path): $(LOCKSTEP_CUDA_FAULT=$f $F diff -m /tmp/smol4.gguf --a ref --b cuda --ids 4000 --decode 4 2>&1 | grep -E "^verdict" | cut -c1-220)"
done
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
el
for m in /tmp/smol.gguf /tmp/gemma3.gguf /tmp/l1b.gguf; do
  for a in split unsplit split unsplit; do
    echo "-- $(basename $m) $a: $(LOCKSTEP_CUDA_ATTN=$a $B bench --backend cuda -m $m -p 0 -n 128 -r 5 2>&1 | grep -E '\| tg' | tr -s ' ')"
  done
done; el
for m in /tmp/smol.gguf /tmp/gemma3.gguf; do
  for a in split unsplit; do
    echo "-- $(basename $m) $a tg1024: $(LOCKSTEP_CUDA_ATTN=$a $B bench --backend cuda -m $m -p 0 -n 1024 -r 2 2>&1 | grep -E '\| tg' | tr -s ' ')"
  done
done; el
for k in 16 64; do
  for m in /tmp/gemma3.gguf /tmp/l1b.gguf; do
    echo "-- $(basename $m) min keys $k: $(LOCKSTEP_CUDA_SPLIT_KEYS=$k $B bench --backend cuda -m $m -p 0 -n 128 -r 5 2>&1 | grep -E '\| tg' | tr -s ' ')"
  done
done; el
