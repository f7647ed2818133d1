#!/usr/bin/env python3
"""llama.cpp as an independent peer for the GGUF export tests (tests/tests/compile_gguf.rs).

Usage: llamacpp_logits.py MODEL.gguf OUT_DIR "prompt" ["prompt" ...]
Loads MODEL.gguf with llama-cpp-python (2 threads, f32 KV cache), and for each prompt writes
OUT_DIR/p{i}.f32 (logits at every position, row-major [n_pos, vocab], little-endian f32)
and OUT_DIR/result.json ({"vocab": V, "prompts": [{"ids": [...]}, ...]}).
Exits 3 when llama_cpp cannot be imported, 4 when the model does not load.
"""
import json, os, sys

try:
    import numpy as np
    from llama_cpp import Llama
except Exception as e:  # noqa: BLE001
    print(f"llama_cpp unavailable: {e}", file=sys.stderr)
    sys.exit(3)

model, out, prompts = sys.argv[1], sys.argv[2], sys.argv[3:]
try:
    llm = Llama(model_path=model, n_ctx=512, n_threads=2, logits_all=True, verbose=False,
                seed=0, type_k=0, type_v=0)
except Exception as e:  # noqa: BLE001
    print(f"llama.cpp could not load {model}: {e}", file=sys.stderr)
    sys.exit(4)
os.makedirs(out, exist_ok=True)
res = {"vocab": llm.n_vocab(), "prompts": []}
for i, p in enumerate(prompts):
    ids = llm.tokenize(p.encode(), add_bos=False, special=True)
    llm.reset()
    llm.eval(ids)
    np.asarray(llm.scores[: len(ids)], dtype="<f4").tofile(os.path.join(out, f"p{i}.f32"))
    res["prompts"].append({"ids": ids})
json.dump(res, open(os.path.join(out, "result.json"), "w"))
