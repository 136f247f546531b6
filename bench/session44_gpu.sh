#!/bin/bash
# Needs bench/session44/f32_down.patch applied to main at 9c3e991 (the kernels were not kept).
# Session 44, call 1: the down projection on its f32 activation (mmv_xf1/2r, plan::f32_decode),
# sparing quantize_q8_32's launch. Checks (check --ops at the default bound and at 16384, check
# on Gemma-3, diff --isolate on cut Gemma-3 and cut Llama-1B with the long rows on); tokens;
# tg128 -r 3 with and without (LOCKSTEP_CUDA_XF=0), alternating; Gemma-3's timeline.
set -u
B=./.device/lockstep
O=/tmp/s44; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$B synth --like llama-8b --type Q4_K_M -o /tmp/l8b.gguf > /dev/null 2>&1 &
P8=$!
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/g3.gguf > /dev/null 2>&1
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf --layers 3 -o /tmp/g3c.gguf > /dev/null 2>&1
$B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf > /dev/null 2>&1
$B synth --like llama-1b --type Q4_K_M --layers 3 -o /tmp/l1bc.gguf > /dev/null 2>&1
$B bench --backend cuda -m /tmp/g3c.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 &
P1=$!
LOCKSTEP_CUDA_TIMELINE=/tmp/x $B bench --backend cuda -m /tmp/g3c.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 &
P2=$!
wait $P1 $P2; el
( $B check --ops --backend cuda > $O/ops.txt 2>&1; echo "== ops cuda: rc $? $(tail -1 $O/ops.txt)"
  LOCKSTEP_CUDA_XF=16384 $B check --ops --backend cuda > $O/ops16k.txt 2>&1; echo "== ops cuda XF=16384: rc $? $(tail -1 $O/ops16k.txt)" ) > $O/ops_summary.txt 2>&1 &
PO=$!
h() { env "$@" $B run --backend cuda -m /tmp/$M.gguf -p 'The quick brown fox' -n 48 --temp 0 2>/dev/null | md5sum | cut -c1-12; }
M=g3; echo "tokens g3: $(h X=1), XF=0 $(h LOCKSTEP_CUDA_XF=0) (64901c8f9708 before)"
M=l1b; echo "tokens l1b: $(h X=1), XF=8192 $(h LOCKSTEP_CUDA_XF=8192), XF=0 $(h LOCKSTEP_CUDA_XF=0) (4e5bee1ab652 before)"
$B check -m /tmp/g3.gguf --backend cuda > $O/check-g3.txt 2>&1
echo "== check g3: rc $? | $(grep -E 'replayed' $O/check-g3.txt | tr -s ' ' | cut -c1-110)"
$B diff -m /tmp/g3c.gguf --a ref --b cuda --ids $(seq -s, 7 46) --decode 32 --isolate > $O/iso.txt 2>&1
echo "== diff g3 cut to 3 layers (40 + 32) --isolate: rc $? | $(grep -E '^isolated verdict|^verdict' $O/iso.txt | head -2 | cut -c1-100 | tr '\n' '|')"
LOCKSTEP_CUDA_XF=8192 $B diff -m /tmp/l1bc.gguf --a ref --b cuda --ids $(seq -s, 7 46) --decode 32 --isolate > $O/iso_l1b.txt 2>&1
echo "== diff l1b cut to 3 layers, XF=8192 --isolate: rc $? | $(grep -E '^isolated verdict|^verdict' $O/iso_l1b.txt | head -2 | cut -c1-100 | tr '\n' '|')"
grep -E "ffn_down|ffn_out" $O/iso.txt | head -4
el
tg() { timeout 60 env "$@" $B bench --backend cuda -m /tmp/$M.gguf -p 0 -n 128 -r 3 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f6 | sed 's/ *± */±/; s/ //g'; }
M=g3
for r in 1 2 3; do echo "g3 tg128 round $r: xf $(tg X=1) / XF=0 $(tg LOCKSTEP_CUDA_XF=0)"; done
M=l1b
for r in 1 2; do echo "l1b tg128 round $r: XF=8192 $(tg LOCKSTEP_CUDA_XF=8192) / XF=0 $(tg LOCKSTEP_CUDA_XF=0)"; done
el
wait $PO; cat $O/ops_summary.txt; grep -E 'FAIL' $O/ops*.txt | head
wait $P8; el
M=l8b
for r in 1 2; do echo "l8b tg128 round $r: XF=16384 $(tg LOCKSTEP_CUDA_XF=16384) / XF=0 $(tg LOCKSTEP_CUDA_XF=0)"; done
el
LOCKSTEP_CUDA_TIMELINE=$O/tl_g3.txt $B bench --backend cuda -m /tmp/g3.gguf -p 0 -n 32 -r 1 > /dev/null 2>&1
LOCKSTEP_CUDA_XF=0 LOCKSTEP_CUDA_TIMELINE=$O/tl_g3_old.txt $B bench --backend cuda -m /tmp/g3.gguf -p 0 -n 32 -r 1 > /dev/null 2>&1
el
mkdir -p $OUT/s44 && cp $O/*.txt $OUT/s44/ 2>/dev/null
true
