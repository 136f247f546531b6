#!/bin/bash
# Builds llama.cpp's llama-bench for the card on the device machine, from
# .device/llama.cpp.tar.xz (bench/llama_cpp_trim.sh makes it), into /tmp/lc/b/bin/llama-bench.
# Logs go to $1 (cmake.log, build.log); at most $2 seconds of building (300). Prints the
# build's exit status.
O=${1:-/tmp/out}; mkdir -p "$O"
mkdir -p /tmp/lc && tar -xJf .device/llama.cpp.tar.xz -C /tmp/lc
G=""; command -v ninja > /dev/null && G="-G Ninja"
cmake -S /tmp/lc/llama.cpp -B /tmp/lc/b $G -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES=90-real -DBUILD_SHARED_LIBS=OFF -DGGML_NATIVE=OFF \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF \
  -DLLAMA_BUILD_SERVER=OFF > "$O/cmake.log" 2>&1 || { echo "cmake failed"; tail -20 "$O/cmake.log"; }
timeout "${2:-300}" cmake --build /tmp/lc/b --target llama-bench -j 18 > "$O/build.log" 2>&1
echo "llama-bench build rc $?"
