"""Drives `lockstep serve` with the official `openai` Python client.

Usage: python3 openai_client.py BASE_URL MODEL API_KEY
Exits non-zero (with the reason) on the first failed check.
"""

import sys

try:
    import openai
except ImportError:
    sys.exit("the `openai` Python package is not installed: run `python3 -m pip install openai==3.54.0`")

base_url, model, api_key = sys.argv[1], sys.argv[2], sys.argv[3]
client = openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=0, timeout=300)
checks = 0


def check(cond, what):
    global checks
    if not cond:
        sys.exit(f"FAILED: {what}")
    checks += 1


# Models.
ids = [m.id for m in client.models.list().data]
check(ids == [model], f"models.list() gives {ids}")

# Completions, whole and streamed: the same text.
prompt = "The capital of Germany is Berlin. The capital of France is"
c = client.completions.create(model=model, prompt=prompt, max_tokens=10, temperature=0)
check(c.object == "text_completion", "completion object")
check(len(c.choices) == 1 and c.choices[0].finish_reason == "length", f"completion choices {c.choices}")
check(c.usage.completion_tokens == 10 and c.usage.prompt_tokens > 5, f"completion usage {c.usage}")
text = c.choices[0].text
check(len(text) > 0, "completion text is empty")
parts, finish, usage = [], None, None
for chunk in client.completions.create(
    model=model, prompt=prompt, max_tokens=10, temperature=0, stream=True,
    stream_options={"include_usage": True},
):
    if chunk.usage is not None:
        usage = chunk.usage
    for ch in chunk.choices:
        parts.append(ch.text)
        finish = ch.finish_reason or finish
check("".join(parts) == text, f"streamed {''.join(parts)!r} vs whole {text!r}")
check(finish == "length", f"streamed finish {finish}")
check(usage is not None and usage.completion_tokens == 10, f"stream usage {usage}")

# Completion logprobs.
c = client.completions.create(model=model, prompt=prompt, max_tokens=4, temperature=0, logprobs=3)
lp = c.choices[0].logprobs
check(len(lp.tokens) == 4 and len(lp.token_logprobs) == 4, f"completion logprobs {lp}")
check(all(len(t) == 3 for t in lp.top_logprobs), "three top logprobs per token")
check(all(v <= 0 for v in lp.token_logprobs), "logprobs are <= 0")

# Chat, whole and streamed, with logprobs.
messages = [{"role": "system", "content": "You are brief."}, {"role": "user", "content": "Name a colour."}]
r = client.chat.completions.create(
    model=model, messages=messages, max_completion_tokens=12, temperature=0,
    logprobs=True, top_logprobs=2,
)
check(r.object == "chat.completion", "chat object")
msg = r.choices[0].message
check(msg.role == "assistant" and msg.content, f"chat message {msg}")
content_lp = r.choices[0].logprobs.content
check(len(content_lp) == r.usage.completion_tokens, "one logprob entry per generated token")
check(all(len(t.top_logprobs) == 2 for t in content_lp), "two top logprobs per token")
lockstep = r.choices[0].model_extra.get("lockstep")
check(isinstance(lockstep, dict) and "monitor_warnings" in lockstep, f"lockstep field {lockstep}")
parts, finish, role = [], None, None
for chunk in client.chat.completions.create(
    model=model, messages=messages, max_completion_tokens=12, temperature=0, stream=True,
):
    for ch in chunk.choices:
        role = ch.delta.role or role
        parts.append(ch.delta.content or "")
        finish = ch.finish_reason or finish
check(role == "assistant", "first chunk carries the role")
check("".join(parts) == msg.content, f"streamed chat {''.join(parts)!r} vs {msg.content!r}")
check(finish == r.choices[0].finish_reason, "same finish reason")

# Seeded sampling is reproducible, n gives distinct choices.
a = client.chat.completions.create(model=model, messages=messages, max_tokens=8, temperature=1.0, seed=11, n=2)
b = client.chat.completions.create(model=model, messages=messages, max_tokens=8, temperature=1.0, seed=11, n=2)
check([c.message.content for c in a.choices] == [c.message.content for c in b.choices], "seeded runs repeat")
check(len(a.choices) == 2 and [c.index for c in a.choices] == [0, 1], "n = 2 choices")

# Stop strings.
s = client.completions.create(model=model, prompt=prompt, max_tokens=10, temperature=0, stop=[text[3:7]])
check(s.choices[0].text == text[:3] and s.choices[0].finish_reason == "stop", f"stop: {s.choices[0]}")

# Errors come back as the client's exception types, naming the field.
try:
    client.completions.create(model="no-such-model", prompt="x", max_tokens=2)
    check(False, "unknown model accepted")
except openai.NotFoundError as e:
    check(e.status_code == 404, "404 for an unknown model")
try:
    client.chat.completions.create(model=model, messages=messages, temperature=-1)
    check(False, "negative temperature accepted")
except openai.BadRequestError as e:
    check(e.body.get("param") == "temperature", f"error names the field: {e.body}")
try:
    openai.OpenAI(base_url=base_url, api_key="wrong", max_retries=0).models.list()
    check(False, "wrong API key accepted")
except openai.AuthenticationError:
    check(True, "401")

print(f"ok: {checks} checks with openai {openai.__version__}")
