#!/usr/bin/env python3
"""Example: an engine writing a lockstep trace with lockstep_trace.py (numpy only).

The "engine" here replays the tensors of an existing trace (for instance lockstep's own
reference, `lockstep trace -m smollm2 --ids 1,504,3458 --decode 2 -o ref.safetensors`), so the
example runs anywhere; in a real engine the arrays come from your kernels. `--perturb` scales
one tensor of one step, as a broken kernel would:

    python3 tools/writers/example.py --from ref.safetensors -o mine.safetensors
    lockstep diff -m smollm2 --ref ref mine.safetensors            # verdict: AGREE
    python3 tools/writers/example.py --from ref.safetensors -o bad.safetensors --perturb 1:blk.2.ffn_up:1.01
    lockstep diff -m smollm2 --ref ref bad.safetensors             # DIVERGE at decode step 1: blk.2.ffn_up
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lockstep_trace import TraceWriter, read_trace  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--from", dest="src", required=True, help="trace whose tensors the stand-in engine replays")
    ap.add_argument("-o", "--output", required=True)
    ap.add_argument("--perturb", help="STEP:TAP:FACTOR, e.g. 1:blk.2.ffn_up:1.01")
    args = ap.parse_args()

    meta, steps, tensors = read_trace(args.src)
    bad = None
    if args.perturb:
        s, tap, factor = args.perturb.split(":")
        bad = (int(s), tap, float(factor))

    # --- what an engine author writes: a writer, one step() per forward pass, one tap() per op output.
    w = TraceWriter(args.output, backend="example-engine", model_sha256=meta.get("model_sha256"))
    for st in steps:
        w.step(st["tokens"], st["positions"])
        for name, value in tensors[st["step"]].items():
            if bad and bad[0] == st["step"] and bad[1] == name:
                value = value * bad[2]
            w.tap(name, value)
    w.close()
    # ---
    n = sum(len(t) for t in tensors.values())
    print(f"wrote {args.output}: {len(steps)} steps, {n} tensors", file=sys.stderr)


if __name__ == "__main__":
    main()
