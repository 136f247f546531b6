#!/bin/bash
# Re-verification of the step-graph fix (`steps::score_room`) under serving: 256 streams with
# --check, step graphs off (serve's default) and on, with the 32768-token cache of
# `bench/serve_gpu.sh` (where graphs gave NaN logits before the fix) and a larger one.
# (Not yet run: the session's device time ran out.)
set -u
B=./.device/lockstep
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf 2>&1 | tail -1
run() {
  env $1 $B serve -m /tmp/smol.gguf --served-model-name smollm2 --backend cuda --host 127.0.0.1 --port 18777 \
    --max-seqs 256 --cache-tokens $2 > /tmp/serve.log 2>&1 &
  pid=$!
  $B loadgen --addr 127.0.0.1:18777 --wait-ready 120 -c 256 -n 256 --max-tokens 32 --check --time-limit 100 > /tmp/lg.txt 2>&1
  echo "== $1 cache $2: $(grep -c 'error in stream' /tmp/lg.txt) errors, $(grep -c 'differs' /tmp/lg.txt) differ; preempt: $(curl -s 127.0.0.1:18777/metrics | grep -E '^lockstep_(preempt|prefix)' | tr '\n' ' ')"
  kill $pid; wait $pid 2>/dev/null
}
run LOCKSTEP_CUDA_GRAPHS=0 32768     # serve's default now: no graphs, cache full (preemption)
run LOCKSTEP_CUDA_GRAPHS=1 32768     # the failing configuration
run LOCKSTEP_CUDA_GRAPHS=1 131072    # graphs, nothing preempted
