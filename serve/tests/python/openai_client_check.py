"""The official `openai` Python client against `lql serve` (run by serve/tests/openai_client.rs).

Usage: python3 openai_client_check.py BASE_URL EXPECT_JSON

EXPECT_JSON holds the engine's own answers for the same prompts (GENERATE … TEMPERATURE 0
text, INFER's probabilities), computed by the Rust test through an lql connection. Prints
one line per check and `N passed, 0 failed`; exits 1 on the first mismatch.
"""

import json
import math
import sys
from urllib.parse import urlparse

import openai

base, expect_path = sys.argv[1], sys.argv[2]
assert urlparse(base).hostname == "127.0.0.1", "this check talks to 127.0.0.1 only"
expect = json.load(open(expect_path))
client = openai.OpenAI(base_url=base + "/v1", api_key="unused", max_retries=0, timeout=300)
passed = 0


def check(name, cond, detail=""):
    global passed
    if not cond:
        print(f"FAIL {name}: {detail}")
        print(f"{passed} passed, 1 failed")
        sys.exit(1)
    passed += 1
    print(f"ok {name}")


models = client.models.list()
check("models.list", len(models.data) == 1 and models.data[0].id, models)

c = client.completions.create(
    model=models.data[0].id, prompt=expect["prompt"], max_tokens=12, temperature=0, logprobs=5
)
check("completions greedy == GENERATE", c.choices[0].text == expect["completion"], repr(c.choices[0].text))
check("completions usage", c.usage.completion_tokens == len(c.choices[0].logprobs.tokens), c.usage)
for tok, prob in expect["infer"]:
    got = c.choices[0].logprobs.top_logprobs[0].get(tok)
    check(f"logprob {tok!r} == ln INFER prob", got is not None and abs(got - math.log(prob)) < 1e-4, f"{got} vs {math.log(prob)}")

msgs = [{"role": "user", "content": expect["question"]}]
r = client.chat.completions.create(model="m", messages=msgs, max_tokens=16, temperature=0)
check("chat greedy == GENERATE on the rendered template", r.choices[0].message.content == expect["chat"], repr(r.choices[0].message.content))

stream = client.chat.completions.create(model="m", messages=msgs, max_tokens=16, temperature=0, stream=True)
text = "".join((ch.choices[0].delta.content or "") for ch in stream if ch.choices)
check("chat streaming == not streaming", text == expect["chat"], repr(text))

stream = client.completions.create(model="m", prompt=expect["prompt"], max_tokens=12, temperature=0, stream=True)
text = "".join(ch.choices[0].text for ch in stream if ch.choices)
check("completions streaming == GENERATE", text == expect["completion"], repr(text))

resp = client.responses.create(model="m", input=expect["question"], max_output_tokens=16, temperature=0)
check("responses output_text == chat", resp.output_text == expect["chat"], repr(resp.output_text))

try:
    client.chat.completions.create(
        model="m", messages=msgs, tools=[{"type": "function", "function": {"name": "f", "parameters": {}}}]
    )
    check("tools refused", False, "no error")
except openai.BadRequestError as e:
    check("tools refused", "not supported yet" in str(e), str(e))

print(f"{passed} passed, 0 failed")
