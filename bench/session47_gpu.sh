#!/bin/bash
# Session 47, call 1: where the 8B's decode step goes now. llama-bench is built in the
# background (for call 2's side by side); meanwhile Nsight Compute times every kernel of eager
# decode steps of the 8B cut to 4 layers (each kernel alone: duration, DRAM bytes and
# throughput, occupancy; clocks not locked), the full section set on its big mat-vecs and
# residual_norm (warp stall reasons), and the timeline of the whole 8B's replayed steps.
set -u
B=./.device/lockstep
O=/tmp/s47; mkdir -p $O
T0=$(date +%s); el() { echo "   [$(( $(date +%s) - T0 )) s]"; }
export LOCKSTEP_CUDA_CACHE=/tmp/cubin
NCU=/usr/local/cuda/bin/ncu
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
( nice -n 10 bash bench/llama_bench_build.sh $O 430 > $O/lbuild.txt 2>&1 ) &
PB=$!
$B synth --like llama-8b --type Q4_K_M --layers 4 -o /tmp/l8c.gguf > /dev/null 2>&1
( $B synth --like llama-8b --type Q4_K_M -o /tmp/l8b.gguf > /dev/null 2>&1 ) &
P8=$!
$B bench --backend cuda -m /tmp/l8c.gguf -p 0 -n 2 -r 1 > /dev/null 2>&1; el
M="gpu__time_duration.sum,dram__bytes_read.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__warps_active.avg.pct_of_peak_sustained_active,launch__registers_per_thread,launch__grid_size,launch__block_size"
LOCKSTEP_CUDA_GRAPHS=0 timeout 200 $NCU --clock-control none --metrics $M --csv --launch-skip 400 --launch-count 120 \
  $B bench --backend cuda -m /tmp/l8c.gguf -p 0 -n 24 -r 1 > $O/ncu_l8c.csv 2> $O/ncu_l8c.err
echo "ncu metrics rc $?"; el
python3 - $O/ncu_l8c.csv <<'PY'
import csv, collections, sys
rows = list(csv.reader(open(sys.argv[1])))
hdr = next(i for i, r in enumerate(rows) if r and r[0] == 'ID')
h = rows[hdr]; ki = h.index('Kernel Name'); mi = h.index('Metric Name'); vi = h.index('Metric Value'); ii = h.index('ID')
per = collections.OrderedDict()
for r in rows[hdr + 1:]:
    if len(r) <= vi: continue
    per.setdefault(r[ii], {'k': r[ki].split('(')[0]})[r[mi]] = float(r[vi].replace(',', ''))
agg = collections.OrderedDict()
for d in per.values():
    a = agg.setdefault(d['k'], collections.defaultdict(float)); a['n'] += 1
    for key, v in d.items():
        if key != 'k': a[key] += v
tot = sum(a['gpu__time_duration.sum'] for a in agg.values())
print(f"{'kernel':30s} {'n':>4s} {'us/call':>8s} {'share':>6s} {'MB/call':>8s} {'GB/s':>6s} {'dram%':>6s} {'warps%':>6s} {'regs':>4s} {'grid':>6s} {'blk':>5s}")
for k, a in sorted(agg.items(), key=lambda x: -x[1]['gpu__time_duration.sum']):
    n = a['n']; ns = a['gpu__time_duration.sum'] / n; b = a['dram__bytes_read.sum'] / n
    print(f"{k:30s} {int(n):4d} {ns/1000:8.2f} {100*a['gpu__time_duration.sum']/tot:5.1f}% {b/1e6:8.2f} {b/ns:6.0f} {a['dram__throughput.avg.pct_of_peak_sustained_elapsed']/n:6.1f} {a['sm__warps_active.avg.pct_of_peak_sustained_active']/n:6.1f} {a['launch__registers_per_thread']/n:4.0f} {a['launch__grid_size']/n:6.0f} {a['launch__block_size']/n:5.0f}")
