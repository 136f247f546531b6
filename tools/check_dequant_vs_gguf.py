#!/usr/bin/env python3
"""Cross-check `lockstep inspect --tensor NAME --dequant OUT.safetensors` against the Python
`gguf` package's `gguf.quants.dequantize` on a sample of real-model tensors of every type.

Needs: `pip install gguf numpy safetensors` and a built `lockstep` binary.

    cargo build --release -p lockstep-cli
    python3 tools/check_dequant_vs_gguf.py                  # both models, 3 tensors per type
    python3 tools/check_dequant_vs_gguf.py --per-type 1 smollm2

Prints, per tensor, the max |lockstep - gguf| and whether the two are bit-identical; exits 1
if any tensor differs by more than --tol (default 0: ggml's dequantization is exact
arithmetic on f16 scales, so both should agree bit for bit).
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize
from safetensors.numpy import load_file

MODELS = {
    "smollm2": "SmolLM2-135M-Instruct.Q4_1.gguf",
    "gemma3": "gemma-3-270m-q4_k_m.gguf",
}
# Tensors above this many elements are sampled only when a type has nothing smaller (the
# dequantized safetensors file is 4 bytes per element).
BIG = 50_000_000


def default_models_dir():
    if os.environ.get("LOCKSTEP_MODELS_DIR"):
        return os.environ["LOCKSTEP_MODELS_DIR"]
    xdg = os.environ.get("XDG_CACHE_HOME")
    if xdg and os.path.isabs(xdg):
        return os.path.join(xdg, "lockstep", "models")
    return os.path.join(os.path.expanduser("~"), ".cache", "lockstep", "models")


def default_binary():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for profile in ("release", "debug"):
        p = os.path.join(root, "target", profile, "lockstep")
        if os.path.isfile(p):
            return p
    return shutil.which("lockstep") or "lockstep"


def sample(tensors, per_type):
    by_type = {}
    for t in tensors:
        by_type.setdefault(t.tensor_type.name, []).append(t)
    out = []
    for name in sorted(by_type):
        ts = by_type[name]
        small = [t for t in ts if int(t.n_elements) <= BIG] or ts
        # first, middle and last of the file order: different layers and roles
        idx = sorted({0, len(small) // 2, len(small) - 1})[:per_type]
        while len(idx) < min(per_type, len(small)):
            idx.append(len(idx))
        out += [small[i] for i in sorted(set(idx))]
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("models", nargs="*", default=list(MODELS), help="smollm2, gemma3 or GGUF paths")
    ap.add_argument("--models-dir", default=default_models_dir())
    ap.add_argument("--lockstep", default=default_binary(), help="the lockstep binary")
    ap.add_argument("--per-type", type=int, default=3)
    ap.add_argument("--tol", type=float, default=0.0)
    args = ap.parse_args()

    worst = 0.0
    n_checked = 0
    n_identical = 0
    with tempfile.TemporaryDirectory() as tmp:
        for m in args.models:
            path = os.path.join(args.models_dir, MODELS[m]) if m in MODELS else m
            reader = GGUFReader(path)
            print(f"== {os.path.basename(path)} ({len(reader.tensors)} tensors)")
            print(f"   {'tensor':<36} {'type':<6} {'shape (row-major)':<18} {'max|diff|':>10}  identical")
            for t in sample(reader.tensors, args.per_type):
                out = os.path.join(tmp, "t.safetensors")
                subprocess.run(
                    [args.lockstep, "inspect", path, "--tensor", t.name, "--dequant", out],
                    check=True, stdout=subprocess.DEVNULL,
                )
                ours = load_file(out)[t.name]
                ref = dequantize(t.data, t.tensor_type).astype(np.float32)
                ref = ref.reshape([int(d) for d in reversed(t.shape)])
                if ours.shape != ref.shape:
                    print(f"   {t.name}: shape {ours.shape} != gguf {ref.shape}")
                    return 1
                diff = float(np.max(np.abs(ours.astype(np.float64) - ref.astype(np.float64)))) if ours.size else 0.0
                identical = ours.tobytes() == ref.tobytes()
                worst = max(worst, diff)
                n_checked += 1
                n_identical += identical
                shape = "x".join(str(d) for d in ours.shape)
                print(f"   {t.name:<36} {t.tensor_type.name:<6} {shape:<18} {diff:>10.3g}  {identical}")
                os.remove(out)
    print(f"checked {n_checked} tensors: {n_identical} bit-identical, worst max|diff| {worst:.3g}")
    return 0 if worst <= args.tol else 1


if __name__ == "__main__":
    sys.exit(main())
