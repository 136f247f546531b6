#!/bin/bash
# Session 33b: the last-block quantizing gate/up letting the down projection launch after its
# rows (LQ8_LAUNCH), against the separate quantizer (LOCKSTEP_CUDA_GATE_UP_LQ8=0) and against a
# launch at entry (LOCKSTEP_LQ8_LAUNCH_AT_ENTRY, session 33's first build). Tokens, then tg128.
set -u
B=./.device/lockstep
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
LIMIT=${LIMIT:-560}
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
[ -s /tmp/smol4.gguf ] || $B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf --layers 4 -o /tmp/smol4.gguf | tail -1
warm() { $B bench --backend cuda -m /tmp/smol4.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1; }
warm & LOCKSTEP_CUDA_DEFINES="LOCKSTEP_LQ8_LAUNCH_AT_ENTRY" warm &
[ -s /tmp/smol.gguf ] || $B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf | tail -1
[ -s /tmp/gemma3.gguf ] || $B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/gemma3.gguf | tail -1
[ -s /tmp/l1b.gguf ] || $B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf | tail -1
[ -s /tmp/l8b.gguf ] || $B synth --like llama-8b --type Q4_K_M -o /tmp/l8b.gguf | tail -1
wait; el
h() { $B run --backend cuda -m /tmp/$1.gguf "${@:2}" 2>/dev/null | md5sum | cut -c1-12; }
for m in smol gemma3 l1b l8b; do
  echo "$m on: $(h $m -p 'The quick brown fox' -n 48 --temp 0) $(h $m -p 'Once upon a time' -n 48 --top-k 40 --seed 7)"
done
echo "(33: smol 10d82d4b9948 d29998751468, gemma3 64901c8f9708 6ed04893ed86, l1b 4e5bee1ab652 e3fb11944b54, l8b 4aa7e0e30dda 71249884f2ee)"
el
tg() { # model: tok/s
  left=$(( LIMIT - ($(date +%s) - T0) )); [ $left -lt 12 ] && { echo skipped; return; }
  timeout $left $B bench --backend cuda -m /tmp/$1.gguf -p 0 -n 128 -r 3 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f6 | sed 's/ *±.*//; s/ //g'
}
echo "== tg128 -r 3: off / on (late launch) / on (launch at entry)"
for r in 1 2; do for m in smol gemma3 l1b l8b; do
  a=$(LOCKSTEP_CUDA_GATE_UP_LQ8=0 tg $m); b=$(tg $m); c=$(LOCKSTEP_CUDA_DEFINES="LOCKSTEP_LQ8_LAUNCH_AT_ENTRY" tg $m)
  echo "round $r $m  $a / $b / $c"
done; done
el
true
