#!/bin/bash
# Session 49, call 7: the final source (the host's q/k/v launch arguments and outputs shared
# by residual_norm_then and scale_norm_then: a refactor, the same launches): check --ops on the
# fused norms (fast and exact), check's replayed vs tapped on Gemma-3, the same tokens on three
# shapes, tg128 once each.
set -u
B=./.device/lockstep
O=/tmp/s49d; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/g3.gguf > /dev/null 2>&1 &
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf > /dev/null 2>&1 &
$B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf > /dev/null 2>&1 &
wait
$B bench --backend cuda -m /tmp/g3.gguf -p 16 -n 2 -r 1 > /dev/null 2>&1 &
$B bench --backend cuda-exact -m /tmp/g3.gguf -p 16 -n 2 -r 1 > /dev/null 2>&1 &
wait; el
for be in cuda cuda-exact; do
  $B check --ops --backend $be --filter '*norm_then*' > $O/ops_$be.txt 2>&1; echo "== ops $be: rc $? $(tail -1 $O/ops_$be.txt)"
done
$B check -m /tmp/g3.gguf --backend cuda > $O/check-g3.txt 2>&1; echo "== check g3: rc $? | $(grep -E 'replayed' $O/check-g3.txt | tr -s ' ' | cut -c1-120)"
h() { $B run --backend cuda -m /tmp/$M.gguf -p "$P" -n 48 --temp 0 2>/dev/null | md5sum | cut -c1-12; }
P='The quick brown fox'
for M in g3 smol l1b; do echo "tokens $M: $(h)"; done
P=$(seq -s ' ' 1 300)
for M in g3 l1b; do echo "tokens $M, a 300-number prompt: $(h)"; done
tg() { timeout 60 $B bench --backend cuda -m /tmp/$M.gguf -p 0 -n 128 -r 3 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f6 | sed 's/ *± */±/; s/ //g'; }
for M in g3 smol l1b; do echo "$M tg128: $(tg)"; done
el
mkdir -p $OUT/s49d && cp $O/*.txt $OUT/s49d/ 2>/dev/null
true
