#!/bin/bash
# Session 31h: the final source (split path for heads of up to 256: 20.6 KB static shared
# memory): checks and tg128 at depth 4096 on SmolLM2 and Gemma-3.
set -u
B=./.device/lockstep
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf --layers 4 -o /tmp/smol4.gguf | tail -1
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf | tail -1
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/gemma3.gguf | tail -1
$B check --ops --backend cuda --filter 'attention*' > /tmp/ops.txt 2>&1; echo "== check --ops attention: rc $? $(tail -1 /tmp/ops.txt)"
el
$B diff -m /tmp/smol4.gguf --a ref --b cuda --ids $(seq -s, 7 306) --decode 8 --isolate > /tmp/iso.txt 2>&1
echo "== diff smol4 (300 + 8) --isolate: rc $? | $(grep -E '^isolated verdict|^verdict' /tmp/iso.txt | head -2 | cut -c1-110 | tr '\n' '|')"
for m in smol gemma3; do echo "-- $m $(timeout 40 $B bench --backend cuda -m /tmp/$m.gguf -p 0 -n 128 -d 4096 -r 3 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f5,6)"; done
el
[ -n "${OUT:-}" ] && cp /tmp/ops.txt /tmp/iso.txt $OUT/ 2>/dev/null
true
