#!/bin/bash
# Session 28g: the submitted build in the deterministic build the server runs (cuda-det):
# check's invariances (batch invariance among them) and diff --isolate on cut Llama-1B (the
# mixed q/k/v launch) and cut SmolLM2 (the fused attention's leaders).
set -u
B=./.device/lockstep
O=${OUT:-/tmp/s28g}; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$B synth --like llama-1b --type Q4_K_M --layers 3 -o /tmp/l1b3.gguf | tail -1
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf --layers 4 -o /tmp/smol4.gguf | tail -1
for m in l1b3 smol4; do
  $B --deterministic check -m /tmp/$m.gguf --backend cuda --tolerance 1e-2 > $O/check-det-$m.txt 2>&1; echo "== check $m --backend cuda-det: rc $? $(grep -E 'result' $O/check-det-$m.txt | tr -s ' ')"
  $B --deterministic diff -m /tmp/$m.gguf --a ref --b cuda --ids $(seq -s, 7 46) --decode 16 --isolate > $O/iso-det-$m.txt 2>&1
  echo "== diff $m cuda-det (40 + 16) --isolate: rc $? | $(grep -E '^isolated verdict|^verdict' $O/iso-det-$m.txt | head -2 | cut -c1-110 | tr '\n' '|')"
done
el
