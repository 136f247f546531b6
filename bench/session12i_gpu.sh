#!/bin/bash
# Session 12, review recheck: shared helpers (act_args on the host; act_block_q8, fast_row_ptr in
# the kernels; no kernel's registers changed) checked against the build before them
# (.device/lockstep-prev): check --ops, check's invariances, generations byte for byte, tg128.
set -u
B=./.device/lockstep
O=${OUT:-/tmp/s12i}; mkdir -p $O
$B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf | tail -1
$B synth --like smollm2 --type Q4_1 --layers 4 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol4.gguf | tail -1
$B synth --like gemma3 --type Q4_K_M --metadata-from .device/gemma3-meta.gguf -o /tmp/gemma3.gguf | tail -1
( LOCKSTEP_CUDA_CACHE=/tmp/cubin-prev ./.device/lockstep-prev bench --backend cuda -m /tmp/smol.gguf -p 0 -n 4 -r 1 > /dev/null 2>&1 ) &
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
$B check --ops --backend cuda > $O/ops.txt 2>&1; echo "== check --ops --backend cuda: $(tail -1 $O/ops.txt)"
$B check -m /tmp/smol4.gguf --backend cuda > $O/c.txt 2>&1; echo "== check smol4: $(grep -E 'untapped|repeated' $O/c.txt | tr -s ' ' | cut -c1-70 | tr '\n' '|')"
wait
P="The capital of France is Paris. The capital of Germany is"
for m in smol gemma3; do
  for t in 0 0.8; do
    $B run -m /tmp/$m.gguf --backend cuda -p "$P" -n 200 --ignore-eos --temp $t > $O/a.txt 2>/dev/null
    LOCKSTEP_CUDA_CACHE=/tmp/cubin-prev ./.device/lockstep-prev run -m /tmp/$m.gguf --backend cuda -p "$P" -n 200 --ignore-eos --temp $t > $O/b.txt 2>/dev/null
    echo "== $m temp $t, 200 tokens vs the build before: $(cmp -s $O/a.txt $O/b.txt && echo same || echo DIFFER) ($(wc -c < $O/a.txt) bytes)"
  done
done
for m in smol gemma3; do
  echo "-- $m: $($B bench --backend cuda -m /tmp/$m.gguf -p 0 -n 128 -r 5 2>&1 | grep -E '\| tg' | tr -s ' ') | before: $(LOCKSTEP_CUDA_CACHE=/tmp/cubin-prev ./.device/lockstep-prev bench --backend cuda -m /tmp/$m.gguf -p 0 -n 128 -r 5 2>&1 | grep -E '\| tg' | tr -s ' ')"
done
