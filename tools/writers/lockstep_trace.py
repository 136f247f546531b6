"""Write (and read) lockstep traces from any Python engine. Needs numpy only; drop this file in.

A trace is a safetensors file: for each forward step (0 = the prompt, then one decode token a
step), every op output the engine holds, under lockstep's tap names (docs/taps.md) or under the
engine's own names plus a name map (docs/trace-format.md). lockstep then runs its reference on
the trace's own tokens and names the first op where your engine parts from it:

    from lockstep_trace import TraceWriter
    w = TraceWriter("mine.safetensors", backend="my-engine", model="model.gguf")
    w.step(tokens=[1, 504, 3458], positions=[0, 1, 2])
    w.tap("inp_embd", x)                      # [tokens, n_embd], row = token
    w.tap("blk.0.attn_norm", h)               # ... every op output you have
    w.tap("result_output", logits)            # [rows, vocab]
    w.step(tokens=[282], positions=[3])       # a decode step, then its taps
    ...
    w.close()

    lockstep diff -m model.gguf --ref ref mine.safetensors

Arrays may be float32, float16 or float64 (stored as given; lockstep reads them as f32).
"""

import hashlib
import json
import struct

import numpy as np

FORMAT = "1"
_DTYPES = {np.dtype(np.float32): "F32", np.dtype(np.float16): "F16", np.dtype(np.float64): "F64"}
_NP = {"F32": np.float32, "F16": np.float16, "F64": np.float64}


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


class TraceWriter:
    """Collects steps and their tensors; `close()` writes the file.

    backend: your engine's name (recorded; shown in verdicts).
    model: path of the GGUF you ran (its sha256 and file name are recorded), or None.
    namemap: when your tensor names are not lockstep's, the map lockstep applies
        (`llama.cpp`, `transformers`, or a map file's path).
    extra: more metadata (str -> str), e.g. {"engine_version": "1.2"}.
    """

    def __init__(self, path, backend, model=None, model_sha256=None, namemap=None, extra=None):
        self.path = path
        self.meta = {"lockstep.trace": FORMAT, "backend": str(backend), "filter": ""}
        if model is not None:
            self.meta["model"] = str(model).replace("\\", "/").rsplit("/", 1)[-1]
            self.meta["model_sha256"] = model_sha256 or sha256_file(model)
        elif model_sha256:
            self.meta["model_sha256"] = model_sha256
        if namemap:
            self.meta["namemap"] = str(namemap)
        for k, v in (extra or {}).items():
            self.meta[str(k)] = str(v)
        self.steps = []
        self.tensors = []  # (key, array)
        self.names = set()

    def step(self, tokens, positions):
        """Starts the next step: the token ids it feeds and their positions."""
        tokens = [int(t) for t in tokens]
        positions = [int(p) for p in positions]
        if not tokens or len(tokens) != len(positions):
            raise ValueError(f"step needs as many positions as tokens ({len(tokens)} vs {len(positions)})")
        self.steps.append({"step": len(self.steps), "tokens": tokens, "positions": positions})

    def tap(self, name, array):
        """Records one tensor of the current step (copied now, so the engine may reuse its buffer)."""
        if not self.steps:
            raise ValueError("call step() before tap()")
        if "/" in name:
            raise ValueError(f"tensor name {name!r} must not contain '/'")
        a = np.array(array, copy=True)
        if a.dtype not in _DTYPES:
            raise TypeError(f"{name}: dtype {a.dtype} (use float32, float16 or float64)")
        key = f"s{len(self.steps) - 1}/{name}"
        if key in self.names:
            raise ValueError(f"{key} recorded twice")
        self.names.add(key)
        self.tensors.append((key, np.ascontiguousarray(a)))

    def close(self):
        meta = dict(self.meta)
        meta["steps"] = json.dumps(self.steps)
        header = {"__metadata__": meta}
        offset = 0
        for key, a in self.tensors:
            n = a.nbytes
            header[key] = {"dtype": _DTYPES[a.dtype], "shape": list(a.shape), "data_offsets": [offset, offset + n]}
            offset += n
        hb = json.dumps(header, separators=(",", ":")).encode()
        hb += b" " * (-len(hb) % 8)
        with open(self.path, "wb") as f:
            f.write(struct.pack("<Q", len(hb)))
            f.write(hb)
            for _, a in self.tensors:
                f.write(a.astype(a.dtype.newbyteorder("<"), copy=False).tobytes())


def read_trace(path):
    """Reads a trace: (metadata dict, steps list, {step: {name: array}})."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        base = 8 + n
        meta = header.pop("__metadata__", {})
        steps = json.loads(meta.get("steps", "[]"))
        out = {s["step"]: {} for s in steps}
        for key, info in header.items():
            dt = _NP.get(info["dtype"])
            if dt is None:
                raise ValueError(f"{key}: dtype {info['dtype']} not supported by this reader")
            a, b = info["data_offsets"]
            f.seek(base + a)
            arr = np.frombuffer(f.read(b - a), dtype=np.dtype(dt).newbyteorder("<")).reshape(info["shape"])
            step, name = key.split("/", 1)
            out.setdefault(int(step[1:]), {})[name] = arr
    return meta, steps, out
