#!/bin/bash
# Session 14, third call: top-p without top-k (`RowPick::Nucleus`): the row's total weight made
# on the device beside its 64 largest logits, the row copied only when the nucleus reaches past
# them. check --ops (draws and totals bitwise, rows copied exactly when they must be); `run`
# against --full-logits (same token ids); the speed of top-p runs against session 13's build;
# the server under top-p requests against --full-logits (loadgen --check), loopback only.
set -u
B=${LOCKSTEP:-./.device/lockstep}
O=${OUT:-/tmp/s14c}; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf | tail -1
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/gemma3.gguf | tail -1
$B check --ops --backend cuda --filter logits_top > $O/ops.txt 2>&1; echo "== check --ops --filter logits_top: rc $?"; grep -E "pick|FAIL" $O/ops.txt | tail -12
el
P="The quick brown fox jumps over the lazy dog. Once upon a time"
same=0; diff_=0
for m in smol gemma3; do
  for cfg in "--temp 1 --top-k 0 --top-p 0.9 --min-p 0" "--temp 0.7 --top-k 0 --top-p 0.5 --min-p 0.05" "--temp 0.3 --top-k 0 --top-p 0.99 --min-p 0" "--temp 1 --top-k 0 --top-p 1 --min-p 0"; do
    for seed in 1 2; do
      a=$($B run -m /tmp/$m.gguf --backend cuda $cfg --seed $seed -n 48 --ignore-eos --no-monitors -p "$P" 2>/dev/null | md5sum)
      b=$($B run -m /tmp/$m.gguf --backend cuda $cfg --seed $seed -n 48 --ignore-eos --no-monitors --full-logits -p "$P" 2>/dev/null | md5sum)
      if [ "$a" == "$b" ]; then same=$((same+1)); else diff_=$((diff_+1)); echo "DIFFER: $m $cfg seed $seed"; fi
    done
  done
  el
done
echo "== on the device vs on the host: $same same, $diff_ different"
for m in smol gemma3; do
  for bin in $B .device/lockstep-base; do
    for r in 1 2; do
      echo "-- $m $(basename $bin) top-p 0.9 r$r: $($bin run -m /tmp/$m.gguf --backend cuda --temp 1 --top-k 0 --top-p 0.9 --min-p 0 --seed $r -n 256 --ignore-eos --no-monitors --verbose -p "$P" 2>&1 >/dev/null | tr '\n' ' ' | cut -c1-120)"
    done
  done
done
el
for mode in "" "--full-logits"; do
  $B serve -m /tmp/smol.gguf --served-model-name smollm2 --backend cuda --host 127.0.0.1 --port 18777 \
    --max-seqs 64 --cache-tokens 32768 $mode > $O/serve.log 2>&1 &
  pid=$!
  echo "== serve ${mode:-(picks on the device)}, top_p 0.9"
  $B loadgen --addr 127.0.0.1:18777 --wait-ready 120 -c 16 -n 64 --max-tokens 64 --no-logprobs --top-p 0.9 --check 2>&1 | grep -iE "concurrency|throughput|TPOT|differ|error" | head -8; echo "   loadgen rc ${PIPESTATUS[0]}"
  $B loadgen --addr 127.0.0.1:18777 -c 64 -n 128 --max-tokens 64 --no-logprobs --top-p 0.9 --check 2>&1 | grep -iE "concurrency|throughput|TPOT|differ|error" | head -8; echo "   loadgen rc ${PIPESTATUS[0]}"
  curl -s 127.0.0.1:18777/metrics | grep -E '^lockstep_(sampled_rows|nucleus)'
  kill $pid; wait $pid 2>/dev/null
  el
done
