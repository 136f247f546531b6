#!/bin/bash
# Device: compile and run the cluster labs (bench/cluster_lab/*.cu); outputs under $OUT.
# LABS: which labs (default: all five); cluster_layer2 also runs with 1024 threads a block.
# ffn_cluster.cu and step_cluster.cu include kernels.cu (about a minute to compile): a binary
# built elsewhere may be carried as .device/<lab>, and is compiled here only when that one does
# not run.
set -u
O=${OUT:-/tmp/out}; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > $O/smi.txt 2>&1
build() {  # name source extra-flags
  nvcc -gencode=arch=compute_90a,code=sm_90a -O3 --fmad=false -std=c++17 $3 -o /tmp/$1 bench/cluster_lab/$2.cu > $O/nvcc_$1.log 2>&1 || { cat $O/nvcc_$1.log; return 1; }
}
for lab in ${LABS:-cluster_prims cluster_layer cluster_layer2 ffn_cluster step_cluster}; do
  if [ -x .device/$lab ] && .device/$lab > $O/$lab.txt 2>&1; then
    cat $O/$lab.txt; continue
  fi
  build $lab $lab "-diag-suppress 128,177,549,550" && timeout 240 /tmp/$lab 2>&1 | tee $O/$lab.txt
  if [ $lab = cluster_layer2 ]; then
    echo "== 1024 threads a block"
    build ${lab}_1024 $lab -DLAB_THREADS=1024 && timeout 240 /tmp/${lab}_1024 2>&1 | tee $O/${lab}_1024.txt
  fi
done
