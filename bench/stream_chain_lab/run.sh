#!/bin/bash
# Device: run the stream-chain lab's builds carried as .device/stream_chain_* (built here with
# nvcc, see stream_chain.cu's head; session 35's builds: a_default, b_stamps (-DSTAMPS),
# c_kpf0 (-DKPF=0), d_stages4 (-DSTAGES=4), e_prefetch8 (-DPREFETCH=8), f_flags (-DFLAGS=1),
# g_split4 (-DATT_SPLIT=4), h_first_form_s6 (the first form, commit 81651d8, -DSTAGES=6); the
# 1B shape's i_1b (-DSHAPE_1B), j_1b_stamps, k_1b_kpf0 ran with "16,64 16,200"), or,
# when none was carried, the default build compiled on the device. ARGS: "layers,pos ..."
# (default "32,64"). Outputs under $OUT, one file a build.
set -u
O=${OUT:-/tmp/out}; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > $O/smi.txt 2>&1
bins=$(ls .device/stream_chain_* 2>/dev/null)
if [ -z "$bins" ]; then
  nvcc -gencode=arch=compute_90a,code=sm_90a -O3 -std=c++17 -diag-suppress 549 -o /tmp/stream_chain_default bench/stream_chain_lab/stream_chain.cu || exit 1
  bins=/tmp/stream_chain_default
fi
for bin in $bins; do
  b=$(basename $bin)
  for args in ${ARGS:-32,64}; do
    echo "== $b ${args//,/ }"
    timeout 120 $bin ${args//,/ } 2>&1 | tee -a $O/$b.txt
  done
done
