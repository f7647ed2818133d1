#!/usr/bin/env python3
"""Independent activation-patching reference (numpy): the golden grid for PATCH.

It runs tests/tools/reference_forward.py's float64 forward pass with its `hook` argument: a
clean run records the component at every layer and position, a corrupted run gives the
baseline, and one corrupted run per cell (layer x position) restores that cell's row from the
clean run. The metric is read off the last position's logits: logit_diff (a - b), logit (a)
or prob (a, softmax in float64).

Usage:
  PY=$(../shared/tools/pyenv.sh)
  $PY tests/tools/reference_patching.py MODEL.gguf --clean '[ids]' --corrupted '[ids]' \\
      --metric logit_diff 5099 2322 [--component resid_pre] [--layers 0-29] --out grid.json
"""
import argparse
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from reference_forward import forward, load  # noqa: E402


def score(logits, metric, toks):
    row = logits[-1].astype(np.float64)
    if metric == "logit_diff":
        return float(row[toks[0]] - row[toks[1]])
    if metric == "logit":
        return float(row[toks[0]])
    e = np.exp(row - row.max())
    return float(e[toks[0]] / e.sum())


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("--clean", required=True, help="JSON list of the clean prompt's token ids")
    ap.add_argument("--corrupted", required=True, help="JSON list of the corrupted prompt's token ids")
    ap.add_argument("--metric", nargs="+", required=True, help="logit_diff A B | logit A | prob A (token ids)")
    ap.add_argument("--component", default="resid_pre", choices=["resid_pre", "resid_mid", "attn_out", "mlp_out"])
    ap.add_argument("--layers", default=None, help="a-b (default: every layer)")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    clean_ids, corrupt_ids = json.loads(a.clean), json.loads(a.corrupted)
    if len(clean_ids) != len(corrupt_ids):
        sys.exit("the prompts must have the same token count")
    metric, toks = a.metric[0], [int(t) for t in a.metric[1:]]
    t0 = time.time()
    cfg, T = load(a.model)
    first, last = 0, cfg["n_layer"] - 1
    if a.layers:
        first, last = (int(x) for x in a.layers.split("-"))

    recorded = {}

    def record(site, layer, value):
        if site == a.component:
            recorded[layer] = value.copy()
        return value

    clean = score(forward(cfg, T, clean_ids, hook=record), metric, toks)
    corrupted = score(forward(cfg, T, corrupt_ids), metric, toks)
    cells = []
    for layer in range(first, last + 1):
        for pos in range(len(corrupt_ids)):
            def restore(site, l, value, layer=layer, pos=pos):
                if site == a.component and l == layer:
                    value = value.copy()
                    value[pos] = recorded[layer][pos]
                return value

            patched = score(forward(cfg, T, corrupt_ids, hook=restore), metric, toks)
            cells.append([layer, pos, patched])
    out = dict(model=os.path.basename(a.model), clean_ids=clean_ids, corrupted_ids=corrupt_ids,
               metric=[metric] + toks, component=a.component, clean=clean, corrupted=corrupted,
               cells=cells, seconds=round(time.time() - t0, 1))
    with open(a.out, "w") as f:
        json.dump(out, f, indent=0)
    print(json.dumps(dict(clean=clean, corrupted=corrupted, cells=len(cells), seconds=out["seconds"])))


if __name__ == "__main__":
    main()