print(f"total {tot/1000:.1f} us over {sum(int(a['n']) for a in agg.values())} kernels")
PY
LOCKSTEP_CUDA_GRAPHS=0 timeout 240 $NCU --clock-control none --set full --import-source no \
  -k 'regex:^(gate_up_fast1_12|mmv_fast1_14|mmv_fast1_12|mmv3_fast2r_12_14|residual_norm|quantize_q8_32|attention_decode_rope_128)$' \
  --launch-skip 60 --launch-count 7 -o /tmp/full $B bench --backend cuda -m /tmp/l8c.gguf -p 0 -n 8 -r 1 > $O/ncu_full_run.txt 2>&1
echo "ncu full rc $?"; tail -2 $O/ncu_full_run.txt; el
$NCU -i /tmp/full.ncu-rep --page details --csv > $O/details.csv 2>&1
python3 - $O/details.csv <<'PY'
import csv, sys, collections
rows = list(csv.reader(open(sys.argv[1])))
h = rows[0]
try:
    ki = h.index('Kernel Name'); ni = h.index('Metric Name'); vi = h.index('Metric Value'); ui = h.index('Metric Unit'); ii = h.index('ID')
except ValueError:
    print('no header', h[:8]); sys.exit()
want = ['Duration', 'DRAM Throughput', 'Memory Throughput', 'Achieved Occupancy', 'Theoretical Occupancy', 'Registers Per Thread',
        'Warp Cycles Per Issued Instruction', 'Issue Slots Busy', 'Executed Ipc Active', 'L2 Hit Rate', 'L1/TEX Hit Rate',
        'Block Limit Registers', 'Waves Per SM', 'One or More Eligible', 'Active Warps Per Scheduler', 'Eligible Warps Per Scheduler']
per = collections.OrderedDict()
for r in rows[1:]:
    if len(r) <= vi: continue
    if r[ni] in want: per.setdefault((r[ii], r[ki].split('(')[0]), {})[r[ni]] = r[vi] + ' ' + r[ui]
for (i, k), d in per.items():
    print(f"== {k} (ID {i})")
    print('   ' + ' | '.join(f"{w}: {d[w]}" for w in want if w in d))
PY
$NCU -i /tmp/full.ncu-rep --page raw --csv --metrics regex:smsp__pcsamp_warps_issue_stalled_.*,smsp__average_warp_latency_issue_stalled_.* > $O/stalls.csv 2>&1
python3 - $O/stalls.csv <<'PY'
import csv, sys
rows = list(csv.reader(open(sys.argv[1])))
try:
    h = rows[0]; ki = h.index('Kernel Name')
except Exception:
    print('stalls: no table'); sys.exit()
cols = [i for i, c in enumerate(h) if c.startswith('smsp__pcsamp_warps_issue_stalled_') and not c.endswith('_not_issued')]
for r in rows[2:]:
    if len(r) <= ki: continue
    vals = []
    for i in cols:
        try: vals.append((float(r[i].replace(',', '')), h[i].replace('smsp__pcsamp_warps_issue_stalled_', '')))
        except: pass
    tot = sum(v for v, _ in vals) or 1
    top = sorted(vals, reverse=True)[:7]
    print(f"{r[ki].split('(')[0]:28s} " + ', '.join(f"{n} {100*v/tot:.0f}%" for v, n in top))
PY
el
wait $P8; el
LOCKSTEP_CUDA_TIMELINE=$O/tl_l8b.txt $B bench --backend cuda -m /tmp/l8b.gguf -p 0 -n 32 -r 1 2>&1 | grep '| tg'
echo "plain tg32: $($B bench --backend cuda -m /tmp/l8b.gguf -p 0 -n 32 -r 3 2>&1 | grep '| tg' | tr -s ' ' | cut -d'|' -f6)"
awk -F'\t' 'NR>1 && $1==0 && $3>=0 && $3<=22' $O/tl_l8b.txt | cut -f3-8
awk -F'\t' 'NR>1 && $1==0 {s[$4]+=$6; n[$4]++; t+=$6} END {for (k in s) printf "%-34s %4d x %6.2f us  %5.1f%%\n", k, n[k], s[k]/n[k], 100*s[k]/t; printf "sum of releases %.1f us\n", t}' $O/tl_l8b.txt | sort -k4 -n -r
el
wait $PB; cat $O/lbuild.txt; ls -la /tmp/lc/b/bin/llama-bench; el
mkdir -p $OUT/s47 && cp $O/*.txt $O/*.csv $OUT/s47/ 2>/dev/null
true
