#!/bin/bash
# Session 39b: the gate and the launch ahead (graph_exec::gate_rewrite, StepGraph::prelaunch).
# Correct first: check (replayed vs tapped, bitwise) on synthesized SmolLM2, Gemma-3 and
# Llama-1B, with the launches ahead on, and again with GATE_TIMEOUT_CYCLES=2000 (nearly every
# launch ahead times out: the run-again path); greedy tokens against session 38's hashes. Then
# tg128 -r 3 alternating PRELAUNCH on / 0 / gate, and the replay clock of each (SmolLM2).
set -u
B=./.device/lockstep
O=${OUT:-/tmp/out}; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
LIMIT=${LIMIT:-570}
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf > /dev/null 2>&1
( $B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/g3.gguf > /dev/null 2>&1
  $B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf > /dev/null 2>&1
  for m in g3 l1b; do nice -n 5 $B bench --backend cuda -m /tmp/$m.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1; done
  LOCKSTEP_CUDA_DEFINES=GATE_TIMEOUT_CYCLES=2000 nice -n 5 $B bench --backend cuda -m /tmp/smol.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 ) &
echo "== smol stats: $(LOCKSTEP_CUDA_STATS=1 $B bench --backend cuda -m /tmp/smol.gguf -p 0 -n 128 -r 2 2>&1 | grep -E 'step graphs|\| tg' | tr -s ' ' | tr '\n' '|')"
el
wait
for m in smol g3 l1b; do
  $B check -m /tmp/$m.gguf --backend cuda > $O/check_$m.txt 2>&1
  echo "== check $m: rc $? | $(grep -E 'replayed' $O/check_$m.txt | tr -s ' ' | cut -c1-100)"
done
LOCKSTEP_CUDA_STATS=1 LOCKSTEP_CUDA_DEFINES=GATE_TIMEOUT_CYCLES=2000 $B check -m /tmp/smol.gguf --backend cuda > $O/check_smol_timeout.txt 2>&1
echo "== check smol, gate timeout 2000 cycles: rc $? | $(grep -E 'replayed|step graphs' $O/check_smol_timeout.txt | tr -s ' ' | cut -c1-250 | tr '\n' '|')"
echo "== smol stats, timeout 2000: $(LOCKSTEP_CUDA_STATS=1 LOCKSTEP_CUDA_DEFINES=GATE_TIMEOUT_CYCLES=2000 $B bench --backend cuda -m /tmp/smol.gguf -p 0 -n 128 -r 1 2>&1 | grep -E 'step graphs|\| tg' | tr -s ' ' | tr '\n' '|')"
h() { $B run --backend cuda -m /tmp/$1.gguf -p 'The quick brown fox' -n 48 --temp 0 2>/dev/null | md5sum | cut -c1-12; }
echo "tokens: smol $(h smol) (10d82d4b9948) g3 $(h g3) (64901c8f9708) l1b $(h l1b) (4e5bee1ab652)"
el
tg() { left=$(( LIMIT - ($(date +%s) - T0) )); [ $left -lt 15 ] && { echo skipped; return; }
  timeout $left env "${@:2}" $B bench --backend cuda -m /tmp/$1.gguf -p 0 -n 128 -r 3 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f6 | sed 's/ *± */±/; s/ //g'; }
for m in smol g3 l1b; do
  echo "== tg128 -r 3 $m: PRELAUNCH on / 0 / gate"
  n=2; [ $m = smol ] && n=3
  for r in $(seq $n); do echo "round $r  $(tg $m X=1) / $(tg $m LOCKSTEP_CUDA_PRELAUNCH=0) / $(tg $m LOCKSTEP_CUDA_PRELAUNCH=gate)"; done
  el
done
clock() {
  env "${@:2}" LOCKSTEP_CUDA_REPLAY_CLOCK=1 $B bench --backend cuda -m /tmp/smol.gguf -p 0 -n 128 -r 1 > /tmp/clk.txt 2>&1
  echo "$1: $(grep -E '^  (between|restage|upload|launch|wait|ahead|finish|step|graph|copy) ' /tmp/clk.txt | awk '{printf "%s %s  ", $1, $2}')"
}
clock "clock on  " X=1; clock "clock 0   " LOCKSTEP_CUDA_PRELAUNCH=0; clock "clock gate" LOCKSTEP_CUDA_PRELAUNCH=gate
el
true
