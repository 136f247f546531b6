#!/bin/bash
# Session 8, last call: the submitted build on what the earlier calls did not cover: every
# tiny-llama quant type in isolation, with the default attention choice and with the split-key
# kernels forced on (LOCKSTEP_CUDA_ATTN=split), and the 8B shape in isolation on the split path.
set -u
B=${LOCKSTEP:-./.device/lockstep}
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
( $B synth --like llama-8b --type Q4_K_M -o /tmp/l8b.gguf > /tmp/synth8b.log 2>&1 ) &
IDS=1022,829,87,183,242,185,818,888,594,40,96,339,442,634,489,270,163,706,750,33,116,462,399,907
for f in .device/tiny/*.gguf; do
  t=$(basename $f .gguf | sed 's/tiny-llama-//')
  echo "tiny $t: $($B diff -m $f --a ref --b cuda --ids $IDS --decode 8 --isolate 2>&1 | grep -E '^isolated verdict' | cut -c1-70) | split: $(LOCKSTEP_CUDA_ATTN=split $B diff -m $f --a ref --b cuda --ids $IDS --decode 8 --isolate 2>&1 | grep -E '^isolated verdict' | cut -c1-70)"
done; el
wait; tail -1 /tmp/synth8b.log; el
echo "== l8b isolate 13 + 6, split forced: $(LOCKSTEP_CUDA_ATTN=split $B diff -m /tmp/l8b.gguf --a ref --b cuda --ids 1022,829,87,183,242,185,818,888,594,40,96,339,442 --decode 6 --isolate 2>&1 | grep -E '^isolated verdict' | cut -c1-150)"; el
