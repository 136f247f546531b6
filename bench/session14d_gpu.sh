#!/bin/bash
# Session 14, fourth call: top-p without top-k as submitted: the row's total and its sorted
# prefix (the bins from the top within 2048 candidates) made on the device, the row copied only
# when the prefix falls short of the nucleus. check --ops (bitwise totals and draws, prefixes
# that are the row's first, rows handed back only for long nuclei); `run` on the device against
# --full-logits (same token ids); the server under top_p requests (loadgen --check).
set -u
B=${LOCKSTEP:-./.device/lockstep}
O=${OUT:-/tmp/s14d}; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf | tail -1
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/gemma3.gguf | tail -1
$B check --ops --backend cuda --filter logits_top > $O/ops.txt 2>&1; echo "== check --ops --filter logits_top: rc $?"; grep -E "pick|FAIL|cases" $O/ops.txt | tail -12
el
P="The quick brown fox jumps over the lazy dog. Once upon a time"
same=0; diff_=0
for m in smol gemma3; do
  for cfg in "--temp 1 --top-k 0 --top-p 0.9 --min-p 0" "--temp 0.7 --top-k 0 --top-p 0.5 --min-p 0.05" "--temp 1 --top-k 0 --top-p 1 --min-p 0"; do
    a=$($B run -m /tmp/$m.gguf --backend cuda $cfg --seed 4 -n 40 --ignore-eos --no-monitors -p "$P" 2>/dev/null | md5sum)
    b=$($B run -m /tmp/$m.gguf --backend cuda $cfg --seed 4 -n 40 --ignore-eos --no-monitors --full-logits -p "$P" 2>/dev/null | md5sum)
    if [ "$a" == "$b" ]; then same=$((same+1)); else diff_=$((diff_+1)); echo "DIFFER: $m $cfg"; fi
  done
  el
done
echo "== on the device vs on the host: $same same, $diff_ different"
$B serve -m /tmp/smol.gguf --served-model-name smollm2 --backend cuda --host 127.0.0.1 --port 18777 \
  --max-seqs 64 --cache-tokens 32768 > $O/serve.log 2>&1 &
pid=$!
$B loadgen --addr 127.0.0.1:18777 --wait-ready 120 -c 16 -n 32 --max-tokens 32 --no-logprobs --top-p 0.9 --check 2>&1 | grep -iE "concurrency|throughput|differ|error" | head -6; echo "   loadgen rc ${PIPESTATUS[0]}"
$B loadgen --addr 127.0.0.1:18777 -c 16 -n 32 --max-tokens 32 --no-logprobs --check 2>&1 | grep -iE "concurrency|throughput|differ|error" | head -6; echo "   loadgen rc ${PIPESTATUS[0]}"
curl -s 127.0.0.1:18777/metrics | grep -E '^lockstep_(sampled_rows|nucleus)'
kill $pid; wait $pid 2>/dev/null
el
