#!/usr/bin/env python3
"""Whether two safetensors traces hold the same tensors, bit for bit (names, dtypes, shapes and
data bytes; the free-form __metadata__ may differ: it names the build)."""
import json, struct, sys

def load(path):
    b = open(path, 'rb').read()
    n = struct.unpack('<Q', b[:8])[0]
    h = json.loads(b[8:8 + n])
    h.pop('__metadata__', None)
    return h, b[8 + n:]

(ha, da), (hb, db) = load(sys.argv[1]), load(sys.argv[2])
same = ha == hb and da == db
print(f"{len(ha)} tensors, {len(da)} data bytes: {'same bits' if same else 'DIFFER'}")
if not same and ha.keys() == hb.keys():
    bad = [k for k in ha if ha[k] != hb[k] or da[slice(*ha[k]['data_offsets'])] != db[slice(*hb[k]['data_offsets'])]]
    print(f"  {len(bad)} tensors differ, e.g. {sorted(bad)[:5]}")
sys.exit(0 if same else 1)
