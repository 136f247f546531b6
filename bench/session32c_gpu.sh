#!/bin/bash
# Session 32c: the submitted build (split-key spans of whole chunks in one wave, at most 256;
# the combine's sums loaded with the maxima). Checks (attention ops; diff --isolate past the
# split threshold on cut SmolLM2, Gemma-3 and the 8B), then beside llama.cpp at depth in one
# call: llama-bench -p 0 -n 128 -d 1024,4096 -fa 1 -r 3 and lockstep bench -p 0 -n 128 -d D -r 3;
# the combine without its early loads (ATT_C_PRE=0) and the f16 cache at depth 4096; timelines.
set -u
B=./.device/lockstep
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
LIMIT=${LIMIT:-560}
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
LB=/tmp/llama-bench
cat .device/llama-bench.xz.part* | xz -d > $LB && chmod +x $LB
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf --layers 4 -o /tmp/smol4.gguf | tail -1
warm() { $B bench --backend cuda -m /tmp/smol4.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1; }
warm & LOCKSTEP_CUDA_DEFINES="ATT_C_PRE=0" warm & LOCKSTEP_CUDA_KV=f16 warm &
LOCKSTEP_CUDA_TIMELINE=/tmp/y.tsv warm &
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf | tail -1
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf --layers 3 -o /tmp/g3.gguf | tail -1
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/gemma3.gguf | tail -1
$B synth --like llama-8b --type Q4_K_M --layers 2 -o /tmp/l8b2.gguf | tail -1
$B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf | tail -1
( $B synth --like llama-8b --type Q4_K_M -o /tmp/l8b.gguf | tail -1 ) &
wait; el
echo "== llama.cpp"
for m in smol gemma3 l1b; do $LB -m /tmp/$m.gguf -p 0 -n 128 -d 1024,4096 -ngl 99 -r 3 -fa 1 -o md 2>&1 | grep -E '^\| [a-z]' | grep -v model; done
$LB -m /tmp/l8b.gguf -p 0 -n 128 -d 1024,4096 -ngl 99 -r 3 -fa 1 -o md 2>&1 | grep -E '^\| [a-z]' | grep -v model
el
$B check --ops --backend cuda --filter 'attention*' > /tmp/ops.txt 2>&1; echo "== check --ops attention: rc $? $(tail -1 /tmp/ops.txt)"
iso() {
  $B diff -m /tmp/$1.gguf --a ref --b cuda --ids $(seq -s, 7 $2) --decode 8 --isolate > /tmp/iso_$1.txt 2>&1
  echo "== diff $1 (ids 7..$2 + 8) --isolate: rc $? | $(grep -E '^isolated verdict|^verdict' /tmp/iso_$1.txt | head -2 | cut -c1-110 | tr '\n' '|')"
}
iso smol4 306; iso g3 706; iso l8b2 306
el
tg() { # model depth: tok/s ± sd
  left=$(( LIMIT - ($(date +%s) - T0) )); [ $left -lt 12 ] && { echo skipped; return; }
  timeout $left $B bench --backend cuda -m /tmp/$1.gguf -p 0 -n 128 -d $2 -r 3 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f6
}
echo "== lockstep, -r 3"
for m in smol gemma3 l1b l8b; do for d in 0 1024 4096; do echo "-- $m d$d $(tg $m $d)"; done; done
el
echo "== d4096: ATT_C_PRE=0 / KV=f16"
for m in smol gemma3 l1b l8b; do echo "-- $m $(LOCKSTEP_CUDA_DEFINES="ATT_C_PRE=0" tg $m 4096) / $(LOCKSTEP_CUDA_KV=f16 tg $m 4096)"; done
el
for m in smol l8b; do
  LOCKSTEP_CUDA_TIMELINE=/tmp/tl_${m}_d4096.tsv timeout 60 $B bench --backend cuda -m /tmp/$m.gguf -p 0 -n 128 -d 4096 -r 1 > /tmp/tl_${m}_d4096.txt 2>&1
  grep -E "attention_split|attention_combine|span" /tmp/tl_${m}_d4096.txt | head -4
done
el
[ -n "${OUT:-}" ] && cp /tmp/ops.txt /tmp/iso_*.txt /tmp/tl_*_d4096.* $OUT/ 2>/dev/null
true
