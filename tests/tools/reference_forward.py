#!/usr/bin/env python3
"""Independent reference forward pass for llama-family GGUF models (numpy, f32 math).

It is an oracle for parity tests, not part of the engine: it dequantizes every tensor
with the `gguf` package and runs the plain transformer math in float32.

Supported: general.architecture in {llama, qwen2, qwen2moe}; RMSNorm; RoPE (adjacent pairs
for llama GGUFs, whose Q/K rows are permuted by the converter; half-split "NEOX" for qwen2
and qwen2moe); GQA; optional Q/K/V biases; SwiGLU FFN, or routed experts (ffn_gate_inp +
ffn_{gate,up,down}_exps): llama (Mixtral) takes a softmax over the top-k router logits,
qwen2moe the top-k of a softmax over all experts (not renormalised), and
`{arch}.expert_gating_func` = 2 asks for sigmoid scores, top-k, renormalised; an optional
shared expert (ffn_{gate,up,down}_shexp) added to every position, scaled by
sigmoid(ffn_gate_inp_shexp . h) when that vector is present; tied or untied output head.

This is the project's copy of ../shared/tools/reference_forward.py, extended for qwen2moe,
shared experts and sigmoid routing; `forward` also records the routed experts per layer
and position in trace["routes_{l}"] when a trace dict is given.

Usage (needs: pip install numpy gguf; see pyenv.sh):
  reference_forward.py MODEL.gguf --ids '[504, 3575, 282, 4649, 314]' [--out DIR]
      [--greedy N] [--top K] [--trace]

Writes to DIR (default: current folder):
  logits.npy      float32 [n_pos, vocab]   logits at every position
  summary.json    ids, top-K tokens per position, greedy continuation (if --greedy)
  trace.npz       (with --trace) per layer l: resid_l [n_pos, hidden] = residual AFTER layer l,
                  attn_delta_l, ffn_delta_l, ffn_in_l (normed FFN input), gate_l (pre-activation
                  gate scores [n_pos, n_ff]), and resid_emb (the embedding rows)
"""
import argparse, json, os, sys, time

import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize


def load(path):
    r = GGUFReader(path)
    arch = r.fields["general.architecture"].contents()
    if arch not in ("llama", "qwen2", "qwen2moe"):
        sys.exit(f"unsupported architecture {arch!r} (reference supports llama, qwen2, qwen2moe)")
    kv = lambda k: r.fields[f"{arch}.{k}"].contents()
    cfg = dict(arch=arch, n_layer=kv("block_count"), d=kv("embedding_length"), n_head=kv("attention.head_count"),
               n_kv=kv("attention.head_count_kv"), eps=kv("attention.layer_norm_rms_epsilon"),
               base=kv("rope.freq_base") if f"{arch}.rope.freq_base" in r.fields else 10000.0)
    cfg["hd"] = cfg["d"] // cfg["n_head"]
    cfg["n_used"] = kv("expert_used_count") if f"{arch}.expert_used_count" in r.fields else 0
    gating = kv("expert_gating_func") if f"{arch}.expert_gating_func" in r.fields else 1
    cfg["routing"] = "sigmoid_norm" if gating == 2 else ("softmax_topk" if arch == "qwen2moe" else "topk_softmax")
    T = {}
    for t in r.tensors:
        a = dequantize(t.data, t.tensor_type).astype(np.float32)
        T[t.name] = a.reshape([int(x) for x in reversed(t.shape)]) if len(t.shape) > 1 else a.reshape(-1)
    return cfg, T


