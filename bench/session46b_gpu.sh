#!/bin/bash
# Session 46, call 2: the one-row mat-vecs' grid wait pinned after their first weight loads
# (kernels.cu GRID_WAIT_AFTER; ptxas had issued the wait first, so the "early" loads went out
# after the release) against LOCKSTEP_CUDA_WAIT_PINNED=0 (the build before): traces of cut
# Gemma-3 and SmolLM2 (same bytes), tokens, tg128 alternating on the four shapes, the device's
# cubins (for their SASS), the new timeline of Gemma-3's layers. (Call 3: the same with the
# trace helper renamed, as it had shadowed tr(1), and the two traces compared by lockstep diff.)
set -u
B=./.device/lockstep
O=/tmp/s46b; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/g3.gguf > /dev/null 2>&1
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf --layers 3 -o /tmp/g3c.gguf > /dev/null 2>&1
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf > /dev/null 2>&1 &
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf --layers 3 -o /tmp/smolc.gguf > /dev/null 2>&1 &
$B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf > /dev/null 2>&1 &
( $B synth --like llama-8b --type Q4_K_M -o /tmp/l8b.gguf > /dev/null 2>&1 ) &
P8=$!
OLD=LOCKSTEP_CUDA_WAIT_PINNED=0
for v in X=1 $OLD LOCKSTEP_CUDA_TIMELINE=/tmp/x; do env "$v" $B bench --backend cuda -m /tmp/g3c.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 & done
wait $(jobs -p | grep -v -e "^$P8$") 2>/dev/null; el
mkdir -p $OUT/s46b/cubin && cp /tmp/cubin/* $OUT/s46b/cubin/ 2>/dev/null; ls -la /tmp/cubin | tail -4
trc() { env "$2" $B trace -m /tmp/$1.gguf --backend cuda --ids $(seq -s, 7 46) --decode 16 -o $O/tr_$1_$3.st > /dev/null 2>&1; echo -n "$(md5sum < $O/tr_$1_$3.st | cut -c1-12) "; }
for M in g3c smolc; do echo "trace $M: pinned $(trc $M X=1 new) again $(trc $M X=1 new2) unpinned $(trc $M $OLD old)"; cmp -s $O/tr_${M}_new.st $O/tr_${M}_old.st && echo "  $M: same bytes" || echo "  $M DIFFER"; $B diff --profile exact $O/tr_${M}_new.st $O/tr_${M}_old.st 2>&1 | tail -4; done
h() { env "$@" $B run --backend cuda -m /tmp/$M.gguf -p 'The quick brown fox' -n 48 --temp 0 2>/dev/null | md5sum | cut -c1-12; }
M=g3; echo "tokens g3: $(h X=1) $(h $OLD) (64901c8f9708)"; M=smol; echo "tokens smol: $(h X=1) $(h $OLD) (10d82d4b9948)"
M=l1b; echo "tokens l1b: $(h X=1) $(h $OLD) (4e5bee1ab652)"
el
tg() { timeout 40 env "$@" $B bench --backend cuda -m /tmp/$M.gguf -p 0 -n 128 -r 3 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f6 | sed 's/ *± */±/; s/ //g'; }
for M in g3 smol l1b; do for r in 1 2; do echo "$M tg128 round $r: pinned $(tg X=1) | unpinned $(tg $OLD)"; done; done
el
LOCKSTEP_CUDA_TIMELINE=$O/tl_g3.txt $B bench --backend cuda -m /tmp/g3.gguf -p 0 -n 32 -r 1 2>&1 | grep '| tg'
awk -F'\t' 'NR>1 && $1==0 && $3>=4 && $3<=17' $O/tl_g3.txt | cut -f4-9
wait $P8; ls -la /tmp/l8b.gguf | cut -c20-; el
M=l8b; for r in 1 2; do echo "$M tg128 round $r: pinned $(timeout 90 $B bench --backend cuda -m /tmp/l8b.gguf -p 0 -n 128 -r 3 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f6) | unpinned $(timeout 90 env $OLD $B bench --backend cuda -m /tmp/l8b.gguf -p 0 -n 128 -r 3 2>&1 | grep -E '\| tg' | tr -s ' ' | cut -d'|' -f6)"; done
el
cp $O/*.txt $OUT/s46b/ 2>/dev/null
true
