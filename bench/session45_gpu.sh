#!/bin/bash
# Needs bench/session45/att_launch_at_entry.patch (LOCKSTEP_ATT_LAUNCH_AT_ENTRY, not kept).
# Session 45, call 1: where the o projection's and the down's blocks are before they reach their
# grid waits (the timeline build's new mark 15: release minus the block's first instruction, for
# the kernels that load weights before their wait), first and last blocks; and the decode
# attention of heads of 256 letting the next kernel launch at its first instruction instead of
# its grid wait (LOCKSTEP_ATT_LAUNCH_AT_ENTRY, a diagnostic define; only the launch moves, so
# the values are the same): tokens, tg128 alternating, timelines.
set -u
B=./.device/lockstep
O=/tmp/s45; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/g3.gguf > /dev/null 2>&1
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf --layers 3 -o /tmp/g3c.gguf > /dev/null 2>&1
D=LOCKSTEP_CUDA_DEFINES
E="$D=LOCKSTEP_ATT_LAUNCH_AT_ENTRY"
L="$D=LOCKSTEP_TL_LAST"
LE="$D=LOCKSTEP_TL_LAST LOCKSTEP_ATT_LAUNCH_AT_ENTRY"
PIDS=""
for v in X=1 "$E"; do
  env "$v" $B bench --backend cuda -m /tmp/g3c.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 & PIDS="$PIDS $!"
  env "$v" LOCKSTEP_CUDA_TIMELINE=/tmp/x $B bench --backend cuda -m /tmp/g3c.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 & PIDS="$PIDS $!"
done
for v in "$L" "$LE"; do
  env "$v" LOCKSTEP_CUDA_TIMELINE=/tmp/x $B bench --backend cuda -m /tmp/g3c.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 & PIDS="$PIDS $!"
done
wait $PIDS; el
h() { env "$@" $B run --backend cuda -m /tmp/$M.gguf -p 'The quick brown fox' -n 48 --temp 0 2>/dev/null | md5sum | cut -c1-12; }
M=g3; echo "tokens g3: $(h X=1) $(h "$E") (64901c8f9708)"
tg() { timeout 60 env "$@" $B bench --backend cuda -m /tmp/$M.gguf -p 0 -n 128 -r 3 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f6 | sed 's/ *± */±/; s/ //g'; }
for r in 1 2 3; do echo "g3 round $r: main $(tg X=1) | att launch at entry $(tg "$E")"; done
el
tl() { env "$@" $B bench --backend cuda -m /tmp/g3.gguf -p 0 -n 32 -r 1 > /dev/null 2>&1; }
tl X=1 LOCKSTEP_CUDA_TIMELINE=$O/tl_g3.txt
tl "$E" LOCKSTEP_CUDA_TIMELINE=$O/tl_g3_att_entry.txt
tl "$L" LOCKSTEP_CUDA_TIMELINE=$O/tl_g3_last.txt
tl "$LE" LOCKSTEP_CUDA_TIMELINE=$O/tl_g3_last_att_entry.txt
el
for f in tl_g3 tl_g3_att_entry tl_g3_last tl_g3_last_att_entry; do echo "== $f"; awk -F'\t' 'NR>1 && $1==0 && $3>=4 && $3<=10' $O/$f.txt | cut -f4-9; done
mkdir -p $OUT/s45 && cp $O/*.txt $OUT/s45/ 2>/dev/null
true
