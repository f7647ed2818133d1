#!/usr/bin/env python3
"""Goldens for the model-family fixtures (tests/fixtures/families/<family>/model.gguf, written by
make_tiny_families.py): for each family, the independent numpy reference (reference_forward.py)
and llama.cpp (llama-cpp-python, F32 KV cache, logits at every position) on the same token ids,
checked against each other, written to <family>/golden.json.

Checks (the script fails when one does not hold; the reference is then wrong about llama.cpp's
semantics and must be fixed, not the tolerance):
  - |reference - llama.cpp| <= 1e-4 on the logits at every prompt position, and at every position
    of prompt + greedy continuation (llama.cpp decoding token by token through its KV cache, the
    reference recomputing the whole sequence; this reaches position 27, past the 4-token windows);
  - the same top-1 at every prompt position, and the same 16 greedy tokens.

golden.json fields: family, arch, prompt, ids (llama.cpp's tokenization, BOS as the file's
tokenizer.ggml.add_bos_token says), dims, reference_logits [n_pos][vocab] (rounded to 1e-6),
reference_top1, reference_greedy (16), llamacpp_top1, llamacpp_greedy (16),
max_abs_diff (prompt positions), max_abs_diff_with_greedy (all 28 positions), and for the GELU
families reference_logits_exact_gelu + exact_gelu_max_abs_diff (the reference with the exact
tanh-approximation GELU instead of ggml's f16-table GELU; see reference_forward.py).

Usage: PY=$HOME/.cache/lql-ci/venv/bin/python   (numpy, gguf, llama-cpp-python; see .ci/run)
       $PY tests/tools/make_tiny_families.py && $PY tests/tools/family_goldens.py [DIR] [--only F ...]
"""
import argparse, json, os, sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from reference_forward import TIE_REL, load, forward  # noqa: E402
from make_tiny_families import FAMILIES, PROMPT  # noqa: E402

ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
GREEDY = 16
TOL = 1e-4


def llamacpp(path, prompt):
    from llama_cpp import Llama
    llm = Llama(model_path=path, n_ctx=64, n_batch=64, n_threads=1, n_threads_batch=1, logits_all=True,
                verbose=False, seed=0, type_k=0, type_v=0)
    # add_bos=True means "add the special tokens the vocabulary asks for" (llama_tokenize add_special)
    ids = llm.tokenize(prompt.encode(), add_bos=True, special=False)
    llm.reset()
    llm.eval(ids)
    logits = np.array(llm.scores[: len(ids)], dtype=np.float32)
    greedy, seq = [], list(ids)
    for _ in range(GREEDY):
        nxt = int(np.argmax(llm.scores[len(seq) - 1]))
        greedy.append(nxt)
        seq.append(nxt)
        if len(greedy) < GREEDY:
            llm.eval([nxt])
    all_logits = np.array(llm.scores[: len(seq) - 1], dtype=np.float32)
    return ids, logits, greedy, all_logits


def resolve_gelu_ties(cfg, T, seq, target):
    """The set of GELU f16-rounding ties (reference_forward.gelu_ggml) which, rounded to the
    other side, bring the reference closest to llama.cpp's logits `target` (greedy search on the
    summed squared difference, ties nearest the midpoint first). Returns (flips, logits)."""
    def run(fl, probe=None):
        return forward(dict(cfg, gelu_flips=fl, gelu_probe=probe), T, seq)

    flips = set()
    best = run(flips)
    err = float(((best - target) ** 2).sum())
    for _ in range(4):
        probe = []
        run(flips, probe)
        changed = False
        for l, s_, j, _rel in sorted(probe, key=lambda t: t[3]):
            trial = flips ^ {(l, s_, j)}
            out = run(trial)
            e = float(((out - target) ** 2).sum())
            if e < 0.5 * err:
                flips, best, err, changed = trial, out, e, True
        if not changed:
            break
    return flips, best


def rounded(a):
    return [[round(float(v), 6) for v in row] for row in a]


