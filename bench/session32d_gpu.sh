#!/bin/bash
# Session 32d: attention_split with its K and V chunks staged in shared memory by cp.async, the
# next chunk's copies in flight while this one is summed (two stages), against 32c's build
# (.device/lockstep_s32a: the chunk loaded to registers, one round trip a chunk). Checks, tg128 at
# depth alternating (-r 2), the f16 cache, a timeline of the 8B at depth 4096.
set -u
B=./.device/lockstep
A=./.device/lockstep_s32a
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
LIMIT=${LIMIT:-540}
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf --layers 4 -o /tmp/smol4.gguf | tail -1
warm() { $1 bench --backend cuda -m /tmp/smol4.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1; }
warm $B & warm $A & LOCKSTEP_CUDA_KV=f16 warm $B & LOCKSTEP_CUDA_KV=f16 warm $A &
LOCKSTEP_CUDA_TIMELINE=/tmp/y.tsv warm $B &
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf | tail -1
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf --layers 3 -o /tmp/g3.gguf | tail -1
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/gemma3.gguf | tail -1
$B synth --like llama-8b --type Q4_K_M --layers 2 -o /tmp/l8b2.gguf | tail -1
$B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf | tail -1
$B synth --like llama-8b --type Q4_K_M -o /tmp/l8b.gguf | tail -1
wait; el
$B check --ops --backend cuda --filter 'attention*' > /tmp/ops.txt 2>&1; echo "== check --ops attention: rc $? $(tail -1 /tmp/ops.txt)"
LOCKSTEP_CUDA_KV=f16 $B check --ops --backend cuda --filter 'attention*' > /tmp/ops16.txt 2>&1; echo "== check --ops attention, KV=f16: rc $? $(tail -1 /tmp/ops16.txt)"
iso() {
  $B diff -m /tmp/$1.gguf --a ref --b cuda --ids $(seq -s, 7 $2) --decode 8 --isolate > /tmp/iso_$1.txt 2>&1
  echo "== diff $1 (ids 7..$2 + 8) --isolate: rc $? | $(grep -E '^isolated verdict|^verdict' /tmp/iso_$1.txt | head -2 | cut -c1-110 | tr '\n' '|')"
}
iso smol4 306; iso g3 706; iso l8b2 306
el
tg() { # binary model depth: tok/s
  left=$(( LIMIT - ($(date +%s) - T0) )); [ $left -lt 12 ] && { echo skipped; return; }
  timeout $left $1 bench --backend cuda -m /tmp/$2.gguf -p 0 -n 128 -d $3 -r 2 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f6 | sed 's/ *±.*//; s/ //g'
}
echo "== tg128 -r 2: staged (new) / 32c / staged again / 32c again"
for d in 4096 1024; do for m in smol gemma3 l1b l8b; do
  echo "$m d$d  $(tg $B $m $d) / $(tg $A $m $d) / $(tg $B $m $d) / $(tg $A $m $d)"
done; done
el
echo "== KV=f16, d4096: staged / 32c"
for m in smol gemma3 l1b l8b; do echo "$m $(LOCKSTEP_CUDA_KV=f16 tg $B $m 4096) / $(LOCKSTEP_CUDA_KV=f16 tg $A $m 4096)"; done
el
LOCKSTEP_CUDA_TIMELINE=/tmp/tl_l8b_d4096.tsv timeout 60 $B bench --backend cuda -m /tmp/l8b.gguf -p 0 -n 128 -d 4096 -r 1 > /tmp/tl_l8b_d4096.txt 2>&1
grep -E "attention_split|attention_combine" /tmp/tl_l8b_d4096.txt | head -2
el
[ -n "${OUT:-}" ] && cp /tmp/ops*.txt /tmp/iso_*.txt /tmp/tl_*_d4096.* $OUT/ 2>/dev/null
true
