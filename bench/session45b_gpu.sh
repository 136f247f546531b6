#!/bin/bash
# Needs bench/session45/att_launch_at_entry.patch (LOCKSTEP_ATT_LAUNCH_AT_ENTRY, not kept).
# Session 45, call 2: when the o projection's and the down's first weights arrive (the timeline
# build's mark 14: release minus the moment the block's first weight scale is in its register;
# mark 15: release minus the block's entry), Gemma-3 first and last blocks, with the attention
# launching at its grid wait (default) and at its entry (LOCKSTEP_ATT_LAUNCH_AT_ENTRY); Llama-1B.
set -u
B=./.device/lockstep
O=/tmp/s45b; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/g3.gguf > /dev/null 2>&1
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf --layers 3 -o /tmp/g3c.gguf > /dev/null 2>&1
$B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf > /dev/null 2>&1
D=LOCKSTEP_CUDA_DEFINES
E="$D=LOCKSTEP_ATT_LAUNCH_AT_ENTRY"
L="$D=LOCKSTEP_TL_LAST"
LE="$D=LOCKSTEP_TL_LAST LOCKSTEP_ATT_LAUNCH_AT_ENTRY"
PIDS=""
for v in X=1 "$E" "$L" "$LE"; do
  env "$v" LOCKSTEP_CUDA_TIMELINE=/tmp/x $B bench --backend cuda -m /tmp/g3c.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 & PIDS="$PIDS $!"
done
wait $PIDS; el
tl() { env "$@" $B bench --backend cuda -m /tmp/$M.gguf -p 0 -n 32 -r 1 > /dev/null 2>&1; }
M=g3
tl X=1 LOCKSTEP_CUDA_TIMELINE=$O/tl_g3.txt
tl "$E" LOCKSTEP_CUDA_TIMELINE=$O/tl_g3_att_entry.txt
tl "$L" LOCKSTEP_CUDA_TIMELINE=$O/tl_g3_last.txt
tl "$LE" LOCKSTEP_CUDA_TIMELINE=$O/tl_g3_last_att_entry.txt
M=l1b
tl X=1 LOCKSTEP_CUDA_TIMELINE=$O/tl_l1b.txt
tl "$L" LOCKSTEP_CUDA_TIMELINE=$O/tl_l1b_last.txt
el
for f in tl_g3 tl_g3_att_entry tl_g3_last tl_g3_last_att_entry; do echo "== $f"; awk -F'\t' 'NR>1 && $1==0 && $3>=4 && $3<=10' $O/$f.txt | cut -f4-9; done
for f in tl_l1b tl_l1b_last; do echo "== $f"; awk -F'\t' 'NR>1 && $1==0 && $3>=4 && $3<=12' $O/$f.txt | cut -f4-9; done
mkdir -p $OUT/s45b && cp $O/*.txt $OUT/s45b/ 2>/dev/null
true
