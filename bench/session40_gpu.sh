#!/bin/bash
# Session 40, call 1: the head's build (b963ee0: five host-side commits not run on the device in
# session 39). check (replayed vs tapped, bitwise) on synthesized SmolLM2, Gemma-3 and Llama-1B;
# greedy tokens against earlier sessions' hashes; the replay clock's whole output for SmolLM2
# (its new line: the host thread's page faults and context switches a replay), with and without
# the launches ahead, pinned to one core and not; tg128 -r 3 of the three shapes.
set -u
B=./.device/lockstep
O=${OUT:-/tmp/out}; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
LIMIT=${LIMIT:-560}
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
nproc; uname -r
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf > /dev/null 2>&1
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/g3.gguf > /dev/null 2>&1
$B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf > /dev/null 2>&1
for m in g3 l1b; do $B bench --backend cuda -m /tmp/$m.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 & done
echo "== smol: $(LOCKSTEP_CUDA_STATS=1 $B bench --backend cuda -m /tmp/smol.gguf -p 0 -n 128 -r 2 2>&1 | grep -E 'step graphs|\| tg' | tr -s ' ' | tr '\n' '|')"
wait; el
for m in smol g3 l1b; do
  $B check -m /tmp/$m.gguf --backend cuda > $O/check_$m.txt 2>&1
  echo "== check $m: rc $? | $(grep -E 'replayed' $O/check_$m.txt | tr -s ' ' | cut -c1-100)"
done
h() { $B run --backend cuda -m /tmp/$1.gguf -p 'The quick brown fox' -n 48 --temp 0 2>/dev/null | md5sum | cut -c1-12; }
echo "tokens: smol $(h smol) (10d82d4b9948) g3 $(h g3) (64901c8f9708) l1b $(h l1b) (4e5bee1ab652)"
el
for v in on:X=1 off:LOCKSTEP_CUDA_PRELAUNCH=0; do
  for pin in free pinned; do
    P=""; [ $pin = pinned ] && P="taskset -c 2"
    env ${v#*:} LOCKSTEP_CUDA_REPLAY_CLOCK=1 $P $B bench --backend cuda -m /tmp/smol.gguf -p 0 -n 128 -r 3 > $O/clock_${v%%:*}_$pin.txt 2>&1
    echo "== clock ${v%%:*} $pin:"; grep -vE '^\|' $O/clock_${v%%:*}_$pin.txt | grep -E 'between|host thread|step|graph|engine|caller|return' | head -14
  done
done
el
tg() { left=$(( LIMIT - ($(date +%s) - T0) )); [ $left -lt 15 ] && { echo skipped; return; }
  timeout $left env "${@:2}" $B bench --backend cuda -m /tmp/$1.gguf -p 0 -n 128 -r 3 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f6 | sed 's/ *± */±/; s/ //g'; }
for m in smol g3 l1b; do echo "$m tg128 -r 3: $(tg $m X=1) / $(tg $m X=1)"; done
el
true
