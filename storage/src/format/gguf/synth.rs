//! Tiny synthetic GGUF models (llama- or qwen2-shaped, seeded random weights, a byte-level
//! tokenizer) for tests and examples across the workspace; with [`TinyMoe`] every FFN is a
//! bank of routed experts (Mixtral-style `llama`, or `qwen2moe` with a shared expert).
//!
//! ```no_run
//! use lql_storage::format::gguf::synth::TinyModel;
//! let path = std::path::Path::new("/tmp/tiny.gguf");
//! TinyModel::qwen2().write(path).unwrap();
//! let model = lql_storage::import::open(path).unwrap();
//! ```

use std::path::Path;

use crate::error::Result;

use super::value::MetaValue;
use super::writer::GgufWriter;

/// The shape and contents of a synthetic model.
#[derive(Debug, Clone, PartialEq)]
pub struct TinyModel {
    /// `llama` (adjacent RoPE pairs) or `qwen2` (half-split, Q/K/V biases).
    pub arch: String,
    pub layers: usize,
    pub hidden: usize,
    pub ffn: usize,
    pub heads: usize,
    pub kv_heads: usize,
    /// At least 259: 256 byte tokens, `<|endoftext|>`, `<|im_start|>`, `<|im_end|>`.
    pub vocab: usize,
    pub context_length: usize,
    pub rope_theta: f32,
    pub norm_eps: f32,
    /// Separate `output.weight` (otherwise the head is tied to the embedding).
    pub untied_head: bool,
    pub seed: u64,
    /// Scale of the uniform random weights.
    pub scale: f32,
    /// Every FFN a bank of experts (`ffn_gate_inp`, `ffn_{gate,up,down}_exps`, optional
    /// shared expert) instead of a dense FFN.
    pub moe: Option<TinyMoe>,
}

/// The bank of a synthetic mixture-of-experts model.
#[derive(Debug, Clone, PartialEq)]
pub struct TinyMoe {
    pub experts: usize,
    pub used: usize,
    /// Width of each routed expert (written as `{arch}.expert_feed_forward_length`).
    pub expert_ffn: usize,
    /// Width of the shared expert; 0 for none.
    pub shared_ffn: usize,
    /// Write the shared expert's gate vector `ffn_gate_inp_shexp`.
    pub shared_gate: bool,
    /// Write `{arch}.expert_gating_func = 2` (sigmoid routing, renormalised).
    pub sigmoid: bool,
}

impl TinyModel {
    /// 2 layers, hidden 64, FFN 128, 4 heads / 2 KV heads, vocab 320, tied head.
    pub fn llama() -> Self {
        TinyModel {
            arch: "llama".into(),
            layers: 2,
            hidden: 64,
            ffn: 128,
            heads: 4,
            kv_heads: 2,
            vocab: 320,
            context_length: 256,
            rope_theta: 10_000.0,
            norm_eps: 1e-5,
            untied_head: false,
            seed: 1,
            scale: 0.2,
            moe: None,
        }
    }

    /// As [`TinyModel::llama`] with Mixtral-style banks: 4 experts of width 96, top-2.
    pub fn mixtral() -> Self {
        TinyModel {
            moe: Some(TinyMoe {
                experts: 4,
                used: 2,
                expert_ffn: 96,
                shared_ffn: 0,
                shared_gate: false,
                sigmoid: false,
            }),
            ..TinyModel::llama()
        }
    }

    /// qwen2moe-shaped: qwen2 attention, banks of 4 experts of width 32, top-2, and a gated
    /// shared expert of width 128.
    pub fn qwen2moe() -> Self {
        TinyModel {
            arch: "qwen2moe".into(),
            moe: Some(TinyMoe {
                experts: 4,
                used: 2,
                expert_ffn: 32,
                shared_ffn: 128,
                shared_gate: true,
                sigmoid: false,
            }),
            ..TinyModel::qwen2()
        }
    }

    /// As [`TinyModel::llama`] but qwen2-shaped: biases and a separate output head.
    pub fn qwen2() -> Self {
        TinyModel {
            arch: "qwen2".into(),
            untied_head: true,
            rope_theta: 1_000_000.0,
            norm_eps: 1e-6,
            ..TinyModel::llama()
        }
    }

