#!/bin/bash
# Needs bench/session44/q8_entry_launch.patch applied to main at 9c3e991 (the defines were not kept).
# Session 44, call 7: the quantizer launching the down projection at its entry, before its own
# grid wait (LOCKSTEP_Q8_ENTRY_LAUNCH), so the down's blocks are resident before the quantizer
# ends (call 6's timelines: the down arrives at its wait 2.07 us after the quantizer's
# release, 1.6 us after its work); with the one-row mat-vecs launching their successor at
# their wait instead of their entry (LOCKSTEP_FAST1_LAUNCH_AT_WAIT) as well. Same values.
set -u
B=./.device/lockstep
O=/tmp/s44g; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/g3.gguf > /dev/null 2>&1
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf --layers 3 -o /tmp/g3c.gguf > /dev/null 2>&1
$B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf > /dev/null 2>&1 &
D=LOCKSTEP_CUDA_DEFINES
E="$D=LOCKSTEP_Q8_ENTRY_LAUNCH"
F="$D=LOCKSTEP_Q8_ENTRY_LAUNCH LOCKSTEP_FAST1_LAUNCH_AT_WAIT"
PIDS=""
for v in X=1 "$E" "$F"; do
  env "$v" $B bench --backend cuda -m /tmp/g3c.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 & PIDS="$PIDS $!"
done
env "$E" LOCKSTEP_CUDA_TIMELINE=/tmp/x $B bench --backend cuda -m /tmp/g3c.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 & PIDS="$PIDS $!"
wait $PIDS; wait; el
h() { env "$@" $B run --backend cuda -m /tmp/$M.gguf -p 'The quick brown fox' -n 48 --temp 0 2>/dev/null | md5sum | cut -c1-12; }
M=g3; echo "tokens g3: $(h X=1) $(h "$E") $(h "$F") (64901c8f9708)"
tg() { timeout 60 env "$@" $B bench --backend cuda -m /tmp/$M.gguf -p 0 -n 128 -r 3 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f6 | sed 's/ *± */±/; s/ //g'; }
M=g3
for r in 1 2 3; do echo "g3 round $r: main $(tg X=1) | q8 entry $(tg "$E") | q8 entry + fast1 at wait $(tg "$F")"; done
M=l1b
for r in 1 2; do echo "l1b round $r: main $(tg X=1) | q8 entry $(tg "$E") | q8 entry + fast1 at wait $(tg "$F")"; done
el
env "$E" LOCKSTEP_CUDA_TIMELINE=$O/tl_g3_q8entry.txt $B bench --backend cuda -m /tmp/g3.gguf -p 0 -n 32 -r 1 > /dev/null 2>&1
el
mkdir -p $OUT/s44g && cp $O/*.txt $OUT/s44g/ 2>/dev/null
true
