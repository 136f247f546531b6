#!/bin/bash
# Session 42, call 8: the submitted build (plan::norm_fused_block: the norm-fused q/k/v and
# gate/up on blocks of 512 threads where 256 would give more blocks than SMs) checked: check
# --ops, diff --isolate on a cut Gemma-3, check (replayed vs tapped) on Gemma-3 and SmolLM2,
# the greedy tokens on three shapes; then tg128 alternating with the build before it
# (.device/lockstep-s42base: 256-thread blocks), and Gemma-3 beside llama.cpp (built while the
# checks run), twice.
set -u
B=./.device/lockstep
B0=./.device/lockstep-s42base
O=/tmp/s42h; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
LB=/tmp/lc/b/bin/llama-bench
( nice -n 10 bash bench/llama_bench_build.sh $O 400 > $O/lbuild.txt 2>&1 ) &
PB=$!
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/g3.gguf > /dev/null 2>&1
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf --layers 3 -o /tmp/g3c.gguf > /dev/null 2>&1
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf > /dev/null 2>&1
$B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf > /dev/null 2>&1
$B bench --backend cuda -m /tmp/g3c.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 &
W1=$!
LOCKSTEP_CUDA_CACHE=/tmp/cubin0 $B0 bench --backend cuda -m /tmp/g3c.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 &
W2=$!
wait $W1 $W2; el
$B check --ops --backend cuda > $O/ops.txt 2>&1; echo "== ops cuda: rc $? $(tail -1 $O/ops.txt)"
$B diff -m /tmp/g3c.gguf --a ref --b cuda --ids $(seq -s, 7 46) --decode 32 --isolate > $O/iso.txt 2>&1
echo "== diff g3 cut to 3 layers (40 + 32) --isolate: rc $? | $(grep -E '^isolated verdict|^verdict' $O/iso.txt | head -2 | cut -c1-100 | tr '\n' '|')"
$B check -m /tmp/g3.gguf --backend cuda > $O/check-g3.txt 2>&1
echo "== check g3: rc $? | $(grep -E 'replayed' $O/check-g3.txt | tr -s ' ' | cut -c1-110)"
$B check -m /tmp/smol.gguf --backend cuda > $O/check-smol.txt 2>&1
echo "== check smol: rc $? | $(grep -E 'replayed' $O/check-smol.txt | tr -s ' ' | cut -c1-110)"
h() { $B run --backend cuda -m /tmp/$1.gguf -p 'The quick brown fox' -n 48 --temp 0 2>/dev/null | md5sum | cut -c1-12; }
echo "tokens g3 $(h g3) (64901c8f9708), smol $(h smol) (10d82d4b9948), l1b $(h l1b) (4e5bee1ab652)"
el
wait $PB; tail -1 $O/lbuild.txt; el
tg() { timeout 40 env LOCKSTEP_CUDA_CACHE=$2 $1 bench --backend cuda -m /tmp/$M.gguf -p 0 -n 128 -r 3 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f6 | sed 's/ *± */±/; s/ //g'; }
for r in 1 2; do M=g3; echo "g3 tg128 round $r: 512-thread blocks $(tg $B /tmp/cubin) / 256 $(tg $B0 /tmp/cubin0)"; done
M=smol; echo "smol tg128: 512 $(tg $B /tmp/cubin) / 256 $(tg $B0 /tmp/cubin0)"
el
for r in 1 2; do
  echo "== round $r: llama.cpp g3"
  [ -x $LB ] && timeout 120 $LB -m /tmp/g3.gguf -p 512 -n 128 -ngl 99 -r 3 -fa 0,1 -o md 2>&1 | grep -E '^\| [a-z]' | grep -v model
  echo "== round $r: lockstep g3"
  timeout 60 $B bench --backend cuda -m /tmp/g3.gguf -p 512 -n 128 -r 3 2>&1 | grep -E '\| (pp|tg)'
  el
done
mkdir -p $OUT/s42h && cp $O/*.txt $OUT/s42h/ 2>/dev/null
true
