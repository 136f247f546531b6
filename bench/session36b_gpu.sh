#!/bin/bash
# Session 36b: the cluster decode step beside llama.cpp in one call. Builds llama.cpp's
# llama-bench for the card (bench/session25_gpu.sh's recipe, from .device/llama.cpp.tar.xz), then
# on a synthesized SmolLM2-135M Q4_1: llama-bench -p 0 -n 128 -r 3 -fa 0,1; lockstep tg128 -r 3
# with and without the cluster step, alternating; check; tokens; the timeline with the cluster
# kernel's marks. ROUNDS: lockstep's rounds (2; session 37 ran 3).
set -u
B=./.device/lockstep
O=${OUT:-/tmp/out}; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
LIMIT=${LIMIT:-580}
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
( $B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf > /dev/null 2>&1
  nice -n 5 $B bench --backend cuda -m /tmp/smol.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 ) &
LB=/tmp/lc/b/bin/llama-bench
bash bench/llama_bench_build.sh $O 300; wait; el
[ -x $LB ] && $LB --version 2>&1 | tail -1
echo "== llama.cpp"
[ -x $LB ] && $LB -m /tmp/smol.gguf -p 0 -n 128 -ngl 99 -r 3 -fa 0,1 -o md 2>&1 | grep -E '^\| [a-z]' | grep -v model
el
tg() { left=$(( LIMIT - ($(date +%s) - T0) )); [ $left -lt 12 ] && { echo skipped; return; }
  timeout $left $B bench --backend cuda -m /tmp/smol.gguf -p 0 -n 128 -r 3 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f6; }
echo "== lockstep tg128 -r 3: CLUSTER_STEP=0 / cluster"
for r in $(seq ${ROUNDS:-2}); do echo "round $r  $(LOCKSTEP_CUDA_CLUSTER_STEP=0 tg) / $(tg)"; done
el
$B check -m /tmp/smol.gguf --backend cuda > $O/check_smol.txt 2>&1
echo "== check smol: rc $? | $(grep -E 'replayed|FAIL' $O/check_smol.txt | tr -s ' ' | cut -c1-100 | tr '\n' '|')"
LOCKSTEP_CUDA_CLUSTER_STEP=0 $B check -m /tmp/smol.gguf --backend cuda > $O/check_smol_off.txt 2>&1
echo "== check smol, CLUSTER_STEP=0: rc $? | $(grep -E 'replayed|FAIL' $O/check_smol_off.txt | tr -s ' ' | cut -c1-100 | tr '\n' '|')"
h() { $B run --backend cuda -m /tmp/smol.gguf "$@" 2>/dev/null | md5sum | cut -c1-12; }
echo "smol tokens: greedy $(h -p 'The quick brown fox' -n 48 --temp 0) top-k $(h -p 'Once upon a time' -n 48 --top-k 40 --seed 7) (before: 10d82d4b9948 d29998751468)"
el
LOCKSTEP_CUDA_TIMELINE=$O/tl_smol.tsv $B bench --backend cuda -m /tmp/smol.gguf -p 0 -n 128 -r 1 > $O/tl_smol.txt 2>&1
grep -A 4 "cuda timeline, graph 0" $O/tl_smol.txt
el
true
