#!/bin/bash
# Session 38b (calls 3 and 4): where session 38's first build lost what it saved. The lab
# (step_cluster.cu) with this kernels.cu (.device/step_new) and session 37's (step_old); then
# the replay clock (graph and copy, device events) and tg128 for: session 37's build, this one,
# its knobs (HOST_LOGITS=0, CLUSTER_STEP=0, both) and the trigger variant CL_LAUNCH_AT_DOWN.
WARM=CL_LAUNCH_AT_DOWN . bench/session38_lib.sh
labs ${LABS-new old}
wait; el
echo "== replay clock (means, us)"
BIN=.device/lockstep-s37 clock "s37 build      " X=1
clock "this build     " X=1
clock "HOST_LOGITS=0  " LOCKSTEP_CUDA_HOST_LOGITS=0
clock "CLUSTER_STEP=0 " LOCKSTEP_CUDA_CLUSTER_STEP=0
clock "CLUSTER_STEP=0 HOST_LOGITS=0" LOCKSTEP_CUDA_CLUSTER_STEP=0 LOCKSTEP_CUDA_HOST_LOGITS=0
clock "AT_DOWN        " LOCKSTEP_CUDA_DEFINES=CL_LAUNCH_AT_DOWN
el
echo "== tg128 -r 3: s37 | this | HOST_LOGITS=0 | CLUSTER_STEP=0 | CLUSTER_STEP=0 HOST_LOGITS=0"
for r in $(seq ${ROUNDS:-2}); do
  echo "round $r  $(BIN=.device/lockstep-s37 tg X=1) | $(tg X=1) | $(tg LOCKSTEP_CUDA_HOST_LOGITS=0) | $(tg LOCKSTEP_CUDA_CLUSTER_STEP=0) | $(tg LOCKSTEP_CUDA_CLUSTER_STEP=0 LOCKSTEP_CUDA_HOST_LOGITS=0)"
done
el
true
