#!/usr/bin/env python3
"""Record a lockstep trace with Hugging Face transformers, attention internals included.

Loads a GGUF with transformers (`from_pretrained(dir, gguf_file=...)`, weights dequantized to
float32, eager attention), runs the prompt and teacher-forced decode steps, and writes every
tensor it can observe under transformers' own names; lockstep applies its shipped
`transformers` name map (crates/verify/maps/transformers.map) when it reads the trace:

    python3 tools/hf_trace.py --model ~/.cache/lockstep/models/gemma-3-270m-q4_k_m.gguf \
        --ids 2,818,5279,529,7001,563 --force-ids 496,236743 -o hf.safetensors
    lockstep diff -m gemma3 --ref ref hf.safetensors

What is recorded, and how (each value is the tensor transformers' own code passed on):
- module outputs (forward hooks): embed_tokens, norms, q/k/v/o projections, q_norm/k_norm,
  the MLP projections, each decoder layer, the final norm, lm_head; and module inputs
  (pre-hooks) where an op is not a module: o_proj's input (heads merged), down_proj's input
  (act(gate) * up), the FFN norm's input (the residual after attention);
- inside attention, by patching the modeling module's functions for the duration of a call:
  `apply_rotary_pos_emb` (its outputs: the rotated q and k), `repeat_kv` (its inputs: the K/V
  the cache returned, before the GQA expansion) and `nn.functional.softmax` (its input: the
  scaled, masked scores; its output: the probabilities). transformers' attention code itself
  runs unchanged.

`--all-logits` is implied: the prompt step records every position's logits (lockstep then
computes them all too). `--break-attention` multiplies the scores by 2 inside eager attention
(a seeded bug for the walkthrough, docs/walkthrough-foreign.md).

Needs: pip install torch transformers gguf numpy (the trace is written with
tools/writers/lockstep_trace.py).
"""

import argparse
import os
import sys
import types

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "writers"))
from lockstep_trace import TraceWriter, read_trace  # noqa: E402


