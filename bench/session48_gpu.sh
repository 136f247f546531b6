#!/bin/bash
# Session 48, call 1: Q8_0 weights on the device in planes (plan::q80_planar, kernels.cu q8p_at)
# against GGUF's 34-byte blocks (LOCKSTEP_CUDA_Q80_PLANAR=0): check --ops (every op, every type),
# the same tokens (Gemma-3, SmolLM2, an all-Q8_0 Llama-1B shape; a long prompt through the
# prefill), check's replayed vs tapped on a cut all-Q8_0 model, then tg128 alternating on
# Gemma-3 and SmolLM2 (whose LM heads are Q8_0) and the all-Q8_0 Llama-1B.
set -u
B=./.device/lockstep
O=/tmp/s48; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
OFF=LOCKSTEP_CUDA_Q80_PLANAR=0
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/g3.gguf > /dev/null 2>&1 &
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf > /dev/null 2>&1 &
$B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf > /dev/null 2>&1 &
$B synth --like llama-1b --type Q8_0 -o /tmp/l1q8.gguf > /dev/null 2>&1 &
$B synth --like llama-1b --type Q8_0 --layers 3 -o /tmp/l1q8c.gguf > /dev/null 2>&1 &
wait; el
for v in X=1 $OFF; do env $v $B bench --backend cuda -m /tmp/smol.gguf -p 16 -n 2 -r 1 > /dev/null 2>&1 & done
$B bench --backend cuda-exact -m /tmp/l1q8c.gguf -p 16 -n 2 -r 1 > /dev/null 2>&1 &
wait; el
$B check --ops --backend cuda > $O/ops.txt 2>&1; echo "== ops: rc $? $(tail -1 $O/ops.txt)"
grep -E "FAIL|ERROR" $O/ops.txt | head -8
$B check --ops --backend cuda-exact > $O/ops_exact.txt 2>&1; echo "== ops exact: rc $? $(tail -1 $O/ops_exact.txt)"
grep -E "FAIL|ERROR" $O/ops_exact.txt | head -8
el
$B check -m /tmp/l1q8c.gguf --backend cuda > $O/check-l1q8c.txt 2>&1; echo "== check l1q8c: rc $? | $(grep -E 'replayed' $O/check-l1q8c.txt | tr -s ' ' | cut -c1-120)"
$B check -m /tmp/g3.gguf --backend cuda > $O/check-g3.txt 2>&1; echo "== check g3: rc $? | $(grep -E 'replayed' $O/check-g3.txt | tr -s ' ' | cut -c1-120)"
$B diff -m /tmp/l1q8c.gguf --a ref --b cuda --ids $(seq -s, 7 46) --decode 32 --isolate > $O/iso-l1q8c.txt 2>&1
echo "== diff l1q8c (40 + 32) --isolate: rc $? | $(grep -E '^isolated verdict|^verdict' $O/iso-l1q8c.txt | head -2 | cut -c1-110 | tr '\n' '|')"
h() { env $1 $B run --backend cuda -m /tmp/$M.gguf -p "$P" -n 48 --temp 0 2>/dev/null | md5sum | cut -c1-12; }
P='The quick brown fox'
M=g3; echo "tokens g3: $(h X=1) off $(h $OFF) (64901c8f9708)"
M=smol; echo "tokens smol: $(h X=1) off $(h $OFF) (10d82d4b9948)"
M=l1b; echo "tokens l1b: $(h X=1) off $(h $OFF) (4e5bee1ab652)"
M=l1q8; echo "tokens l1q8: $(h X=1) off $(h $OFF)"
P=$(seq -s ' ' 1 300)
M=l1q8; echo "tokens l1q8, a 300-number prompt: $(h X=1) off $(h $OFF)"
M=g3; echo "tokens g3, a 300-number prompt: $(h X=1) off $(h $OFF)"
el
tg() { timeout 60 env $1 $B bench --backend cuda -m /tmp/$M.gguf -p 0 -n 128 -r 3 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f6 | sed 's/ *± */±/; s/ //g'; }
for r in 1 2 3; do for M in g3 smol; do echo "$M tg128 round $r: planar $(tg X=1) | gguf $(tg $OFF)"; done; done
M=l1q8; for r in 1 2; do echo "$M tg128 round $r: planar $(tg X=1) | gguf $(tg $OFF)"; done
el
pp() { timeout 60 env $1 $B bench --backend cuda -m /tmp/$M.gguf -p 512 -n 0 -r 3 2>&1 | grep -E '\| pp' | tr -s ' ' | cut -d'|' -f6 | sed 's/ *± */±/; s/ //g'; }
for M in g3 l1q8; do echo "$M pp512: planar $(pp X=1) | gguf $(pp $OFF) | planar $(pp X=1)"; done
el
mkdir -p $OUT/s48 && cp $O/*.txt $OUT/s48/ 2>/dev/null
true
