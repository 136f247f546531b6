#!/bin/bash
# Session 16, fifth script: is Gemma-3's bimodal pp512 the GPU's clock? Six processes of
# -r 5 after the GPU idled 20 s, six of -r 30, each process's SM clock sampled every 50 ms.
set -u
B=${LOCKSTEP:-./.device/lockstep}
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/gemma3.gguf | tail -1
pp() {
  nvidia-smi --query-gpu=clocks.sm --format=csv,noheader,nounits -lms 50 > /tmp/clk.txt 2>/dev/null &
  local p=$!
  local r=$($B bench --backend cuda -m /tmp/gemma3.gguf -p 512 -n 0 -r $1 2>&1 | grep -E '\| pp' | tr -s ' ' | cut -d'|' -f6)
  kill $p 2>/dev/null; wait $p 2>/dev/null
  echo "$r | SM MHz samples: $(sort -n /tmp/clk.txt | uniq -c | sort -k2 -n | awk '{printf "%sx%s ", $1, $2}')"
}
for i in 1 2 3; do sleep 20; echo "-- -r 5 after 20 s idle: $(pp 5)"; done
for i in 1 2 3; do echo "-- -r 5 back to back: $(pp 5)"; done
for i in 1 2 3; do echo "-- -r 30: $(pp 30)"; done
