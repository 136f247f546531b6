#!/bin/bash
# Session 18, fifth script: the submitted build. loadgen --check under penalties (every
# response against its solo run), then bench pp512 + tg128 on the four anchor shapes.
set -u
B=./.device/lockstep
O=${OUT:-/tmp/s18e}; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf | tail -1
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/gemma3.gguf | tail -1
$B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf | tail -1
( $B synth --like llama-8b --type Q4_K_M -o /tmp/l8b.gguf > /dev/null 2>&1 ) &
port=18950
$B serve -m /tmp/smol.gguf --served-model-name smollm2 --backend cuda --host 127.0.0.1 --port $port \
  --max-seqs 256 --cache-tokens 32768 > $O/serve.log 2>&1 &
pid=$!
echo "-- --check (each distinct request alone first), penalties, top-k 40, logprobs:"
$B loadgen --addr 127.0.0.1:$port --wait-ready 180 -c 64 -n 128 --max-tokens 32 --top-k 40 \
  --frequency-penalty 0.5 --presence-penalty 0.2 --check --time-limit 120 2>&1 | grep -v '^$' | tail -9
curl -s 127.0.0.1:$port/metrics | grep -E '^lockstep_(sampled_rows_total|adjusted_rows_copied)'
kill $pid; wait $pid 2>/dev/null
el
wait
for m in smol gemma3 l1b l8b; do
  echo "-- $m:"; $B bench --backend cuda -m /tmp/$m.gguf -r 5 2>&1 | grep -E '\| (pp|tg)|GPU memory' | tr -s ' '
done
el
