#!/bin/bash
# Session 32f: the team variant of attention_split (ATT_S_TEAM, from bench/session32/team_variant.patch applied to the submitted source: each key's team of threads runs
# its own online softmax over its keys, no barrier in the key loop, the teams merged once a
# span), with registers for 4 blocks an SM (ATT_S_MINB=4: 128) and without (149: 3 blocks),
# against the submitted kernel. Checks with the variant, then tg128 at depth alternating (-r 2).
set -u
B=./.device/lockstep
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
LIMIT=${LIMIT:-420}
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
TEAM="ATT_S_TEAM ATT_S_MINB=4"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf --layers 4 -o /tmp/smol4.gguf | tail -1
warm() { $B bench --backend cuda -m /tmp/smol4.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1; }
warm & LOCKSTEP_CUDA_DEFINES="$TEAM" warm & LOCKSTEP_CUDA_DEFINES="ATT_S_TEAM" warm &
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf | tail -1
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/gemma3.gguf | tail -1
$B synth --like llama-8b --type Q4_K_M --layers 2 -o /tmp/l8b2.gguf | tail -1
$B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf | tail -1
$B synth --like llama-8b --type Q4_K_M -o /tmp/l8b.gguf | tail -1
wait; el
export LOCKSTEP_CUDA_DEFINES="$TEAM"
$B check --ops --backend cuda --filter 'attention*' > /tmp/ops.txt 2>&1; echo "== [team] check --ops attention: rc $? $(tail -1 /tmp/ops.txt)"
iso() {
  $B diff -m /tmp/$1.gguf --a ref --b cuda --ids $(seq -s, 7 $2) --decode 8 --isolate > /tmp/iso_$1.txt 2>&1
  echo "== [team] diff $1 (ids 7..$2 + 8) --isolate: rc $? | $(grep -E '^isolated verdict|^verdict' /tmp/iso_$1.txt | head -2 | cut -c1-110 | tr '\n' '|')"
}
iso smol4 306; iso l8b2 306
unset LOCKSTEP_CUDA_DEFINES
el
tg() { # defines model depth: tok/s
  left=$(( LIMIT - ($(date +%s) - T0) )); [ $left -lt 12 ] && { echo skipped; return; }
  LOCKSTEP_CUDA_DEFINES="$1" timeout $left $B bench --backend cuda -m /tmp/$2.gguf -p 0 -n 128 -d $3 -r 2 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f6 | sed 's/ *±.*//; s/ //g'
}
echo "== tg128 -r 2: submitted / team (MINB=4) / team (149 registers) / submitted / team (MINB=4)"
for d in 4096 1024; do for m in l8b l1b smol gemma3; do
  echo "$m d$d  $(tg "" $m $d) / $(tg "$TEAM" $m $d) / $(tg ATT_S_TEAM $m $d) / $(tg "" $m $d) / $(tg "$TEAM" $m $d)"
done; done
el
[ -n "${OUT:-}" ] && cp /tmp/ops.txt /tmp/iso_*.txt $OUT/ 2>/dev/null
true
