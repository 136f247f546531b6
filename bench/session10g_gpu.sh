#!/bin/bash
# Session 10, after review: the attention kernels' shared helpers (att_query_head,
# att_run_end; the flash kernel stages q from its row-head table). Rechecked: check --ops,
# diff and isolation over several flash chunks, the tile kernel forced, wrong-kv-head in the
# flash kernel, pp512.
set -u
B=${LOCKSTEP:-./.device/lockstep}
F=${LOCKSTEP_FAULTS:-./.device/lockstep-faults}
O=${OUT:-/tmp/s10g}; mkdir -p $O
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
$B synth --like smollm2 --type Q4_1 --layers 4 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol4.gguf | tail -1
$B synth --like llama-1b --type Q4_K_M -o /tmp/l1b.gguf | tail -1
$B check --ops --backend cuda > $O/ops.txt 2>&1; echo "== check --ops --backend cuda: $(tail -1 $O/ops.txt)"
LOCKSTEP_CUDA_ATTN=tile $B check --ops --backend cuda > $O/ops-tile.txt 2>&1; echo "== same, tiles forced: $(tail -1 $O/ops-tile.txt)"
IDS=$(seq -s, 7 206)
$B diff -m /tmp/smol4.gguf --a ref --b cuda --ids $IDS --decode 4 --isolate > $O/iso.txt 2>&1
echo "== diff smol4 (200 + 4) --isolate: rc $? | $(grep -E '^verdict' $O/iso.txt | cut -c1-80) | $(grep -E '^isolated verdict' $O/iso.txt | cut -c1-100)"
echo "== check smol4: $($B check -m /tmp/smol4.gguf --backend cuda 2>&1 | grep -cE '^  ok') ok lines (5 declared + 2 undeclared expected to differ)"
echo "-- l1b pp512 flash: $($B bench --backend cuda -m /tmp/l1b.gguf -p 512 -n 0 -r 3 2>&1 | grep -E '\| pp' | tr -s ' ')"
P="The capital of France is Paris. The capital of Germany is"
echo "== wrong-kv-head (flash, 13 + 4): $(LOCKSTEP_CUDA_CACHE=/tmp/cubin-f LOCKSTEP_CUDA_FAULT=wrong-kv-head $F diff -m /tmp/smol4.gguf --a ref --b cuda -p "$P" --decode 4 2>&1 | grep -E '^verdict' | cut -c1-220)"
