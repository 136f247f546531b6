#!/bin/bash
# Session 38's shared device-call steps, sourced by session38b/c/d_gpu.sh: the prologue (a
# synthesized SmolLM2-135M Q4_1, kernel caches warmed for this build and session 37's,
# .device/lockstep-s37, plus any LOCKSTEP_CUDA_DEFINES in WARM), the labs (.device/step_<v>,
# or from .device/labs.tar.xz), the replay clock and tg128.
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
for d in ${WARM:-}; do
  LOCKSTEP_CUDA_DEFINES=$d $B bench --backend cuda -m /tmp/smol.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 &
done
[ -f .device/labs.tar.xz ] && tar -xJf .device/labs.tar.xz -C .device
# labs V...: each .device/step_<v>, its per-layer times (and whether it was bitwise)
labs() {
  for v in "$@"; do
    [ -x .device/step_$v ] || continue
    timeout 120 .device/step_$v > $O/lab_$v.txt 2>&1
    echo "== lab $v: $(grep -E 'NOT bitwise|round 1' $O/lab_$v.txt | sed 's/six kernels [0-9.]* us a layer, //' | tr -s ' ' | cut -c1-80 | tr '\n' '|')"
  done
}
# clock LABEL [VAR=VALUE...]: the replay clock's means for tg128 (BIN: another build)
clock() {
  local label=$1; shift
  env "$@" LOCKSTEP_CUDA_REPLAY_CLOCK=1 ${BIN:-$B} bench --backend cuda -m /tmp/smol.gguf -p 0 -n 128 -r 1 > /tmp/clk.txt 2>&1
  echo "$label: $(grep -E '^  (between|restage|upload|launch|wait|ahead|step|graph|copy) ' /tmp/clk.txt | awk '{printf "%s %s  ", $1, $2}')"
}
# tg [VAR=VALUE...]: tg128 -r 3, tok/s ± (BIN: another build)
tg() { left=$(( LIMIT - ($(date +%s) - T0) )); [ $left -lt 12 ] && { echo skipped; return; }
  timeout $left env "$@" ${BIN:-$B} bench --backend cuda -m /tmp/smol.gguf -p 0 -n 128 -r 3 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f6 | sed 's/ *± */±/; s/ //g'; }
