#!/usr/bin/env bash
# Session 27, call 1: the L2 streamer lab (bench/stream_lab/l2_stream.cu), compiled here with
# nvcc 13.5 for sm_90 (static runtime) and carried as .device/lab/l2_stream.
set -u
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
timeout 300 ./.device/lab/l2_stream ${LAB_ARGS:-} 2>&1
