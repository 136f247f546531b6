#!/usr/bin/env python3
"""Record llama.cpp's own intermediate tensors as a lockstep trace.

Runs a GGUF with llama.cpp through llama-cpp-python's ctypes API: the prompt as one batch (every
position's logits requested), then teacher-forced decode steps of one token. The context's
`cb_eval` callback sees every graph node as the scheduler computes it; each named node is read
back with `ggml_backend_tensor_get`, so it works whatever ggml backend computed it (CPU, CUDA,
Metal, ...). Tensors are stored under `NAME@OP` (`Qcur-3@ROPE`: llama.cpp gives one name to
several nodes; a repeat in one step gets `#2`, `#3`; an unnamed node is `node(SRC0)@OP`) in ggml's layout, row-major [ne3, ne2, ne1, ne0] (strided views are gathered),
F32 or F16 as computed; lockstep's shipped `llama.cpp` name map turns them into taps:

    python3 tools/llama_cpp_trace.py --model ~/.cache/lockstep/models/SmolLM2-135M-Instruct.Q4_1.gguf \
        --ids 1,504,3458,282 --force-ids 260,4115 -o llama.safetensors
    lockstep diff -m smollm2 --ref ref llama.safetensors

Metadata `ggml_backend` names the ggml buffers the recorded nodes were computed in (`CPU` on
a CPU-only run): `lockstep diff --isolate` holds a `CPU` trace to ggml-cpu's arithmetic.

Settings: flash attention off (so scores and softmax exist as tensors), F16 KV cache, one
sequence, no extra CPU buffer types (AMX and other repacked weight layouts: their kernels are
not ggml-cpu's plain arithmetic). `--lib DIR` loads libllama from DIR (another build, e.g. one with a patched kernel;
sets LLAMA_CPP_LIB_PATH). Pure view nodes (RESHAPE, PERMUTE, TRANSPOSE, VIEW) are not read
except the K/V cache views attention reads (`cache_k_l0 (view)`); quantized or integer tensors
are listed, not stored.

Needs: llama-cpp-python (built from its sdist: .ci/run shows how), numpy.
"""

import argparse
import ctypes
import os
import pathlib
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "writers"))
from lockstep_trace import TraceWriter, read_trace  # noqa: E402

GGML_MAX_DIMS, GGML_MAX_SRC, GGML_MAX_OP_PARAMS, GGML_MAX_NAME = 4, 10, 64, 64
GGML_TYPE_F32, GGML_TYPE_F16 = 0, 1
SKIP_OPS = {"NONE", "RESHAPE", "PERMUTE", "TRANSPOSE", "VIEW"}


