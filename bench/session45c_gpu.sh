#!/bin/bash
# Session 45, call 3: whether the o projection's first weight loads are held until the decode
# attention ends: the timeline build's marks 13 (release minus the first weights' arrival, now
# also in the norm-fused kernels), 15 (release minus entry), 12 (the SM, smid * 1000 + 1 ns),
# first and last blocks, with the cluster attention and with attention_decode_256
# (LOCKSTEP_CUDA_ATT_CL=0), weights under the default L2 policy (LOCKSTEP_CUDA_EVICT_FIRST=0),
# and without programmatic edges (LOCKSTEP_CUDA_PDL=0).
set -u
B=./.device/lockstep
O=/tmp/s45c; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/g3.gguf > /dev/null 2>&1
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf --layers 3 -o /tmp/g3c.gguf > /dev/null 2>&1
D=LOCKSTEP_CUDA_DEFINES
L="$D=LOCKSTEP_TL_LAST"
PIDS=""
for v in X=1 "$L" LOCKSTEP_CUDA_EVICT_FIRST=0; do
  env "$v" LOCKSTEP_CUDA_TIMELINE=/tmp/x $B bench --backend cuda -m /tmp/g3c.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 & PIDS="$PIDS $!"
done
wait $PIDS; el
tl() { env "$@" $B bench --backend cuda -m /tmp/g3.gguf -p 0 -n 32 -r 1 > /dev/null 2>&1; }
tl X=1 LOCKSTEP_CUDA_TIMELINE=$O/tl_g3.txt
tl "$L" LOCKSTEP_CUDA_TIMELINE=$O/tl_g3_last.txt
tl LOCKSTEP_CUDA_ATT_CL=0 LOCKSTEP_CUDA_TIMELINE=$O/tl_g3_nocl.txt
tl "$L" LOCKSTEP_CUDA_ATT_CL=0 LOCKSTEP_CUDA_TIMELINE=$O/tl_g3_nocl_last.txt
tl LOCKSTEP_CUDA_EVICT_FIRST=0 LOCKSTEP_CUDA_TIMELINE=$O/tl_g3_evict_normal.txt
tl LOCKSTEP_CUDA_PDL=0 LOCKSTEP_CUDA_TIMELINE=$O/tl_g3_nopdl.txt
el
for f in tl_g3 tl_g3_last tl_g3_nocl tl_g3_nocl_last tl_g3_evict_normal tl_g3_nopdl; do echo "== $f"; awk -F'\t' 'NR>1 && $1==0 && $3>=4 && $3<=10' $O/$f.txt | cut -f4-9; done
mkdir -p $OUT/s45c && cp $O/*.txt $OUT/s45c/ 2>/dev/null
true
