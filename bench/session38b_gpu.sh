#!/bin/bash
# Session 38b: where session 38's first build lost what it saved. The lab (step_cluster.cu)
# with this kernels.cu (.device/step_new) and session 37's (step_old); then the replay clock
# (graph and copy, device events) and tg128 for: session 37's build, this one, its knobs
# (HOST_LOGITS=0, CLUSTER_STEP=0, both) and the trigger variant CL_LAUNCH_AT_DOWN.
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
for v in ${LABS-new old}; do
  [ -x .device/step_$v ] || continue
  timeout 120 .device/step_$v > $O/lab_$v.txt 2>&1
  echo "== lab $v: $(grep -E 'BITWISE|DIFFER|us a layer|graph' $O/lab_$v.txt | tr -s ' ' | cut -c1-150 | tr '\n' '|')"
done
wait; el
clock() { # label, then env assignments
  local label=$1; shift
  env "$@" LOCKSTEP_CUDA_REPLAY_CLOCK=1 ${BIN:-$B} bench --backend cuda -m /tmp/smol.gguf -p 0 -n 128 -r 1 > /tmp/clk.txt 2>&1
  echo "$label: $(grep -E '^  (between|restage|launch|wait|step|graph|copy) ' /tmp/clk.txt | awk '{printf "%s %s  ", $1, $2}')"
}
echo "== replay clock (means, us)"
BIN=.device/lockstep-s37 clock "s37 build      " X=1
clock "this build     " X=1
clock "HOST_LOGITS=0  " LOCKSTEP_CUDA_HOST_LOGITS=0
clock "CLUSTER_STEP=0 " LOCKSTEP_CUDA_CLUSTER_STEP=0
clock "CLUSTER_STEP=0 HOST_LOGITS=0" LOCKSTEP_CUDA_CLUSTER_STEP=0 LOCKSTEP_CUDA_HOST_LOGITS=0
clock "AT_DOWN        " LOCKSTEP_CUDA_DEFINES=CL_LAUNCH_AT_DOWN
el
tg() { left=$(( LIMIT - ($(date +%s) - T0) )); [ $left -lt 12 ] && { echo skipped; return; }
  timeout $left env "$@" ${BIN:-$B} bench --backend cuda -m /tmp/smol.gguf -p 0 -n 128 -r 3 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f6 | sed 's/ *± */±/; s/ //g'; }
echo "== tg128 -r 3: s37 | this | HOST_LOGITS=0 | CLUSTER_STEP=0 | CLUSTER_STEP=0 HOST_LOGITS=0"
for r in $(seq ${ROUNDS:-2}); do
  echo "round $r  $(BIN=.device/lockstep-s37 tg X=1) | $(tg X=1) | $(tg LOCKSTEP_CUDA_HOST_LOGITS=0) | $(tg LOCKSTEP_CUDA_CLUSTER_STEP=0) | $(tg LOCKSTEP_CUDA_CLUSTER_STEP=0 LOCKSTEP_CUDA_HOST_LOGITS=0)"
done
el
true
