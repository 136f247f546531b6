#!/bin/bash
# Session 18, ninth script: a row that needs all of itself crosses whole alone (RowPick::whole),
# the step's other rows reduced. check --ops, then the server with two loads at once: A
# (top-k 40: reduced rows) beside B (frequency penalty, no top-k: whole rows), the session's
# start against this build; then A with --check beside B on this build.
set -u
B=./.device/lockstep
A0=./.device/lockstep-base
O=${OUT:-/tmp/s18i}; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf | tail -1
LOCKSTEP_CUDA_CACHE=/tmp/cubin-a $A0 bench --backend cuda -m /tmp/smol.gguf -p 0 -n 8 -r 1 > /dev/null 2>&1 &
LOCKSTEP_CUDA_CACHE=/tmp/cubin-b $B check --ops --backend cuda > $O/ops.txt 2>&1; echo "== check --ops --backend cuda: rc $? $(tail -1 $O/ops.txt)"
wait
grep -E 'FAIL' $O/ops.txt | head -8
echo "logits_top cases: $(grep -c '^  logits_top.* ok$' $O/ops.txt) ok, $(grep -c '^  logits_top.*FAIL' $O/ops.txt) FAIL"
el
both() {  # binary cache port check
  LOCKSTEP_CUDA_CACHE=$2 $1 serve -m /tmp/smol.gguf --served-model-name smollm2 --backend cuda --host 127.0.0.1 --port $3 \
    --max-seqs 256 --cache-tokens 32768 > $O/serve-$3.log 2>&1 &
  local pid=$!
  $B loadgen --addr 127.0.0.1:$3 --wait-ready 120 -c 1 -n 1 --max-tokens 4 > /dev/null 2>&1
  $B loadgen --addr 127.0.0.1:$3 -c 32 -n 96 --max-tokens 64 --no-logprobs --frequency-penalty 0.5 \
    --time-limit 60 > $O/b-$3.txt 2>&1 &
  local bp=$!
  echo "   A (top-k 40) beside B (penalties, no top-k):"
  $B loadgen --addr 127.0.0.1:$3 -c 32 -n 96 --max-tokens 64 --no-logprobs --top-k 40 $4 --time-limit 60 2>&1 | grep -E "throughput|TPOT|completed|wrong|differs" | head -4
  wait $bp
  echo "   B: $(grep -E 'throughput' $O/b-$3.txt)"
  curl -s 127.0.0.1:$3/metrics | grep -E '^lockstep_sampled_rows_total'
  kill $pid; wait $pid 2>/dev/null
}
echo "-- the session's start:"; both $A0 /tmp/cubin-a 18811 ""
echo "-- this build:"; both $B /tmp/cubin-b 18812 ""
echo "-- this build, A with --check:"; both $B /tmp/cubin-b 18813 "--check"
el
