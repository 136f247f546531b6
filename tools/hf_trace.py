#!/usr/bin/env python3
"""Record a lockstep-format trace with Hugging Face transformers.

Loads the same GGUF file with transformers (`from_pretrained(dir, gguf_file=...)`, weights
dequantized to float32), runs the prefill and teacher-forced decode steps with forward hooks,
and writes the taps under lockstep's names (docs/taps.md) to a safetensors trace that
`lockstep diff A B` compares with a lockstep trace.

    lockstep trace -m gemma3 -p "The capital of France is" --decode 4 -o ls.safetensors
    python3 tools/hf_trace.py --model ~/.cache/lockstep/models/gemma-3-270m-q4_k_m.gguf \
        --like ls.safetensors -o hf.safetensors
    lockstep diff ls.safetensors hf.safetensors

`--like` takes the prompt ids and the decode ids from a lockstep trace, so both engines see
identical token streams; `--ids` / `--force-ids` give them explicitly.

Taps recorded: inp_embd (llama) / inp_scaled (gemma3: the HF embedding module already scales),
blk.N.{attn_norm,q,k,v,q_norm,k_norm,kqv,attn_out,attn_post_norm,ffn_inp,ffn_norm,ffn_gate,
ffn_up,ffn_act,ffn_out,ffn_post_norm,l_out}, result_norm, result_output. RoPE outputs, cache
reads and attention scores live inside HF's attention function and are not recorded.
llama GGUFs store Q/K permuted for llama.cpp's adjacent-pair RoPE; transformers undoes that
permutation on load, so q/k (and q_norm/k_norm) are permuted back here to GGUF's layout.

Needs: pip install torch transformers gguf safetensors numpy
"""

import argparse
import hashlib
import json
import os
import sys

import numpy as np


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def read_like(path):
    """Prompt ids and decode ids from a lockstep trace's metadata."""
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(n))
    steps = json.loads(header["__metadata__"]["steps"])
    steps.sort(key=lambda s: s["step"])
    prompt = steps[0]["tokens"]
    force = [s["tokens"][0] for s in steps[1:]]
    return prompt, force