def parse_ids(s):
    return [int(x) for x in s.replace(" ", ",").split(",") if x]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="GGUF file")
    ap.add_argument("--like", help="take prompt and decode ids from this trace")
    ap.add_argument("--ids", help="prompt ids, e.g. 1,2,3")
    ap.add_argument("--force-ids", default="", help="teacher-forced decode ids")
    ap.add_argument("--break-attention", action="store_true", help="seeded bug: scores x2 before softmax")
    ap.add_argument("-o", "--output", required=True)
    args = ap.parse_args()

    import torch
    from transformers import AutoModelForCausalLM

    if args.like:
        _, steps, _ = read_trace(args.like)
        steps.sort(key=lambda s: s["step"])
        prompt, force = steps[0]["tokens"], [s["tokens"][0] for s in steps[1:]]
    elif args.ids:
        prompt, force = parse_ids(args.ids), parse_ids(args.force_ids)
    else:
        sys.exit("give --like TRACE or --ids")

    d, name = os.path.split(os.path.abspath(args.model))
    torch.set_grad_enabled(False)
    model = AutoModelForCausalLM.from_pretrained(d, gguf_file=name, dtype=torch.float32, attn_implementation="eager")
    model.eval()
    modeling = sys.modules[type(model).__module__]

    taps = []  # (name, array) of the current step, in execution order

    def put(name, t):
        taps.append((name, t.detach().to(torch.float32).cpu().numpy().copy()))

    # --- module boundaries
    names = {m: n for n, m in model.named_modules()}
    current = {"attn": None}

    def out_hook(mod, _inp, out):
        put(names[mod], out[0] if isinstance(out, tuple) else out)

    def in_hook(mod, inp):
        put(names[mod] + ":input", inp[0])

    def attn_enter(mod, _inp):
        current["attn"] = names[mod]

    inner = model.model
    hooked = [inner.embed_tokens, inner.norm, model.lm_head]
    for layer in inner.layers:
        a = layer.self_attn
        a.register_forward_pre_hook(attn_enter)
        hooked += [layer, layer.input_layernorm, a.q_proj, a.k_proj, a.v_proj, a.o_proj]
        hooked += [getattr(a, n) for n in ("q_norm", "k_norm") if hasattr(a, n)]
        hooked += [layer.mlp.gate_proj, layer.mlp.up_proj, layer.mlp.down_proj]
        hooked += [getattr(layer, n) for n in ("post_attention_layernorm", "pre_feedforward_layernorm",
                                                "post_feedforward_layernorm") if hasattr(layer, n)]
        for m in (a.o_proj, layer.mlp.down_proj):
            m.register_forward_pre_hook(in_hook)
        for n in ("post_attention_layernorm", "pre_feedforward_layernorm"):
            if hasattr(layer, n):
                getattr(layer, n).register_forward_pre_hook(in_hook)
    for m in hooked:
        m.register_forward_hook(out_hook)

    # --- inside attention: wrap the modeling module's own functions
    orig_rope = modeling.apply_rotary_pos_emb
    orig_attention = modeling.eager_attention_forward

    def rope(q, k, *a, **kw):
        qe, ke = orig_rope(q, k, *a, **kw)
        put(current["attn"] + ":q_rope", qe)
        put(current["attn"] + ":k_rope", ke)
        return qe, ke

    def attention(module, query, key, value, *a, **kw):
        prefix = names[module]
        orig_repeat = modeling.repeat_kv
        seen = []

        def repeat_kv(x, n_rep):
            put(prefix + (":k_read" if not seen else ":v_read"), x)
            seen.append(1)
            return orig_repeat(x, n_rep)

        def softmax(x, *sa, **skw):
            if args.break_attention:
                x = x * 2.0
            put(prefix + ":scores", x)
            p = torch.nn.functional.softmax(x, *sa, **skw)
            put(prefix + ":probs", p)
            return p

        functional = types.SimpleNamespace(**{k: getattr(torch.nn.functional, k) for k in dir(torch.nn.functional)
                                              if not k.startswith("__")})
        functional.softmax = softmax
        nn_proxy = types.SimpleNamespace(**{k: getattr(torch.nn, k) for k in dir(torch.nn) if not k.startswith("__")})
        nn_proxy.functional = functional
        orig_nn = modeling.nn
        modeling.repeat_kv, modeling.nn = repeat_kv, nn_proxy
        try:
            return orig_attention(module, query, key, value, *a, **kw)
        finally:
            modeling.repeat_kv, modeling.nn = orig_repeat, orig_nn

    modeling.apply_rotary_pos_emb = rope
    modeling.eager_attention_forward = attention

    w = TraceWriter(args.output, backend="hf-transformers", model=args.model, namemap="transformers",
                    extra={"engine_version": f"transformers {__import__('transformers').__version__}, "
                                             f"torch {torch.__version__}, float32, eager attention"})
    past = None
    pos = 0
    for step, toks in enumerate([prompt] + [[t] for t in force]):
        taps.clear()
        positions = list(range(pos, pos + len(toks)))
        r = model(input_ids=torch.tensor([toks]), past_key_values=past, use_cache=True,
                  position_ids=torch.tensor([positions]))
        past = r.past_key_values
        w.step(toks, positions)
        seen = set()
        for n, a in taps:
            if n in seen:
                sys.exit(f"{n} recorded twice in step {step}: the hooks do not match this transformers version")
            seen.add(n)
            w.tap(n, np.ascontiguousarray(a, dtype=np.float32))
        top = int(np.argmax(r.logits[0, -1].to(torch.float32).numpy()))
        print(f"step {step}: {len(toks)} tokens, {len(taps)} tensors, argmax {top}", file=sys.stderr)
        pos += len(toks)
    w.close()
    print(f"wrote {args.output}", file=sys.stderr)


if __name__ == "__main__":
    main()