    /// The GGUF bytes.
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        Ok(self.writer()?.to_bytes())
    }

    /// Write the model to `path` (temporary name, then rename).
    pub fn write(&self, path: &Path) -> Result<()> {
        self.writer()?.write(path)
    }

    /// A writer holding the model, for further changes before writing.
    pub fn writer(&self) -> Result<GgufWriter<'static>> {
        let a = self.arch.as_str();
        let hd = self.hidden / self.heads;
        let mut w = GgufWriter::new();
        w.add_kv("general.architecture", a)?;
        w.add_kv("general.name", format!("tiny-{a}"))?;
        w.add_kv(format!("{a}.context_length"), self.context_length as u32)?;
        w.add_kv(format!("{a}.embedding_length"), self.hidden as u32)?;
        w.add_kv(format!("{a}.block_count"), self.layers as u32)?;
        // A Mixtral-style `llama` bank's experts are `feed_forward_length` wide.
        let ffn_len = match &self.moe {
            Some(m) if a == "llama" => m.expert_ffn,
            _ => self.ffn,
        };
        w.add_kv(format!("{a}.feed_forward_length"), ffn_len as u32)?;
        w.add_kv(format!("{a}.attention.head_count"), self.heads as u32)?;
        w.add_kv(format!("{a}.attention.head_count_kv"), self.kv_heads as u32)?;
        w.add_kv(format!("{a}.rope.freq_base"), self.rope_theta)?;
        w.add_kv(format!("{a}.rope.dimension_count"), hd as u32)?;
        w.add_kv(
            format!("{a}.attention.layer_norm_rms_epsilon"),
            self.norm_eps,
        )?;
        if let Some(m) = &self.moe {
            w.add_kv(format!("{a}.expert_count"), m.experts as u32)?;
            w.add_kv(format!("{a}.expert_used_count"), m.used as u32)?;
            if a != "llama" {
                w.add_kv(
                    format!("{a}.expert_feed_forward_length"),
                    m.expert_ffn as u32,
                )?;
            }
            if m.shared_ffn > 0 {
                w.add_kv(
                    format!("{a}.expert_shared_feed_forward_length"),
                    m.shared_ffn as u32,
                )?;
            }
            if m.sigmoid {
                w.add_kv(format!("{a}.expert_gating_func"), 2u32)?;
            }
        }
        let tokens = byte_level_vocab(self.vocab);
        w.add_kv("tokenizer.ggml.model", "gpt2")?;
        w.add_kv("tokenizer.ggml.pre", "gpt-2")?;
        let types: Vec<i32> = (0..tokens.len())
            .map(|i| if (256..259).contains(&i) { 3 } else { 1 })
            .collect();
        w.add_kv("tokenizer.ggml.tokens", MetaValue::str_array(&tokens))?;
        w.add_kv("tokenizer.ggml.token_type", MetaValue::i32_array(&types))?;
        w.add_kv(
            "tokenizer.ggml.merges",
            MetaValue::str_array(Vec::<String>::new()),
        )?;
        w.add_kv("tokenizer.ggml.bos_token_id", 257u32)?;
        w.add_kv("tokenizer.ggml.eos_token_id", 258u32)?;
        w.add_kv("tokenizer.ggml.unknown_token_id", 256u32)?;
        w.add_kv("tokenizer.ggml.add_bos_token", false)?;

        let mut rng = self.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        let mut rand = |n: usize, scale: f32| -> Vec<f32> {
            (0..n)
                .map(|_| {
                    rng ^= rng << 13;
                    rng ^= rng >> 7;
                    rng ^= rng << 17;
                    ((rng >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 2.0 * scale
                })
                .collect()
        };
        let s = self.scale;
        let (h, f, q, kv) = (self.hidden, self.ffn, self.heads * hd, self.kv_heads * hd);
        let ones = |n: usize, r: Vec<f32>| -> Vec<f32> {
            r.into_iter().take(n).map(|x| 1.0 + x).collect()
        };
        w.add_f32_tensor(
            "token_embd.weight",
            &[h, self.vocab],
            &rand(h * self.vocab, 1.0),
        )?;
        for l in 0..self.layers {
            let n = |t: &str| format!("blk.{l}.{t}");
            w.add_f32_tensor(&n("attn_norm.weight"), &[h], &ones(h, rand(h, 0.1)))?;
            w.add_f32_tensor(&n("attn_q.weight"), &[h, q], &rand(h * q, s))?;
            w.add_f32_tensor(&n("attn_k.weight"), &[h, kv], &rand(h * kv, s))?;
            w.add_f32_tensor(&n("attn_v.weight"), &[h, kv], &rand(h * kv, s))?;
            if self.arch.starts_with("qwen2") {
                w.add_f32_tensor(&n("attn_q.bias"), &[q], &rand(q, s))?;
                w.add_f32_tensor(&n("attn_k.bias"), &[kv], &rand(kv, s))?;
                w.add_f32_tensor(&n("attn_v.bias"), &[kv], &rand(kv, s))?;
            }
            w.add_f32_tensor(&n("attn_output.weight"), &[q, h], &rand(q * h, s))?;
            w.add_f32_tensor(&n("ffn_norm.weight"), &[h], &ones(h, rand(h, 0.1)))?;
            let Some(m) = &self.moe else {
                w.add_f32_tensor(&n("ffn_gate.weight"), &[h, f], &rand(h * f, s))?;
                w.add_f32_tensor(&n("ffn_up.weight"), &[h, f], &rand(h * f, s))?;
                w.add_f32_tensor(&n("ffn_down.weight"), &[f, h], &rand(f * h, s))?;
                continue;
            };
            let (e, ef, sf) = (m.experts, m.expert_ffn, m.shared_ffn);
            w.add_f32_tensor(&n("ffn_gate_inp.weight"), &[h, e], &rand(h * e, 1.0))?;
            w.add_f32_tensor(
                &n("ffn_gate_exps.weight"),
                &[h, ef, e],
                &rand(h * ef * e, s),
            )?;
            w.add_f32_tensor(&n("ffn_up_exps.weight"), &[h, ef, e], &rand(h * ef * e, s))?;
            w.add_f32_tensor(
                &n("ffn_down_exps.weight"),
                &[ef, h, e],
                &rand(ef * h * e, s),
            )?;
            if sf > 0 {
                w.add_f32_tensor(&n("ffn_gate_shexp.weight"), &[h, sf], &rand(h * sf, s))?;
                w.add_f32_tensor(&n("ffn_up_shexp.weight"), &[h, sf], &rand(h * sf, s))?;
                w.add_f32_tensor(&n("ffn_down_shexp.weight"), &[sf, h], &rand(sf * h, s))?;
                if m.shared_gate {
                    w.add_f32_tensor(&n("ffn_gate_inp_shexp.weight"), &[h], &rand(h, 1.0))?;
                }
            }
        }
        w.add_f32_tensor("output_norm.weight", &[h], &ones(h, rand(h, 0.1)))?;
        if self.untied_head {
            w.add_f32_tensor("output.weight", &[h, self.vocab], &rand(h * self.vocab, s))?;
        }
        Ok(w)
    }
}

/// GPT-2 byte-level alphabet (token i < 256 is byte i), three specials, then `<pad_N>`.
pub fn byte_level_vocab(vocab: usize) -> Vec<String> {
    let mut out: Vec<String> = Vec::with_capacity(vocab.max(259));
    let mut extra = 0u32;
    for b in 0u32..256 {
        let printable =
            (33..=126).contains(&b) || (161..=172).contains(&b) || (174..=255).contains(&b);
        let c = if printable {
            char::from_u32(b)
        } else {
            extra += 1;
            char::from_u32(255 + extra)
        };
        out.push(c.map(String::from).unwrap_or_default());
    }
    out.push("<|endoftext|>".into());
    out.push("<|im_start|>".into());
    out.push("<|im_end|>".into());
    let mut i = 0;
    while out.len() < vocab {
        out.push(format!("<pad_{i}>"));
        i += 1;
    }
    out
}
