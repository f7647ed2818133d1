#!/usr/bin/env python3
"""Independent checks of constrained generations.

Reads a JSON list of cases on stdin:
  {"kind": "schema", "schema": {...}, "outputs": [{"text": "...", "tokens": [...]}]}
  {"kind": "gbnf", "grammar": "...", "outputs": [{"text": "...", "tokens": [...]}]}
and prints one JSON list of results, one per case: {"ok": n, "failures": ["why", ...]}.

A schema case validates each text as JSON with the `jsonschema` package (Draft 2020-12).
A GBNF case replays each output's token ids through llama.cpp's own grammar sampler
(llama-cpp-python's `llama_sampler_init_grammar` on the model's vocabulary, argv[1]): every
token must keep a finite logit when the sampler is applied to it alone, and the end-of-
sequence token must be allowed after the last one (the text is complete) unless the
output says `"complete": false` (it was cut at its token limit).
"""

import ctypes
import json
import math
import sys


def check_schema(case):
    import jsonschema

    validator = jsonschema.Draft202012Validator(case["schema"])
    failures = []
    for i, out in enumerate(case["outputs"]):
        try:
            value = json.loads(out["text"])
        except json.JSONDecodeError as e:
            failures.append(f"output {i}: not JSON ({e}): {out['text']!r}")
            continue
        errors = sorted(validator.iter_errors(value), key=str)
        if errors:
            failures.append(f"output {i}: {errors[0].message}: {out['text']!r}")
    return failures


class Vocab:
    def __init__(self, model_path):
        import llama_cpp as L

        self.L = L
        L.llama_backend_init()
        params = L.llama_model_default_params()
        params.vocab_only = True
        self.model = L.llama_model_load_from_file(model_path.encode(), params)
        if not self.model:
            raise SystemExit(f"llama.cpp could not load {model_path}")
        self.vocab = L.llama_model_get_vocab(self.model)
        self.eos = L.llama_vocab_eos(self.vocab)

    def allowed(self, sampler, token):
        L = self.L
        data = (L.llama_token_data * 1)()
        data[0].id = token
        data[0].logit = 0.0
        data[0].p = 0.0
        arr = L.llama_token_data_array(data, 1, -1, False)
        L.llama_sampler_apply(sampler, ctypes.byref(arr))
        return math.isfinite(data[0].logit)

    def check_gbnf(self, case):
        L = self.L
        failures = []
        for i, out in enumerate(case["outputs"]):
            sampler = L.llama_sampler_init_grammar(
                self.vocab, case["grammar"].encode(), b"root"
            )
            if not sampler:
                return [f"llama.cpp could not parse the grammar"]
            try:
                bad = None
                for j, tok in enumerate(out["tokens"]):
                    if not self.allowed(sampler, tok):
                        bad = f"token {j} ({tok}) is not allowed"
                        break
                    L.llama_sampler_accept(sampler, tok)
                if bad is None and out.get("complete", True) and not self.allowed(sampler, self.eos):
                    bad = "the text is not complete (end of sequence not allowed)"
                if bad is not None:
                    failures.append(f"output {i}: {bad}: {out['text']!r}")
            finally:
                L.llama_sampler_free(sampler)
        return failures


def main():
    cases = json.load(sys.stdin)
    vocab = None
    results = []
    for case in cases:
        if case["kind"] == "schema":
            failures = check_schema(case)
        elif case["kind"] == "gbnf":
            if vocab is None:
                vocab = Vocab(sys.argv[1])
            failures = vocab.check_gbnf(case)
        else:
            raise SystemExit(f"unknown case kind {case['kind']!r}")
        results.append(
            {"ok": len(case["outputs"]) - len(failures), "failures": failures}
        )
    json.dump(results, sys.stdout)


if __name__ == "__main__":
    main()
