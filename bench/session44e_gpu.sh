#!/bin/bash
# Needs bench/session44/in_block_q8.patch applied to main at 9c3e991 (the kernels were not kept).
# Session 44, call 5: the one-row K-quant mat-vec that quantizes its activation in each block
# (mmv_q8s1 / mmv_q8s2r, plan::quantizes_in_blocks; bitwise quantize_q8_32 then mmv_fast1),
# sparing the quantizer's launch before the down projection. Bitwise checks against
# LOCKSTEP_CUDA_Q8S=0 (tokens, whole traces), check --ops, check, diff --isolate; tg128 -r 3
# alternating (Gemma-3 at the default bound; Llama-1B and the 8B with their long rows in);
# variants: the next kernel launched after the quantization (kernel define), every kernel's
# preferred carveout at 100; Gemma-3's timeline.
set -u
B=./.device/lockstep
O=/tmp/s44e; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$B synth --like llama-8b --type Q4_K_M -o /tmp/l8b.gguf > /dev/null 2>&1 &
P8=$!
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/g3.gguf > /dev/null 2>&1
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf --layers 3 -o /tmp/g3c.gguf > /dev/null 2>&1
$B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf > /dev/null 2>&1
$B synth --like llama-1b --type Q4_K_M --layers 3 -o /tmp/l1bc.gguf > /dev/null 2>&1
LATE=LOCKSTEP_CUDA_DEFINES=LOCKSTEP_Q8S_LATE_LAUNCH
PIDS=""
for v in X=1 $LATE; do
  env "$v" $B bench --backend cuda -m /tmp/g3c.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 & PIDS="$PIDS $!"
  env "$v" LOCKSTEP_CUDA_TIMELINE=/tmp/x $B bench --backend cuda -m /tmp/g3c.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 & PIDS="$PIDS $!"
done
wait $PIDS; el
( $B check --ops --backend cuda > $O/ops.txt 2>&1; echo "== ops cuda: rc $? $(tail -1 $O/ops.txt)"
  LOCKSTEP_CUDA_Q8S=16384 $B check --ops --backend cuda > $O/ops16k.txt 2>&1; echo "== ops cuda Q8S=16384: rc $? $(tail -1 $O/ops16k.txt)" ) > $O/ops_summary.txt 2>&1 &
PO=$!
h() { env "$@" $B run --backend cuda -m /tmp/$M.gguf -p 'The quick brown fox' -n 48 --temp 0 2>/dev/null | md5sum | cut -c1-12; }
M=g3; echo "tokens g3: $(h X=1), Q8S=0 $(h LOCKSTEP_CUDA_Q8S=0) (64901c8f9708)"
M=l1b; echo "tokens l1b: Q8S=8192 $(h LOCKSTEP_CUDA_Q8S=8192), Q8S=0 $(h LOCKSTEP_CUDA_Q8S=0) (4e5bee1ab652)"
trc() { env "$2" $B trace -m /tmp/$1.gguf --backend cuda --ids $(seq -s, 7 46) --decode 16 -o $O/tr_$1_$3.st > $O/trace_$1_$3.txt 2>&1; }
trc g3c X=1 new; trc g3c LOCKSTEP_CUDA_Q8S=0 old
echo "trace g3c, in blocks vs Q8S=0: $(python3 bench/session43/st_same.py $O/tr_g3c_new.st $O/tr_g3c_old.st)"
trc l1bc LOCKSTEP_CUDA_Q8S=8192 new; trc l1bc LOCKSTEP_CUDA_Q8S=0 old
echo "trace l1bc, in blocks (8192) vs Q8S=0: $(python3 bench/session43/st_same.py $O/tr_l1bc_new.st $O/tr_l1bc_old.st)"
rm -f $O/*.st
$B check -m /tmp/g3.gguf --backend cuda > $O/check-g3.txt 2>&1
echo "== check g3: rc $? | $(grep -E 'replayed' $O/check-g3.txt | tr -s ' ' | cut -c1-110)"
$B diff -m /tmp/g3c.gguf --a ref --b cuda --ids $(seq -s, 7 46) --decode 32 --isolate > $O/iso.txt 2>&1
echo "== diff g3 cut to 3 layers (40 + 32) --isolate: rc $? | $(grep -E '^isolated verdict|^verdict' $O/iso.txt | head -2 | cut -c1-100 | tr '\n' '|')"
el
tg() { timeout 60 env "$@" $B bench --backend cuda -m /tmp/$M.gguf -p 0 -n 128 -r 3 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f6 | sed 's/ *± */±/; s/ //g'; }
M=g3
for r in 1 2 3; do
  echo "g3 round $r: in blocks $(tg X=1) | Q8S=0 $(tg LOCKSTEP_CUDA_Q8S=0) | late $(tg "$LATE") | carveout 100 $(tg LOCKSTEP_CUDA_CARVEOUT=100)"
done
M=l1b
for r in 1 2; do echo "l1b round $r: Q8S=8192 $(tg LOCKSTEP_CUDA_Q8S=8192) | Q8S=0 $(tg LOCKSTEP_CUDA_Q8S=0)"; done
el
wait $PO; cat $O/ops_summary.txt; grep -E 'FAIL' $O/ops*.txt | head
wait $P8; el
M=l8b
for r in 1 2; do echo "l8b round $r: Q8S=16384 $(tg LOCKSTEP_CUDA_Q8S=16384) | Q8S=0 $(tg LOCKSTEP_CUDA_Q8S=0)"; done
el
LOCKSTEP_CUDA_TIMELINE=$O/tl_g3.txt $B bench --backend cuda -m /tmp/g3.gguf -p 0 -n 32 -r 1 > /dev/null 2>&1
el
mkdir -p $OUT/s44e && cp $O/*.txt $OUT/s44e/ 2>/dev/null
true
