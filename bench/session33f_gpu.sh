#!/bin/bash
# Session 33f: the two diagnostics of mmv_fq's first build (activation read with __ldcg), run as
# two calls: the step graphs' counts and an eager per-op profile (LOCKSTEP_CUDA_STATS,
# LOCKSTEP_CUDA_PROFILE), then the step timeline (its own compile), SmolLM2, FQ=0 against the
# default.
export LOCKSTEP_CUDA_CACHE=/tmp/cubin; B=./.device/lockstep
[ -s /tmp/smol.gguf ] || $B synth --like smollm2 --type Q4_1 --metadata-from .device/smollm2-meta.gguf -o /tmp/smol.gguf | tail -1
for v in 0 4; do echo "== FQ=$v"; LOCKSTEP_CUDA_FQ=$v LOCKSTEP_CUDA_STATS=1 $B bench --backend cuda -m /tmp/smol.gguf -p 0 -n 128 -r 2 2>&1 | grep -E 'tg|step graphs'; done
echo "== profile"
for v in 0 4; do LOCKSTEP_CUDA_FQ=$v LOCKSTEP_CUDA_PROFILE=1 $B bench --backend cuda -m /tmp/smol.gguf -p 0 -n 16 -r 1 2>&1 | grep -A14 'cuda profile'; done
for v in 0 4; do echo "== FQ=$v timeline"; LOCKSTEP_CUDA_FQ=$v LOCKSTEP_CUDA_TIMELINE=/tmp/t$v.tsv $B bench --backend cuda -m /tmp/smol.gguf -p 0 -n 128 -r 1 > ${OUT:-/tmp}/tl_smol_fq$v.txt 2>&1; grep -E 'span|calls' ${OUT:-/tmp}/tl_smol_fq$v.txt | head -12; done
