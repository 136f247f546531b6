#!/usr/bin/env bash
# `lockstep diff --a ref --b cpu` on every fixture prompt of both models (prompt ids from cases.json,
# 4 teacher-forced decode steps, attention-score taps left out); one line per prompt with the exit code.
# usage: tools/diff_fixture_prompts.sh   (after cargo build --release -p lockstep-cli)
set -u
cd "$(dirname "$0")/.."
for m in smollm2 gemma3; do
  python3 -c "
import json
for c in json.load(open('../shared/fixtures/reference/$m/cases.json'))['cases']:
    if c['kind']!='batch': print(c['idx'], ','.join(map(str,c['prompt_ids'])))
" | while read idx ids; do
    out=$(./target/release/lockstep diff -m $m --a ref --b cpu --ids "$ids" --decode 4 --filter=-blk.*.kq,-blk.*.kq_softmax 2>&1); rc=$?
    echo "$m #$idx rc=$rc $(echo "$out" | grep -E '^final logits' | cut -c1-100) | $(echo "$out" | grep -E '^verdict' | cut -c1-60)"
  done
done
