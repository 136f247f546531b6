#!/bin/bash
# Session 9, first call: programmatic dependent launch in the step graphs (graph_exec.rs,
# GRID_ENTER in every kernel). Checked first (replayed steps against tapped ones, generations
# with and without programmatic edges and without graphs, bitwise), then timed side by side
# against LOCKSTEP_CUDA_PDL=0 on the four anchor shapes. Logs in $OUT.
set -u
B=${LOCKSTEP:-./.device/lockstep}
O=${OUT:-/tmp/s9}; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
( $B synth --like llama-8b --type Q4_K_M -o /tmp/l8b.gguf > /tmp/synth8b.log 2>&1 ) &
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf | tail -1
$B synth --like smollm2 --type Q4_1 --layers 4 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol4.gguf | tail -1
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/gemma3.gguf | tail -1
$B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf | tail -1
el
echo "== check smol4 cuda:"; LOCKSTEP_CUDA_STATS=1 $B check -m /tmp/smol4.gguf --backend cuda 2>&1 | grep -E "^  (ok|FAIL)|result|graphs" | tail -9
echo "== check gemma3 cuda:"; LOCKSTEP_CUDA_STATS=1 $B check -m /tmp/gemma3.gguf --backend cuda 2>&1 | grep -E "^  (ok|FAIL)|result|graphs"
echo "== check --deterministic gemma3: $($B check --deterministic -m /tmp/gemma3.gguf --backend cuda 2>&1 | tail -1)"
el
P="The capital of France is Paris. The capital of Germany is"
for m in /tmp/smol.gguf /tmp/gemma3.gguf /tmp/l1b.gguf; do
  for t in 0 0.8; do
    LOCKSTEP_CUDA_STATS=1 $B run -m $m --backend cuda -p "$P" -n 300 --ignore-eos --temp $t > $O/run-pdl.txt 2> $O/run-pdl.err
    LOCKSTEP_CUDA_PDL=0 $B run -m $m --backend cuda -p "$P" -n 300 --ignore-eos --temp $t > $O/run-nopdl.txt 2>/dev/null
    LOCKSTEP_CUDA_GRAPHS=0 $B run -m $m --backend cuda -p "$P" -n 300 --ignore-eos --temp $t > $O/run-eager.txt 2>/dev/null
    echo "== $(basename $m) temp $t, 300 tokens: pdl vs no pdl: $(cmp -s $O/run-pdl.txt $O/run-nopdl.txt && echo same || echo DIFFER), pdl vs eager: $(cmp -s $O/run-pdl.txt $O/run-eager.txt && echo same || echo DIFFER) ($(wc -c < $O/run-pdl.txt) bytes; $(grep graphs $O/run-pdl.err))"
  done
done; el
wait; tail -1 /tmp/synth8b.log
for m in /tmp/smol.gguf /tmp/gemma3.gguf /tmp/l1b.gguf /tmp/l8b.gguf; do
  for e in LOCKSTEP_CUDA_PDL=1 LOCKSTEP_CUDA_PDL=0 LOCKSTEP_CUDA_PDL=1 LOCKSTEP_CUDA_PDL=0; do
    echo "-- $(basename $m) $e: $(env $e $B bench --backend cuda -m $m -p 0 -n 128 -r 5 2>&1 | grep -E '\| tg' | tr -s ' ')"
  done
done; el
for m in /tmp/smol.gguf /tmp/gemma3.gguf /tmp/l1b.gguf /tmp/l8b.gguf; do
  echo "-- $(basename $m)"; $B bench --backend cuda -m $m -r 3 2>&1 | grep -E "\| (pp|tg)|GPU memory"
done; el
