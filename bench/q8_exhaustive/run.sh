#!/bin/bash
# Build and run q8_exhaustive (on the device, or carry a binary built with the same line).
set -eu
cd "$(dirname "$0")"
nvcc -arch=sm_90 --fmad=false -std=c++17 -O3 -diag-suppress 128,177,550,549 -o /tmp/q8_exhaustive q8_exhaustive.cu
/tmp/q8_exhaustive