class GgmlTensor(ctypes.Structure):
    """struct ggml_tensor of ggml.h (the llama.cpp vendored by llama-cpp-python 0.3.x)."""

    _fields_ = [
        ("type", ctypes.c_int),
        ("buffer", ctypes.c_void_p),
        ("ne", ctypes.c_int64 * GGML_MAX_DIMS),
        ("nb", ctypes.c_size_t * GGML_MAX_DIMS),
        ("op", ctypes.c_int),
        ("op_params", ctypes.c_int32 * (GGML_MAX_OP_PARAMS // 4)),
        ("flags", ctypes.c_int32),
        ("src", ctypes.c_void_p * GGML_MAX_SRC),
        ("view_src", ctypes.c_void_p),
        ("view_offs", ctypes.c_size_t),
        ("data", ctypes.c_void_p),
        ("name", ctypes.c_char * GGML_MAX_NAME),
        ("extra", ctypes.c_void_p),
        ("padding", ctypes.c_char * 8),
    ]


def parse_ids(s):
    return [int(x) for x in s.replace(" ", ",").split(",") if x]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="GGUF file")
    ap.add_argument("--like", help="take prompt and decode ids from this trace")
    ap.add_argument("--ids", help="prompt ids, e.g. 1,2,3")
    ap.add_argument("--force-ids", default="", help="teacher-forced decode ids")
    ap.add_argument("--lib", help="directory holding the libllama / libggml* to use")
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("-o", "--output", required=True)
    args = ap.parse_args()

    if args.lib:
        os.environ["LLAMA_CPP_LIB_PATH"] = os.path.abspath(args.lib)
    import llama_cpp as L

    if args.like:
        _, steps, _ = read_trace(args.like)
        steps.sort(key=lambda s: s["step"])
        prompt, force = steps[0]["tokens"], [s["tokens"][0] for s in steps[1:]]
    elif args.ids:
        prompt, force = parse_ids(args.ids), parse_ids(args.force_ids)
    else:
        sys.exit("give --like TRACE or --ids")

    libdir = pathlib.Path(os.environ.get("LLAMA_CPP_LIB_PATH") or pathlib.Path(L.__file__).parent / "lib")
    base = ctypes.CDLL(str(libdir / "libggml-base.so"), mode=ctypes.RTLD_GLOBAL)
    base.ggml_backend_tensor_get.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t]
    base.ggml_backend_tensor_get.restype = None
    base.ggml_nbytes.argtypes = [ctypes.c_void_p]
    base.ggml_nbytes.restype = ctypes.c_size_t
    base.ggml_op_name.argtypes = [ctypes.c_int]
    base.ggml_op_name.restype = ctypes.c_char_p
    base.ggml_type_name.argtypes = [ctypes.c_int]
    base.ggml_type_name.restype = ctypes.c_char_p
    base.ggml_backend_buffer_name.argtypes = [ctypes.c_void_p]
    base.ggml_backend_buffer_name.restype = ctypes.c_char_p

    current = []  # (name@op, array) of the step being computed
    unread = set()
    # The ggml buffers the recorded nodes lived in ("CPU", "CUDA0", ...): which ggml backend
    # computed them, and so which arithmetic lockstep's isolated pass holds them to.
    buffers = set()

    def wanted(t):
        name = t.name.decode(errors="replace")
        if not name or (name.startswith("node_") and name[5:].isdigit()):
            # Unnamed node (ggml calls it node_N, a number that moves with the graph): name it
            # by its first source, e.g. node(blk.3.attn_output.weight)@MUL_MAT.
            src0 = t.src[0]
            if not src0:
                return None
            name = "node(" + GgmlTensor.from_address(src0).name.decode(errors="replace") + ")"
        op = base.ggml_op_name(t.op).decode()
        if op in SKIP_OPS and not (op == "VIEW" and name.startswith("cache_")):
            return None
        return f"{name}@{op}"

    def read(p, t, key):
        if t.type not in (GGML_TYPE_F32, GGML_TYPE_F16):
            unread.add(f"{key} ({base.ggml_type_name(t.type).decode()})")
            return
        if t.buffer:
            buffers.add(base.ggml_backend_buffer_name(t.buffer).decode(errors="replace"))
        n = base.ggml_nbytes(p)
        buf = (ctypes.c_uint8 * n)()
        base.ggml_backend_tensor_get(p, buf, 0, n)
        dt = np.float32 if t.type == GGML_TYPE_F32 else np.float16
        flat = np.frombuffer(buf, dtype=np.uint8)
        shape = tuple(int(x) for x in reversed(t.ne))
        strides = tuple(int(x) for x in reversed(t.nb))
        # Strided view over the bytes (views of the KV cache are not contiguous), gathered, then
        # reinterpreted as the element type.
        es = np.dtype(dt).itemsize
        arr = np.lib.stride_tricks.as_strided(flat, shape=shape + (es,), strides=strides + (1,))
        current.append((key, np.ascontiguousarray(arr).view(dt).reshape(shape).copy()))

    @L.ggml_backend_sched_eval_callback
    def cb_eval(p, ask, _user):
        t = GgmlTensor.from_address(p)
        key = wanted(t)
        if ask:
            return key is not None
        if key is not None:
            read(p, t, key)
        return True

    L.llama_backend_init()
    mparams = L.llama_model_default_params()
    mparams.n_gpu_layers = 0
    # No extra CPU buffer types: on a CPU with AMX (or with ggml's other repacking buffers)
    # llama.cpp moves the weights into repacked layouts computed by other kernels. The trace is
    # meant to hold ggml-cpu's plain arithmetic, which `diff --isolate` emulates. On an AMX
    # machine the repacked path also crashed this script (segfault during the first decode).
    if any(f[0] == "use_extra_bufts" for f in type(mparams)._fields_):
        mparams.use_extra_bufts = False
    model = L.llama_model_load_from_file(args.model.encode(), mparams)
    if not model:
        sys.exit(f"llama.cpp could not load {args.model}")
    n = len(prompt) + len(force)
    cparams = L.llama_context_default_params()
    cparams.n_ctx = max(512, n + 16)
    cparams.n_batch = cparams.n_ubatch = max(512, len(prompt))
    cparams.n_threads = cparams.n_threads_batch = args.threads
    cparams.flash_attn_type = L.LLAMA_FLASH_ATTN_TYPE_DISABLED
    cparams.type_k = cparams.type_v = GGML_TYPE_F16
    cparams.cb_eval = cb_eval
    cparams.cb_eval_user_data = None
    ctx = L.llama_init_from_model(model, cparams)
    if not ctx:
        sys.exit("llama.cpp could not create a context")
    n_vocab = L.llama_vocab_n_tokens(L.llama_model_get_vocab(model))

    engine = "llama.cpp (llama-cpp-python {}), CPU, flash attention off, f16 KV".format(
        getattr(L, "__version__", "?"))
    w = TraceWriter(args.output, backend="llama.cpp", model=args.model, namemap="llama.cpp",
                    extra={"engine_version": engine})
    batch = L.llama_batch_init(max(len(prompt), 1), 0, 1)
    pos = 0
    for step, toks in enumerate([prompt] + [[t] for t in force]):
        current.clear()
        batch.n_tokens = len(toks)
        for i, tok in enumerate(toks):
            batch.token[i] = tok
            batch.pos[i] = pos + i
            batch.n_seq_id[i] = 1
            batch.seq_id[i][0] = 0
            batch.logits[i] = 1
        rc = L.llama_decode(ctx, batch)
        if rc != 0:
            sys.exit(f"llama_decode failed ({rc}) at step {step}")
        w.step(toks, list(range(pos, pos + len(toks))))
        seen = {}
        for key, arr in current:
            k = seen.get(key, 0)
            seen[key] = k + 1
            w.tap(key if k == 0 else f"{key}#{k + 1}", arr)
        last = np.ctypeslib.as_array(L.llama_get_logits_ith(ctx, len(toks) - 1), shape=(n_vocab,))
        print(f"step {step}: {len(toks)} tokens, {len(current)} tensors, argmax {int(np.argmax(last))}",
              file=sys.stderr)
        pos += len(toks)
    # "CPU" when ggml's CPU backend computed every recorded node (lockstep then isolates the
    # trace with the `ggml-cpu` arithmetic); several names when the graph was split.
    w.meta["ggml_backend"] = ",".join(sorted(buffers))
    # The CPU backend's compiled features ("AVX = 1 | AVX2 = 1 | ..."): which code paths quantize
    # the matmul activations (lockstep emulates the x86 AVX ones exactly).
    w.meta["ggml_cpu_features"] = L.llama_print_system_info().decode(errors="replace").strip()
    w.close()
    L.llama_batch_free(batch)
    L.llama_free(ctx)
    L.llama_model_free(model)
    if unread:
        print(f"not stored (not F32/F16): {', '.join(sorted(unread)[:12])}"
              f"{' ...' if len(unread) > 12 else ''}", file=sys.stderr)
    print(f"wrote {args.output}", file=sys.stderr)


if __name__ == "__main__":
    main()
