#!/usr/bin/env python3
"""The official openai client against /v1/embeddings (serve/tests/embeddings.rs).

Usage: openai_embeddings_check.py BASE_URL WIDTH
Checks: vectors of the model's width and unit length, the same vectors twice, float and
base64 (the client's default) encodings equal, and for 10 triples (sentence, paraphrase,
unrelated) whether cosine similarity ranks the paraphrase above the unrelated sentence.
Prints "ranked K/10" and "N passed, M failed"; exits 1 on any failed check.
"""
import math, sys

from openai import OpenAI

url, width = sys.argv[1], int(sys.argv[2])
client = OpenAI(base_url=url + "/v1", api_key="none")
TRIPLES = [
    ("The cat sat on the mat.", "A cat was sitting on the rug.", "Stock markets fell sharply today."),
    ("I love eating pizza.", "Pizza is my favourite food.", "The train leaves at noon."),
    ("It is raining outside.", "The weather is wet and rainy.", "She plays the violin."),
    ("He bought a new car.", "He purchased a brand new automobile.", "The soup needs more salt."),
    ("The meeting was cancelled.", "They called off the meeting.", "Mountains are covered in snow."),
    ("My phone battery is dead.", "My mobile has run out of charge.", "The river flows to the sea."),
    ("She is learning French.", "She studies the French language.", "The bridge was built in 1900."),
    ("The store opens at nine.", "The shop starts business at 9 am.", "Dolphins are intelligent animals."),
    ("The movie was very funny.", "That film made me laugh a lot.", "Tax forms are due in April."),
    ("Please close the window.", "Could you shut the window?", "Jupiter is the largest planet."),
]
passed = failed = 0


def check(ok, what):
    global passed, failed
    if ok:
        passed += 1
    else:
        failed += 1
        print("FAILED:", what)


def cos(a, b):
    return sum(x * y for x, y in zip(a, b)) / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))


flat = [s for t in TRIPLES for s in t]
r = client.embeddings.create(model="x", input=flat)
vecs = [d.embedding for d in r.data]
check(len(vecs) == len(flat), "one vector per input")
check(all(len(v) == width for v in vecs), f"vectors of width {width}")
check(all(abs(math.sqrt(sum(x * x for x in v)) - 1) < 1e-4 for v in vecs), "unit length")
check(r.usage.prompt_tokens > 0, "usage counts tokens")
again = client.embeddings.create(model="x", input=flat[:3], encoding_format="float")
check([d.embedding for d in again.data] == [[float(x) for x in v] for v in vecs[:3]]
      or all(max(abs(p - q) for p, q in zip(a.embedding, b)) < 1e-6 for a, b in zip(again.data, vecs[:3])),
      "deterministic, and float equals base64")
ranked = 0
for i in range(len(TRIPLES)):
    a, p, u = vecs[3 * i], vecs[3 * i + 1], vecs[3 * i + 2]
    if cos(a, p) > cos(a, u):
        ranked += 1
    else:
        print(f"not ranked: {TRIPLES[i]} para {cos(a, p):.4f} unrelated {cos(a, u):.4f}")
print(f"ranked {ranked}/10")
check(ranked >= 9, "cosine similarity ranks the paraphrase first for 9 of 10")
print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