def run(family, fdir):
    path = os.path.join(fdir, family, "model.gguf")
    cfg, T = load(path)
    ids, lc, lc_greedy, lc_all = llamacpp(path, PROMPT)
    ref = forward(cfg, T, ids)
    greedy, seq = [], list(ids)
    for _ in range(GREEDY):
        nxt = int(forward(cfg, T, seq)[-1].argmax())
        greedy.append(nxt)
        seq.append(nxt)
    ref_all = forward(cfg, T, seq[:-1])
    diff = float(np.abs(ref - lc).max())
    diff_all = float(np.abs(ref_all - lc_all).max())
    top1_ref, top1_lc = ref.argmax(-1).tolist(), lc.argmax(-1).tolist()
    ties = None
    if cfg["act"] == "gelu_ggml" and diff_all > TOL:
        flips, resolved = resolve_gelu_ties(cfg, T, seq[:-1], lc_all)
        ties = dict(tie_rel=TIE_REL, flipped=sorted([list(f) for f in flips]),
                    max_abs_diff=float(np.abs(resolved[: len(ids)] - lc).max()),
                    max_abs_diff_with_greedy=float(np.abs(resolved - lc_all).max()))
    dims = dict(hidden=cfg["d"], layers=cfg["n_layer"], heads=cfg["n_head"], kv_heads=cfg["n_kv"],
                head_dim=cfg["hd"], rotary_dims=cfg["n_rot"] if cfg["rope"] else 0, vocab=int(ref.shape[1]),
                ffn=cfg["ff"],
                sliding_window=cfg["window"], swa_layers=[l for l, s in enumerate(cfg["swa_layers"]) if s])
    if "blk.0.ffn_gate_inp.weight" in T:
        dims.update(experts=int(T["blk.0.ffn_gate_inp.weight"].shape[0]), experts_used=cfg["n_used"],
                    expert_ffn=int(T["blk.0.ffn_down_exps.weight"].shape[-1]))
    doc = dict(family=family, arch=cfg["arch"], prompt=PROMPT, ids=ids, dims=dims,
               reference_logits=rounded(ref), reference_top1=top1_ref, reference_greedy=greedy,
               llamacpp_top1=top1_lc, llamacpp_greedy=lc_greedy,
               max_abs_diff=diff, max_abs_diff_with_greedy=diff_all)
    if ties is not None:
        doc["gelu_ties"] = ties
    if cfg["act"] != "silu":
        exact, _ = load(path, exact_gelu=True)
        ref_x = forward(exact, T, ids)
        doc.update(reference_logits_exact_gelu=rounded(ref_x),
                   exact_gelu_max_abs_diff=float(np.abs(ref_x - ref).max()))
    out = os.path.join(fdir, family, "golden.json")
    with open(out, "w") as f:
        json.dump(doc, f, separators=(",", ":"))
        f.write("\n")
    close = (diff <= TOL and diff_all <= TOL) or (ties is not None and ties["max_abs_diff_with_greedy"] <= TOL)
    ok = close and top1_ref == top1_lc and greedy == lc_greedy
    note = "" if ties is None else (f"; {len(ties['flipped'])} GELU f16 ties rounded the other way: "
                                    f"{ties['max_abs_diff']:.2e} (with greedy {ties['max_abs_diff_with_greedy']:.2e})")
    print(f"{family:9s} {cfg['arch']:9s} ids {len(ids):2d}  max|ref-llama.cpp| {diff:.2e} "
          f"(with greedy {diff_all:.2e}){note}  top1 {'==' if top1_ref == top1_lc else '!='}  "
          f"greedy {'==' if greedy == lc_greedy else '!='}  {'ok' if ok else 'MISMATCH'}")
    if not ok:
        print(f"  ref top1 {top1_ref}\n  lc  top1 {top1_lc}\n  ref greedy {greedy}\n  lc  greedy {lc_greedy}\n"
              f"  per-position max diff {np.abs(ref_all - lc_all).max(-1).round(6).tolist()}")
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dir", nargs="?", default=os.path.join(ROOT, "tests", "fixtures", "families"))
    ap.add_argument("--only", nargs="*", default=None)
    a = ap.parse_args()
    bad = [f for f in FAMILIES if (not a.only or f in a.only) and not run(f, a.dir)]
    if bad:
        sys.exit(f"reference and llama.cpp disagree on: {', '.join(bad)}")


if __name__ == "__main__":
    main()
