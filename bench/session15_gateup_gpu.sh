#!/bin/bash
# Session 15: the fused gate/up's 32-row quantizing blocks against 8-row blocks and the separate
# quantizer (LOCKSTEP_CUDA_GATE_UP_Q8=0), and the norm not fused at all (NORM_FUSE=0), three
# rounds alternating. Run as one command line on the device (the build of session15e); kept
# here as run.
export LOCKSTEP_CUDA_CACHE=/tmp/cubin; B=.device/lockstep
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/gemma3.gguf | tail -1
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf | tail -1
for i in 1 2 3; do for m in gemma3 smol; do
  echo "$m default: $($B bench --backend cuda -m /tmp/$m.gguf -p 0 -n 128 -r 5 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f6)" \
    "GATE_UP_Q8=0: $(LOCKSTEP_CUDA_GATE_UP_Q8=0 $B bench --backend cuda -m /tmp/$m.gguf -p 0 -n 128 -r 5 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f6)" \
    "NORM_FUSE=0: $(LOCKSTEP_CUDA_NORM_FUSE=0 $B bench --backend cuda -m /tmp/$m.gguf -p 0 -n 128 -r 5 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f6)"
done; done
