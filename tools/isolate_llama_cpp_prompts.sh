#!/usr/bin/env bash
# Calibration of the `ggml-cpu` isolated-op bounds: every fixture prompt of both models up to
# 100 tokens (the ~780-token ones are left out: the importer stores every softmax, ~0.7 GB per
# step there) traced by llama.cpp (tools/llama_cpp_trace.py, the fixtures' greedy continuation
# teacher-forced for DECODE steps), then `lockstep diff -m MODEL --ref ref TRACE --isolate --json`.
# Prints per prompt the exit code and both verdicts, then per model and op kind the largest
# NMSE / bound seen. usage: tools/isolate_llama_cpp_prompts.sh [DECODE]  (after cargo build
# --release; $LOCKSTEP_PYTHON with llama-cpp-python, as .ci/run sets up)
set -u
cd "$(dirname "$0")/.."
decode=${1:-8}
py=${LOCKSTEP_PYTHON:-python3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
declare -A file=([smollm2]=SmolLM2-135M-Instruct.Q4_1.gguf [gemma3]=gemma-3-270m-q4_k_m.gguf)
models=${LOCKSTEP_MODELS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/lockstep/models}
for m in smollm2 gemma3; do
  python3 -c "
import json
for i, c in enumerate(json.load(open('../shared/fixtures/reference/$m/cases.json'))['cases']):
    if len(c['prompt_ids']) <= 100:
        print(i, len(c['prompt_ids']), ','.join(map(str, c['prompt_ids'])), ','.join(map(str, c['gen_ids'][:$decode])))
" | while read -r idx n ids force; do
    "$py" tools/llama_cpp_trace.py --model "$models/${file[$m]}" --ids "$ids" --force-ids "$force" \
        -o "$tmp/$m-$idx.st" 2>/dev/null || { echo "== $m #$idx: llama.cpp trace failed"; continue; }
    ./target/release/lockstep diff -m "$m" --ref ref "$tmp/$m-$idx.st" --isolate --json \
        > "$tmp/$m-$idx.json" 2>/dev/null; rc=$?
    python3 - "$tmp/$m-$idx.json" "$m #$idx ($n tokens) rc=$rc" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
iso = j["isolated"]
bad = [c for c in iso["checks"] if not c["pass"]]
print("==", sys.argv[2], "| whole-run", "AGREE" if j["report"]["verdict"] is None else "DIVERGE",
      "| isolated", iso["arithmetic"], len(iso["checks"]), "checks,", len(bad), "wrong")
for c in bad[:5]:
    print("   wrong:", c["step"], c["op"], c["what"], c["metrics"]["nmse"], c["bound"])
PY
  done
  python3 - "$tmp" "$m" <<'PY'
import glob, json, sys
worst = {}
for f in glob.glob(f"{sys.argv[1]}/{sys.argv[2]}-*.json"):
    for c in json.load(open(f))["isolated"]["checks"]:
        what = c["what"]
        kind = "matmul (" + what.split(" ")[0] + ")" if "matmul" in what else what
        r = 0.0 if c["metrics"]["n_diff"] == 0 else (c["metrics"]["nmse"] / c["bound"] if c["bound"] > 0 else float("inf"))
        if r >= worst.get(kind, (-1,))[0]:
            worst[kind] = (r, c["metrics"]["nmse"], c["bound"], f.rsplit("/", 1)[1][:-5], c["op"], c["step"])
print(f"-- {sys.argv[2]}: largest NMSE / bound per op kind")
for k, (r, n, b, f, op, st) in sorted(worst.items()):
    print(f"   {k:<44} {r:9.2e}  (NMSE {n:.2e}, bound {b:.2e}; {f} {op} step {st})")
PY
done
