#!/bin/bash
# Needs the instrumentation of call 4 (mark 10, a probe load, since removed: runs.txt).
# Session 45, call 4: where the o projection's pre-wait time goes: marks 10 (a probe load of a
# global word, ld.global.cg, returned) and 11 (a value from the kernel's parameters ready), as
# release minus stamp, next to 15 (entry) and 13 (first weights). Gemma-3 first and last blocks.
set -u
B=./.device/lockstep
O=/tmp/s45d; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/g3.gguf > /dev/null 2>&1
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf --layers 3 -o /tmp/g3c.gguf > /dev/null 2>&1
D=LOCKSTEP_CUDA_DEFINES
L="$D=LOCKSTEP_TL_LAST"
PIDS=""
for v in X=1 "$L"; do
  env "$v" LOCKSTEP_CUDA_TIMELINE=/tmp/x $B bench --backend cuda -m /tmp/g3c.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 & PIDS="$PIDS $!"
done
wait $PIDS; el
tl() { env "$@" $B bench --backend cuda -m /tmp/g3.gguf -p 0 -n 32 -r 1 > /dev/null 2>&1; }
tl X=1 LOCKSTEP_CUDA_TIMELINE=$O/tl_g3.txt
tl "$L" LOCKSTEP_CUDA_TIMELINE=$O/tl_g3_last.txt
tl LOCKSTEP_CUDA_PDL=0 LOCKSTEP_CUDA_TIMELINE=$O/tl_g3_nopdl.txt
el
for f in tl_g3 tl_g3_last tl_g3_nopdl; do echo "== $f"; awk -F'\t' 'NR>1 && $1==0 && $3>=4 && $3<=10' $O/$f.txt | cut -f4-9; done
mkdir -p $OUT/s45d && cp $O/*.txt $OUT/s45d/ 2>/dev/null
true
