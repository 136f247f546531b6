#!/bin/bash
# Session 37: the cluster decode step's lab variants (carried as .device/step_<v>: step_cluster.cu
# built against a variant of kernels.cu with -DKERNELS_CU, or 7d33df8's v3), then the backend's
# checks and tg128 as bench/session36_gpu.sh runs them (LABS="" skips the labs).
set -u
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for v in ${LABS-old new novis v3}; do
  [ -x .device/step_$v ] || continue
  echo "== lab $v"
  timeout 120 .device/step_$v > /tmp/lab_$v.txt 2>&1
  grep -E "BITWISE|DIFFER|differ|round" /tmp/lab_$v.txt | tr -s ' ' | cut -c1-120
  [ -n "${OUT:-}" ] && cp /tmp/lab_$v.txt $OUT/
done
el
[ -n "${NO_BACKEND:-}" ] && exit 0
NO_TL=${NO_TL:-1} LIMIT=$(( ${LIMIT:-560} - ($(date +%s) - T0) )) bash bench/session36_gpu.sh
