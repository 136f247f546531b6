#!/bin/bash
# Session 43, call 5: the norm-fused prologue's quantization with a warp's blocks side by side
# again (q8_blocks, now without division branches; LOCKSTEP_Q8_SERIAL keeps the loop). The
# whole session's changes end to end: traces of cut Gemma-3 and SmolLM2 (40 + 16 steps) with
# every session-43 change on and with each taken back by its diagnostic define must be the same
# bytes. Then tg128 A/B, and the four shapes beside llama.cpp (built meanwhile), lockstep with
# and without q8_blocks.
set -u
B=./.device/lockstep
O=/tmp/s43e; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
LB=/tmp/lc/b/bin/llama-bench
( nice -n 10 bash bench/llama_bench_build.sh $O 300 > $O/lbuild.txt 2>&1 ) &
PB=$!
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/g3.gguf > /dev/null 2>&1
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf --layers 3 -o /tmp/g3c.gguf > /dev/null 2>&1
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf > /dev/null 2>&1 &
P1=$!
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf --layers 3 -o /tmp/smolc.gguf > /dev/null 2>&1 &
P2=$!
$B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf > /dev/null 2>&1 &
P3=$!
( $B synth --like llama-8b --type Q4_K_M -o /tmp/l8b.gguf > /dev/null 2>&1 ) &
P8=$!
SER=LOCKSTEP_CUDA_DEFINES=LOCKSTEP_Q8_SERIAL
OLD="LOCKSTEP_CUDA_DEFINES=LOCKSTEP_Q8_SERIAL LOCKSTEP_Q8_IEEE_DIV LOCKSTEP_Q8_NAN_BRANCH LOCKSTEP_NORM_IEEE_DIV LOCKSTEP_NORM_LEAD_SYNC LOCKSTEP_NORM_DIV_LATE"
for v in X=1 $SER "$OLD"; do env "$v" $B bench --backend cuda -m /tmp/g3c.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 & done
wait $P1 $P2 $P3; wait $(jobs -p | grep -v -e "^$PB$" -e "^$P8$") 2>/dev/null; el
tr() { env "$2" $B trace -m /tmp/$1.gguf --backend cuda --ids $(seq -s, 7 46) --decode 16 -o $O/tr_$1_$3.st > /dev/null 2>&1; echo -n "$(md5sum < $O/tr_$1_$3.st | cut -c1-12) "; }
for M in g3c smolc; do echo "trace $M: new $(tr $M X=1 new) serial $(tr $M $SER ser) session-42 code $(tr $M "$OLD" old)"; cmp -s $O/tr_${M}_new.st $O/tr_${M}_old.st && echo "  $M new == session-42 code: same bytes" || echo "  $M DIFFER"; cmp -s $O/tr_${M}_new.st $O/tr_${M}_ser.st && echo "  $M new == serial: same bytes" || echo "  $M DIFFER serial"; done
h() { env "$@" $B run --backend cuda -m /tmp/$M.gguf -p 'The quick brown fox' -n 48 --temp 0 2>/dev/null | md5sum | cut -c1-12; }
M=g3; echo "tokens g3: $(h X=1) (64901c8f9708)"; M=smol; echo "tokens smol: $(h X=1) (10d82d4b9948)"
$B check -m /tmp/g3.gguf --backend cuda > $O/check-g3.txt 2>&1
echo "== check g3: rc $? | $(grep -E 'replayed' $O/check-g3.txt | tr -s ' ' | cut -c1-110)"
$B check --ops --backend cuda > $O/ops.txt 2>&1; echo "== ops cuda: rc $? $(tail -1 $O/ops.txt)"
el
tg() { timeout 40 env "$@" $B bench --backend cuda -m /tmp/$M.gguf -p 0 -n 128 -r 3 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f6 | sed 's/ *± */±/; s/ //g'; }
M=g3; for r in 1 2 3; do echo "g3 tg128 round $r: batched $(tg X=1) / serial $(tg $SER)"; done
M=smol; echo "smol tg128: batched $(tg X=1) / serial $(tg $SER)"
el
wait $PB; tail -1 $O/lbuild.txt; el
for M in g3 g3 smol l1b; do
  echo "== llama.cpp $M"
  [ -x $LB ] && timeout 120 $LB -m /tmp/$M.gguf -p 512 -n 128 -ngl 99 -r 3 -fa 0,1 -o md 2>&1 | grep -E '^\| [a-z]' | grep -v model
  echo "== lockstep $M (batched, then serial)"
  timeout 60 $B bench --backend cuda -m /tmp/$M.gguf -p 512 -n 128 -r 3 2>&1 | grep -E '\| (pp|tg)'
  timeout 60 env $SER $B bench --backend cuda -m /tmp/$M.gguf -p 0 -n 128 -r 3 2>&1 | grep -E '\| tg'
  el
done
wait $P8; ls -la /tmp/l8b.gguf | cut -c20-; el
M=l8b; echo "== llama.cpp $M"
[ -x $LB ] && timeout 120 $LB -m /tmp/$M.gguf -p 512 -n 128 -ngl 99 -r 3 -fa 0,1 -o md 2>&1 | grep -E '^\| [a-z]' | grep -v model
echo "== lockstep $M"
timeout 90 $B bench --backend cuda -m /tmp/$M.gguf -p 512 -n 128 -r 3 2>&1 | grep -E '\| (pp|tg)'
el
mkdir -p $OUT/s43e && cp $O/*.txt $OUT/s43e/ 2>/dev/null
true
