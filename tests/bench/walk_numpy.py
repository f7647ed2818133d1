#!/usr/bin/env python3
"""Peer for `cargo run -p lql-tests --release --example walk_bench`: WALK EMBEDDING over all
layers, TOP 10, with numpy on gate matrices dequantized to f32 beforehand (the decode is
not timed), top-10 by |score| via argpartition.

Usage: PY=$(/work/shared/tools/pyenv.sh); $PY tests/bench/walk_numpy.py MODEL.gguf [ITERS]
"""
import sys, time

import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize


def main():
    path = sys.argv[1]
    iters = int(sys.argv[2]) if len(sys.argv) > 2 else 200
    r = GGUFReader(path)
    t = {x.name: x for x in r.tensors}
    n_layers = sum(1 for n in t if n.endswith("ffn_gate.weight"))
    emb = t["token_embd.weight"]
    E = dequantize(emb.data, emb.tensor_type).astype(np.float32).reshape(int(emb.shape[1]), int(emb.shape[0]))
    G = []
    for l in range(n_layers):
        g = t[f"blk.{l}.ffn_gate.weight"]
        G.append(np.ascontiguousarray(dequantize(g.data, g.tensor_type).astype(np.float32).reshape(int(g.shape[1]), int(g.shape[0]))))
    q = E[314]  # last token of "The capital of France is"

    def walk():
        out = []
        for g in G:
            s = g @ q
            idx = np.argpartition(-np.abs(s), 10)[:10]
            idx = idx[np.argsort(-np.abs(s[idx]), kind="stable")]
            out.append((idx, s[idx]))
        return out

    for _ in range(10):
        walk()
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        res = walk()
        times.append((time.perf_counter() - t0) * 1e3)
    nbytes = sum(g.nbytes for g in G)
    print(f"numpy walk_embedding  median {np.median(times):.3f} ms over {iters} runs; "
          f"f32 gate bytes read per walk {nbytes} ({nbytes / 1e6:.1f} MB); "
          f"L0 top: {[(int(i), round(float(v), 3)) for i, v in zip(res[0][0][:3], res[0][1][:3])]}")


if __name__ == "__main__":
    main()
