B=./.device/lockstep; export LOCKSTEP_CUDA_CACHE=/tmp/cubin
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf > /dev/null 2>&1
$B bench --backend cuda -m /tmp/smol.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1
for v in 1 0; do
LOCKSTEP_CUDA_PRELAUNCH=$v LOCKSTEP_CUDA_REPLAY_CLOCK=1 $B bench --backend cuda -m /tmp/smol.gguf -p 0 -n 128 -r 1 2>&1 | grep -E "^  " ; echo; done
