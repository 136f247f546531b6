#!/bin/bash
# Session 14, the real SmolLM2-135M-Instruct Q4_1 on the GPU (carried in two halves over two
# back-to-back calls: .device-real-a/part1 with the binary, then .device-real-b/part2 here):
# sampling without top-k on real rows. `run` with picks on the device against --full-logits
# (same tokens); speed of top-p and temperature-only generation both ways; the server under
# top_p 0.9 requests (loadgen --check), with how many rows the nucleus prefix did not hold.
set -u
B=${LOCKSTEP:-./.device/lockstep}
O=${OUT:-/tmp/s14g}; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name --format=csv,noheader
M=/tmp/smollm2-real.gguf
cat .device-real-a/part1 .device-real-b/part2 > $M
echo "sha256 $(sha256sum $M | cut -c1-64)"
P="Write a short story about a lighthouse keeper who finds a message in a bottle."
same=0; diff_=0
for cfg in "--temp 1 --top-k 0 --top-p 1 --min-p 0" "--temp 0.8 --top-k 0 --top-p 0.9 --min-p 0" "--temp 1 --top-k 0 --top-p 0.95 --min-p 0.05"; do
  for seed in 1 2; do
    a=$($B run -m $M --backend cuda --chat $cfg --seed $seed -n 96 --ignore-eos --no-monitors -p "$P" 2>/dev/null | md5sum)
    b=$($B run -m $M --backend cuda --chat $cfg --seed $seed -n 96 --ignore-eos --no-monitors --full-logits -p "$P" 2>/dev/null | md5sum)
    if [ "$a" == "$b" ]; then same=$((same+1)); else diff_=$((diff_+1)); echo "DIFFER: $cfg seed $seed"; fi
  done
done
echo "== real SmolLM2, on the device vs on the host: $same same, $diff_ different"
$B run -m $M --backend cuda --chat --temp 0.8 --top-k 0 --top-p 0.9 --min-p 0 --seed 1 -n 60 -p "$P" 2>/dev/null | tail -c 400; echo
el
for cfg in "--temp 0.8 --top-k 0 --top-p 0.9 --min-p 0" "--temp 1 --top-k 0 --top-p 1 --min-p 0"; do
  for mode in "" "--full-logits"; do
    for r in 1 2; do
      echo "-- $cfg ${mode:-device} r$r: $($B run -m $M --backend cuda --chat $cfg --seed $r -n 256 --ignore-eos --no-monitors --verbose $mode -p "$P" 2>&1 >/dev/null | tr '\n' ' ' | cut -c1-110)"
    done
  done
done
el
for mode in "" "--full-logits"; do
  $B serve -m $M --served-model-name smollm2 --backend cuda --host 127.0.0.1 --port 18777 \
    --max-seqs 64 --cache-tokens 32768 $mode > $O/serve.log 2>&1 &
  pid=$!
  echo "== serve ${mode:-(picks on the device)}, top_p 0.9, real SmolLM2"
  $B loadgen --addr 127.0.0.1:18777 --wait-ready 120 -c 64 -n 128 --max-tokens 64 --no-logprobs --top-p 0.9 --check 2>&1 | grep -iE "concurrency|throughput|TPOT|differ|error" | head -6; echo "   loadgen rc ${PIPESTATUS[0]}"
  curl -s 127.0.0.1:18777/metrics | grep -E '^lockstep_(sampled_rows|nucleus)'
  kill $pid; wait $pid 2>/dev/null
  el
done
