#!/usr/bin/env python3
"""Tiny random F32 GGUFs, one per model family, that llama.cpp loads and runs: fixtures for
the family parity tests (goldens: tests/tools/family_goldens.py; semantics: docs/families.md).

Every file carries the same tiny byte-level BPE tokenizer (tokenizer.ggml.model "gpt2",
pre "gpt-2": the 256 GPT-2 byte characters, a few dozen merges forming English pieces and one
control token <|endoftext|> as BOS/EOS, add_bos_token false) and random weights drawn from
numpy's default_rng with a fixed seed per family, so a rerun writes byte-identical files.
Tensor names are exactly those llama.cpp's loader asks for (src/models/<arch>.cpp).

Usage: make_tiny_families.py [OUT_DIR (default tests/fixtures/families)] [--only FAMILY ...]
Writes OUT_DIR/<family>/model.gguf for every family in FAMILIES.
"""
import argparse, math, os

import numpy as np
from gguf import GGUFWriter, RopeScalingType, TokenType

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PROMPT = "The quick brown fox jumps over the lazy dog."

# ---------------------------------------------------------------------------------------------
# tokenizer: GPT-2 byte-level BPE, tiny


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, (chr(c) for c in cs)))


# Merges in rank order; each joins two existing tokens into a new one (Ġ is the space byte).
MERGES = [
    "Ġ t", "h e", "Ġt he", "T he", "Ġ a", "i n", "e r", "o n", "r e", "a n",
    "Ġ o", "v er", "Ġo ver", "Ġ b", "r o", "Ġb ro", "w n", "Ġbro wn", "Ġ f", "o x",
    "Ġf ox", "Ġ d", "o g", "Ġd og", "Ġ j", "u m", "Ġj um", "p s", "Ġ l", "a z",
    "Ġl az", "Ġ q", "u i", "Ġq ui", "c k", "Ġqui ck", "Ġ s", "a t", "Ġ c", "Ġc at",
    "Ġs at", "Ġ in", "Ġa n", "Ġan d", "i s", "Ġ is", "Ġo n", "Ġ w", "a s", "Ġw as",
]


def tokenizer():
    """(tokens, token_types, merges, eos_id) of the tiny vocabulary."""
    b2u = bytes_to_unicode()
    tokens = [b2u[b] for b in range(256)]
    merges, have = [], set(tokens)
    for m in MERGES:
        a, b = m.split(" ")
        if a in have and b in have and a + b not in have:
            merges.append(m)
            tokens.append(a + b)
            have.add(a + b)
        else:
            raise SystemExit(f"merge {m!r}: a part is not a token yet, or the result already is")
    types = [TokenType.NORMAL] * len(tokens)
    tokens.append("<|endoftext|>")
    types.append(TokenType.CONTROL)
    return tokens, types, merges, len(tokens) - 1


# ---------------------------------------------------------------------------------------------
# families

def llama3_rope_factors(hd, base, factor=8.0, low=1.0, high=4.0, old_ctx=64):
    """Llama 3 frequency divisors exactly as llama.cpp's converter computes them
    (conversion/llama.py generate_extra_tensors), with a tiny original context so that the
    16-wide head gets a mix of 1, smoothed and `factor`."""
    out = []
    for i in range(0, hd, 2):
        freq = 1.0 / (base ** (i / hd))
        wavelen = 2 * math.pi / freq
        if wavelen < old_ctx / high:
            out.append(1.0)
        elif wavelen > old_ctx / low:
            out.append(factor)
        else:
            smooth = (old_ctx / wavelen - low) / (high - low)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return np.array(out, dtype=np.float32)


