#!/usr/bin/env python3
"""Builds the tiny qwen2 test model and its expected logits.

There is no qwen2 model among the real models, so the qwen2 graph (q/k/v biases, NEOX RoPE,
separate output matrix) is checked on a tiny random one: the GGUF is written with the `gguf`
package and the expected logits come from the fixtures' independent float64 NumPy forward pass
(../shared/fixtures/tools/numpy_llama_ref.py), not from lockstep.

usage: python3 tools/make_qwen2_fixture.py   (needs: pip install gguf numpy safetensors)
writes crates/engine/tests/data/tiny-qwen2.gguf and tiny-qwen2.logits.safetensors
"""
import os
import sys

import numpy as np
import gguf
from safetensors.numpy import save_file

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "..", "shared", "fixtures", "tools"))
from numpy_llama_ref import forward  # noqa: E402

OUT = os.path.join(ROOT, "crates", "engine", "tests", "data")
D, L, NH, NKV, FF, V = 64, 2, 4, 2, 160, 256
HD = D // NH
rng = np.random.default_rng(20261122)


def mat(rows, cols, scale):
    return (rng.standard_normal((rows, cols)) * scale).astype(np.float32)


W = {"token_embd.weight": mat(V, D, 0.5), "output_norm.weight": (1 + 0.1 * rng.standard_normal(D)).astype(np.float32),
     "output.weight": mat(V, D, 0.2)}
for l in range(L):
    p = f"blk.{l}."
    W[p + "attn_norm.weight"] = (1 + 0.1 * rng.standard_normal(D)).astype(np.float32)
    W[p + "attn_q.weight"] = mat(NH * HD, D, 0.15)
    W[p + "attn_k.weight"] = mat(NKV * HD, D, 0.15)
    W[p + "attn_v.weight"] = mat(NKV * HD, D, 0.15)
    W[p + "attn_q.bias"] = mat(1, NH * HD, 0.3)[0]
    W[p + "attn_k.bias"] = mat(1, NKV * HD, 0.3)[0]
    W[p + "attn_v.bias"] = mat(1, NKV * HD, 0.3)[0]
    W[p + "attn_output.weight"] = mat(D, NH * HD, 0.15)
    W[p + "ffn_norm.weight"] = (1 + 0.1 * rng.standard_normal(D)).astype(np.float32)
    W[p + "ffn_gate.weight"] = mat(FF, D, 0.15)
    W[p + "ffn_up.weight"] = mat(FF, D, 0.15)
    W[p + "ffn_down.weight"] = mat(D, FF, 0.1)

os.makedirs(OUT, exist_ok=True)
path = os.path.join(OUT, "tiny-qwen2.gguf")
w = gguf.GGUFWriter(path, "qwen2")
w.add_block_count(L)
w.add_context_length(256)
w.add_embedding_length(D)
w.add_feed_forward_length(FF)
w.add_head_count(NH)
w.add_head_count_kv(NKV)
w.add_rope_freq_base(1000000.0)
w.add_layer_norm_rms_eps(1e-6)
w.add_vocab_size(V)
for name, t in W.items():
    w.add_tensor(name, t)
w.write_header_to_file()
w.write_kv_data_to_file()
w.write_tensors_to_file()
w.close()

f = {"general.architecture": "qwen2", "qwen2.block_count": L, "qwen2.attention.head_count": NH,
     "qwen2.attention.head_count_kv": NKV, "qwen2.attention.layer_norm_rms_epsilon": 1e-6,
     "qwen2.rope.freq_base": 1000000.0}
W64 = {k: v.astype(np.float64) for k, v in W.items()}
tokens = rng.integers(0, V, size=24).astype(np.int32)
logits = forward(f, W64, tokens.tolist())
save_file({"tokens": tokens, "exact_f64": logits.astype(np.float32)},
          os.path.join(OUT, "tiny-qwen2.logits.safetensors"))
print("wrote", path, os.path.getsize(path), "bytes; logits", logits.shape)
