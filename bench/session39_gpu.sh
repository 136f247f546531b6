#!/bin/bash
# Session 39 (call 1): facts before changes. The L2 lab (bench/gemv_lab/l2_head.cu: can the LM
# head stay in L2 between steps), then the step timeline and the replay clock of synthesized
# Gemma-3-270M Q4_K_M and Llama-3.2-1B Q4_K_M (this build), where their steps' time goes.
set -u
B=./.device/lockstep
O=${OUT:-/tmp/out}; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
( $B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/g3.gguf > /dev/null 2>&1
  $B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf > /dev/null 2>&1
  for m in g3 l1b; do nice -n 5 $B bench --backend cuda -m /tmp/$m.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1; done ) &
timeout 200 .device/l2_head > $O/l2_head.txt 2>&1; echo "lab rc $?"; cat $O/l2_head.txt
wait; el
for m in g3 l1b; do
  LOCKSTEP_CUDA_TIMELINE=$O/tl_$m.txt $B bench --backend cuda -m /tmp/$m.gguf -p 0 -n 128 -r 1 > $O/tlrun_$m.txt 2>&1
  echo "== timeline $m (rc $?)"; grep -A40 "cuda timeline" $O/tlrun_$m.txt $O/tl_$m.txt 2>/dev/null | head -45
  LOCKSTEP_CUDA_REPLAY_CLOCK=1 $B bench --backend cuda -m /tmp/$m.gguf -p 0 -n 128 -r 1 > $O/clk_$m.txt 2>&1
  echo "== clock $m: $(grep -E '^  (between|restage|upload|launch|wait|ahead|finish|step|graph|copy) ' $O/clk_$m.txt | awk '{printf "%s %s  ", $1, $2}')"
  el
done
true
