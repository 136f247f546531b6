#!/bin/bash
# Makes .device/llama.cpp.tar.xz: llama.cpp as llama-cpp-python 0.3.36's sdist vendors it (the
# commit of the issue's H100 anchors, 0c1e57098), trimmed to what llama-bench needs, small enough
# to travel to the device machine (which has nvcc and CMake but no network), where
# bench/session25_gpu.sh builds it for the card. Never commit llama.cpp's code or binaries.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
W=${TMPDIR:-/tmp}/llama_cpp_trim.$$
mkdir -p "$W" && trap 'rm -rf "$W"' EXIT
python3 -m pip download -q --no-deps --no-binary llama-cpp-python "llama-cpp-python==0.3.36" -d "$W/dl"
mkdir -p "$W/src" && tar -xzf "$W"/dl/llama_cpp_python-*.tar.gz -C "$W/src" --strip-components=1
mv "$W/src/vendor/llama.cpp" "$W/llama.cpp"
cd "$W/llama.cpp"
# Models, docs, tests, examples and the other backends are not built; the tools but llama-bench
# are cut from tools/CMakeLists.txt.
rm -rf models docs tests examples benches media app pocs skills gguf-py conversion scripts ci \
  requirements grammars ./*.py .git*
(cd tools && ls | grep -v -x -e llama-bench -e CMakeLists.txt | xargs rm -rf)
echo 'add_subdirectory(llama-bench)' > tools/CMakeLists.txt
(cd ggml/src && rm -rf ggml-et ggml-metal ggml-hexagon ggml-sycl ggml-vulkan ggml-opencl ggml-cann \
  ggml-musa ggml-kompute ggml-webgpu ggml-zdnn ggml-openvino)
mkdir -p "$ROOT/.device"
tar -cJf "$ROOT/.device/llama.cpp.tar.xz" -C "$W" llama.cpp
ls -la "$ROOT/.device/llama.cpp.tar.xz"
