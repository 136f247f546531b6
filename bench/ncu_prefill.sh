#!/bin/bash
# Where one pp512 prefill's GPU time goes, per kernel (Nsight Compute's gpu__time_duration):
# bench/ncu_prefill.sh MODEL [LAUNCHES]
set -u
B=${LOCKSTEP:-./.device/lockstep}
M=$1; N=${2:-2000}
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
/usr/local/cuda/bin/ncu --metrics gpu__time_duration.sum --csv --launch-count $N \
  $B bench --backend cuda -m $M -p 512 -n 0 -r 1 > /tmp/ncu.csv 2>/dev/null
python3 - <<'PY'
import csv, collections
rows = list(csv.reader(open('/tmp/ncu.csv')))
hdr = next(i for i, r in enumerate(rows) if r and r[0] == 'ID')
h = rows[hdr]; ki = h.index('Kernel Name'); vi = h.index('Metric Value'); ui = h.index('Metric Unit')
agg = collections.OrderedDict(); tot = 0.0
for r in rows[hdr + 1:]:
    if len(r) <= vi: continue
    v = float(r[vi].replace(',', '')); u = r[ui]
    us = {'nsecond': v / 1000, 'ns': v / 1000, 'usecond': v, 'us': v, 'msecond': v * 1000, 'ms': v * 1000}.get(u, v)
    k = r[ki].split('(')[0][:40]
    a = agg.setdefault(k, [0.0, 0]); a[0] += us; a[1] += 1; tot += us
print("units seen:", set(r[ui] for r in rows[hdr + 1:] if len(r) > ui))
for k, (us, n) in sorted(agg.items(), key=lambda x: -x[1][0])[:14]:
    print(f"{k:40s} {n:5d} calls {us:10.1f} us {us/n:8.2f} us/call {100*us/tot:5.1f}%")
print(f"total {tot:.1f} us over {sum(a[1] for a in agg.values())} kernels")
PY
