#!/bin/bash
# Device: run the stream-chain lab's builds carried as .device/stream_chain_* (built here with
# nvcc: -DCOMPUTE_WARPS=8|16 -DSTAGES=N), or, when none was carried, the default build
# compiled on the device. ARGS: "layers,pos ..." (default "32,64"). Outputs under $OUT.
set -u
O=${OUT:-/tmp/out}; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > $O/smi.txt 2>&1
bins=$(ls .device/stream_chain_* 2>/dev/null)
if [ -z "$bins" ]; then
  nvcc -gencode=arch=compute_90a,code=sm_90a -O3 -std=c++17 -o /tmp/stream_chain_default bench/stream_chain_lab/stream_chain.cu || exit 1
  bins=/tmp/stream_chain_default
fi
for bin in $bins; do
  b=$(basename $bin)
  for args in ${ARGS:-32,64}; do
    echo "== $b ${args//,/ }"
    timeout 120 $bin ${args//,/ } 2>&1 | tee -a $O/$b.txt
  done
done
