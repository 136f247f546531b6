#!/bin/bash
# Session 9, last call: the server with requests the device reduction serves (top_k 40, no
# logprobs; OpenAI's API sends no top_k, and a sampler without one needs the whole row)
# against --full-logits, SmolLM2 and Gemma-3 shapes, 256 streams checked bitwise; then the
# session's final build timed on the four anchor shapes.
set -u
B=${LOCKSTEP:-./.device/lockstep}
O=${OUT:-/tmp/s9e}; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
( $B synth --like llama-8b --type Q4_K_M -o /tmp/l8b.gguf > /tmp/synth8b.log 2>&1 ) &
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf | tail -1
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/gemma3.gguf | tail -1
$B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf | tail -1
serve_load() { # model, extra serve flags, label
  $B serve -m $1 --served-model-name m --backend cuda --host 127.0.0.1 --port 18777 \
    --max-seqs 256 --cache-tokens 32768 $2 > $O/serve-$3.log 2>&1 &
  pid=$!
  $B loadgen --addr 127.0.0.1:18777 -m m --wait-ready 120 -c 1 -n 16 --max-tokens 32 --no-logprobs --top-k 40 2>&1 | grep -E "output tok/s|TTFT|ITL|failed" | tr -s ' ' | sed "s/^/   $3 c1: /"
  for c in 64 256; do
    $B loadgen --addr 127.0.0.1:18777 -m m -c $c -n $c --max-tokens 32 --no-logprobs --top-k 40 --time-limit 120 2>&1 | grep -E "output tok/s|TTFT|ITL|failed" | tr -s ' ' | sed "s/^/   $3 c$c: /"
  done
  kill $pid; wait $pid 2>/dev/null
}
for m in smol gemma3; do
  for round in 1 2; do
    echo "== $m serve (round $round), top_k 40, no logprobs, rows reduced on the GPU:"; serve_load /tmp/$m.gguf "" $m-top
    echo "== $m serve (round $round), top_k 40, no logprobs, --full-logits:"; serve_load /tmp/$m.gguf "--full-logits" $m-full
  done
  el
done
for m in smol gemma3; do
  $B serve -m /tmp/$m.gguf --served-model-name m --backend cuda --host 127.0.0.1 --port 18777 \
    --max-seqs 256 --cache-tokens 32768 > $O/serve-check-$m.log 2>&1 &
  pid=$!
  echo "== $m 256 streams --check, top_k 40, no logprobs: $($B loadgen --addr 127.0.0.1:18777 -m m --wait-ready 120 -c 256 -n 256 --max-tokens 32 --no-logprobs --top-k 40 --check --time-limit 200 2>&1 | grep -E 'completed|Error|error|wrong' | head -3 | tr '\n' ' ' | tr -s ' ')"
  kill $pid; wait $pid 2>/dev/null
done
el
wait; tail -1 /tmp/synth8b.log
for m in /tmp/smol.gguf /tmp/gemma3.gguf /tmp/l1b.gguf /tmp/l8b.gguf; do
  echo "-- $(basename $m)"; $B bench --backend cuda -m $m -r 3 2>&1 | grep -E "\| (pp|tg)|GPU memory"
done; el