def forward(cfg, T, ids, trace=None):
    d, hd, nh, nkv, eps = cfg["d"], cfg["hd"], cfg["n_head"], cfg["n_kv"], cfg["eps"]
    neox = cfg["arch"] in ("qwen2", "qwen2moe")

    def rms(x, w):
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w

    def rope(x, pos):  # x: [S, H, hd]
        i = np.arange(hd // 2)
        ang = pos[:, None] * (cfg["base"] ** (-2.0 * i / hd))[None, :]
        c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
        x0, x1 = (x[..., : hd // 2], x[..., hd // 2:]) if neox else (x[..., 0::2], x[..., 1::2])
        y0, y1 = x0 * c - x1 * s, x0 * s + x1 * c
        out = np.empty_like(x)
        if neox:
            out[..., : hd // 2], out[..., hd // 2:] = y0, y1
        else:
            out[..., 0::2], out[..., 1::2] = y0, y1
        return out.astype(np.float32)

    S = len(ids)
    pos = np.arange(S, dtype=np.float64)
    x = T["token_embd.weight"][ids].astype(np.float32)
    if trace is not None:
        trace["resid_emb"] = x.copy()
    mask = np.triu(np.full((S, S), -np.inf, dtype=np.float32), 1)
    for l in range(cfg["n_layer"]):
        p = f"blk.{l}."
        h = rms(x, T[p + "attn_norm.weight"])
        q, k, v = (h @ T[p + f"attn_{n}.weight"].T for n in "qkv")
        if p + "attn_q.bias" in T:
            q, k, v = q + T[p + "attn_q.bias"], k + T[p + "attn_k.bias"], v + T[p + "attn_v.bias"]
        q, k = rope(q.reshape(S, nh, hd), pos), rope(k.reshape(S, nkv, hd), pos)
        v = v.reshape(S, nkv, hd)
        g = nh // nkv
        k, v = np.repeat(k, g, axis=1), np.repeat(v, g, axis=1)
        att = np.einsum("shd,thd->hst", q, k) / np.sqrt(hd) + mask
        att = np.exp(att - att.max(-1, keepdims=True))
        att /= att.sum(-1, keepdims=True)
        o = np.einsum("hst,thd->shd", att, v).reshape(S, d)
        attn_delta = o @ T[p + "attn_output.weight"].T
        x = x + attn_delta
        h = rms(x, T[p + "ffn_norm.weight"])
        if p + "ffn_gate_inp.weight" in T:  # routed experts
            gt = None
            router = h @ T[p + "ffn_gate_inp.weight"].T
            ffn_delta = np.zeros_like(h)
            routes = []
            for s_ in range(S):
                z = router[s_].astype(np.float64)
                if cfg["routing"] == "topk_softmax":  # softmax over the top-k logits (Mixtral)
                    top = np.argsort(-z, kind="stable")[: cfg["n_used"]]
                    wts = np.exp(z[top] - z[top].max()); wts /= wts.sum()
                elif cfg["routing"] == "softmax_topk":  # top-k of a softmax over all (qwen2moe)
                    pr = np.exp(z - z.max()); pr /= pr.sum()
                    top = np.argsort(-pr, kind="stable")[: cfg["n_used"]]
                    wts = pr[top]
                else:  # sigmoid scores, top-k, renormalised
                    sg = 1 / (1 + np.exp(-z))
                    top = np.argsort(-sg, kind="stable")[: cfg["n_used"]]
                    wts = sg[top] / sg[top].sum()
                routes.append([int(e) for e in top])
                for e, wgt in zip(top, wts.astype(np.float32)):
                    g_ = T[p + "ffn_gate_exps.weight"][e] @ h[s_]
                    u_ = T[p + "ffn_up_exps.weight"][e] @ h[s_]
                    ffn_delta[s_] += wgt * (T[p + "ffn_down_exps.weight"][e] @ ((g_ / (1 + np.exp(-g_))) * u_))
            if p + "ffn_gate_shexp.weight" in T:  # the shared expert, on every position
                g_ = h @ T[p + "ffn_gate_shexp.weight"].T
                u_ = h @ T[p + "ffn_up_shexp.weight"].T
                sh = ((g_ / (1 + np.exp(-g_))) * u_) @ T[p + "ffn_down_shexp.weight"].T
                if p + "ffn_gate_inp_shexp.weight" in T:
                    sh = sh * (1 / (1 + np.exp(-(h @ T[p + "ffn_gate_inp_shexp.weight"]))))[:, None]
                ffn_delta += sh
            if trace is not None:
                trace[f"routes_{l}"] = np.array(routes)
        else:
            gt = h @ T[p + "ffn_gate.weight"].T
            up = h @ T[p + "ffn_up.weight"].T
            ffn_delta = ((gt / (1 + np.exp(-gt))) * up) @ T[p + "ffn_down.weight"].T
        x = x + ffn_delta
        if trace is not None:
            trace[f"attn_delta_{l}"], trace[f"ffn_delta_{l}"] = attn_delta, ffn_delta
            trace[f"ffn_in_{l}"], trace[f"resid_{l}"] = h, x.copy()
            if gt is not None:
                trace[f"gate_{l}"] = gt
    x = rms(x, T["output_norm.weight"])
    W = T.get("output.weight", T["token_embd.weight"])
    return x @ W.T


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("--ids", required=True, help="JSON list of token ids")
    ap.add_argument("--out", default=".")
    ap.add_argument("--top", type=int, default=5)
    ap.add_argument("--greedy", type=int, default=0, help="also decode N greedy tokens (full recompute each step)")
    ap.add_argument("--trace", action="store_true")
    a = ap.parse_args()
    ids = json.loads(a.ids)
    t0 = time.time()
    cfg, T = load(a.model)
    tr = {} if a.trace else None
    logits = forward(cfg, T, ids, tr)
    os.makedirs(a.out, exist_ok=True)
    np.save(os.path.join(a.out, "logits.npy"), logits.astype(np.float32))
    if tr is not None:
        np.savez(os.path.join(a.out, "trace.npz"), **{k: v if k.startswith("routes_") else v.astype(np.float32)
                                                    for k, v in tr.items()})
    top = [[[int(i), float(row[i])] for i in np.argsort(-row)[: a.top]] for row in logits]
    greedy, seq = [], list(ids)
    for _ in range(a.greedy):
        nxt = int(forward(cfg, T, seq)[-1].argmax())
        greedy.append(nxt)
        seq.append(nxt)
    summary = dict(model=os.path.basename(a.model), arch=cfg["arch"], ids=ids, top=top, greedy=greedy,
                   seconds=round(time.time() - t0, 2))
    json.dump(summary, open(os.path.join(a.out, "summary.json"), "w"), indent=1)
    print(json.dumps(dict(top_last=top[-1], greedy=greedy)))


if __name__ == "__main__":
    main()
