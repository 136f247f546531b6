#!/bin/bash
# Where one decode step's GPU time goes, per kernel (Nsight Compute's gpu__time_duration), for a
# model: bench/ncu_kernels.sh MODEL [LAUNCHES]. Eager steps (graphs off) so each kernel is
# profiled alone; the kernels are the ones graphs replay.
set -u
B=${LOCKSTEP:-./.device/lockstep}
M=$1; N=${2:-420}
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
LOCKSTEP_CUDA_GRAPHS=0 /usr/local/cuda/bin/ncu --metrics gpu__time_duration.sum --csv \
  --launch-skip 3000 --launch-count $N $B bench --backend cuda -m $M -p 0 -n 64 -r 1 > /tmp/ncu.csv 2>/dev/null
python3 - <<'PY'
import csv, collections
rows = list(csv.reader(open('/tmp/ncu.csv')))
hdr = next(i for i, r in enumerate(rows) if r and r[0] == 'ID')
h = rows[hdr]; ki = h.index('Kernel Name'); vi = h.index('Metric Value'); ui = h.index('Metric Unit')
agg = collections.OrderedDict(); tot = 0.0
for r in rows[hdr + 1:]:
    if len(r) <= vi: continue
    v = float(r[vi].replace(',', '')); u = r[ui]
    us = v / 1000 if u == 'nsecond' else v if u == 'usecond' else v * 1000
    k = r[ki].split('(')[0]
    a = agg.setdefault(k, [0.0, 0]); a[0] += us; a[1] += 1; tot += us
for k, (us, n) in sorted(agg.items(), key=lambda x: -x[1][0]):
    print(f"{k:28s} {n:5d} calls {us:9.1f} us {us/n:7.2f} us/call {100*us/tot:5.1f}%")
print(f"total {tot:.1f} us over {sum(a[1] for a in agg.values())} kernels")
PY
