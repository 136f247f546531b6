#!/bin/bash
# Session 35b: where the ring gate/up loses: the step timelines of Llama-1B and the 8B with and
# without it, then tg128 with 2, 3 and 6 stages (LOCKSTEP_CUDA_RING_STAGES) against RING=0.
set -u
B=./.device/lockstep
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
LIMIT=${LIMIT:-560}
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
[ -s /tmp/l1b.gguf ] || $B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf | tail -1
[ -s /tmp/l8b.gguf ] || $B synth --like llama-8b --type Q4_K_M -o /tmp/l8b.gguf | tail -1
el
for m in l1b l8b; do for v in 0 1; do
  LOCKSTEP_CUDA_RING_GATE_UP=$v LOCKSTEP_CUDA_TIMELINE=/tmp/tl_${m}_ring$v.tsv timeout 90 $B bench --backend cuda -m /tmp/$m.gguf -p 0 -n 128 -r 1 > /tmp/tl_${m}_ring$v.txt 2>&1
  echo "== timeline $m RING=$v"; grep -E "tg128|span|ring|gate_up|residual_norm|quantize|mmv_fast|attention" /tmp/tl_${m}_ring$v.txt | head -12
done; done
el
tg() { # model: tok/s
  left=$(( LIMIT - ($(date +%s) - T0) )); [ $left -lt 12 ] && { echo skipped; return; }
  timeout $left $B bench --backend cuda -m /tmp/$1.gguf -p 0 -n 128 -r 3 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f6 | sed 's/ *±.*//; s/ //g'
}
echo "== tg128 -r 3: RING=0 / 2 stages / 3 / 6"
for m in l1b l8b; do
  a=$(LOCKSTEP_CUDA_RING_GATE_UP=0 tg $m); b=$(LOCKSTEP_CUDA_RING_STAGES=2 tg $m); c=$(LOCKSTEP_CUDA_RING_STAGES=3 tg $m); d=$(tg $m)
  echo "$m  $a / $b / $c / $d"
done
el
[ -n "${OUT:-}" ] && cp /tmp/tl_*.txt $OUT/ 2>/dev/null
true
