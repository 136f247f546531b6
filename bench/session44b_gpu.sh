#!/bin/bash
# Needs bench/session44/f32_down.patch applied to main at 9c3e991 (the kernels were not kept).
# Session 44, call 2: where the f32 down loses (call 1: Gemma-3 -2 to -7%). Variants by kernel
# define: the next kernel launched once the row is staged (XF_LATE_LAUNCH), the first unit's
# weights loaded after the grid wait (XF_NO_PRELOAD), a unit's shared-memory reads issued
# before its products (XF_LDS_FIRST); tg128 -r 3 against XF=0, two rounds; timelines.
set -u
B=./.device/lockstep
O=/tmp/s44b; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/g3.gguf > /dev/null 2>&1
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf --layers 3 -o /tmp/g3c.gguf > /dev/null 2>&1
$B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf > /dev/null 2>&1 &
D=LOCKSTEP_CUDA_DEFINES
V0=X=1
V1="$D=LOCKSTEP_XF_LATE_LAUNCH"
V2="$D=LOCKSTEP_XF_NO_PRELOAD"
V3="$D=LOCKSTEP_XF_LATE_LAUNCH LOCKSTEP_XF_NO_PRELOAD"
V4="$D=LOCKSTEP_XF_LATE_LAUNCH LOCKSTEP_XF_NO_PRELOAD LOCKSTEP_XF_LDS_FIRST"
V5="$D=LOCKSTEP_XF_LATE_LAUNCH LOCKSTEP_XF_LDS_FIRST"
for v in "$V0" "$V1" "$V2" "$V3" "$V4" "$V5"; do
  env "$v" $B bench --backend cuda -m /tmp/g3c.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 &
  env "$v" LOCKSTEP_CUDA_TIMELINE=/tmp/x $B bench --backend cuda -m /tmp/g3c.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 &
done
wait; el
h() { env "$@" $B run --backend cuda -m /tmp/g3.gguf -p 'The quick brown fox' -n 48 --temp 0 2>/dev/null | md5sum | cut -c1-12; }
echo "tokens g3: $(h "$V0") $(h "$V1") $(h "$V2") $(h "$V3") $(h "$V4") $(h "$V5") XF=0 $(h LOCKSTEP_CUDA_XF=0)"
tg() { timeout 60 env "$@" $B bench --backend cuda -m /tmp/$M.gguf -p 0 -n 128 -r 3 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f6 | sed 's/ *± */±/; s/ //g'; }
M=g3
for r in 1 2; do
  echo "g3 round $r: XF=0 $(tg LOCKSTEP_CUDA_XF=0) | v0 $(tg "$V0") | late $(tg "$V1") | nopre $(tg "$V2") | late+nopre $(tg "$V3") | late+nopre+lds $(tg "$V4") | late+lds $(tg "$V5")"
done
el
M=l1b
echo "l1b: XF=0 $(tg LOCKSTEP_CUDA_XF=0) | late+nopre+lds XF=8192 $(tg "$V4" LOCKSTEP_CUDA_XF=8192) | late+lds XF=8192 $(tg "$V5" LOCKSTEP_CUDA_XF=8192)"
for v in 3 4 5; do
  eval vv=\$V$v
  env "$vv" LOCKSTEP_CUDA_TIMELINE=$O/tl_g3_v$v.txt $B bench --backend cuda -m /tmp/g3.gguf -p 0 -n 32 -r 1 > /dev/null 2>&1
done
el
mkdir -p $OUT/s44b && cp $O/*.txt $OUT/s44b/ 2>/dev/null
true
