//! Tiny synthetic GGUF models (llama- or qwen2-shaped, seeded random weights, a byte-level
//! tokenizer) for tests and examples across the workspace.
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
        w.add_kv(format!("{a}.feed_forward_length"), self.ffn as u32)?;
        w.add_kv(format!("{a}.attention.head_count"), self.heads as u32)?;
        w.add_kv(format!("{a}.attention.head_count_kv"), self.kv_heads as u32)?;
        w.add_kv(format!("{a}.rope.freq_base"), self.rope_theta)?;
        w.add_kv(format!("{a}.rope.dimension_count"), hd as u32)?;
        w.add_kv(
            format!("{a}.attention.layer_norm_rms_epsilon"),
            self.norm_eps,
        )?;
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
            if self.arch == "qwen2" {
                w.add_f32_tensor(&n("attn_q.bias"), &[q], &rand(q, s))?;
                w.add_f32_tensor(&n("attn_k.bias"), &[kv], &rand(kv, s))?;
                w.add_f32_tensor(&n("attn_v.bias"), &[kv], &rand(kv, s))?;
            }
            w.add_f32_tensor(&n("attn_output.weight"), &[q, h], &rand(q * h, s))?;
            w.add_f32_tensor(&n("ffn_norm.weight"), &[h], &ones(h, rand(h, 0.1)))?;
            w.add_f32_tensor(&n("ffn_gate.weight"), &[h, f], &rand(h * f, s))?;
            w.add_f32_tensor(&n("ffn_up.weight"), &[h, f], &rand(h * f, s))?;
            w.add_f32_tensor(&n("ffn_down.weight"), &[f, h], &rand(f * h, s))?;
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