def parse_ids(s):
    return [int(x) for x in s.replace(" ", ",").split(",") if x]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="GGUF file")
    ap.add_argument("--like", help="take prompt and decode ids from this lockstep trace")
    ap.add_argument("--ids", help="prompt ids, e.g. 1,2,3")
    ap.add_argument("--force-ids", default="", help="teacher-forced decode ids")
    ap.add_argument("--all-logits", action="store_true", help="logits of every prompt position")
    ap.add_argument("-o", "--output", required=True)
    args = ap.parse_args()

    import torch
    from safetensors.numpy import save_file
    from transformers import AutoModelForCausalLM

    if args.like:
        prompt, force = read_like(args.like)
    elif args.ids:
        prompt, force = parse_ids(args.ids), parse_ids(args.force_ids)
    else:
        sys.exit("give --like TRACE or --ids")

    d, name = os.path.split(os.path.abspath(args.model))
    torch.set_grad_enabled(False)
    model = AutoModelForCausalLM.from_pretrained(
        d, gguf_file=name, dtype=torch.float32, attn_implementation="eager"
    )
    model.eval()
    cfg = model.config
    arch = cfg.model_type  # "llama", "gemma3_text", "qwen2"
    gemma = arch.startswith("gemma3")
    n_heads = cfg.num_attention_heads
    n_kv = cfg.num_key_value_heads
    hd = getattr(cfg, "head_dim", None) or cfg.hidden_size // n_heads
    inner = model.model

    taps = {}
    order = []
    cur = {"rows": None}

    def put(tap, t):
        a = t.detach().to(torch.float32).reshape(-1, t.shape[-1] if t.dim() > 1 else 1)
        if tap not in taps:
            order.append(tap)
        taps[tap] = a.numpy().copy()

    def to_gguf_qk(t, heads):
        # HF rotate-half layout -> GGUF adjacent pairs: gguf[2i] = hf[i], gguf[2i+1] = hf[i+half].
        x = t.reshape(*t.shape[:-1], heads, hd)
        half = hd // 2
        y = torch.stack([x[..., :half], x[..., half:]], dim=-1).reshape(*x.shape)
        return y.reshape(t.shape)

    def out_hook(tap, fix=None):
        def f(_m, _i, out):
            o = out[0] if isinstance(out, tuple) else out
            if fix is not None:
                o = fix(o)
            if o.dim() == 4:  # q_norm/k_norm: [B, H, T, hd] -> [B, T, H * hd]
                o = o.transpose(1, 2).reshape(o.shape[0], o.shape[2], -1)
            put(tap, o)
        return f

    def in_hook(tap):
        def f(_m, inp):
            put(tap, inp[0])
        return f

    hooks = []
    reg = lambda mod, h: hooks.append(mod.register_forward_hook(h))
    pre = lambda mod, h: hooks.append(mod.register_forward_pre_hook(h))

    reg(inner.embed_tokens, out_hook("inp_scaled" if gemma else "inp_embd"))
    permute = arch == "llama"
    for i, layer in enumerate(inner.layers):
        b = f"blk.{i}."
        a = layer.self_attn
        def res_in(_m, args, kwargs, i=i):
            x = args[0] if args else kwargs["hidden_states"]
            taps[f"__res_in{i}"] = x.detach().clone()

        hooks.append(layer.register_forward_pre_hook(res_in, with_kwargs=True))
        reg(layer.input_layernorm, out_hook(b + "attn_norm"))
        reg(a.q_proj, out_hook(b + "q", (lambda t: to_gguf_qk(t, n_heads)) if permute else None))
        reg(a.k_proj, out_hook(b + "k", (lambda t: to_gguf_qk(t, n_kv)) if permute else None))
        reg(a.v_proj, out_hook(b + "v"))
        if gemma:
            reg(a.q_norm, out_hook(b + "q_norm"))
            reg(a.k_norm, out_hook(b + "k_norm"))
        pre(a.o_proj, in_hook(b + "kqv"))
        reg(a.o_proj, out_hook(b + "attn_out"))
        if gemma:
            reg(layer.post_attention_layernorm, out_hook(b + "attn_post_norm"))
            reg(layer.pre_feedforward_layernorm, out_hook(b + "ffn_norm"))
            reg(layer.post_feedforward_layernorm, out_hook(b + "ffn_post_norm"))
        else:
            reg(layer.post_attention_layernorm, out_hook(b + "ffn_norm"))
        reg(layer.mlp.gate_proj, out_hook(b + "ffn_gate"))
        reg(layer.mlp.up_proj, out_hook(b + "ffn_up"))
        pre(layer.mlp.down_proj, in_hook(b + "ffn_act"))
        reg(layer.mlp.down_proj, out_hook(b + "ffn_out"))
        reg(layer, out_hook(b + "l_out"))
    reg(inner.norm, out_hook("result_norm"))

    def finish_step(logits, n_rows):
        # ffn_inp = residual in + attention branch (not a module in HF).
        for i in range(len(inner.layers)):
            b = f"blk.{i}."
            res = taps.pop(f"__res_in{i}").to(torch.float32).reshape(-1, cfg.hidden_size).numpy()
            att = taps.get(b + "attn_post_norm", taps.get(b + "attn_out"))
            taps[b + "ffn_inp"] = res + att
        # Head taps: only the rows whose logits are wanted, like lockstep.
        taps["result_norm"] = taps["result_norm"][-n_rows:]
        taps["result_output"] = logits.reshape(-1, logits.shape[-1])[-n_rows:].numpy().copy()

    out = {}
    steps = []
    past = None
    pos = 0
    stream = [prompt] + [[t] for t in force]
    for step, toks in enumerate(stream):
        taps.clear()
        ids = torch.tensor([toks], dtype=torch.long)
        positions = list(range(pos, pos + len(toks)))
        r = model(
            input_ids=ids,
            past_key_values=past,
            use_cache=True,
            position_ids=torch.tensor([positions]),
        )
        past = r.past_key_values
        n_rows = len(toks) if (step == 0 and args.all_logits) else 1
        finish_step(r.logits.to(torch.float32), n_rows)
        for k, v in taps.items():
            out[f"s{step}/{k}"] = np.ascontiguousarray(v, dtype=np.float32)
        steps.append({"step": step, "tokens": toks, "positions": positions})
        pos += len(toks)
        top = int(np.argmax(taps["result_output"][-1]))
        print(f"step {step}: {len(toks)} tokens, {len(taps)} taps, argmax {top}", file=sys.stderr)

    meta = {
        "lockstep.trace": "1",
        "model": name,
        "model_sha256": sha256(args.model),
        "backend": "hf-transformers",
        "filter": "",
        # Taps inside the attention module that transformers never exposes: `lockstep diff`
        # looks through them to the taps both sides have (docs/taps.md).
        "hidden_taps": "q_rope,k_rope,k_read,v_read,kq,kq_softmax",
        "steps": json.dumps(steps),
    }
    save_file(out, args.output, metadata=meta)
    print(f"wrote {args.output}: {len(steps)} steps, {len(out)} tensors", file=sys.stderr)


if __name__ == "__main__":
    main()
