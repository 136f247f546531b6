#!/bin/bash
# Session 18: the 8B shape's decode mat-vecs alone (bench/gemv_lab), against a streaming read.
set -u
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv
NVCC=$(which nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null | head -1)
$NVCC --version | tail -2
$NVCC -arch=sm_90 -O3 --fmad=false -std=c++17 -Xptxas -v -o /tmp/gemv_lab bench/gemv_lab/gemv_lab.cu 2> /tmp/ptxas.txt || { tail -30 /tmp/ptxas.txt; exit 1; }
grep -E "Compiling entry|Used [0-9]+ registers" /tmp/ptxas.txt | paste - - | grep -E "lab_mmv|(mmv|gate_up)_fast1_1[24]'" | sed 's/ptxas info *: //g' | cut -c1-200
/tmp/gemv_lab
