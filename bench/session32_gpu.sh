#!/bin/bash
# Session 32: the split-key spans as whole chunks in one wave (plan::attention_spans, kernels.cu
# attention_split) and the combine's sums loaded with the maxima (ATT_C_PRE), against session
# 31's spans (LOCKSTEP_CUDA_SPLIT_SQRT=1, ATT_C_PRE=0), and two variants: registers for 5 blocks
# an SM (ATT_S_MINB=5), chunks of twice the keys (ATT_S_KPT=8). Checks first.
set -u
B=./.device/lockstep
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
LIMIT=${LIMIT:-560}
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
[ -s /tmp/smol4.gguf ] || $B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf --layers 4 -o /tmp/smol4.gguf | tail -1
# Every build's kernels compiled at once (one NVRTC process each).
warm() { $B bench --backend cuda -m /tmp/smol4.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1; }
warm & LOCKSTEP_CUDA_SPLIT_SQRT=1 LOCKSTEP_CUDA_DEFINES="ATT_C_PRE=0" warm &
LOCKSTEP_CUDA_DEFINES="ATT_S_MINB=5" warm & LOCKSTEP_CUDA_DEFINES="ATT_S_KPT=8" warm &
[ -s /tmp/smol.gguf ] || $B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf | tail -1
[ -s /tmp/gemma3.gguf ] || $B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/gemma3.gguf | tail -1
[ -s /tmp/l1b.gguf ] || $B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf | tail -1
[ -s /tmp/l8b.gguf ] || $B synth --like llama-8b --type Q4_K_M -o /tmp/l8b.gguf | tail -1
wait; el
$B check --ops --backend cuda --filter 'attention*' > /tmp/ops.txt 2>&1; echo "== check --ops attention: rc $? $(tail -1 /tmp/ops.txt)"
$B diff -m /tmp/smol4.gguf --a ref --b cuda --ids $(seq -s, 7 306) --decode 8 --isolate > /tmp/iso.txt 2>&1
echo "== diff smol4 (300 + 8) --isolate: rc $? | $(grep -E '^isolated verdict|^verdict' /tmp/iso.txt | head -2 | cut -c1-110 | tr '\n' '|')"
el
tg() { # model depth: tok/s
  left=$(( LIMIT - ($(date +%s) - T0) )); [ $left -lt 12 ] && { echo skipped; return; }
  timeout $left $B bench --backend cuda -m /tmp/$1.gguf -p 0 -n 128 -d $2 -r 2 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f6 | sed 's/ *±.*//; s/ //g'
}
echo "== tg128 at depth, -r 2: new / session 31 (SQRT, PRE=0) / MINB=5 / KPT=8"
for d in 4096 1024; do for m in smol gemma3 l1b l8b; do
  a=$(tg $m $d); b=$(LOCKSTEP_CUDA_SPLIT_SQRT=1 LOCKSTEP_CUDA_DEFINES="ATT_C_PRE=0" tg $m $d)
  c=$(LOCKSTEP_CUDA_DEFINES="ATT_S_MINB=5" tg $m $d); e=$(LOCKSTEP_CUDA_DEFINES="ATT_S_KPT=8" tg $m $d)
  echo "$m d$d  $a / $b / $c / $e"
done; done
el
echo "== spans fixed (SPLIT_SPANS=N), d4096: 64 / 256"
for m in smol gemma3; do echo "$m $(LOCKSTEP_CUDA_SPLIT_SPANS=64 tg $m 4096) / $(LOCKSTEP_CUDA_SPLIT_SPANS=256 tg $m 4096)"; done
el
[ -n "${OUT:-}" ] && cp /tmp/ops.txt /tmp/iso.txt $OUT/ 2>/dev/null
true
