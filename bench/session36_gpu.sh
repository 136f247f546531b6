#!/bin/bash
# Session 36: the cluster decode step (kernels.cu decode_layers_cluster, graph_exec::
# cluster_rewrite; LOCKSTEP_CUDA_CLUSTER_STEP=0 keeps the captured kernels). On a synthesized
# SmolLM2-135M Q4_1: which graphs take it, check (replayed steps vs tapped, bitwise), tokens
# both ways, tg128 alternating, a timeline; Gemma-3 and Llama-1B must not take it.
set -u
B=./.device/lockstep
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
LIMIT=${LIMIT:-560}
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
[ -s /tmp/smol.gguf ] || $B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf | tail -1
$B bench --backend cuda -m /tmp/smol.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 &
[ -s /tmp/g3.gguf ] || $B synth --like gemma3 --type Q4_K_M --layers 3 --metadata-from .device/gemma3-meta.gguf -o /tmp/g3.gguf | tail -1
[ -s /tmp/l1b3.gguf ] || $B synth --like llama-1b --type Q4_K_M --layers 3 -o /tmp/l1b3.gguf | tail -1
wait; el
for m in smol g3 l1b3; do
  echo "== $m: $(LOCKSTEP_CUDA_STATS=1 $B bench --backend cuda -m /tmp/$m.gguf -p 0 -n 16 -r 1 2>&1 | grep 'step graphs')"
done
$B check -m /tmp/smol.gguf --backend cuda > /tmp/check_smol.txt 2>&1
echo "== check smol: rc $? | $(grep -E 'replayed|FAIL' /tmp/check_smol.txt | tr -s ' ' | cut -c1-110 | tr '\n' '|')"
el
h() { $B run --backend cuda -m /tmp/$1.gguf "${@:2}" 2>/dev/null | md5sum | cut -c1-12; }
hh() { echo "$(h $1 -p 'The quick brown fox' -n 48 --temp 0) $(h $1 -p 'Once upon a time' -n 48 --top-k 40 --seed 7)"; }
echo "smol cluster: $(hh smol)  CLUSTER_STEP=0: $(LOCKSTEP_CUDA_CLUSTER_STEP=0 hh smol)  (before: 10d82d4b9948 d29998751468)"
el
tg() { # model: tok/s
  left=$(( LIMIT - ($(date +%s) - T0) )); [ $left -lt 12 ] && { echo skipped; return; }
  timeout $left $B bench --backend cuda -m /tmp/$1.gguf -p 0 -n 128 -r 3 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f6 | sed 's/ *±.*//; s/ //g'
}
echo "== tg128 -r 3 smol: CLUSTER_STEP=0 / cluster"
for r in 1 2 3; do
  a=$(LOCKSTEP_CUDA_CLUSTER_STEP=0 tg smol); b=$(tg smol)
  echo "round $r smol  $a / $b"
done
el
if [ -z "${NO_TL:-}" ]; then  # NO_TL=1: no timeline (its kernel build takes a minute and a half)
  LOCKSTEP_CUDA_TIMELINE=/tmp/tl_smol.tsv $B bench --backend cuda -m /tmp/smol.gguf -p 0 -n 128 -r 1 > /tmp/tl_smol.txt 2>&1
  grep -A 8 "cuda timeline, graph 0" /tmp/tl_smol.txt
  el
fi
[ -n "${OUT:-}" ] && cp /tmp/check_smol.txt /tmp/tl_smol.txt $OUT/ 2>/dev/null
true
