#!/bin/bash
# Session 38: the cluster decode step also runs the output norm (residual_norm's work) and lets
# the LM head launch from its last layer; a replayed one-row LM head writes the logits a caller
# wants on the host into mapped page-locked memory itself (mmv_head2r, graph_exec::head_rewrite;
# LOCKSTEP_CUDA_HOST_LOGITS=0: the copy after the graph). On a synthesized SmolLM2-135M Q4_1:
# which graphs take them; check (replayed vs tapped, bitwise); tokens; tg128 alternating with
# session 37's build (.device/lockstep-s37) and the knobs; the replay clock.
set -u
B=./.device/lockstep
O=${OUT:-/tmp/out}; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
LIMIT=${LIMIT:-570}
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
[ -s /tmp/smol.gguf ] || $B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf | tail -1
$B bench --backend cuda -m /tmp/smol.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 &
[ -x .device/lockstep-s37 ] && .device/lockstep-s37 bench --backend cuda -m /tmp/smol.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 &
[ -s /tmp/g3.gguf ] || $B synth --like gemma3 --type Q4_K_M --layers 3 --metadata-from .device/gemma3-meta.gguf -o /tmp/g3.gguf | tail -1
[ -s /tmp/l1b3.gguf ] || $B synth --like llama-1b --type Q4_K_M --layers 3 -o /tmp/l1b3.gguf | tail -1
wait; el
for m in smol g3 l1b3; do
  echo "== $m: $(LOCKSTEP_CUDA_STATS=1 $B bench --backend cuda -m /tmp/$m.gguf -p 0 -n 16 -r 1 2>&1 | grep 'step graphs')"
done
$B check -m /tmp/smol.gguf --backend cuda > $O/check_smol.txt 2>&1
echo "== check smol: rc $? | $(grep -E 'replayed|FAIL' $O/check_smol.txt | tr -s ' ' | cut -c1-100 | tr '\n' '|')"
for m in g3 l1b3; do
  $B check -m /tmp/$m.gguf --backend cuda > $O/check_$m.txt 2>&1
  echo "== check $m: rc $? | $(grep -E 'replayed|FAIL' $O/check_$m.txt | tr -s ' ' | cut -c1-100 | tr '\n' '|')"
done
h() { $B run --backend cuda -m /tmp/smol.gguf "$@" 2>/dev/null | md5sum | cut -c1-12; }
echo "smol tokens: greedy $(h -p 'The quick brown fox' -n 48 --temp 0) top-k $(h -p 'Once upon a time' -n 48 --top-k 40 --seed 7) (before: 10d82d4b9948 d29998751468)"
el
tg() { left=$(( LIMIT - ($(date +%s) - T0) )); [ $left -lt 12 ] && { echo skipped; return; }
  timeout $left ${BIN:-$B} bench --backend cuda -m /tmp/smol.gguf -p 0 -n 128 -r 3 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f6 | sed 's/ *± */±/; s/ //g'; }
echo "== tg128 -r 3: s37 build | this build | HOST_LOGITS=0 | CL_LAUNCH_AT_DOWN | CL_LAUNCH_AT_END"
for r in $(seq ${ROUNDS:-2}); do
  echo "round $r  $(BIN=.device/lockstep-s37 tg) | $(tg) | $(LOCKSTEP_CUDA_HOST_LOGITS=0 tg) | $(LOCKSTEP_CUDA_DEFINES=CL_LAUNCH_AT_DOWN tg) | $(LOCKSTEP_CUDA_DEFINES=CL_LAUNCH_AT_END tg)"
done
el
LOCKSTEP_CUDA_REPLAY_CLOCK=1 $B bench --backend cuda -m /tmp/smol.gguf -p 0 -n 128 -r 1 > $O/clock_smol.txt 2>&1
grep -A 14 "replay clock" $O/clock_smol.txt | head -16
el
true
