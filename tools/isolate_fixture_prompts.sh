#!/usr/bin/env bash
# Calibration of the isolated-op bounds and the whole-run tolerances: `lockstep diff --a ref --b cpu
# --isolate` on every fixture prompt of both models (prompt ids from cases.json), 8 teacher-forced
# decode steps; the ~780-token prompts without the attention-score taps (their attention is still
# checked whole). Prints, per prompt, the exit code, the two verdicts and the worst isolated op per
# kind (NMSE / bound). usage: tools/isolate_fixture_prompts.sh [DECODE]  (after cargo build --release)
set -u
cd "$(dirname "$0")/.."
decode=${1:-8}
for m in smollm2 gemma3; do
  python3 -c "
import json
for c in json.load(open('../shared/fixtures/reference/$m/cases.json'))['cases']:
    if c['kind']!='batch': print(c['idx'], len(c['prompt_ids']), ','.join(map(str,c['prompt_ids'])))
" | while read -r idx n ids; do
    filter=""
    if [ "$n" -gt 100 ]; then filter="--filter=-blk.*.kq,-blk.*.kq_softmax"; fi
    out=$(./target/release/lockstep diff -m "$m" --a ref --b cpu --ids "$ids" --decode "$decode" $filter --isolate 2>&1); rc=$?
    echo "== $m #$idx ($n tokens) rc=$rc"
    echo "$out" | grep -E '^(verdict|isolated verdict|final logits)'
    echo "$out" | sed -n '/^  op kind/,/^isolated verdict/p' | grep -v '^isolated verdict'
  done
done
