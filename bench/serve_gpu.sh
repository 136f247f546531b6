#!/bin/bash
# lockstep serve on the cuda backend: loadgen at 1, 8, 64, 256 concurrent streams (loopback only).
set -u
B=${LOCKSTEP:-./.device/lockstep}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$B synth --like smollm2 --type Q4_1 --metadata-from ${META:-.device/smollm2-meta.gguf} -o /tmp/smol.gguf 2>&1 | tail -1
$B serve -m /tmp/smol.gguf --served-model-name smollm2 --backend cuda --host 127.0.0.1 --port 18777 \
  --max-seqs 256 --cache-tokens 32768 > $OUT/serve.log 2>&1 &
pid=$!
$B loadgen --addr 127.0.0.1:18777 --wait-ready 120 -c 1 -n 16 --max-tokens 32 --slo-ttft-ms 5000 --slo-tpot-ms 500 2>&1 | tee $OUT/c1.txt
$B loadgen --addr 127.0.0.1:18777 -c 8 -n 32 --max-tokens 32 --slo-ttft-ms 5000 --slo-tpot-ms 500 2>&1 | tee $OUT/c8.txt
$B loadgen --addr 127.0.0.1:18777 -c 64 -n 128 --max-tokens 32 --slo-ttft-ms 5000 --slo-tpot-ms 500 2>&1 | tee $OUT/c64.txt
$B loadgen --addr 127.0.0.1:18777 -c 256 -n 256 --max-tokens 32 --slo-ttft-ms 5000 --slo-tpot-ms 500 --check --time-limit 200 2>&1 | tee $OUT/c256.txt
curl -s 127.0.0.1:18777/metrics | grep -E '^lockstep_(requests_total|step|forward|tokens)' | head -20
kill $pid; wait $pid 2>/dev/null
tail -5 $OUT/serve.log
