#!/bin/bash
# Session 41, call 3: rope_store's work inside the cluster decode attention of heads of 256
# (kernels.cu attention_decode_rope_cl<N>_256, N = LOCKSTEP_CUDA_ATT_CL: 4 by default or 8;
# LOCKSTEP_CUDA_ROPE_ATTN=0 keeps rope_store then attention_decode_cl<N>_256, call 2's build;
# LOCKSTEP_CUDA_ATT_CL=0 the kernels before this session). Correct first: check --ops (every case,
# then the attention and rope cases with 8 blocks, unfused, and without the cluster), diff
# --isolate on a cut Gemma-3 with 4 and 8, check on the whole synthesized Gemma-3 (replayed vs
# tapped), the greedy tokens; then tg128 -r 3 alternating, and the step timeline.
set -u
B=./.device/lockstep
O=/tmp/s41c; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/g3.gguf > /dev/null 2>&1 &
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf --layers 3 -o /tmp/g3c.gguf > /dev/null 2>&1
$B bench --backend cuda -m /tmp/g3c.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 &
LOCKSTEP_CUDA_TIMELINE=/tmp/x $B bench --backend cuda -m /tmp/g3c.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 &
wait; el
( $B check --ops --backend cuda > $O/ops.txt 2>&1; echo "== ops cuda: rc $? $(tail -1 $O/ops.txt)"
  LOCKSTEP_CUDA_ATT_CL=8 $B check --ops --backend cuda --filter 'attention*,rope*,kv*' > $O/ops8.txt 2>&1; echo "== ops cuda attention/rope/kv, ATT_CL=8: rc $? $(tail -1 $O/ops8.txt)"
  LOCKSTEP_CUDA_ROPE_ATTN=0 $B check --ops --backend cuda --filter 'attention*,rope*,kv*' > $O/opsnr.txt 2>&1; echo "== ops cuda attention/rope/kv, ROPE_ATTN=0: rc $? $(tail -1 $O/opsnr.txt)"
  LOCKSTEP_CUDA_ATTN_HEADS=group $B check --ops --backend cuda --filter 'attention*,rope*,kv*' > $O/opsg.txt 2>&1; echo "== ops cuda attention/rope/kv, ATTN_HEADS=group: rc $? $(tail -1 $O/opsg.txt)"
  LOCKSTEP_CUDA_ATT_CL=0 $B check --ops --backend cuda --filter 'attention*,rope*,kv*' > $O/ops0.txt 2>&1; echo "== ops cuda attention/rope/kv, ATT_CL=0: rc $? $(tail -1 $O/ops0.txt)" ) > $O/ops_summary.txt 2>&1 &
LOCKSTEP_CUDA_ATTN_HEADS=group $B diff -m /tmp/g3c.gguf --a ref --b cuda --ids $(seq -s, 7 46) --decode 32 --isolate > $O/iso-g3c-group.txt 2>&1
echo "== diff g3 cut (40 + 32) --isolate, ATTN_HEADS=group: rc $? | $(grep -E '^isolated verdict|^verdict' $O/iso-g3c-group.txt | head -2 | cut -c1-110 | tr '\n' '|')"
for c in 4 8; do
  LOCKSTEP_CUDA_ATT_CL=$c $B diff -m /tmp/g3c.gguf --a ref --b cuda --ids $(seq -s, 7 46) --decode 32 --isolate > $O/iso-g3c-$c.txt 2>&1
  echo "== diff g3 cut to 3 layers (40 + 32) --isolate, ATT_CL=$c: rc $? | $(grep -E '^isolated verdict|^verdict' $O/iso-g3c-$c.txt | head -2 | cut -c1-110 | tr '\n' '|')"
done
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf > /dev/null 2>&1
$B check -m /tmp/smol.gguf --backend cuda > $O/check-smol.txt 2>&1
echo "== check smol (the stage's change under attention_decode_rope_64): rc $? | $(grep -E 'replayed' $O/check-smol.txt | tr -s ' ' | cut -c1-110) | tokens $($B run --backend cuda -m /tmp/smol.gguf -p 'The quick brown fox' -n 48 --temp 0 2>/dev/null | md5sum | cut -c1-12) (session 39: 10d82d4b9948)"
$B check -m /tmp/g3.gguf --backend cuda > $O/check-g3.txt 2>&1
echo "== check g3: rc $? | $(grep -E 'replayed|result' $O/check-g3.txt | tr -s ' ' | cut -c1-110 | tr '\n' '|')"
wait; cat $O/ops_summary.txt; grep -E 'FAIL' $O/ops*.txt | head -20
el
h() { env "$@" $B run --backend cuda -m /tmp/g3.gguf -p 'The quick brown fox' -n 48 --temp 0 2>/dev/null | md5sum | cut -c1-12; }
echo "tokens g3: ATT_CL=4 $(h X=1), 8 $(h LOCKSTEP_CUDA_ATT_CL=8), 4 unfused $(h LOCKSTEP_CUDA_ROPE_ATTN=0), 0 $(h LOCKSTEP_CUDA_ATT_CL=0) (session 39: 64901c8f9708)"
el
tg() { timeout 40 env "$@" $B bench --backend cuda -m /tmp/g3.gguf -p 0 -n 128 -r 3 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f6 | sed 's/ *± */±/; s/ //g'; }
for r in 1 2 3; do echo "g3 tg128 round $r: ATT_CL=4 $(tg X=1) / 8 $(tg LOCKSTEP_CUDA_ATT_CL=8) / 4 unfused $(tg LOCKSTEP_CUDA_ROPE_ATTN=0) / 8 unfused $(tg LOCKSTEP_CUDA_ROPE_ATTN=0 LOCKSTEP_CUDA_ATT_CL=8) / 0 $(tg LOCKSTEP_CUDA_ATT_CL=0)"; done
el
LOCKSTEP_CUDA_TIMELINE=$O/tl_g3.txt $B bench --backend cuda -m /tmp/g3.gguf -p 0 -n 128 -r 1 > $O/tlrun_g3.txt 2>&1
awk -F'\t' 'NR>1 && $3>=3 && $3<=9 {print $4, $6, $9}' $O/tl_g3.txt | head -8
awk -F'\t' 'NR>1 {s[$4]+=$6; c[$4]++} END {for (k in s) printf "%s %d %.3f\n", k, c[k], s[k]/c[k]}' $O/tl_g3.txt | sort -k3 -nr | head -12
LOCKSTEP_CUDA_ATT_CL=8 LOCKSTEP_CUDA_TIMELINE=$O/tl_g3_8.txt $B bench --backend cuda -m /tmp/g3.gguf -p 0 -n 128 -r 1 > /dev/null 2>&1
awk -F'\t' 'NR>1 && $3>=3 && $3<=9 {print $4, $6, $9}' $O/tl_g3_8.txt | head -8
el
mkdir -p $OUT/s41c && cp $O/*.txt $OUT/s41c/ 2>/dev/null
true