# d: hidden, h/kv: heads, hd: head_dim (key_length = value_length), ff: FFN width, L: layers.
# Every file stays under 400 KB: gemma3's six layers fit only with hidden 32 (q width 64 still
# differs from it), gemma2 has FFN 64, and gptneox/olmo2 (which need an untied head) FFN 80.
# gemma: post-norm gains ~4-6 and an output-norm gain ~3 so that the layers, not the sqrt(d)-scaled
# embedding, decide the logits, and those reach +-44 before gemma2's final softcap of 30;
# qk_std 0.7 gives attention scores of tens, so gemma2's attention softcap of 50 bites.
FAMILIES = {
    "llama3": dict(arch="llama", d=64, h=4, kv=2, hd=16, ff=96, L=2, seed=101, base=10000.0, rms_eps=1e-5,
                   rope_freqs=True),
    "gemma2": dict(arch="gemma2", d=64, h=4, kv=2, hd=32, ff=64, L=2, seed=102, base=10000.0, rms_eps=1e-6,
                   swa=4, attn_softcap=50.0, final_softcap=30.0, emb_std=0.5, qk_std=0.7, post_gain=6.0, out_gain=3.0),
    "gemma3": dict(arch="gemma3", d=32, h=4, kv=2, hd=16, ff=64, L=6, seed=103, base=1000000.0, rms_eps=1e-6,
                   swa=4, base_swa=10000.0, linear_scale=8.0, emb_std=0.5, post_gain=4.0, out_gain=3.0),
    "qwen3": dict(arch="qwen3", d=64, h=4, kv=2, hd=16, ff=96, L=2, seed=104, base=1000000.0, rms_eps=1e-6),
    "qwen3moe": dict(arch="qwen3moe", d=64, h=4, kv=2, hd=16, ff=96, L=2, seed=105, base=1000000.0, rms_eps=1e-6,
                     experts=4, used=2, ff_exp=32),
    "phi3": dict(arch="phi3", d=64, h=4, kv=2, hd=16, ff=96, L=2, seed=106, base=10000.0, rms_eps=1e-5,
                 swa=4),  # llama.cpp reads phi3.attention.sliding_window and then disables SWA
    "gpt2": dict(arch="gpt2", d=64, h=4, kv=4, hd=16, ff=96, L=2, seed=107, ln_eps=1e-5),
    "gptneox": dict(arch="gptneox", d=64, h=4, kv=4, hd=16, ff=80, L=2, seed=108, base=10000.0, ln_eps=1e-5,
                    n_rot=4, parallel=True),
    "olmo2": dict(arch="olmo2", d=64, h=4, kv=2, hd=16, ff=80, L=2, seed=109, base=500000.0, rms_eps=1e-6),
}
CTX = 64  # context_length (gpt2's position_embd has this many rows)


