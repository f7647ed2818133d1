#!/usr/bin/env python3
"""Independent reference forward pass for GGUF decoder models (numpy).

It is an oracle for parity tests, not part of the engine: it dequantizes every tensor with the
`gguf` package to f32 and runs the plain transformer math on those values in float64 (its own
rounding is far below any f32 implementation's: llama.cpp's f32 logits land within ~1e-4 of it,
closer than to an f32 numpy pass), computing what llama.cpp computes (the llama.cpp vendored in
llama-cpp-python 0.3.36: src/models/<arch>.cpp, src/llama-graph.cpp, ggml-cpu). Every fact below was checked against that source and, on the
tiny fixtures of tests/fixtures/families (tests/tools/family_goldens.py), against llama.cpp's
logits to 1e-4.

Supported general.architecture values and what each computes (x: the residual stream;
rms(x) = x / sqrt(mean(x^2) + eps) * w; ln(x) = (x - mean) / sqrt(var + eps) * w + b;
"adjacent" RoPE rotates dims (2i, 2i+1), llama.cpp's LLAMA_ROPE_TYPE_NORM; "neox" rotates
(i, i + n_rot/2), LLAMA_ROPE_TYPE_NEOX; theta_i = pos * freq_scale * base^(-2i/n_rot) / f_i;
a sliding-window layer lets query position p see key position k when 0 <= p - k < window):

  llama     pre-RMSNorm (attn_norm, ffn_norm); separate Q/K/V (+ optional biases); adjacent
            RoPE on all head dims; per-dimension divisors f_i from the global `rope_freqs.weight`
            [n_rot/2] when present (Llama 3 scaling); no sliding window, whatever the metadata
            says (llama.cpp never reads llama.attention.sliding_window: Mistral's window is not
            applied); scale 1/sqrt(head_dim); SwiGLU silu(gate)*up; routed experts when
            ffn_gate_inp exists (Mixtral: softmax over the top-k logits); tied head when
            output.weight is absent.
  qwen2     as llama with neox RoPE and Q/K/V biases.
  qwen2moe  as qwen2 with routed experts: top-k of a softmax over all experts, NOT
            renormalised; optional shared expert (ffn_*_shexp) scaled by
            sigmoid(ffn_gate_inp_shexp . h). `{arch}.expert_gating_func` = 2: sigmoid, top-k,
            renormalised.
  qwen3     as llama with neox RoPE and a per-head RMSNorm of Q and of K (attn_q_norm /
            attn_k_norm, [head_dim] weights, eps = layer_norm_rms_epsilon) before RoPE.
  qwen3moe  as qwen3 with routed experts: softmax over all experts, top-k, renormalised over
            the k (= softmax over the k chosen logits, i.e. Mixtral's rule); expert width
            `qwen3moe.expert_feed_forward_length`; no shared expert.
  gemma2    x0 = embedding * sqrt(d) (f32); sandwich norms: x += rms_post_attn(attn(rms(x)))
            and x += rms_post_ffw(ffn(rms(x))) (post_attention_norm, post_ffw_norm); neox RoPE;
            q *= f_attention_scale = 1/sqrt(key_length) (1/sqrt(d/n_head) when block_count is
            46, llama.cpp's 27B rule), then scores = cap_a * tanh(q.k / cap_a) with cap_a =
            gemma2.attn_logit_softcapping (default 50), no further scale; sliding window
            gemma2.attention.sliding_window (default 4096) on layers l with l % 2 == 0 (pattern
            2: even layers local, odd layers global); GeGLU gelu(gate)*up (GELU below); tied head;
            logits = cap_f * tanh(logits / cap_f), cap_f = gemma2.final_logit_softcapping
            (default 30). Local layers use gemma2.rope.freq_base_swa if present, else the
            global base.
  gemma3    as gemma2 but: per-head RMSNorm of Q and K before RoPE; no attention softcap; final
            softcap only when gemma3.final_logit_softcapping is present; sliding window only
            when gemma3.attention.sliding_window > 0, on layers l % 6 < 5 (pattern 6, or
            gemma3.attention.sliding_window_pattern); local layers use RoPE base
            gemma3.rope.freq_base_swa (default 10000 when absent, NOT the global base) and no
            scaling; global layers use gemma3.rope.freq_base and linear scaling
            freq_scale = 1/gemma3.rope.scaling.factor; optional untied head; 27B rule at 62
            layers.
  phi3      pre-RMSNorm; fused `attn_qkv` rows = [Q (n_head*hd); K (n_kv*hd); V (n_kv*hd)];
            neox RoPE; scale 1/sqrt(hd) (applied to q); fused `ffn_up` [2*ff rows] =
            [gate; up], out = down(silu(first ff) * (last ff)); phi3.attention.sliding_window
            is read and then DISABLED by llama.cpp (every layer is global).
  gpt2      x0 = token_embd[id] + position_embd[pos]; pre-LayerNorm with biases; fused
            attn_qkv (+bias); no RoPE; scale 1/sqrt(hd); attn_output bias; MLP
            down(gelu_tanh(up x + b_up)) + b_down; final LayerNorm with bias; tied head unless
            output.weight. eps = gpt2.attention.layer_norm_epsilon.
  gptneox   LayerNorm with biases; fused attn_qkv (+bias, [Q; K; V] after the converter's
            reordering); neox RoPE on the first n_rot = gptneox.rope.dimension_count dims of
            each head only (the exponent uses n_rot, the rest pass through); MLP as gpt2;
            gptneox.use_parallel_residual: x += attn(ln1(x)) + mlp(ln2(x)) (else sequential);
            untied head.
  olmo2     no pre-norms: x += rms_post_attn(attn(x)); x += rms_post_ffw(swiglu(x)); RMSNorm of
            the WHOLE Q projection ([n_head*hd] weights) and K projection ([n_kv*hd]) before
            RoPE; neox RoPE; untied head. Optional sliding window (Olmo3:
            olmo2.attention.sliding_window, pattern 4: l % 4 < 3) whose layers use no RoPE
            scaling (implemented from the source; no fixture exercises it).

Common to all: GQA (query head j reads KV head j // (n_head/n_kv)); softmax over the visible
keys; optional biases wherever the file has them (attn_q/k/v/qkv/output.bias, ffn_*.bias);
RoPE scaling: `{arch}.rope.scaling.type` linear (or absent with
`{arch}.rope.scaling.factor`) gives freq_scale = 1/factor, type none forces 1; yarn/longrope are
not supported here. `{arch}.rope.scaling.attn_factor` multiplies cos and sin.

GELU: ggml's CPU GELU is not the exact formula: for -10 < x < 10 it rounds x to f16 and reads
a 65536-entry f16 table of the tanh approximation (x <= -10: 0; x >= 10: x), so its output has
f16 precision. This reference does the same by default, with the table rebuilt entry for entry
(ggml_gelu_table); that is what makes it agree with llama.cpp to 1e-4. Where a GELU input lies
within ~1e-6 (relative) of an f16 rounding midpoint, f32 noise decides the side and the two
sides differ by one f16 step: isolated positions then differ by up to ~3e-3 (family_goldens.py
finds and reports such ties). --exact-gelu computes 0.5x(1+tanh(sqrt(2/pi)(x+0.044715x^3)))
instead (Hugging Face's gelu_pytorch_tanh; smooth, no ties); it differs from llama.cpp by ~5e-3
to 2e-2 on the tiny fixtures.

Usage (needs: pip install numpy gguf; see pyenv.sh):
  reference_forward.py MODEL.gguf --ids '[504, 3575, 282, 4649, 314]' [--out DIR]
      [--greedy N] [--top K] [--trace] [--exact-gelu]

Writes to DIR (default: current folder):
  logits.npy      float32 [n_pos, vocab]   logits at every position
  summary.json    ids, top-K tokens per position, greedy continuation (if --greedy)
  trace.npz       (with --trace) per layer l: resid_l [n_pos, hidden] = residual AFTER layer l,
                  attn_delta_l (what attention adds to the residual), ffn_delta_l, ffn_in_l (the
                  FFN's input), gate_l (pre-activation gate scores [n_pos, n_ff], gated FFNs), and
                  resid_emb (the embedding rows, after gemma's scale / gpt2's positions); routes_l
                  (routed experts per position) for MoE layers
"""
import argparse, json, math, os, sys, time

