#!/bin/bash
# Session 38c (call 5): which change slowed the cluster loop by 0.26 us a layer (lab:
# step_cluster.cu against variants of this kernels.cu, each with one of the output norm's pieces
# taken out: nopost (no norm after the layers), nof (the last down rows not pushed), nofield (no
# onorm vector), none (all three), and session 37's (old); the variants were made by hand and
# not kept); then the replay clock and tg128 with the next step's tables staged while the graph
# runs (LOCKSTEP_CUDA_PRESTAGE=0: not); tokens and check. With AT_DOWN=1 (call 6, session38d,
# after the output norm's pointers left the kernel's argument) also the LM head launched from
# the last down phase (CL_LAUNCH_AT_DOWN).
WARM=${AT_DOWN:+CL_LAUNCH_AT_DOWN} . bench/session38_lib.sh
labs ${LABS-old new nopost nof nofield none}
wait; el
echo "== replay clock (means, us)"
BIN=.device/lockstep-s37 clock "s37 build   " X=1
clock "this build  " X=1
clock "PRESTAGE=0  " LOCKSTEP_CUDA_PRESTAGE=0
[ -n "${AT_DOWN:-}" ] && clock "AT_DOWN     " LOCKSTEP_CUDA_DEFINES=CL_LAUNCH_AT_DOWN
el
if [ -n "${AT_DOWN:-}" ]; then
  echo "== tg128 -r 3: s37 | this | AT_DOWN | PRESTAGE=0 HOST_LOGITS=0"
  for r in $(seq ${ROUNDS:-3}); do
    echo "round $r  $(BIN=.device/lockstep-s37 tg X=1) | $(tg X=1) | $(tg LOCKSTEP_CUDA_DEFINES=CL_LAUNCH_AT_DOWN) | $(tg LOCKSTEP_CUDA_PRESTAGE=0 LOCKSTEP_CUDA_HOST_LOGITS=0)"
  done
else
  echo "== tg128 -r 3: s37 | this | PRESTAGE=0 | HOST_LOGITS=0"
  for r in $(seq ${ROUNDS:-3}); do
    echo "round $r  $(BIN=.device/lockstep-s37 tg X=1) | $(tg X=1) | $(tg LOCKSTEP_CUDA_PRESTAGE=0) | $(tg LOCKSTEP_CUDA_HOST_LOGITS=0)"
  done
fi
el
h() { $B run --backend cuda -m /tmp/smol.gguf "$@" 2>/dev/null | md5sum | cut -c1-12; }
echo "smol tokens: greedy $(h -p 'The quick brown fox' -n 48 --temp 0) top-k $(h -p 'Once upon a time' -n 48 --top-k 40 --seed 7) (before: 10d82d4b9948 d29998751468)"
$B check -m /tmp/smol.gguf --backend cuda > $O/check_smol.txt 2>&1
echo "== check smol: rc $? | $(grep -E 'replayed|FAIL' $O/check_smol.txt | tr -s ' ' | cut -c1-100 | tr '\n' '|')"
el
true
