#!/usr/bin/env python3
"""Per-kernel critical-path time of graph-replayed decode steps, from an Nsight Systems export
(sqlite). For kernels in start order, a kernel's added time is its end minus the latest end
before it: what it adds to the step when launches overlap (PDL). Steps are counted by the
embedding kernel; only the second half of the run's steps (warm) is summed."""
import sqlite3, sys, collections

db = sqlite3.connect(sys.argv[1])
names = dict(db.execute("select id, value from StringIds"))
rows = db.execute(
    "select start, end, shortName from CUPTI_ACTIVITY_KIND_KERNEL order by start").fetchall()
rows = [(s, e, names.get(n, str(n))) for s, e, n in rows]
steps = [i for i, r in enumerate(rows) if r[2] == 'embed_rows']
if len(steps) < 4:
    print(f"only {len(steps)} steps found"); sys.exit(0)
first = steps[len(steps) // 2]
last = steps[-1]
sel = rows[first:last]
nsteps = sum(1 for r in sel if r[2] == 'embed_rows')
agg = collections.OrderedDict()
prev_end = rows[first - 1][1]
for s, e, n in sel:
    add = max(0, e - max(prev_end, s)) if n != 'embed_rows' else e - prev_end
    a = agg.setdefault(n, [0, 0, 0])
    a[0] += add; a[1] += 1; a[2] += e - s
    prev_end = max(prev_end, e)
tot = sum(a[0] for a in agg.values())
print(f"{nsteps} steps, {tot / nsteps / 1e3:.1f} us a step (end to end, host gaps in embed_rows)")
print(f"{'kernel':34s} {'calls/step':>10s} {'added us/step':>13s} {'added us/call':>13s} {'span us/call':>12s}")
for n, (add, c, span) in sorted(agg.items(), key=lambda x: -x[1][0]):
    print(f"{n[:34]:34s} {c / nsteps:10.1f} {add / nsteps / 1e3:13.2f} {add / c / 1e3:13.2f} {span / c / 1e3:12.2f}")
