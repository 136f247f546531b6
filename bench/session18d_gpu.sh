#!/bin/bash
# Session 18, fourth script: penalties and logit bias from the row's largest logits and a few
# gathered ones (Sampler::top_needed_adjusted, logits_gather). check --ops (the logits_top
# cases now gather), the same tokens as the session's start with penalties (which copied the
# whole row), and the server under penalties: the session's start against this build.
set -u
B=./.device/lockstep
A=./.device/lockstep-base
O=${OUT:-/tmp/s18d}; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf | tail -1
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/gemma3.gguf | tail -1
$B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf | tail -1
LOCKSTEP_CUDA_CACHE=/tmp/cubin-a $A bench --backend cuda -m /tmp/smol.gguf -p 0 -n 8 -r 1 > /dev/null 2>&1 &
LOCKSTEP_CUDA_CACHE=/tmp/cubin-b $B check --ops --backend cuda > $O/ops.txt 2>&1; echo "== check --ops --backend cuda: rc $? $(tail -1 $O/ops.txt)"
wait
grep -E 'FAIL' $O/ops.txt | head -8
echo "logits_top cases: $(grep -c '^  logits_top.* ok$' $O/ops.txt) ok, $(grep -c '^  logits_top.*FAIL' $O/ops.txt) FAIL"
el
P="The quick brown fox jumps over the lazy dog. Once upon a time"
same=0; diff_=0
for m in gemma3 smol l1b; do
  for cfg in "--temp 0 --repeat-penalty 1.3 --repeat-last-n 16" "--temp 0.8 --top-k 40 --frequency-penalty 0.6 --presence-penalty 0.3 --repeat-last-n 20" "--temp 0" "--temp 0.8 --top-k 40"; do
    a=$(LOCKSTEP_CUDA_CACHE=/tmp/cubin-b $B run -m /tmp/$m.gguf --backend cuda $cfg --seed 4 -n 100 --ignore-eos --no-monitors -p "$P" 2>/dev/null | md5sum)
    c=$(LOCKSTEP_CUDA_CACHE=/tmp/cubin-a $A run -m /tmp/$m.gguf --backend cuda $cfg --seed 4 -n 100 --ignore-eos --no-monitors -p "$P" 2>/dev/null | md5sum)
    if [ "$a" == "$c" ]; then same=$((same+1)); else diff_=$((diff_+1)); echo "DIFFER: $m $cfg ($a / $c)"; fi
  done
done
echo "== this build vs the session's start (run -n 100, penalties and none): $same same, $diff_ different"
el
serve() {  # binary cache port
  LOCKSTEP_CUDA_CACHE=$2 $1 serve -m /tmp/smol.gguf --served-model-name smollm2 --backend cuda --host 127.0.0.1 --port $3 \
    --max-seqs 256 --cache-tokens 32768 > $O/serve-$3.log 2>&1 &
  echo $!
}
for who in A B A B; do
  bin=$A; cache=/tmp/cubin-a; [ $who == B ] && { bin=$B; cache=/tmp/cubin-b; }
  port=$((18800 + RANDOM % 100))
  pid=$(serve $bin $cache $port)
  echo "-- $who ($bin) penalties, top-k 40, no logprobs:"
  $B loadgen --addr 127.0.0.1:$port --wait-ready 120 -c 64 -n 256 --max-tokens 64 --no-logprobs --top-k 40 \
    --frequency-penalty 0.5 --presence-penalty 0.2 --slo-ttft-ms 5000 --slo-tpot-ms 500 2>&1 | grep -v '^$' | tail -6
  curl -s 127.0.0.1:$port/metrics | grep -E '^lockstep_(sampled_rows_total|adjusted_rows_copied|steps_total|forward_seconds|step_seconds)'
  kill $pid; wait $pid 2>/dev/null
done
el
port=18950
pid=$(serve $B /tmp/cubin-b $port)
echo "-- B --check (each distinct request alone first), penalties, top-k 40:"
$B loadgen --addr 127.0.0.1:$port --wait-ready 120 -c 32 -n 64 --max-tokens 32 --no-logprobs --top-k 40 \
  --frequency-penalty 0.5 --presence-penalty 0.2 --check --time-limit 120 2>&1 | grep -v '^$' | tail -4
kill $pid; wait $pid 2>/dev/null
el