def write_family(name, spec, out_dir):
    arch, d, h, kv, hd, ff, L = (spec[k] for k in ("arch", "d", "h", "kv", "hd", "ff", "L"))
    rng = np.random.default_rng(spec["seed"])

    def r(*shape, sc):
        return (rng.standard_normal(shape) * sc).astype(np.float32)

    def W(rows, cols, gain=1.0):  # a [rows, cols] matrix (GGUF ne = [cols, rows]), std gain/sqrt(cols)
        return r(rows, cols, sc=gain / math.sqrt(cols))

    def norm_w(n, gain=1.0):
        return ((1.0 + r(n, sc=0.1)) * gain).astype(np.float32)

    def bias(n):
        return r(n, sc=0.1)

    tokens, types, merges, eos = tokenizer()
    V = len(tokens)
    path = os.path.join(out_dir, name, "model.gguf")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    w = GGUFWriter(path, arch)
    # not the family's name: llama.cpp's vocab loader keys quirks on general.name (a name
    # containing "phi3" makes it look up "</s>", "<unk>" and "<s>", which this vocabulary lacks)
    w.add_name("lql-tiny")
    w.add_context_length(CTX)
    w.add_block_count(L)
    w.add_embedding_length(d)
    w.add_feed_forward_length(ff)
    w.add_head_count(h)
    w.add_head_count_kv(kv)
    if hd != d // h:
        w.add_key_length(hd)
        w.add_value_length(hd)
    if "rms_eps" in spec:
        w.add_layer_norm_rms_eps(spec["rms_eps"])
    if "ln_eps" in spec:
        w.add_layer_norm_eps(spec["ln_eps"])
    if "base" in spec:
        w.add_rope_freq_base(spec["base"])
        w.add_rope_dimension_count(spec.get("n_rot", hd))
    if "swa" in spec:
        w.add_sliding_window(spec["swa"])
    if "base_swa" in spec:
        w.add_rope_freq_base_swa(spec["base_swa"])
    if "linear_scale" in spec:
        w.add_rope_scaling_type(RopeScalingType.LINEAR)
        w.add_rope_scaling_factor(spec["linear_scale"])
    if "attn_softcap" in spec:
        w.add_attn_logit_softcapping(spec["attn_softcap"])
    if "final_softcap" in spec:
        w.add_final_logit_softcapping(spec["final_softcap"])
    if "parallel" in spec:
        w.add_parallel_residual(spec["parallel"])
    if "experts" in spec:
        w.add_expert_count(spec["experts"])
        w.add_expert_used_count(spec["used"])
        w.add_expert_feed_forward_length(spec["ff_exp"])
    # tokenizer
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("gpt-2")
    w.add_token_list(tokens)
    w.add_token_types([int(t) for t in types])
    w.add_token_merges(merges)
    w.add_bos_token_id(eos)
    w.add_eos_token_id(eos)
    w.add_add_bos_token(False)
    w.add_add_eos_token(False)

    emb_std = spec.get("emb_std", 0.5)
    qk_gain = spec.get("qk_std", 0.0) * math.sqrt(d) if "qk_std" in spec else 1.5
    T = {}
    T["token_embd.weight"] = r(V, d, sc=emb_std)
    if arch == "gpt2":
        T["position_embd.weight"] = r(CTX, d, sc=0.3)
    T["output_norm.weight"] = norm_w(d, spec.get("out_gain", 1.0))
    if arch in ("gpt2", "gptneox"):
        T["output_norm.bias"] = bias(d)
    if arch in ("gptneox", "olmo2"):  # llama.cpp requires an untied head for these
        T["output.weight"] = r(V, d, sc=emb_std)
    if spec.get("rope_freqs"):
        T["rope_freqs.weight"] = llama3_rope_factors(hd, spec["base"])
    nq, nk = h * hd, kv * hd
    for l in range(L):
        p = f"blk.{l}."
        if arch in ("gpt2", "gptneox"):
            T[p + "attn_norm.weight"], T[p + "attn_norm.bias"] = norm_w(d), bias(d)
            T[p + "attn_qkv.weight"] = np.concatenate([W(nq, d, qk_gain), W(nk, d, qk_gain), W(nk, d)])
            T[p + "attn_qkv.bias"] = bias(nq + 2 * nk)
            T[p + "attn_output.weight"], T[p + "attn_output.bias"] = W(d, nq), bias(d)
            T[p + "ffn_norm.weight"], T[p + "ffn_norm.bias"] = norm_w(d), bias(d)
            T[p + "ffn_up.weight"], T[p + "ffn_up.bias"] = W(ff, d, 2.0), bias(ff)
            T[p + "ffn_down.weight"], T[p + "ffn_down.bias"] = W(d, ff), bias(d)
            continue
        if arch != "olmo2":
            T[p + "attn_norm.weight"] = norm_w(d)
        if arch == "phi3":
            T[p + "attn_qkv.weight"] = np.concatenate([W(nq, d, qk_gain), W(nk, d, qk_gain), W(nk, d)])
        else:
            T[p + "attn_q.weight"], T[p + "attn_k.weight"] = W(nq, d, qk_gain), W(nk, d, qk_gain)
            T[p + "attn_v.weight"] = W(nk, d)
        T[p + "attn_output.weight"] = W(d, nq)
        if arch in ("qwen3", "qwen3moe", "gemma3"):
            T[p + "attn_q_norm.weight"], T[p + "attn_k_norm.weight"] = norm_w(hd), norm_w(hd)
        if arch == "olmo2":
            T[p + "attn_q_norm.weight"], T[p + "attn_k_norm.weight"] = norm_w(nq), norm_w(nk)
        if arch in ("gemma2", "gemma3", "olmo2"):
            T[p + "post_attention_norm.weight"] = norm_w(d, spec.get("post_gain", 1.0))
        if arch != "olmo2":
            T[p + "ffn_norm.weight"] = norm_w(d)
        if arch == "qwen3moe":
            E, fe = spec["experts"], spec["ff_exp"]
            T[p + "ffn_gate_inp.weight"] = W(E, d, 4.0)
            T[p + "ffn_gate_exps.weight"] = np.stack([W(fe, d, 2.0) for _ in range(E)])
            T[p + "ffn_up_exps.weight"] = np.stack([W(fe, d, 2.0) for _ in range(E)])
            T[p + "ffn_down_exps.weight"] = np.stack([W(d, fe) for _ in range(E)])
        elif arch == "phi3":  # ffn_up holds [gate; up] (2*ff rows), llama.cpp's fused swiglu order
            T[p + "ffn_up.weight"] = np.concatenate([W(ff, d, 2.0), W(ff, d, 2.0)])
            T[p + "ffn_down.weight"] = W(d, ff)
        else:
            T[p + "ffn_gate.weight"], T[p + "ffn_up.weight"] = W(ff, d, 2.0), W(ff, d, 2.0)
            T[p + "ffn_down.weight"] = W(d, ff)
        if arch in ("gemma2", "gemma3", "olmo2"):
            T[p + "post_ffw_norm.weight"] = norm_w(d, spec.get("post_gain", 1.0))
    for k, v in T.items():
        w.add_tensor(k, np.ascontiguousarray(v, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", nargs="?", default=os.path.join(ROOT, "tests", "fixtures", "families"))
    ap.add_argument("--only", nargs="*", default=None)
    a = ap.parse_args()
    for name, spec in FAMILIES.items():
        if a.only and name not in a.only:
            continue
        path = write_family(name, spec, a.out)
        print(f"{name:9s} {spec['arch']:9s} {os.path.getsize(path):7d} bytes  {os.path.relpath(path, ROOT)}")


if __name__ == "__main__":
    main()
