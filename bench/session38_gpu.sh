#!/bin/bash
# Session 38 (call 2): the cluster decode step also runs the output norm (residual_norm's work);
# a replayed one-row LM head writes the logits a caller wants on the host into mapped
# page-locked memory itself (mmv_head2r, graph_exec::head_rewrite; LOCKSTEP_CUDA_HOST_LOGITS=0:
# the copy after the graph). On a synthesized SmolLM2-135M Q4_1 (and 3-layer Gemma-3 and
# Llama-1B): which graphs take them; check (replayed vs tapped, bitwise); tokens; tg128
# alternating with session 37's build (.device/lockstep-s37) and the knobs; the replay clock.
# (Call 2 ran it when the LM head launched from the cluster's last layer by default, today's
# CL_LAUNCH_AT_LAYER, and its last column was the launch at the grid's end, today's default.)
WARM="CL_LAUNCH_AT_LAYER CL_LAUNCH_AT_DOWN" . bench/session38_lib.sh
[ -s /tmp/g3.gguf ] || $B synth --like gemma3 --type Q4_K_M --layers 3 --metadata-from .device/gemma3-meta.gguf -o /tmp/g3.gguf | tail -1
[ -s /tmp/l1b3.gguf ] || $B synth --like llama-1b --type Q4_K_M --layers 3 -o /tmp/l1b3.gguf | tail -1
wait; el
for m in smol g3 l1b3; do
  echo "== $m: $(LOCKSTEP_CUDA_STATS=1 $B bench --backend cuda -m /tmp/$m.gguf -p 0 -n 16 -r 1 2>&1 | grep 'step graphs')"
done
for m in smol g3 l1b3; do
  $B check -m /tmp/$m.gguf --backend cuda > $O/check_$m.txt 2>&1
  echo "== check $m: rc $? | $(grep -E 'replayed|FAIL' $O/check_$m.txt | tr -s ' ' | cut -c1-100 | tr '\n' '|')"
done
h() { $B run --backend cuda -m /tmp/smol.gguf "$@" 2>/dev/null | md5sum | cut -c1-12; }
echo "smol tokens: greedy $(h -p 'The quick brown fox' -n 48 --temp 0) top-k $(h -p 'Once upon a time' -n 48 --top-k 40 --seed 7) (before: 10d82d4b9948 d29998751468)"
el
echo "== tg128 -r 3: s37 build | this build | HOST_LOGITS=0 | CL_LAUNCH_AT_LAYER | CL_LAUNCH_AT_DOWN"
for r in $(seq ${ROUNDS:-2}); do
  echo "round $r  $(BIN=.device/lockstep-s37 tg X=1) | $(tg X=1) | $(tg LOCKSTEP_CUDA_HOST_LOGITS=0) | $(tg LOCKSTEP_CUDA_DEFINES=CL_LAUNCH_AT_LAYER) | $(tg LOCKSTEP_CUDA_DEFINES=CL_LAUNCH_AT_DOWN)"
done
el
LOCKSTEP_CUDA_REPLAY_CLOCK=1 $B bench --backend cuda -m /tmp/smol.gguf -p 0 -n 128 -r 1 > $O/clock_smol.txt 2>&1
grep -A 14 "replay clock" $O/clock_smol.txt | head -16
el
true
