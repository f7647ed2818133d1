#!/usr/bin/env python3
"""Goldens for exec/tests/moe.rs: for every tiny MoE GGUF in IN_DIR (written by the
`write_moe_fixtures` test), the independent numpy reference's logits at every position,
its routed experts per layer and position, and its greedy 16 continuation; and, for F32
softmax-routed files that llama.cpp runs the same way (its llama and qwen2moe graphs), the
logits and greedy continuation of llama.cpp (llama-cpp-python, F32 KV cache).

Usage: PY=$(/work/shared/tools/pyenv.sh --llamacpp); $PY moe_goldens.py IN_DIR OUT_DIR
"""
import json, os, sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from reference_forward import load, forward  # noqa: E402

GREEDY = 16


def llamacpp(path, ids):
    from llama_cpp import Llama
    llm = Llama(model_path=path, n_ctx=256, n_threads=2, logits_all=True, verbose=False, seed=0,
                type_k=0, type_v=0)
    llm.reset(); llm.eval(ids)
    logits = np.array(llm.scores[: len(ids)], dtype=np.float32)
    greedy, seq = [], list(ids)
    llm.reset(); llm.eval(seq)
    for _ in range(GREEDY):
        nxt = int(np.argmax(llm.scores[len(seq) - 1]))
        greedy.append(nxt); seq.append(nxt)
        llm.eval([nxt])
    return logits, greedy


def main():
    src, out = sys.argv[1], sys.argv[2]
    ids = json.load(open(os.path.join(src, "ids.json")))
    os.makedirs(out, exist_ok=True)
    for f in sorted(os.listdir(src)):
        if not f.endswith(".gguf"):
            continue
        name, path = f[:-5], os.path.join(src, f)
        cfg, T = load(path)
        tr = {}
        logits = forward(cfg, T, ids, tr)
        routes = [tr[f"routes_{l}"].tolist() for l in range(cfg["n_layer"])]
        greedy, seq = [], list(ids)
        for _ in range(GREEDY):
            nxt = int(forward(cfg, T, seq)[-1].argmax())
            greedy.append(nxt); seq.append(nxt)
        quantised = any(t.tensor_type != 0 for t in __import__("gguf").GGUFReader(path).tensors)
        doc = dict(model=f, arch=cfg["arch"], routing=cfg["routing"], ids=ids,
                   logits=[[round(float(v), 7) for v in row] for row in logits],
                   greedy=greedy, routes=routes, llamacpp_logits=None, llamacpp_greedy=None)
        note = ""
        if cfg["routing"] != "sigmoid_norm" and not quantised:
            lc, lg = llamacpp(path, ids)
            d = float(np.abs(lc - logits).max())
            doc.update(llamacpp_logits=[[round(float(v), 7) for v in row] for row in lc], llamacpp_greedy=lg,
                       llamacpp_vs_reference=d)
            note = f"llama.cpp vs reference {d:.2e}, greedy equal {lg == greedy}"
        json.dump(doc, open(os.path.join(out, name + ".json"), "w"), separators=(",", ":"))
        print(name, cfg["routing"], note)


if __name__ == "__main__":
    main()
