#!/bin/bash
# Session 39d: where the host's 5-7 us after a replay go (the replay clock's "unwind": between
# the replay's return and the engine's, code that takes 0.1 us on this host): the process's
# threads, and the clock with the process on one core, on two, and free.
B=./.device/lockstep; export LOCKSTEP_CUDA_CACHE=/tmp/cubin
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf > /dev/null 2>&1
$B bench --backend cuda -m /tmp/smol.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1
LOCKSTEP_CUDA_REPLAY_CLOCK=1 $B bench --backend cuda -m /tmp/smol.gguf -p 0 -n 128 -r 20 > /dev/null 2>&1 &
sleep 3; P=$!; for t in /proc/$P/task/*; do echo "thread $(cat $t/comm) $(grep -E 'voluntary' $t/status | tr -s ' \t' ' ' | tr '\n' ' ')"; done; wait
c() { echo "== $1"; ${@:2} env LOCKSTEP_CUDA_REPLAY_CLOCK=1 $B bench --backend cuda -m /tmp/smol.gguf -p 0 -n 128 -r 3 2>&1 | grep -E "^  (between|  caller|   unwind|step)|\| tg" | tr -s ' ' | cut -c1-60; }
c free; c "one core" taskset -c 5; c "two cores" taskset -c 5,6; c "free again"
