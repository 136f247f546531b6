#!/bin/bash
# Session 41, call 2: the one-row decode attention of heads of 256 on a cluster of 4 (or 8)
# blocks, each a chunk of the row's keys (kernels.cu attention_decode_cl<N>_256;
# LOCKSTEP_CUDA_ATT_CL=0 the block a head of attention_decode_256, =8 eight blocks). Correct
# first: check --ops (every case, then the attention cases with 8 blocks and with none), diff
# --isolate on a cut Gemma-3 with 4 and 8, check on the whole synthesized Gemma-3, the greedy
# tokens (other sums: other bits than session 39's 64901c8f9708 may follow); then tg128 -r 3
# alternating 4 / 0 / 8, and the step timeline with 4.
set -u
B=./.device/lockstep
O=/tmp/s41b; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/g3.gguf > /dev/null 2>&1 &
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf --layers 3 -o /tmp/g3c.gguf > /dev/null 2>&1
$B bench --backend cuda -m /tmp/g3c.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 &
LOCKSTEP_CUDA_TIMELINE=/tmp/x $B bench --backend cuda -m /tmp/g3c.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 &
wait; el
( $B check --ops --backend cuda > $O/ops.txt 2>&1; echo "== ops cuda: rc $? $(tail -1 $O/ops.txt)"
  LOCKSTEP_CUDA_ATT_CL=8 $B check --ops --backend cuda --filter 'attention*' > $O/ops8.txt 2>&1; echo "== ops cuda attention, ATT_CL=8: rc $? $(tail -1 $O/ops8.txt)"
  LOCKSTEP_CUDA_ATT_CL=0 $B check --ops --backend cuda --filter 'attention*' > $O/ops0.txt 2>&1; echo "== ops cuda attention, ATT_CL=0: rc $? $(tail -1 $O/ops0.txt)" ) > $O/ops_summary.txt 2>&1 &
for c in 4 8; do
  LOCKSTEP_CUDA_ATT_CL=$c $B diff -m /tmp/g3c.gguf --a ref --b cuda --ids $(seq -s, 7 46) --decode 32 --isolate > $O/iso-g3c-$c.txt 2>&1
  echo "== diff g3 cut to 3 layers (40 + 32) --isolate, ATT_CL=$c: rc $? | $(grep -E '^isolated verdict|^verdict' $O/iso-g3c-$c.txt | head -2 | cut -c1-110 | tr '\n' '|')"
done
$B check -m /tmp/g3.gguf --backend cuda > $O/check-g3.txt 2>&1
echo "== check g3: rc $? | $(grep -E 'replayed|result' $O/check-g3.txt | tr -s ' ' | cut -c1-110 | tr '\n' '|')"
wait; cat $O/ops_summary.txt; grep -E 'FAIL' $O/ops*.txt | head -20
el
h() { env "$@" $B run --backend cuda -m /tmp/g3.gguf -p 'The quick brown fox' -n 48 --temp 0 2>/dev/null | md5sum | cut -c1-12; }
echo "tokens g3: ATT_CL=4 $(h X=1), 8 $(h LOCKSTEP_CUDA_ATT_CL=8), 0 $(h LOCKSTEP_CUDA_ATT_CL=0) (session 39: 64901c8f9708)"
el
tg() { timeout 40 env "$@" $B bench --backend cuda -m /tmp/g3.gguf -p 0 -n 128 -r 3 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f6 | sed 's/ *± */±/; s/ //g'; }
for r in 1 2 3; do echo "g3 tg128 round $r: ATT_CL=4 $(tg X=1) / 0 $(tg LOCKSTEP_CUDA_ATT_CL=0) / 8 $(tg LOCKSTEP_CUDA_ATT_CL=8)"; done
el
LOCKSTEP_CUDA_TIMELINE=$O/tl_g3.txt $B bench --backend cuda -m /tmp/g3.gguf -p 0 -n 128 -r 1 > $O/tlrun_g3.txt 2>&1
awk -F'\t' 'NR>1 && $3>=3 && $3<=9 {print $4, $6, $9}' $O/tl_g3.txt | head -8
el
mkdir -p $OUT/s41b && cp $O/*.txt $OUT/s41b/ 2>/dev/null
true
