#!/bin/bash
# Session 14, second call: the whole-row draw kernels in `check --ops` (bitwise `draw_row` on
# rows of 1 to 262144 logits), `run` greedy for scale, and the server under OpenAI-default
# requests (temperature, no top_k, no logprobs: the rows are drawn on the device) against the
# same server with --full-logits (rows copied whole and drawn on the host), each load checked
# against every request's run alone (loadgen --check), loopback only.
set -u
B=${LOCKSTEP:-./.device/lockstep}
O=${OUT:-/tmp/s14b}; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf | tail -1
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/gemma3.gguf | tail -1
$B check --ops --backend cuda --filter logits_top > $O/ops.txt 2>&1; echo "== check --ops --filter logits_top: rc $?"; grep -E "logits_top|pass|FAIL" $O/ops.txt | tail -18
el
P="The quick brown fox jumps over the lazy dog. Once upon a time"
for m in smol gemma3; do
  for r in 1 2 3; do
    echo "-- $m greedy r$r: $($B run -m /tmp/$m.gguf --backend cuda --temp 0 -n 256 --ignore-eos --no-monitors --verbose -p "$P" 2>&1 >/dev/null | tr '\n' ' ' | cut -c1-120)"
  done
done
el
# Temperature sampling without top-k or top-p: this build (device draws), and session 13's
# build (.device/lockstep-base: rows copied whole, drawn on the host), in one call.
for m in smol gemma3; do
  for bin in $B .device/lockstep-base; do
    for r in 1 2 3; do
      echo "-- $m $(basename $bin) temp 1 r$r: $($bin run -m /tmp/$m.gguf --backend cuda --temp 1 --top-k 0 --top-p 1 --min-p 0 --seed $r -n 256 --ignore-eos --no-monitors --verbose -p "$P" 2>&1 >/dev/null | tr '\n' ' ' | cut -c1-120)"
    done
  done
done
el
for mode in "" "--full-logits"; do
  $B serve -m /tmp/smol.gguf --served-model-name smollm2 --backend cuda --host 127.0.0.1 --port 18777 \
    --max-seqs 64 --cache-tokens 32768 $mode > $O/serve.log 2>&1 &
  pid=$!
  echo "== serve ${mode:-(device draws)}"
  $B loadgen --addr 127.0.0.1:18777 --wait-ready 120 -c 1 -n 8 --max-tokens 64 --no-logprobs --check 2>&1 | grep -iE "concurrency|throughput|TPOT|differ|error|rc" | head -8; echo "   loadgen rc ${PIPESTATUS[0]}"
  $B loadgen --addr 127.0.0.1:18777 -c 16 -n 64 --max-tokens 64 --no-logprobs --check 2>&1 | grep -iE "concurrency|throughput|TPOT|differ|error|rc" | head -8; echo "   loadgen rc ${PIPESTATUS[0]}"
  $B loadgen --addr 127.0.0.1:18777 -c 64 -n 128 --max-tokens 64 --no-logprobs --check 2>&1 | grep -iE "concurrency|throughput|TPOT|differ|error|rc" | head -8; echo "   loadgen rc ${PIPESTATUS[0]}"
  curl -s 127.0.0.1:18777/metrics | grep -E '^lockstep_sampled_rows_total'
  kill $pid; wait $pid 2>/dev/null
  el
done
