#!/bin/bash
# Session 38d: the output norm's pointers out of the kernel's argument (a record after the
# layer table; ptxas: 20 bytes of spills instead of 40): the lab against session 37's kernel,
# then the replay clock, tg128 (also with the LM head launched from the last down phase,
# CL_LAUNCH_AT_DOWN), tokens and check.
set -u
B=./.device/lockstep
O=${OUT:-/tmp/out}; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
LIMIT=${LIMIT:-570}
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf | tail -1
$B bench --backend cuda -m /tmp/smol.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 &
.device/lockstep-s37 bench --backend cuda -m /tmp/smol.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 &
LOCKSTEP_CUDA_DEFINES=CL_LAUNCH_AT_DOWN $B bench --backend cuda -m /tmp/smol.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 &
[ -f .device/labs.tar.xz ] && tar -xJf .device/labs.tar.xz -C .device
for v in ${LABS-old new}; do
  [ -x .device/step_$v ] || continue
  timeout 120 .device/step_$v > $O/lab_$v.txt 2>&1
  echo "== lab $v: $(grep -E 'NOT bitwise|round 1' $O/lab_$v.txt | sed 's/six kernels [0-9.]* us a layer, //' | tr -s ' ' | cut -c1-80 | tr '\n' '|')"
done
wait; el
clock() { # label, then env assignments
  local label=$1; shift
  env "$@" LOCKSTEP_CUDA_REPLAY_CLOCK=1 ${BIN:-$B} bench --backend cuda -m /tmp/smol.gguf -p 0 -n 128 -r 1 > /tmp/clk.txt 2>&1
  echo "$label: $(grep -E '^  (between|restage|upload|launch|wait|ahead|step|graph|copy) ' /tmp/clk.txt | awk '{printf "%s %s  ", $1, $2}')"
}
echo "== replay clock (means, us)"
BIN=.device/lockstep-s37 clock "s37 build   " X=1
clock "this build  " X=1
clock "PRESTAGE=0  " LOCKSTEP_CUDA_PRESTAGE=0
clock "AT_DOWN     " LOCKSTEP_CUDA_DEFINES=CL_LAUNCH_AT_DOWN
el
tg() { left=$(( LIMIT - ($(date +%s) - T0) )); [ $left -lt 12 ] && { echo skipped; return; }
  timeout $left env "$@" ${BIN:-$B} bench --backend cuda -m /tmp/smol.gguf -p 0 -n 128 -r 3 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f6 | sed 's/ *± */±/; s/ //g'; }
echo "== tg128 -r 3: s37 | this | AT_DOWN | PRESTAGE=0 HOST_LOGITS=0"
for r in $(seq ${ROUNDS:-3}); do
  echo "round $r  $(BIN=.device/lockstep-s37 tg X=1) | $(tg X=1) | $(tg LOCKSTEP_CUDA_DEFINES=CL_LAUNCH_AT_DOWN) | $(tg LOCKSTEP_CUDA_PRESTAGE=0 LOCKSTEP_CUDA_HOST_LOGITS=0)"
done
el
h() { $B run --backend cuda -m /tmp/smol.gguf "$@" 2>/dev/null | md5sum | cut -c1-12; }
echo "smol tokens: greedy $(h -p 'The quick brown fox' -n 48 --temp 0) top-k $(h -p 'Once upon a time' -n 48 --top-k 40 --seed 7) (before: 10d82d4b9948 d29998751468)"
$B check -m /tmp/smol.gguf --backend cuda > $O/check_smol.txt 2>&1
echo "== check smol: rc $? | $(grep -E 'replayed|FAIL' $O/check_smol.txt | tr -s ' ' | cut -c1-100 | tr '\n' '|')"
el
true
