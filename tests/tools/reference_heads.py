#!/usr/bin/env python3
"""Independent reference for the attention-head tables (numpy, float64): attention patterns,
head scores and each head's direct contribution to a token's logit.

It runs tests/tools/reference_forward.py's forward pass with its trace (attention weights per
layer) and a `z` hook (each head's output before attn_output, at every position), then:

- patterns: att[layer][head, query, key] for the layers asked;
- scores, per layer and head, over the prompt's queries q:
    prev_token      mean over q >= 1 of the weight on q-1;
    duplicate_token mean, over the q whose token occurred before, of the weight on those
                    earlier occurrences (None when no token repeats);
    induction       mean, over the q with targets, of the weight on the positions j+1 right
                    after an earlier occurrence j of q's token (j+1 < q) (None without any);
- contributions at the last position to token T's logit: head h's term is
  c(W_O[:, h] z_h) with c(v) = sum_i (v_i - mean(v)) w_i u_i / rms(x_final) (the mean only
  for a LayerNorm), w the final norm's weight, u the unembedding row of T, x_final the
  residual after the last layer: TRACE's attn_contrib, split by head (pre-norm families).

Usage:
  PY=$(../shared/tools/pyenv.sh)
  $PY tests/tools/reference_heads.py MODEL.gguf --ids '[…]' --token ID --layers 0,14,29 --out heads.json
"""
import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from reference_forward import forward, load  # noqa: E402


def scores(att, ids):
    """prev_token, duplicate_token, induction for one layer: lists over heads."""
    n_heads, n, _ = att.shape
    out = []
    for h in range(n_heads):
        a = att[h]
        prev = float(np.mean([a[q, q - 1] for q in range(1, n)])) if n > 1 else None
        dup, ind = [], []
        for q in range(n):
            earlier = [j for j in range(q) if ids[j] == ids[q]]
            if earlier:
                dup.append(sum(a[q, j] for j in earlier))
            targets = [j + 1 for j in earlier if j + 1 < q]
            if targets:
                ind.append(sum(a[q, t] for t in targets))
        out.append([prev, float(np.mean(dup)) if dup else None, float(np.mean(ind)) if ind else None])
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("--ids", required=True)
    ap.add_argument("--token", type=int, required=True)
    ap.add_argument("--layers", default="0", help="comma-separated layers whose patterns are kept")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    ids = json.loads(a.ids)
    cfg, T = load(a.model)
    if cfg["placement"] not in ("pre", "parallel"):
        sys.exit("per-head contributions here are for pre-norm blocks")
    z = {}

    def hook(site, layer, value):
        if site == "z":
            z[layer] = value.copy()
        return value

    tr = {}
    forward(cfg, T, ids, tr, hook=hook)
    n_layer, nh, hd_v = cfg["n_layer"], cfg["n_head"], cfg["hd_v"]
    x = tr[f"resid_{n_layer - 1}"][-1].astype(np.float64)
    w = T["output_norm.weight"].astype(np.float64)
    u = T.get("output.weight", T["token_embd.weight"])[a.token].astype(np.float64)
    layer_norm = cfg["norm"] == "layer"
    mean = (lambda v: v.mean()) if layer_norm else (lambda v: 0.0)
    rms = np.sqrt(((x - mean(x)) ** 2).mean() + cfg["eps"])
    coef = w * u / rms

    def c(v):
        return float(((v - mean(v)) * coef).sum())

    contrib = []
    for l in range(n_layer):
        W = T[f"blk.{l}.attn_output.weight"].astype(np.float64)  # [d, n_head*hd_v]
        zl = z[l][-1].astype(np.float64)
        contrib.append([c(W[:, h * hd_v:(h + 1) * hd_v] @ zl[h * hd_v:(h + 1) * hd_v]) for h in range(nh)])
    keep = [int(s) for s in a.layers.split(",")]
    out = dict(
        model=os.path.basename(a.model), ids=ids, token=a.token,
        patterns={str(l): tr[f"att_{l}"].tolist() for l in keep},
        scores=[scores(tr[f"att_{l}"], ids) for l in range(n_layer)],
        contrib=contrib,
        attn_contrib=[c(tr[f"attn_delta_{l}"][-1].astype(np.float64)) for l in range(n_layer)],
    )
    with open(a.out, "w") as f:
        json.dump(out, f)
    print(json.dumps(dict(layers=n_layer, heads=nh, kept=keep)))


if __name__ == "__main__":
    main()
