#!/bin/bash
# Session 49, call 4 (of two back to back: the machine goes back 30 s after a call): llama.cpp's
# llama-bench built on the device from .device/llama.cpp.tar.xz (alone, so the build has the
# cores), then the four anchor shapes synthesized and lockstep's kernels compiled into the
# cache. session49c_gpu.sh runs the side by side on this machine.
set -u
B=./.device/lockstep
O=/tmp/s49b; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
bash bench/llama_bench_build.sh $O 420; el
ls -la /tmp/lc/b/bin/llama-bench
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/g3.gguf > /dev/null 2>&1 &
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf > /dev/null 2>&1 &
$B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf > /dev/null 2>&1 &
$B synth --like llama-8b --type Q4_K_M -o /tmp/l8b.gguf > /dev/null 2>&1 &
$B bench --backend cuda -m /tmp/smol.gguf -p 16 -n 2 -r 1 > /dev/null 2>&1
wait; el
ls -la /tmp/*.gguf
true
