#!/bin/bash
# Session 30: the KV cache in f16 on the device (fast numerics; LOCKSTEP_CUDA_KV=f32 keeps the
# f32 cache of sessions 1-29). Checks first (check --ops cuda and cuda-exact, diff --isolate on
# cut SmolLM2 and cut Gemma-3, check's invariances, the deterministic build, the tokens: f32
# must give session 29's hashes), then tg128 and pp512 alternating in one call.
set -u
B=./.device/lockstep
O=/tmp/s30; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
LIMIT=${LIMIT:-570}
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf --layers 4 -o /tmp/smol4.gguf | tail -1
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf --layers 3 -o /tmp/g3.gguf | tail -1
# The four builds compile beside the synths: f16 (default), f32 (knob), exact.
$B bench --backend cuda -m /tmp/smol4.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 &
LOCKSTEP_CUDA_KV=f32 $B bench --backend cuda -m /tmp/smol4.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 &
$B bench --backend cuda-exact -m /tmp/smol4.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1 &
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf | tail -1
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/gemma3.gguf | tail -1
$B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf | tail -1
wait; el
$B synth --like llama-8b --type Q4_K_M -o /tmp/l8b.gguf > /tmp/synth8b.txt 2>&1 &
P8=$!
( $B check --ops --backend cuda > $O/ops.txt 2>&1; echo "== check --ops --backend cuda: rc $? $(tail -1 $O/ops.txt)"
  $B check --ops --backend cuda-exact > $O/ops-exact.txt 2>&1; echo "== check --ops --backend cuda-exact: rc $? $(tail -1 $O/ops-exact.txt)"
  LOCKSTEP_CUDA_ATTN_HEADS=group $B check --ops --backend cuda --filter 'attention*,rope*,kv*' > $O/ops-group.txt 2>&1; echo "== check --ops attention/rope/kv, ATTN_HEADS=group: rc $? $(tail -1 $O/ops-group.txt)"
  LOCKSTEP_CUDA_ROPE_ATTN=0 $B check --ops --backend cuda --filter 'attention*,rope*,kv*' > $O/ops-norope.txt 2>&1; echo "== check --ops attention/rope/kv, ROPE_ATTN=0: rc $? $(tail -1 $O/ops-norope.txt)" ) > $O/ops_summary.txt &
for m in smol4 g3; do
  $B diff -m /tmp/$m.gguf --a ref --b cuda --ids $(seq -s, 7 46) --decode 32 --isolate > $O/iso-$m.txt 2>&1
  echo "== diff $m (40 + 32) --isolate: rc $? | $(grep -E '^isolated verdict|^verdict' $O/iso-$m.txt | head -2 | cut -c1-110 | tr '\n' '|')"
  $B check -m /tmp/$m.gguf --backend cuda --tolerance 1e-2 > $O/check-$m.txt 2>&1; echo "== check $m (1e-2): rc $? $(grep -E 'replayed|result' $O/check-$m.txt | tr -s ' ' | tr '\n' '|')"
done
$B --deterministic check -m /tmp/smol4.gguf --backend cuda --tolerance 1e-2 > $O/check-det-smol4.txt 2>&1; echo "== check smol4 --backend cuda-det: rc $? $(grep -E 'result' $O/check-det-smol4.txt | tr -s ' ')"
$B --deterministic diff -m /tmp/g3.gguf --a ref --b cuda --ids $(seq -s, 7 46) --decode 16 --isolate > $O/iso-det-g3.txt 2>&1
echo "== diff g3 cuda-det (40 + 16) --isolate: rc $? | $(grep -E '^isolated verdict|^verdict' $O/iso-det-g3.txt | head -2 | cut -c1-110 | tr '\n' '|')"
wait $P8
cat $O/ops_summary.txt
el
h() { env $1 $B run --backend cuda -m /tmp/$2.gguf "${@:3}" 2>/dev/null | md5sum | cut -c1-12; }
for m in smol gemma3; do for x in "LOCKSTEP_CUDA_KV=f32" "S30_NONE=1"; do
  echo "$m [$x] greedy $(h $x $m -p 'The quick brown fox' -n 48 --temp 0) top-k $(h $x $m -p 'Once upon a time' -n 48 --top-k 40 --seed 7)"
done; done
echo "(session 29: smol 10d82d4b9948 d29998751468, gemma3 64901c8f9708 6ed04893ed86)"
el
bn() { env $1 $B bench --backend cuda -m /tmp/$2.gguf $3 -r 3 2>&1 | grep -E '\| (tg|pp)' | tr -s ' ' | cut -d'|' -f5,6 | tr '\n' ' '; }
for r in 1 2; do
  for m in smol gemma3 l1b l8b; do
    for x in "LOCKSTEP_CUDA_KV=f32" "S30_NONE=1"; do
      left=$(( LIMIT - ($(date +%s) - T0) )); if [ $left -lt 20 ]; then echo "-- $m r$r [$x]: skipped"; continue; fi
      echo "-- $m r$r [$x]: $(timeout $left bash -c "$(declare -f bn); B=$B; bn '$x' $m '-p 0 -n 128'")"
    done
  done
done
el
for m in smol gemma3 l1b l8b; do
  for x in "LOCKSTEP_CUDA_KV=f32" "S30_NONE=1"; do
    left=$(( LIMIT - ($(date +%s) - T0) )); if [ $left -lt 20 ]; then echo "-- $m pp [$x]: skipped"; continue; fi
    echo "-- $m pp [$x]: $(timeout $left bash -c "$(declare -f bn); B=$B; bn '$x' $m '-p 512 -n 0'")"
  done
done
el
[ -n "${OUT:-}" ] && cp $O/ops.txt $O/iso-smol4.txt $O/iso-g3.txt $O/iso-det-g3.txt $O/check-g3.txt $O/check-det-smol4.txt $OUT/ 2>/dev/null
