#!/bin/bash
# Session 14, sixth call: logprobs from reduced rows (the row's total made on the device beside
# its largest logits, the drawn token's logit with its draw): check --ops (draws with totals,
# totals alone), `run` on the device against --full-logits, and the server under loadgen's
# default requests (temperature 0.8, no top_k, logprobs 0: a draw and a total a row) and with
# top_k 40, against --full-logits, every reply checked against its solo run.
set -u
B=${LOCKSTEP:-./.device/lockstep}
O=${OUT:-/tmp/s14f}; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name --format=csv,noheader
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf | tail -1
$B check --ops --backend cuda --filter logits_top > $O/ops.txt 2>&1; echo "== check --ops --filter logits_top: $(tail -1 $O/ops.txt)"; grep -E "FAIL" $O/ops.txt | head -5 | cut -c1-200
el
P="The quick brown fox jumps over the lazy dog. Once upon a time"
same=0; diff_=0
for cfg in "--temp 1 --top-k 0 --top-p 1 --min-p 0" "--temp 0.8 --top-k 0 --top-p 0.9 --min-p 0.05"; do
  for seed in 5 6; do
    a=$($B run -m /tmp/smol.gguf --backend cuda $cfg --seed $seed -n 48 --ignore-eos --no-monitors -p "$P" 2>/dev/null | md5sum)
    b=$($B run -m /tmp/smol.gguf --backend cuda $cfg --seed $seed -n 48 --ignore-eos --no-monitors --full-logits -p "$P" 2>/dev/null | md5sum)
    if [ "$a" == "$b" ]; then same=$((same+1)); else diff_=$((diff_+1)); echo "DIFFER: $cfg seed $seed"; fi
  done
done
echo "== run on the device vs on the host: $same same, $diff_ different"
for mode in "" "--full-logits"; do
  $B serve -m /tmp/smol.gguf --served-model-name smollm2 --backend cuda --host 127.0.0.1 --port 18777 \
    --max-seqs 64 --cache-tokens 32768 $mode > $O/serve.log 2>&1 &
  pid=$!
  echo "== serve ${mode:-(reduced rows)}, logprobs 0"
  $B loadgen --addr 127.0.0.1:18777 --wait-ready 120 -c 16 -n 64 --max-tokens 64 --check 2>&1 | grep -iE "concurrency|throughput|TPOT|differ|error" | head -6; echo "   loadgen rc ${PIPESTATUS[0]}"
  $B loadgen --addr 127.0.0.1:18777 -c 64 -n 128 --max-tokens 64 --check 2>&1 | grep -iE "concurrency|throughput|TPOT|differ|error" | head -6; echo "   loadgen rc ${PIPESTATUS[0]}"
  echo "== top_k 40, logprobs 0"
  $B loadgen --addr 127.0.0.1:18777 -c 64 -n 128 --max-tokens 64 --top-k 40 --check 2>&1 | grep -iE "concurrency|throughput|TPOT|differ|error" | head -6; echo "   loadgen rc ${PIPESTATUS[0]}"
  curl -s 127.0.0.1:18777/metrics | grep -E '^lockstep_(sampled_rows|nucleus)'
  kill $pid; wait $pid 2>/dev/null
  el
done