import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize

ARCHS = ("llama", "qwen2", "qwen2moe", "qwen3", "qwen3moe", "gemma2", "gemma3", "phi3", "gpt2", "gptneox", "olmo2")
NEOX = ("qwen2", "qwen2moe", "qwen3", "qwen3moe", "gemma2", "gemma3", "phi3", "gptneox", "olmo2")


def load(path, exact_gelu=False):
    r = GGUFReader(path)
    arch = r.fields["general.architecture"].contents()
    if arch not in ARCHS:
        sys.exit(f"unsupported architecture {arch!r} (reference supports {', '.join(ARCHS)})")
    has = lambda k: f"{arch}.{k}" in r.fields
    kv = lambda k, default=None: r.fields[f"{arch}.{k}"].contents() if has(k) else default
    d, n_head = kv("embedding_length"), kv("attention.head_count")
    cfg = dict(arch=arch, n_layer=kv("block_count"), d=d, n_head=n_head, n_kv=kv("attention.head_count_kv", n_head),
               ff=kv("feed_forward_length", 0))
    cfg["hd"] = kv("attention.key_length", d // n_head)
    cfg["hd_v"] = kv("attention.value_length", d // n_head)
    if arch == "olmo2":  # llama.cpp sizes olmo2's heads as n_embd / n_head
        cfg["hd"] = cfg["hd_v"] = d // n_head
    cfg["n_rot"] = kv("rope.dimension_count", cfg["hd"])
    cfg["norm"] = "layer" if arch in ("gpt2", "gptneox") else "rms"
    cfg["eps"] = kv("attention.layer_norm_epsilon") if cfg["norm"] == "layer" else kv("attention.layer_norm_rms_epsilon")
    cfg["placement"] = {"gemma2": "sandwich", "gemma3": "sandwich", "olmo2": "post"}.get(arch, "pre")
    if arch == "gptneox" and kv("use_parallel_residual"):
        cfg["placement"] = "parallel"
    cfg["qk_norm"] = {"qwen3": "head", "qwen3moe": "head", "gemma3": "head", "olmo2": "whole"}.get(arch)
    cfg["rope"] = None if arch == "gpt2" else ("neox" if arch in NEOX else "adjacent")
    cfg["act"] = ("gelu_exact" if exact_gelu else "gelu_ggml") if arch in ("gemma2", "gemma3", "gpt2", "gptneox") else "silu"
    cfg["emb_scale"] = float(np.sqrt(np.float32(d))) if arch in ("gemma2", "gemma3") else 1.0

    # RoPE base and scaling (llama-model.cpp load_hparams + llama-context.cpp cparams)
    cfg["base"] = float(kv("rope.freq_base", 10000.0))
    stype = kv("rope.scaling.type", "linear")
    if stype not in ("none", "linear"):
        sys.exit(f"rope scaling type {stype!r} is not supported by this reference")
    factor = kv("rope.scaling.factor", kv("rope.scale_linear", 0.0))
    cfg["freq_scale"] = 1.0 if (stype == "none" or not factor) else 1.0 / factor
    cfg["rope_attn_factor"] = float(kv("rope.scaling.attn_factor", 1.0))

    # attention scale (applied to q) and softcaps
    cfg["q_scale"] = 1.0 / math.sqrt(cfg["hd"])
    if arch in ("gemma2", "gemma3"):
        big = cfg["n_layer"] == (46 if arch == "gemma2" else 62)  # llama.cpp's LLM_TYPE_27B
        cfg["q_scale"] = 1.0 / math.sqrt(d / n_head) if big else 1.0 / math.sqrt(cfg["hd"])
    cfg["attn_softcap"] = float(kv("attn_logit_softcapping", 50.0)) if arch == "gemma2" else 0.0
    cfg["final_softcap"] = float(kv("final_logit_softcapping", 30.0 if arch == "gemma2" else 0.0)) \
        if arch in ("gemma2", "gemma3") else 0.0

    # sliding window: which layers, window, their RoPE base/scale (llama_hparams::set_swa_pattern)
    L = cfg["n_layer"]
    swa, win = [False] * L, 0
    base_swa, scale_swa = cfg["base"], cfg["freq_scale"]
    pattern_default = {"gemma2": 2, "gemma3": 6, "olmo2": 4}.get(arch)
    if arch == "gemma2" or (arch in ("gemma3", "olmo2") and kv("attention.sliding_window", 0) > 0):
        win = int(kv("attention.sliding_window", 4096))
        pat = kv("attention.sliding_window_pattern", pattern_default)
        if isinstance(pat, list):
            swa = [bool(x) for x in pat][:L]
        else:
            swa = [pat == 0 or (l % pat < pat - 1) for l in range(L)]
        if arch == "gemma2":
            base_swa, scale_swa = kv("rope.freq_base_swa", cfg["base"]), cfg["freq_scale"]
        elif arch == "gemma3":
            base_swa, scale_swa = kv("rope.freq_base_swa", 10000.0), 1.0
        else:  # olmo2 (Olmo3): swa layers use freq_scale 1, attn_factor 1
            base_swa, scale_swa = kv("rope.freq_base_swa", cfg["base"]), 1.0
    cfg.update(window=win, swa_layers=swa, base_swa=float(base_swa), scale_swa=float(scale_swa))

    # experts
    cfg["n_used"] = kv("expert_used_count", 0)
    gating = kv("expert_gating_func", 1)
    cfg["routing"] = ("sigmoid_norm" if gating == 2 else
                      "softmax_topk" if arch == "qwen2moe" else
                      "softmax_topk_norm" if arch == "qwen3moe" else "topk_softmax")
    T = {}
    for t in r.tensors:
        a = dequantize(t.data, t.tensor_type).astype(np.float32)
        T[t.name] = a.reshape([int(x) for x in reversed(t.shape)]) if len(t.shape) > 1 else a.reshape(-1)
    cfg["rope_factors"] = arch == "llama" and "rope_freqs.weight" in T
    return cfg, T


def gelu_tanh(x):
    """0.5 x (1 + tanh(sqrt(2/pi) x (1 + 0.044715 x^2))), in x's precision."""
    t = x.dtype.type
    c, a = t(0.79788456080286535587989211986876), t(0.044715)
    return t(0.5) * x * (t(1) + np.tanh(c * x * (t(1) + a * x * x)))


_GELU_TABLE = None


def ggml_gelu_table():
    """ggml-cpu's table ggml_table_gelu_f16[65536]: entry i = f16(ggml_gelu_f32(f16 value i)), where
    ggml_gelu_f32(x) = 0.5f*x*(1.0f + tanhf(SQRT_2_OVER_PI*x*(1.0f + GELU_COEF_A*x*x))) runs in f32
    and the compiler contracts 1.0f + (GELU_COEF_A*x)*x into one fused multiply-add (ggml-cpu is
    built with FMA). Reproduced step by step in f32 (the FMA exactly, via f64; tanhf correctly
    rounded): equal, entry for entry, to the table of llama-cpp-python 0.3.36 on x86-64 (checked).
    Computing the same formula in plain f32 numpy, or in f64, gets ~250 entries (around
    x in [-3.5, -1.8], where 1 + tanh cancels) one f16 step off."""
    global _GELU_TABLE
    if _GELU_TABLE is None:
        f = np.float32
        x = np.arange(65536, dtype=np.uint16).view(np.float16).astype(np.float32)
        x[~np.isfinite(x) | (np.abs(x) >= 10)] = 0  # those entries are never read
        inner = (f(0.044715) * x).astype(np.float64) * x.astype(np.float64) + 1.0  # the fma
        z = f(0.79788456080286535587989211986876) * x * inner.astype(f)
        th = np.tanh(z.astype(np.float64)).astype(f)
        _GELU_TABLE = ((f(0.5) * x) * (f(1) + th)).astype(np.float16)
    return _GELU_TABLE


TIE_REL = 5e-6  # GELU inputs this close (relative) to an f16 rounding midpoint are "ties"


def gelu_ggml(x, layer=None, flips=None, probe=None):
    """ggml-cpu's GELU (GGML_GELU_FP16): for -10 < x < 10, x is rounded to f16 and looked up in
    ggml_gelu_table() (an f16 result); x <= -10 gives 0, x >= 10 gives x.

    Rounding x to f16 is discontinuous: where x lies within ~1e-6 (relative) of a midpoint
    between two f16 values, f32 noise (a different summation order in a matmul) decides the
    side, and the two sides differ by one f16 step (~1e-3 relative) in the output. `probe`
    (a list) collects such ties as (layer, row, col, relative distance); `flips` (a set of
    (layer, row, col)) rounds those ties to the other side. Both are for family_goldens.py,
    which uses them to show that every difference from llama.cpp above 1e-4 is such a tie."""
    x = np.asarray(x)
    x16 = x.astype(np.float32).astype(np.float16)  # llama.cpp holds x in f32, then rounds it
    xh = x16.astype(np.float32)
    if probe is not None or flips:
        with np.errstate(over="ignore", invalid="ignore"):
            up = np.nextafter(x16, np.float16(np.inf)).astype(np.float64)
            dn = np.nextafter(x16, np.float16(-np.inf)).astype(np.float64)
        c, x64 = xh.astype(np.float64), x.astype(np.float64)
        d_up, d_dn = np.abs((c + up) / 2 - x64), np.abs(x64 - (c + dn) / 2)
        alt = np.where(d_up < d_dn, up, dn).astype(np.float32)
        rel = np.minimum(d_up, d_dn) / np.maximum(np.abs(x64), 1e-30)
        tie = (rel < TIE_REL) & (np.abs(x) < 10)
        if probe is not None:
            for s, j in zip(*np.nonzero(tie)):
                probe.append((layer, int(s), int(j), float(rel[s, j])))
        if flips:
            for (l, s, j) in flips:
                if l == layer and s < x.shape[0]:
                    xh[s, j] = alt[s, j]
    y = ggml_gelu_table()[xh.astype(np.float16).view(np.uint16)].astype(x.dtype)
    return np.where(x <= -10, 0.0, np.where(x >= 10, x, y)).astype(x.dtype)


F = np.float64  # the activations' precision (weights are the file's values, as f32)


def forward(cfg, T, ids, trace=None, hook=None):
    """Logits [S, vocab] of `ids`. `trace` (a dict) receives the residual stream and each
    layer's deltas; `hook(site, layer, value)` may replace the activation at each site of
    each layer (TransformerLens' names: resid_pre, z [S, n_head*hd_v] before attn_output,
    attn_out, resid_mid (not on parallel blocks), mlp_out) and returns what the pass goes
    on with (activation patching)."""
    if hook is None:
        hook = lambda site, layer, value: value  # noqa: E731
    arch, d, hd, hd_v, nh, nkv, eps = (cfg[k] for k in ("arch", "d", "hd", "hd_v", "n_head", "n_kv", "eps"))
    n_rot = cfg["n_rot"]

    def norm(x, name):
        w, b = T.get(name + ".weight"), T.get(name + ".bias")
        if cfg["norm"] == "layer":
            xm = x - x.mean(-1, keepdims=True)
            y = xm / np.sqrt((xm * xm).mean(-1, keepdims=True) + eps)
        else:
            y = x / np.sqrt((x * x).mean(-1, keepdims=True) + eps)
        y = y * w
        return (y + b if b is not None else y).astype(F)

    def rms_w(x, w):
        return (x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w).astype(F)

    def act(x, layer=None):
        if cfg["act"] == "silu":
            return x / (1 + np.exp(-x))
        if cfg["act"] == "gelu_ggml":
            return gelu_ggml(x, layer, cfg.get("gelu_flips"), cfg.get("gelu_probe"))
        return gelu_tanh(x)

    def rope(x, pos, base, scale, mscale):  # x: [S, H, hd]; rotates the first n_rot dims
        half = n_rot // 2
        i = np.arange(half)
        inv = base ** (-2.0 * i / n_rot)
        if cfg["rope_factors"]:
            inv = inv / T["rope_freqs.weight"][:half].astype(np.float64)
        ang = pos[:, None] * scale * inv[None, :]
        c, s = (np.cos(ang) * mscale)[:, None, :], (np.sin(ang) * mscale)[:, None, :]
        out = x.copy()
        if cfg["rope"] == "neox":
            x0, x1 = x[..., :half], x[..., half:n_rot]
            out[..., :half], out[..., half:n_rot] = x0 * c - x1 * s, x0 * s + x1 * c
        else:
            x0, x1 = x[..., 0:n_rot:2], x[..., 1:n_rot:2]
            out[..., 0:n_rot:2], out[..., 1:n_rot:2] = x0 * c - x1 * s, x0 * s + x1 * c
        return out.astype(F)

    def linear(h, name):
        y = h @ T[name + ".weight"].T
        return y + T[name + ".bias"] if name + ".bias" in T else y

    S = len(ids)
    pos = np.arange(S, dtype=np.float64)
    x = T["token_embd.weight"][ids].astype(F)
    if cfg["emb_scale"] != 1.0:
        x = (x * F(cfg["emb_scale"])).astype(F)
    if "position_embd.weight" in T:
        x = x + T["position_embd.weight"][:S]
    if trace is not None:
        trace["resid_emb"] = x.copy()
    dist = pos[:, None] - pos[None, :]  # query - key
    causal = np.where(dist >= 0, 0.0, -np.inf).astype(F)
    windowed = np.where((dist >= 0) & (dist < max(cfg["window"], 1)), 0.0, -np.inf).astype(F)

    def attention(h, l, p):
        is_swa = cfg["swa_layers"][l]
        if p + "attn_qkv.weight" in T:
            qkv = linear(h, p + "attn_qkv")
            q, k, v = qkv[:, : nh * hd], qkv[:, nh * hd: (nh + nkv) * hd], qkv[:, (nh + nkv) * hd:]
        else:
            q, k, v = (linear(h, p + f"attn_{n}") for n in "qkv")
        if cfg["qk_norm"] == "whole":
            q, k = rms_w(q, T[p + "attn_q_norm.weight"]), rms_w(k, T[p + "attn_k_norm.weight"])
        q, k, v = q.reshape(S, nh, hd), k.reshape(S, nkv, hd), v.reshape(S, nkv, hd_v)
        if cfg["qk_norm"] == "head":
            q, k = rms_w(q, T[p + "attn_q_norm.weight"]), rms_w(k, T[p + "attn_k_norm.weight"])
        if cfg["rope"]:
            if is_swa:
                base, scale = cfg["base_swa"], cfg["scale_swa"]
                mscale = 1.0 if arch == "olmo2" else cfg["rope_attn_factor"]
            else:
                base, scale, mscale = cfg["base"], cfg["freq_scale"], cfg["rope_attn_factor"]
            q, k = rope(q, pos, base, scale, mscale), rope(k, pos, base, scale, mscale)
        g = nh // nkv
        k, v = np.repeat(k, g, axis=1), np.repeat(v, g, axis=1)
        att = np.einsum("shd,thd->hst", q * F(cfg["q_scale"]), k)
        if cfg["attn_softcap"]:
            cap = F(cfg["attn_softcap"])
            att = np.tanh(att / cap) * cap
        att = att + (windowed if is_swa else causal)
        att = np.exp(att - att.max(-1, keepdims=True))
        att /= att.sum(-1, keepdims=True)
        if trace is not None:
            trace[f"att_{l}"] = att.copy()  # [heads, queries, keys]
        o = hook("z", l, np.einsum("hst,thd->shd", att, v).reshape(S, nh * hd_v))
        return linear(o, p + "attn_output").astype(F)

    def ffn(h, l, p, trace_l):
        gt = None
        if p + "ffn_gate_inp.weight" in T:  # routed experts
            router = h @ T[p + "ffn_gate_inp.weight"].T
            out = np.zeros_like(h)
            routes = []
            for s_ in range(S):
                z = router[s_].astype(np.float64)
                if cfg["routing"] == "topk_softmax":  # softmax over the top-k logits (Mixtral)
                    top = np.argsort(-z, kind="stable")[: cfg["n_used"]]
                    wts = np.exp(z[top] - z[top].max()); wts /= wts.sum()
                elif cfg["routing"] in ("softmax_topk", "softmax_topk_norm"):  # top-k of a softmax over all
                    pr = np.exp(z - z.max()); pr /= pr.sum()
                    top = np.argsort(-pr, kind="stable")[: cfg["n_used"]]
                    wts = pr[top]
                    if cfg["routing"] == "softmax_topk_norm":  # qwen3moe: renormalised over the k
                        wts = wts / max(wts.sum(), 6.103515625e-5)
                else:  # sigmoid scores, top-k, renormalised
                    sg = 1 / (1 + np.exp(-z))
                    top = np.argsort(-sg, kind="stable")[: cfg["n_used"]]
                    wts = sg[top] / sg[top].sum()
                routes.append([int(e) for e in top])
                for e, wgt in zip(top, wts.astype(F)):
                    g_ = T[p + "ffn_gate_exps.weight"][e] @ h[s_]
                    u_ = T[p + "ffn_up_exps.weight"][e] @ h[s_]
                    out[s_] += wgt * (T[p + "ffn_down_exps.weight"][e] @ (act(g_) * u_))
            if p + "ffn_gate_shexp.weight" in T:  # the shared expert, on every position
                g_ = h @ T[p + "ffn_gate_shexp.weight"].T
                u_ = h @ T[p + "ffn_up_shexp.weight"].T
                sh = (act(g_) * u_) @ T[p + "ffn_down_shexp.weight"].T
                if p + "ffn_gate_inp_shexp.weight" in T:
                    sh = sh * (1 / (1 + np.exp(-(h @ T[p + "ffn_gate_inp_shexp.weight"]))))[:, None]
                out += sh
            if trace_l is not None:
                trace_l[f"routes_{l}"] = np.array(routes)
        elif p + "ffn_gate.weight" in T:  # GLU: down(act(gate h) * up h)
            gt = linear(h, p + "ffn_gate")
            out = linear(act(gt, l) * linear(h, p + "ffn_up"), p + "ffn_down")
        elif arch == "phi3":  # fused ffn_up = [gate; up]
            gu = linear(h, p + "ffn_up")
            ff = gu.shape[-1] // 2
            gt = gu[:, :ff]
            out = linear(act(gt, l) * gu[:, ff:], p + "ffn_down")
        else:  # MLP: down(act(up h + b) ) + b
            out = linear(act(linear(h, p + "ffn_up"), l), p + "ffn_down")
        if trace_l is not None and gt is not None:
            trace_l[f"gate_{l}"] = gt
        return out.astype(F)

    for l in range(cfg["n_layer"]):
        p = f"blk.{l}."
        place = cfg["placement"]
        x = hook("resid_pre", l, x)
        if place == "post":  # olmo2
            attn_delta = hook("attn_out", l, norm(attention(x, l, p), p + "post_attention_norm"))
            x = hook("resid_mid", l, x + attn_delta)
            h = x
            ffn_delta = hook("mlp_out", l, norm(ffn(h, l, p, trace), p + "post_ffw_norm"))
            x = x + ffn_delta
        elif place == "parallel":  # gptneox
            attn_delta = hook("attn_out", l, attention(norm(x, p + "attn_norm"), l, p))
            h = norm(x, p + "ffn_norm")
            ffn_delta = hook("mlp_out", l, ffn(h, l, p, trace))
            x = x + attn_delta + ffn_delta
        else:
            attn_delta = attention(norm(x, p + "attn_norm"), l, p)
            if place == "sandwich":
                attn_delta = norm(attn_delta, p + "post_attention_norm")
            attn_delta = hook("attn_out", l, attn_delta)
            x = hook("resid_mid", l, x + attn_delta)
            h = norm(x, p + "ffn_norm")
            ffn_delta = ffn(h, l, p, trace)
            if place == "sandwich":
                ffn_delta = norm(ffn_delta, p + "post_ffw_norm")
            ffn_delta = hook("mlp_out", l, ffn_delta)
            x = x + ffn_delta
        x = x.astype(F)
        if trace is not None:
            trace[f"attn_delta_{l}"], trace[f"ffn_delta_{l}"] = attn_delta, ffn_delta
            trace[f"ffn_in_{l}"], trace[f"resid_{l}"] = h, x.copy()
    x = norm(x, "output_norm")
    W = T.get("output.weight", T["token_embd.weight"])
    logits = (x @ W.T).astype(F)
    if "output.bias" in T:
        logits = logits + T["output.bias"]
    if cfg["final_softcap"]:
        cap = F(cfg["final_softcap"])
        logits = (np.tanh(logits / cap) * cap).astype(F)
    return logits


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("--ids", required=True, help="JSON list of token ids")
    ap.add_argument("--out", default=".")
    ap.add_argument("--top", type=int, default=5)
    ap.add_argument("--greedy", type=int, default=0, help="also decode N greedy tokens (full recompute each step)")
    ap.add_argument("--trace", action="store_true")
    ap.add_argument("--exact-gelu", action="store_true", help="exact tanh-approximation GELU instead of ggml's f16 table")
    a = ap.parse_args()
    ids = json.loads(a.ids)
    t0 = time.time()
    cfg, T = load(a.model, exact_gelu=a.exact_gelu)
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
