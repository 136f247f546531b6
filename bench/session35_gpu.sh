#!/bin/bash
# Session 35: Llama's norm and Q4_K gate/up on a ring of bulk copies (norm_gate_up_ring_12,
# plan::ring_gate_up; LOCKSTEP_CUDA_RING_GATE_UP=0: residual_norm, then gate_up_fast1).
# Tokens both ways, check --ops on residual_norm_then, check and diff --isolate on 3-layer
# Llama-8B and 1B shapes, tg128 alternating.
set -u
B=./.device/lockstep
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
LIMIT=${LIMIT:-560}
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
[ -s /tmp/l1b3.gguf ] || $B synth --like llama-1b --type Q4_K_M --layers 3 -o /tmp/l1b3.gguf | tail -1
$B bench --backend cuda -m /tmp/l1b3.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 &
[ -s /tmp/l8b3.gguf ] || $B synth --like llama-8b --type Q4_K_M --layers 3 -o /tmp/l8b3.gguf | tail -1
[ -s /tmp/l1b.gguf ] || $B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf | tail -1
[ -s /tmp/l8b.gguf ] || $B synth --like llama-8b --type Q4_K_M -o /tmp/l8b.gguf | tail -1
wait; el
$B check --ops --backend cuda --filter 'residual_norm_then*' > /tmp/ops.txt 2>&1
echo "== check --ops residual_norm_then: rc $? | $(grep -E '(2048|4096|8192)\], then gate/up Q4_K' /tmp/ops.txt | grep -cv ' ok$') not ok of $(grep -cE '(2048|4096|8192)\], then gate/up Q4_K' /tmp/ops.txt) ring lines | $(tail -1 /tmp/ops.txt)"
for m in l8b3 l1b3; do
  $B check -m /tmp/$m.gguf --backend cuda > /tmp/check_$m.txt 2>&1
  echo "== check $m: rc $? | $(grep -E 'replayed|all-true|repeated|FAIL' /tmp/check_$m.txt | tr -s ' ' | cut -c1-90 | tr '\n' '|')"
  $B diff -m /tmp/$m.gguf --a ref --b cuda -p "The capital of France is Paris. The capital of Germany is" --decode 32 --isolate > /tmp/iso_$m.txt 2>&1
  echo "== diff $m --isolate: rc $? | $(grep -E '^isolated verdict|^verdict' /tmp/iso_$m.txt | head -2 | cut -c1-120 | tr '\n' '|')"
done
el
h() { $B run --backend cuda -m /tmp/$1.gguf "${@:2}" 2>/dev/null | md5sum | cut -c1-12; }
hh() { echo "$(h $1 -p 'The quick brown fox' -n 48 --temp 0) $(h $1 -p 'Once upon a time' -n 48 --top-k 40 --seed 7)"; }
for m in l1b l8b; do
  echo "$m ring: $(hh $m)  RING=0: $(LOCKSTEP_CUDA_RING_GATE_UP=0 hh $m)"
done
echo "(33, before: l1b 4e5bee1ab652 e3fb11944b54, l8b 4aa7e0e30dda 71249884f2ee)"
el
tg() { # model: tok/s
  left=$(( LIMIT - ($(date +%s) - T0) )); [ $left -lt 12 ] && { echo skipped; return; }
  timeout $left $B bench --backend cuda -m /tmp/$1.gguf -p 0 -n 128 -r 3 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f6 | sed 's/ *±.*//; s/ //g'
}
echo "== tg128 -r 3: RING=0 / ring"
for r in 1 2; do for m in l1b l8b; do
  a=$(LOCKSTEP_CUDA_RING_GATE_UP=0 tg $m); b=$(tg $m)
  echo "round $r $m  $a / $b"
done; done
el
[ -n "${OUT:-}" ] && cp /tmp/ops.txt /tmp/check_*.txt /tmp/iso_*.txt $OUT/ 2>/dev/null
true
