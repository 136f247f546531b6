#!/bin/bash
# Per-kernel GPU time and DRAM traffic of decode steps (Nsight Compute), for one model:
# bench/ncu_decode.sh MODEL [LAUNCHES] [SKIP]. Eager steps (graphs off) so each kernel is
# profiled alone; the kernels are the ones graphs replay. NCU_FLAGS adds ncu options (e.g.
# "--clock-control none --cache-control none": clocks and caches as in a replay). Prints, per
# kernel name: calls, total and mean time, share, and achieved read bandwidth (DRAM bytes read
# / time).
set -u
B=${LOCKSTEP:-./.device/lockstep}
M=$1; N=${2:-600}; S=${3:-3000}
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
LOCKSTEP_CUDA_GRAPHS=0 /usr/local/cuda/bin/ncu ${NCU_FLAGS:-} --metrics gpu__time_duration.sum,dram__bytes_read.sum --csv \
  --launch-skip $S --launch-count $N $B bench --backend cuda -m $M -p 0 -n 64 -r 1 > /tmp/ncu.csv 2>/dev/null
python3 - <<'PY'
import csv, collections
rows = list(csv.reader(open('/tmp/ncu.csv')))
hdr = next(i for i, r in enumerate(rows) if r and r[0] == 'ID')
h = rows[hdr]; ki = h.index('Kernel Name'); mi = h.index('Metric Name'); vi = h.index('Metric Value'); ui = h.index('Metric Unit')
idi = h.index('ID')
per = {}
for r in rows[hdr + 1:]:
    if len(r) <= vi: continue
    v = float(r[vi].replace(',', '')); u = r[ui]; name = r[ki].split('(')[0]
    e = per.setdefault(r[idi], {'k': name})
    if r[mi] == 'gpu__time_duration.sum':
        e['us'] = v * {'ns': 1e-3, 'nsecond': 1e-3, 'us': 1, 'usecond': 1, 'ms': 1e3, 'msecond': 1e3}.get(u, float('nan'))
    else:
        e['b'] = v * {'byte': 1, 'B': 1, 'Kbyte': 1e3, 'KB': 1e3, 'Mbyte': 1e6, 'MB': 1e6, 'Gbyte': 1e9, 'GB': 1e9}.get(u, float('nan'))
agg = collections.OrderedDict(); tot = 0.0
for e in per.values():
    a = agg.setdefault(e['k'], [0.0, 0, 0.0]); a[0] += e.get('us', 0); a[1] += 1; a[2] += e.get('b', 0); tot += e.get('us', 0)
for k, (us, n, b) in sorted(agg.items(), key=lambda x: -x[1][0]):
    print(f"{k:28s} {n:5d} calls {us:9.1f} us {us/n:7.2f} us/call {100*us/tot:5.1f}% {b/us/1e3 if us else 0:7.1f} GB/s")
print(f"total {tot:.1f} us over {sum(a[1] for a in agg.values())} kernels")
PY
