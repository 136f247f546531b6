#!/bin/bash
# Session 33d: the one-row mat-vec on an unquantized f32 row quantizing in its lanes (mmv_fq1 /
# mmv_fq2r, plan::quantizes_in_lanes; LOCKSTEP_CUDA_FQ=0: quantize_q8_32 first, =N: up to N
# blocks a lane). Tokens with and without (bitwise the same), check --ops on the mat-vecs,
# check's replayed steps, diff --isolate; tg128 alternating.
set -u
B=./.device/lockstep
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
LIMIT=${LIMIT:-560}
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
[ -s /tmp/smol4.gguf ] || $B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf --layers 4 -o /tmp/smol4.gguf | tail -1
$B bench --backend cuda -m /tmp/smol4.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 &
[ -s /tmp/smol.gguf ] || $B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf | tail -1
[ -s /tmp/gemma3.gguf ] || $B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/gemma3.gguf | tail -1
[ -s /tmp/l1b.gguf ] || $B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf | tail -1
[ -s /tmp/l8b.gguf ] || $B synth --like llama-8b --type Q4_K_M -o /tmp/l8b.gguf | tail -1
wait; el
h() { $B run --backend cuda -m /tmp/$1.gguf "${@:2}" 2>/dev/null | md5sum | cut -c1-12; }
hh() { echo "$(h $1 -p 'The quick brown fox' -n 48 --temp 0) $(h $1 -p 'Once upon a time' -n 48 --top-k 40 --seed 7)"; }
for m in smol gemma3 l1b l8b; do
  echo "$m default: $(hh $m)  FQ=0: $(LOCKSTEP_CUDA_FQ=0 hh $m)  FQ=64: $(LOCKSTEP_CUDA_FQ=64 hh $m)"
done
echo "(33: smol 10d82d4b9948 d29998751468, gemma3 64901c8f9708 6ed04893ed86, l1b 4e5bee1ab652 e3fb11944b54, l8b 4aa7e0e30dda 71249884f2ee)"
el
$B check --ops --backend cuda --filter 'matmul*' > /tmp/ops.txt 2>&1; echo "== check --ops matmul: rc $? | $(tail -2 /tmp/ops.txt | tr '\n' '|')"
$B check -m /tmp/smol4.gguf --backend cuda > /tmp/check.txt 2>&1; echo "== check smol4: $(grep -E 'replayed|all-true|repeated' /tmp/check.txt | tr -s ' ' | tr '\n' '|')"
$B diff -m /tmp/smol4.gguf --a ref --b cuda -p "The capital of France is Paris. The capital of Germany is" --decode 32 --isolate > /tmp/iso.txt 2>&1
echo "== diff smol4 --isolate: rc $? | $(grep -E '^isolated verdict|^verdict' /tmp/iso.txt | head -2 | cut -c1-110 | tr '\n' '|')"
el
tg() { # model: tok/s
  left=$(( LIMIT - ($(date +%s) - T0) )); [ $left -lt 12 ] && { echo skipped; return; }
  timeout $left $B bench --backend cuda -m /tmp/$1.gguf -p 0 -n 128 -r 3 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f6 | sed 's/ *±.*//; s/ //g'
}
echo "== tg128 -r 3: FQ=0 / default (4 blocks a lane) / FQ=64"
for r in 1 2; do for m in smol gemma3 l1b l8b; do
  a=$(LOCKSTEP_CUDA_FQ=0 tg $m); b=$(tg $m)
  c=$([ $m = l1b -o $m = l8b ] && LOCKSTEP_CUDA_FQ=64 tg $m)
  echo "round $r $m  $a / $b / $c"
done; done
el
[ -n "${OUT:-}" ] && cp /tmp/ops.txt /tmp/check.txt /tmp/iso.txt $OUT/ 2>/dev/null
true
