#!/bin/bash
# Session 9, third call: check --ops with the logits reduction fixed; the server with logits
# reduced on the GPU (requests without logprobs) against whole rows (--full-logits), SmolLM2
# and Gemma-3 shapes; the 256-stream loads with --check (every reply bitwise its solo run).
set -u
B=${LOCKSTEP:-./.device/lockstep}
O=${OUT:-/tmp/s9c}; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf | tail -1
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/gemma3.gguf | tail -1
$B check --ops --backend cuda > $O/ops-cuda.txt 2>&1
echo "== check --ops --backend cuda: $(tail -1 $O/ops-cuda.txt)"; grep -E " FAIL" $O/ops-cuda.txt | head -5; grep logits_top $O/ops-cuda.txt
$B check --ops --backend cuda-exact --filter logits_top > $O/ops-exact.txt 2>&1
echo "== check --ops --backend cuda-exact --filter logits_top: $(tail -1 $O/ops-exact.txt)"
el
serve_load() { # model name, extra serve flags, label
  $B serve -m $1 --served-model-name m --backend cuda --host 127.0.0.1 --port 18777 \
    --max-seqs 256 --cache-tokens 32768 $2 > $O/serve-$3.log 2>&1 &
  pid=$!
  $B loadgen --addr 127.0.0.1:18777 -m m --wait-ready 120 -c 1 -n 16 --max-tokens 32 --no-logprobs 2>&1 | grep -E "output tok/s|TTFT|ITL|TPOT|failed" | tr -s ' ' | sed "s/^/   $3 c1: /"
  for c in 64 256; do
    $B loadgen --addr 127.0.0.1:18777 -m m -c $c -n $c --max-tokens 32 --no-logprobs --time-limit 120 2>&1 | grep -E "output tok/s|TTFT|ITL|failed" | tr -s ' ' | sed "s/^/   $3 c$c: /"
  done
  kill $pid; wait $pid 2>/dev/null
}
for m in smol gemma3; do
  echo "== $m serve, no logprobs, rows reduced on the GPU:"; serve_load /tmp/$m.gguf "" $m-top
  echo "== $m serve, no logprobs, --full-logits:"; serve_load /tmp/$m.gguf "--full-logits" $m-full
  el
done
$B serve -m /tmp/smol.gguf --served-model-name m --backend cuda --host 127.0.0.1 --port 18777 \
  --max-seqs 256 --cache-tokens 32768 > $O/serve-check.log 2>&1 &
pid=$!
echo "== smol 256 streams --check --no-logprobs: $($B loadgen --addr 127.0.0.1:18777 -m m --wait-ready 120 -c 256 -n 256 --max-tokens 32 --no-logprobs --check --time-limit 200 2>&1 | tail -3 | tr '\n' ' ' | tr -s ' ')"
echo "== smol 256 streams --check (logprobs, whole rows): $($B loadgen --addr 127.0.0.1:18777 -m m -c 256 -n 256 --max-tokens 32 --check --time-limit 200 2>&1 | tail -3 | tr '\n' ' ' | tr -s ' ')"
kill $pid; wait $pid 2>/dev/null
el
