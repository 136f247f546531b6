#!/bin/bash
# Session 9, second call: logits reduced on the device (LogitsOut::Top: logits_top_part +
# logits_top_merge). check --ops (guards on, the logits_top cases last), generations with the
# device reduction against full rows sampled on the host (same tokens), and their speed.
set -u
B=${LOCKSTEP:-./.device/lockstep}
O=${OUT:-/tmp/s9b}; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf | tail -1
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/gemma3.gguf | tail -1
$B check --ops --backend cuda > $O/ops-cuda.txt 2>&1
echo "== check --ops --backend cuda: $(tail -1 $O/ops-cuda.txt)"; grep -E " FAIL" $O/ops-cuda.txt | head -5; grep logits_top $O/ops-cuda.txt
$B check --ops --backend cuda-exact --filter logits_top > $O/ops-exact.txt 2>&1
echo "== check --ops --backend cuda-exact --filter logits_top: $(tail -1 $O/ops-exact.txt)"
el
P="The capital of France is Paris. The capital of Germany is"
for m in /tmp/smol.gguf /tmp/gemma3.gguf; do
  for t in "--temp 0" "--temp 0.8" "--temp 1.2 --top-k 64 --top-p 0.9 --min-p 0"; do
    $B run -m $m --backend cuda -p "$P" -n 400 --ignore-eos $t --verbose > $O/run-top.txt 2> $O/run-top.err
    $B run -m $m --backend cuda -p "$P" -n 400 --ignore-eos $t --verbose --full-logits > $O/run-full.txt 2> $O/run-full.err
    LOCKSTEP_CUDA_TOPK=host $B run -m $m --backend cuda -p "$P" -n 400 --ignore-eos $t > $O/run-host.txt 2>/dev/null
    echo "== $(basename $m) $t, 400 tokens: device top vs full rows: $(cmp -s $O/run-top.txt $O/run-full.txt && echo same || echo DIFFER), vs host reduction: $(cmp -s $O/run-top.txt $O/run-host.txt && echo same || echo DIFFER) ($(wc -c < $O/run-top.txt) bytes)"
    echo "   device top: $(grep -iE 'tok/s|token' $O/run-top.err | tr '\n' ' ')"
    echo "   full rows:  $(grep -iE 'tok/s|token' $O/run-full.err | tr '\n' ' ')"
  done
done; el
for m in /tmp/smol.gguf /tmp/gemma3.gguf; do
  for r in 1 2; do
    for f in "" "--full-logits"; do
      $B run -m $m --backend cuda -p "$P" -n 256 --ignore-eos --temp 0 --verbose $f > /dev/null 2> $O/t.err
      echo "-- $(basename $m) greedy 256 ${f:-device-top}: $(grep -iE 'tok/s' $O/t.err | tr '\n' ' ')"
    done
  done
done; el
