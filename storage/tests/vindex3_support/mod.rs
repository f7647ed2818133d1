//! Test support for the VINDEX3 tests: a small synthetic decoder `Model` (real encodings,
//! deterministic values) held in one owned buffer, the way an importer lays out a GGUF;
//! [`crash`] for the killed-EXTRACT tests.

#![allow(dead_code)]

pub mod crash;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use lql_storage::codec::encode_row;
use lql_storage::model::{Backing, Operand, SourceKind};
use lql_storage::surface::{Activation, RopePairing, SpecialTokens};
use lql_storage::tokenizer_spec::{GgufVocab, TokenizerSlot, TokenizerSpec};
use lql_storage::{DType, ExecutionSurface, Model, OperandKey, Role};

/// Lower-case hex of bytes (a digest).
pub fn hex(d: impl AsRef<[u8]>) -> String {
    d.as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

/// Geometry of a synthetic model.
#[derive(Clone, Copy)]
pub struct Geometry {
    pub layers: usize,
    pub hidden: usize,
    pub ffn: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub vocab: usize,
    pub tied: bool,
    /// Encoding of the per-layer matrices.
    pub matrix: DType,
}

pub const SMALL: Geometry = Geometry {
    layers: 2,
    hidden: 64,
    ffn: 128,
    heads: 4,
    kv_heads: 2,
    vocab: 96,
    tied: true,
    matrix: DType::Q4_1,
};

fn values(seed: u64, n: usize) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32) - 0.5
        })
        .collect()
}

/// A synthetic model with real encodings; tensors are laid out back to back in one buffer,
/// at unaligned offsets (as a source file may).
pub fn synthetic(g: Geometry) -> Model {
    let head_dim = g.hidden / g.heads;
    let q = g.heads * head_dim;
    let kv = g.kv_heads * head_dim;
    let mut specs: Vec<(OperandKey, String, DType, Vec<usize>)> = vec![
        (
            OperandKey::global(Role::TokenEmbedding),
            "token_embd.weight".into(),
            DType::Q8_0,
            vec![g.hidden, g.vocab],
        ),
        (
            OperandKey::global(Role::OutputNorm),
            "output_norm.weight".into(),
            DType::F32,
            vec![g.hidden],
        ),
    ];
    if !g.tied {
        specs.push((
            OperandKey::global(Role::Output),
            "output.weight".into(),
            DType::F16,
            vec![g.hidden, g.vocab],
        ));
    }
    for l in 0..g.layers {
        for (role, name, dtype, shape) in [
            (Role::AttnNorm, "attn_norm", DType::F32, vec![g.hidden]),
            (Role::AttnQ, "attn_q", g.matrix, vec![g.hidden, q]),
            (Role::AttnK, "attn_k", g.matrix, vec![g.hidden, kv]),
            (Role::AttnV, "attn_v", g.matrix, vec![g.hidden, kv]),
            (Role::AttnOutput, "attn_output", g.matrix, vec![q, g.hidden]),
            (Role::FfnNorm, "ffn_norm", DType::F32, vec![g.hidden]),
            (Role::FfnGate, "ffn_gate", g.matrix, vec![g.hidden, g.ffn]),
            (Role::FfnUp, "ffn_up", g.matrix, vec![g.hidden, g.ffn]),
            (Role::FfnDown, "ffn_down", g.matrix, vec![g.ffn, g.hidden]),
        ] {
            specs.push((
                OperandKey::layer(l, role),
                format!("blk.{l}.{name}.weight"),
                dtype,
                shape,
            ));
        }
    }
    let mut buf = vec![0u8; 7]; // an unaligned start, like a GGUF data section may have
    let mut operands = BTreeMap::new();
    for (i, (key, name, dtype, shape)) in specs.into_iter().enumerate() {
        let n: usize = shape.iter().product();
        let vals = values(i as u64 + 1, n);
        let offset = buf.len();
        encode_row(dtype, &vals, &mut buf).expect("encode");
        operands.insert(
            key,
            Operand {
                source_name: name,
                dtype,
                shape,
                backing: 0,
                offset,
                len: buf.len() - offset,
            },
        );
    }
    let vocab = GgufVocab {
        model: "gpt2".into(),
        pre: Some("smollm".into()),
        tokens: (0..g.vocab).map(|i| format!("t{i}")).collect(),
        scores: vec![0.0; g.vocab],
        token_types: vec![1; g.vocab],
        merges: vec!["t 1".into()],
        add_space_prefix: None,
    };
    let surface = ExecutionSurface {
        source_architecture: "llama".into(),
        n_layers: g.layers,
        hidden: g.hidden,
        ffn: g.ffn,
        n_heads: g.heads,
        n_kv_heads: g.kv_heads,
        head_dim,
        vocab: g.vocab,
        context_length: 2048,
        rope_theta: 10000.0,
        rope_pairing: RopePairing::Adjacent,
        norm_eps: 1e-5,
        activation: Activation::Silu,
        tied_head: g.tied,
        attn_bias: false,
        embedding_scale: 1.0,
        moe: None,
        block: Default::default(),
        special: SpecialTokens {
            bos: Some(1),
            eos: Some(2),
            pad: None,
            unk: None,
            eot: vec![2],
            add_bos: false,
            add_eos: false,
        },
    };
    Model {
        path: PathBuf::from("/nonexistent/synthetic.gguf"),
        kind: SourceKind::Gguf,
        surface,
        tokenizer: TokenizerSlot::ready(TokenizerSpec::Gguf {
            vocab,
            chat_template: Some("{% for m in messages %}{{ m.content }}{% endfor %}".into()),
        }),
        operands,
        backings: vec![Backing::Owned(Arc::new(buf))],
        absent: Default::default(),
        overlays: Default::default(),
        uninterpreted: None,
    }
}

/// A LYRW v2 file with one dense bank (gate, up, down regions of `rows × cols` f16), laid
/// out as seed 002 §6 describes.
pub fn lyrw_dense(layer: u32, rows: u32, cols: u32) -> Vec<u8> {
    let mut b = Vec::new();
    let u16s =
        |b: &mut Vec<u8>, v: &[u16]| v.iter().for_each(|x| b.extend_from_slice(&x.to_le_bytes()));
    let u32s =
        |b: &mut Vec<u8>, v: &[u32]| v.iter().for_each(|x| b.extend_from_slice(&x.to_le_bytes()));
    u32s(&mut b, &[0x4C59_5257, 2, layer]);
    u16s(&mut b, &[1, 1]);
    u32s(&mut b, &[0, 0]);
    u16s(&mut b, &[0, 0, 3, 1]);
    u32s(&mut b, &[1, cols, rows, cols]);
    u16s(&mut b, &[0, 0]);
    u32s(&mut b, &[0, 1]);
    for (i, role) in [0u16, 1, 3].into_iter().enumerate() {
        u16s(&mut b, &[i as u16, role, 1, 0, 0xFFFF, 0]);
        u32s(&mut b, &[rows, cols]);
    }
    let table_at = b.len();
    b.resize(table_at + 3 * 16, 0);
    let len = (rows * cols * 2) as u64;
    let mut at = (b.len() as u64).div_ceil(64) * 64;
    for i in 0..3 {
        let e = table_at + i * 16;
        b[e..e + 8].copy_from_slice(&at.to_le_bytes());
        b[e + 8..e + 16].copy_from_slice(&len.to_le_bytes());
        at = (at + len).div_ceil(64) * 64;
    }
    b.resize(at as usize, 0);
    b
}
