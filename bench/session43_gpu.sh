#!/bin/bash
# Session 43, call 1: Gemma-3's norm-fused gate/up quantizing its activation on a cluster of two
# blocks (norm_gate_up_cq8_fast1, LOCKSTEP_CUDA_GATE_UP_CLUSTER=1) instead of quantize_q8_32.
# Correct first (greedy tokens, check replayed vs tapped, diff --isolate, check --ops, each with
# the cluster kernel on); then tg128 -r 3 alternating off / on; the timelines (the prologue's
# new marks: 7 loads, 14 the post norm's reduction, 8 post norm done, 1 the add, 2 the norm's
# reduction, 10-12 each quantized block, 3 the end), and two timing-only ablations of the fused
# quantization (wrong values: LOCKSTEP_EXP_NOQ8 skips it, LOCKSTEP_EXP_FASTDIV approximates
# its divisions).
set -u
B=./.device/lockstep
O=/tmp/s43; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/g3.gguf > /dev/null 2>&1
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf --layers 3 -o /tmp/g3c.gguf > /dev/null 2>&1
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf > /dev/null 2>&1 &
$B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf > /dev/null 2>&1 &
# Compile every variant's module at once (the cache keys on the source and the defines).
$B bench --backend cuda -m /tmp/g3c.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 &
LOCKSTEP_CUDA_TIMELINE=/tmp/x $B bench --backend cuda -m /tmp/g3c.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 &
LOCKSTEP_CUDA_DEFINES=LOCKSTEP_EXP_NOQ8 $B bench --backend cuda -m /tmp/g3c.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 &
LOCKSTEP_CUDA_DEFINES=LOCKSTEP_EXP_FASTDIV $B bench --backend cuda -m /tmp/g3c.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 &
wait; el
C=LOCKSTEP_CUDA_GATE_UP_CLUSTER=1
S="env LOCKSTEP_CUDA_STATS=1"
$S $C $B bench --backend cuda -m /tmp/g3c.gguf -p 0 -n 4 -r 1 2>&1 | grep -i "step graphs" | cut -c1-200
h() { env "$@" $B run --backend cuda -m /tmp/$M.gguf -p 'The quick brown fox' -n 48 --temp 0 2>/dev/null | md5sum | cut -c1-12; }
M=g3; echo "tokens g3: off $(h X=1), cluster $(h $C) (64901c8f9708)"
M=smol; echo "tokens smol: off $(h X=1), cluster $(h $C) (10d82d4b9948)"
M=l1b; echo "tokens l1b: cluster $(h $C) (4e5bee1ab652)"
env $C $B check -m /tmp/g3.gguf --backend cuda > $O/check-g3.txt 2>&1
echo "== check g3 cluster: rc $? | $(grep -E 'replayed' $O/check-g3.txt | tr -s ' ' | cut -c1-110)"
env $C $B diff -m /tmp/g3c.gguf --a ref --b cuda --ids $(seq -s, 7 46) --decode 32 --isolate > $O/iso.txt 2>&1
echo "== diff g3 cut (40 + 32) --isolate, cluster: rc $? | $(grep -E '^isolated verdict|^verdict' $O/iso.txt | head -2 | cut -c1-100 | tr '\n' '|')"
env $C $B check --ops --backend cuda > $O/ops.txt 2>&1; echo "== ops cuda cluster: rc $? $(tail -1 $O/ops.txt)"
el
tg() { timeout 40 env "$@" $B bench --backend cuda -m /tmp/$M.gguf -p 0 -n 128 -r 3 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f6 | sed 's/ *± */±/; s/ //g'; }
M=g3
for r in 1 2 3; do echo "g3 tg128 round $r: off $(tg X=1) / cluster $(tg $C)"; done
echo "g3 tg128 ablations (wrong values): no fused q8 $(tg LOCKSTEP_CUDA_DEFINES=LOCKSTEP_EXP_NOQ8) / fast div $(tg LOCKSTEP_CUDA_DEFINES=LOCKSTEP_EXP_FASTDIV) / off $(tg X=1)"
M=smol; echo "smol tg128: off $(tg X=1) / cluster $(tg $C)"
el
for v in off cluster; do
  E=X=1; [ $v = cluster ] && E=$C
  env $E LOCKSTEP_CUDA_TIMELINE=$O/tl_g3_$v.txt $B bench --backend cuda -m /tmp/g3.gguf -p 0 -n 128 -r 1 > /dev/null 2>&1
  echo "timeline $v:"; awk -F'\t' 'NR>1 && $1==0 && $3>=9 && $3<=16' $O/tl_g3_$v.txt | cut -f4-9
done
el
mkdir -p $OUT/s43 && cp $O/*.txt $OUT/s43/ 2>/dev/null
true
