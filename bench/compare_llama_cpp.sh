#!/usr/bin/env bash
# Measures lockstep's cpu backend and llama.cpp side by side on this machine, in one run.
#
#   bench/compare_llama_cpp.sh [-t THREADS] [-p 512] [-n 128] [-r 3] [MODEL...]
#
# MODEL defaults to both reference models (smollm2, gemma3) in $LOCKSTEP_MODELS_DIR
# (default ~/.cache/lockstep/models). llama.cpp is built once, outside the repository, from the
# llama-cpp-python sdist on PyPI (its vendored llama.cpp; about 20 minutes on 2 cores) into
# $LLAMA_DIR (default /tmp/llamacpp); set LLAMA_BENCH=/path/to/llama-bench to use another build.
# Never commit llama.cpp's code or binaries.
#
# Output: a markdown table per model (llama-bench's own table, lockstep's, then the ratios
# lockstep / llama.cpp against the better of llama.cpp's flash-attention settings), with the
# machine load before and after.
set -euo pipefail

THREADS=2
NP=512
NG=128
REPS=3
while getopts "t:p:n:r:" opt; do
  case $opt in
    t) THREADS=$OPTARG ;;
    p) NP=$OPTARG ;;
    n) NG=$OPTARG ;;
    r) REPS=$OPTARG ;;
    *) echo "usage: $0 [-t threads] [-p n_prompt] [-n n_gen] [-r reps] [model...]" >&2; exit 2 ;;
  esac
done
shift $((OPTIND - 1))

ROOT=$(cd "$(dirname "$0")/.." && pwd)
MODELS_DIR=${LOCKSTEP_MODELS_DIR:-$HOME/.cache/lockstep/models}
LLAMA_DIR=${LLAMA_DIR:-/tmp/llamacpp}
LLAMA_CPP_PYTHON_VERSION=${LLAMA_CPP_PYTHON_VERSION:-0.3.36}
if [ $# -eq 0 ]; then
  set -- "$MODELS_DIR/SmolLM2-135M-Instruct.Q4_1.gguf" "$MODELS_DIR/gemma-3-270m-q4_k_m.gguf"
fi

build_llama_cpp() {
  local src="$LLAMA_DIR/src"
  mkdir -p "$LLAMA_DIR"
  if [ ! -d "$src/vendor/llama.cpp" ]; then
    echo ">> downloading llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION sdist" >&2
    (cd "$LLAMA_DIR" && python3 -m pip download --no-deps --no-binary llama-cpp-python \
      "llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION" -d dl >&2)
    rm -rf "$src" && mkdir -p "$src"
    tar -xzf "$LLAMA_DIR"/dl/llama_cpp_python-*.tar.gz -C "$src" --strip-components=1
    # The vendored .git folders point at submodules that are not there; move them away so
    # cmake does not try to use git.
    find "$src" -name .git -prune -exec sh -c 'mv "$1" "$1.moved"' _ {} \;
  fi
  echo ">> building llama.cpp (llama-bench) in $LLAMA_DIR/build" >&2
  cmake -S "$src/vendor/llama.cpp" -B "$LLAMA_DIR/build" -DCMAKE_BUILD_TYPE=Release \
    -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
    -DLLAMA_BUILD_SERVER=OFF -DLLAMA_CURL=OFF -DGGML_NATIVE=ON >&2
  cmake --build "$LLAMA_DIR/build" --target llama-bench -j "$(nproc)" >&2
}

LLAMA_BENCH=${LLAMA_BENCH:-$LLAMA_DIR/build/bin/llama-bench}
if [ ! -x "$LLAMA_BENCH" ]; then
  build_llama_cpp
fi
if [ "${BUILD_ONLY:-0}" = 1 ]; then
  exit 0
fi

echo ">> building lockstep" >&2
(cd "$ROOT" && cargo build --release -p lockstep-cli >&2)
if "$ROOT/target/release/lockstep" bench --help >/dev/null 2>&1; then
  LOCKSTEP_BENCH=("$ROOT/target/release/lockstep" bench)
else
  # Until `bench` is wired into the CLI: the same module built as an example.
  (cd "$ROOT" && cargo build --release -p lockstep-backend-cpu --example bench >&2)
  LOCKSTEP_BENCH=("$ROOT/target/release/examples/bench")
fi

echo "# lockstep cpu backend vs llama.cpp, $(date -u +%Y-%m-%dT%H:%M:%SZ)"
echo "host: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores; threads: $THREADS"
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
for model in "$@"; do
  name=$(basename "$model")
  echo
  echo "## $name"
  ljson=$(mktemp)
  "$LLAMA_BENCH" -m "$model" -t "$THREADS" -p "$NP" -n "$NG" -r "$REPS" -fa 0,1 -o json > "$ljson"
  sjson=$(mktemp)
  "${LOCKSTEP_BENCH[@]}" -m "$model" --backend cpu -t "$THREADS" -p "$NP" -n "$NG" -r "$REPS" --json > "$sjson"
  python3 - "$ljson" "$sjson" "$NP" "$NG" <<'EOF'
import json, sys
llama = json.load(open(sys.argv[1]))
ours = json.load(open(sys.argv[2]))
np_, ng = int(sys.argv[3]), int(sys.argv[4])
best = {}
print("| engine | fa | test | t/s |")
print("| --- | --- | --- | ---: |")
for r in llama:
    test = f"pp{r['n_prompt']}" if r["n_gen"] == 0 else f"tg{r['n_gen']}"
    fa = r.get("flash_attn", False)
    print(f"| llama.cpp | {int(bool(fa))} | {test} | {r['avg_ts']:.2f} ± {r['stddev_ts']:.2f} |")
    best[test] = max(best.get(test, 0.0), r["avg_ts"])
for t in ours["tests"]:
    print(f"| lockstep cpu | - | {t['test']} | {t['tokens_per_s_mean']:.2f} ± {t['tokens_per_s_sd']:.2f} |")
print()
print("| test | lockstep t/s | llama.cpp best t/s | ratio |")
print("| --- | ---: | ---: | ---: |")
for t in ours["tests"]:
    b = best.get(t["test"])
    if b:
        print(f"| {t['test']} | {t['tokens_per_s_mean']:.2f} | {b:.2f} | {t['tokens_per_s_mean'] / b:.2f}x |")
peak, rss = ours.get("peak_rss_bytes"), ours.get("rss_bytes")
if peak:
    print(f"\nlockstep memory: peak RSS {peak / 2**20:.1f} MiB (includes the mapped model file "
          f"while loading), RSS after the runs {(rss or 0) / 2**20:.1f} MiB")
EOF
  rm -f "$ljson" "$sjson"
done
echo
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
