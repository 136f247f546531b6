#!/bin/bash
# Session 7, second call: the f16 tensor-core prefill (default) against TF32
# (`LOCKSTEP_CUDA_GEMM=tf32`), the decode attention choice (auto: the row kernel) against the
# tiled kernel (`LOCKSTEP_CUDA_ATTN=tile`), correctness of both GEMMs (check --ops has
# 80-row matmul cases; diff --isolate over a 100-token prefill, bounded by the TF32/f16
# rounding bound), then where pp512 and decode time goes (Nsight Compute). Logs in $OUT.
set -u
B=${LOCKSTEP:-./.device/lockstep}
O=${OUT:-/tmp/s7b}; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
( $B synth --like llama-8b --type Q4_K_M -o /tmp/l8b.gguf > /tmp/synth8b.log 2>&1 ) &
for g in f16 tf32; do
  LOCKSTEP_CUDA_GEMM=$g $B check --ops --backend cuda > $O/ops-$g.txt 2>&1
  echo "== check --ops cuda gemm=$g: $(tail -1 $O/ops-$g.txt)"; grep -E " FAIL" $O/ops-$g.txt | head -5
  grep -E "x \[80, (256|1024)\]" $O/ops-$g.txt | head -3
done
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf | tail -1
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/gemma3.gguf | tail -1
$B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf | tail -1
IDS100=$(python3 -c "import random; random.seed(7); print(','.join(str(random.randrange(1000, 40000)) for _ in range(100)))")
for m in /tmp/smol.gguf /tmp/gemma3.gguf /tmp/l1b.gguf; do
  for g in f16 tf32; do
    echo "== $(basename $m) gemm=$g isolate 100 + 8: $(LOCKSTEP_CUDA_GEMM=$g $B diff -m $m --a ref --b cuda --ids $IDS100 --decode 8 --isolate 2>&1 | grep -E '^isolated verdict' | cut -c1-150)"
  done
  echo "== $(basename $m) whole-run diff 100 + 8 (f16): $($B diff -m $m --a ref --b cuda --ids $IDS100 --decode 8 2>&1 | grep -E '^verdict' | cut -c1-150)"
done; el
wait; tail -1 /tmp/synth8b.log; el
for m in /tmp/smol.gguf /tmp/gemma3.gguf /tmp/l1b.gguf /tmp/l8b.gguf; do
  echo "-- $(basename $m) default"; $B bench --backend cuda -m $m -r 3 2>&1 | grep -E "\| (pp|tg)"
  echo "-- $(basename $m) gemm=tf32: $(LOCKSTEP_CUDA_GEMM=tf32 $B bench --backend cuda -m $m -r 3 -n 0 2>&1 | grep -E '\| pp' | tr -s ' ')"
  echo "-- $(basename $m) attn=tile: $(LOCKSTEP_CUDA_ATTN=tile $B bench --backend cuda -m $m -r 3 -p 0 2>&1 | grep -E '\| tg' | tr -s ' ')"
  echo "-- $(basename $m) tg1024 auto: $($B bench --backend cuda -m $m -r 1 -p 0 -n 1024 2>&1 | grep -E '\| tg' | tr -s ' ')"
  echo "-- $(basename $m) tg1024 tile: $(LOCKSTEP_CUDA_ATTN=tile $B bench --backend cuda -m $m -r 1 -p 0 -n 1024 2>&1 | grep -E '\| tg' | tr -s ' ')"
done; el
echo "== l8b isolate 100 + 4 (f16): $($B diff -m /tmp/l8b.gguf --a ref --b cuda --ids $IDS100 --decode 4 --isolate 2>&1 | grep -E '^isolated verdict' | cut -c1-150)"; el
echo "== ncu pp512 l1b"; bash bench/ncu_prefill.sh /tmp/l1b.gguf 2000 2>&1 | tail -16; el
echo "== ncu pp512 l8b"; bash bench/ncu_prefill.sh /tmp/l8b.gguf 400 2>&1 | tail -16; el
echo "== ncu decode gemma3"; bash bench/ncu_decode.sh /tmp/gemma3.gguf 600 3000 2>&1 | tail -18; el
