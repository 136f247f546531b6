#!/bin/bash
# Session 42, call 1: rope_store's work inside the norm-fused q/k/v launch of a replayed step
# (kernels.cu norm_mmv3_rope_fast1_<id>, graph_exec::rope_rewrite; LOCKSTEP_CUDA_ROPE_QKV=0 keeps
# the two kernels, =entry lets the attention launch at the fused kernel's entry). Correct first:
# the pairs fused (LOCKSTEP_CUDA_STATS), check on Gemma-3 (replayed vs tapped, bitwise), the
# greedy tokens all three ways (session 41: 64901c8f9708), check on SmolLM2 (no pair there);
# then tg128 -r 3 alternating, and the step timeline.
set -u
B=./.device/lockstep
O=/tmp/s42; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/g3.gguf > /dev/null 2>&1 &
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf > /dev/null 2>&1 &
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf --layers 3 -o /tmp/g3c.gguf > /dev/null 2>&1
$B bench --backend cuda -m /tmp/g3c.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 &
LOCKSTEP_CUDA_TIMELINE=/tmp/x $B bench --backend cuda -m /tmp/g3c.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 &
wait; el
for v in X=1 LOCKSTEP_CUDA_ROPE_QKV=entry LOCKSTEP_CUDA_ROPE_QKV=0; do
  echo "== stats $v: $(env $v LOCKSTEP_CUDA_STATS=1 $B bench --backend cuda -m /tmp/g3.gguf -p 0 -n 8 -r 1 2>&1 | grep 'step graphs' | cut -c1-220)"
done
h() { env "$@" $B run --backend cuda -m /tmp/$M.gguf -p 'The quick brown fox' -n 48 --temp 0 2>/dev/null | md5sum | cut -c1-12; }
M=g3; echo "tokens g3: $(h X=1), entry $(h LOCKSTEP_CUDA_ROPE_QKV=entry), 0 $(h LOCKSTEP_CUDA_ROPE_QKV=0) (session 41: 64901c8f9708); smol $(M=smol; h X=1) (10d82d4b9948)"
for v in X=1 LOCKSTEP_CUDA_ROPE_QKV=entry; do
  env $v $B check -m /tmp/g3.gguf --backend cuda > $O/check-g3.txt 2>&1
  echo "== check g3 $v: rc $? | $(grep -E 'replayed' $O/check-g3.txt | tr -s ' ' | cut -c1-110)"
done
$B check -m /tmp/g3c.gguf --backend cuda > $O/check-g3c.txt 2>&1
echo "== check g3 cut: rc $? | $(grep -E 'replayed' $O/check-g3c.txt | tr -s ' ' | cut -c1-110)"
$B check -m /tmp/smol.gguf --backend cuda > $O/check-smol.txt 2>&1
echo "== check smol: rc $? | $(grep -E 'replayed' $O/check-smol.txt | tr -s ' ' | cut -c1-110)"
$B check --ops --backend cuda --filter 'rope*,kv*,attention*' > $O/ops.txt 2>&1; echo "== ops rope/kv/attention: rc $? $(tail -1 $O/ops.txt)"
el
tg() { timeout 40 env "$@" $B bench --backend cuda -m /tmp/g3.gguf -p 0 -n 128 -r 3 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f6 | sed 's/ *± */±/; s/ //g'; }
for r in 1 2 3; do echo "g3 tg128 round $r: fused $(tg X=1) / entry $(tg LOCKSTEP_CUDA_ROPE_QKV=entry) / two kernels $(tg LOCKSTEP_CUDA_ROPE_QKV=0)"; done
el
LOCKSTEP_CUDA_TIMELINE=$O/tl_g3.txt $B bench --backend cuda -m /tmp/g3.gguf -p 0 -n 128 -r 1 > $O/tlrun_g3.txt 2>&1
awk -F'\t' 'NR>1 && $1==0 && $3>=8 && $3<=22' $O/tl_g3.txt
LOCKSTEP_CUDA_DEFINES=LOCKSTEP_TL_LAST LOCKSTEP_CUDA_TIMELINE=$O/tl_g3_last.txt $B bench --backend cuda -m /tmp/g3.gguf -p 0 -n 128 -r 1 > $O/tlrun_g3_last.txt 2>&1
echo "== last blocks"; awk -F'\t' 'NR>1 && $1==0 && $3>=8 && $3<=22' $O/tl_g3_last.txt
el
mkdir -p $OUT/s42 && cp $O/*.txt $OUT/s42/ 2>/dev/null
true
