#!/bin/bash
# Session 27e: the submitted build (Q6_K in planes) in the deterministic build the server runs
# (cuda-det: check's invariances and diff --isolate on cut Llama-1B, whose v, down and tied
# embedding/head are Q6_K), and the 8B's step timeline with the Q6_K planes (for the next
# session: where the 8B's step goes now).
set -u
B=./.device/lockstep
O=${OUT:-/tmp/s27e}; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$B synth --like llama-1b --type Q4_K_M --layers 3 -o /tmp/l1b3.gguf | tail -1
( $B synth --like llama-8b --type Q4_K_M -o /tmp/l8b.gguf > /dev/null 2>&1 ) &
LOCKSTEP_CUDA_TIMELINE=/tmp/x.tsv $B bench --backend cuda -m /tmp/l1b3.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 &
$B --deterministic check -m /tmp/l1b3.gguf --backend cuda --tolerance 1e-2 > $O/check-det-l1b3.txt 2>&1; echo "== check l1b3 --backend cuda-det: rc $? $(grep -E 'result' $O/check-det-l1b3.txt | tr -s ' ')"
$B --deterministic diff -m /tmp/l1b3.gguf --a ref --b cuda --ids $(seq -s, 7 86) --decode 16 --isolate > $O/iso-det-l1b3.txt 2>&1
echo "== diff l1b3 cuda-det (80 + 16) --isolate: rc $? | $(grep -E '^isolated verdict|^verdict' $O/iso-det-l1b3.txt | head -2 | cut -c1-110 | tr '\n' '|')"
$B diff -m /tmp/l1b3.gguf --a ref --b cuda --ids $(seq -s, 7 106) --decode 4 --isolate > $O/iso-l1b3-100.txt 2>&1
echo "== diff l1b3 cuda (100 + 4: the tensor-core prefill) --isolate: rc $? | $(grep -E '^isolated verdict|^verdict' $O/iso-l1b3-100.txt | head -2 | cut -c1-110 | tr '\n' '|')"
wait; el
LOCKSTEP_CUDA_TIMELINE=$O/tl_l8b.tsv $B bench --backend cuda -m /tmp/l8b.gguf -p 0 -n 128 -r 2 > $O/tl_l8b.txt 2>&1
echo "== timeline l8b: $(grep -E '\| tg' $O/tl_l8b.txt | tr -s ' ' | cut -d'|' -f6)"
grep -A12 "graph 0" $O/tl_l8b.txt
el
