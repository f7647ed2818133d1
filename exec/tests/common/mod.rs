//! Test support: synthetic models built in memory, and a naive reference forward pass
//! (full recomputation per position, plain loops) written independently of the executor.
#![allow(dead_code)]

pub mod hf_writer;

use std::collections::BTreeMap;
use std::sync::Arc;

use lql_storage::codec;
use lql_storage::model::{OperandKey, OperandSource, Role, TensorView};
use lql_storage::surface::{Activation, ExecutionSurface, RopePairing, SpecialTokens};
use lql_storage::DType;

/// `n` deterministic test values in `[-scale, scale]` (a sine of the index, shifted by `seed`).
pub fn values(n: usize, seed: u32, scale: f32) -> Vec<f32> {
    (0..n)
        .map(|i| (i as f32 * 0.37 + seed as f32 * 1.7).sin() * scale)
        .collect()
}

/// One owned tensor.
#[derive(Clone)]
pub struct Tensor {
    pub dtype: DType,
    pub shape: Vec<usize>,
    pub bytes: Vec<u8>,
}

impl Tensor {
    pub fn view(&self) -> TensorView<'_> {
        TensorView {
            dtype: self.dtype,
            shape: &self.shape,
            bytes: &self.bytes,
        }
    }
}

/// An in-memory operand source.
#[derive(Clone)]
pub struct Model {
    pub surface: ExecutionSurface,
    pub operands: BTreeMap<OperandKey, Tensor>,
}

impl OperandSource for Model {
    fn surface(&self) -> &ExecutionSurface {
        &self.surface
    }
    fn view(&self, key: OperandKey) -> Option<TensorView<'_>> {
        self.operands.get(&key).map(Tensor::view)
    }
}

pub mod real;

pub struct Rng(u64);
impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }
    pub fn next(&mut self) -> f32 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        ((z >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }
}

/// Options of a synthetic model.
#[derive(Clone)]
pub struct Spec {
    pub pairing: RopePairing,
    pub tied: bool,
    pub bias: bool,
    pub matrix_dtype: DType,
    pub embed_dtype: DType,
    pub context: usize,
    pub layers: usize,
    pub activation: Activation,
    pub embedding_scale: f32,
}

impl Default for Spec {
    fn default() -> Self {
        Spec {
            pairing: RopePairing::Adjacent,
            tied: true,
            bias: false,
            matrix_dtype: DType::F32,
            embed_dtype: DType::F32,
            context: 48,
            layers: 2,
            activation: Activation::Silu,
            embedding_scale: 1.0,
        }
    }
}

pub fn surface(spec: &Spec) -> ExecutionSurface {
    ExecutionSurface {
        source_architecture: "synthetic".into(),
        n_layers: spec.layers,
        hidden: 64,
        ffn: 128,
        n_heads: 4,
        n_kv_heads: 2,
        head_dim: 16,
        vocab: 96,
        context_length: spec.context,
        rope_theta: 10000.0,
        rope_pairing: spec.pairing,
        norm_eps: 1e-5,
        activation: spec.activation,
        tied_head: spec.tied,
        attn_bias: spec.bias,
        embedding_scale: spec.embedding_scale,
        moe: None,
        block: Default::default(),
        special: SpecialTokens {
            eos: Some(2),
            ..SpecialTokens::default()
        },
    }
}

/// A model with random weights, every tensor in its own owned backing.
pub fn build(spec: &Spec, seed: u64) -> Model {
    let s = surface(spec);
    let mut rng = Rng::new(seed);
    let mut operands = BTreeMap::new();
    let mut add = |key: OperandKey, dtype: DType, shape: Vec<usize>, scale: f32, offset: f32| {
        let n: usize = shape.iter().product();
        let vals: Vec<f32> = (0..n).map(|_| offset + scale * rng.next()).collect();
        let mut bytes = Vec::new();
        for row in vals.chunks(shape[0]) {
            codec::encode_row(dtype, row, &mut bytes).unwrap();
        }
        operands.insert(
            key,
            Tensor {
                dtype,
                shape,
                bytes,
            },
        );
    };
    let (d, qd, kvd, ff) = (
        s.hidden,
        s.n_heads * s.head_dim,
        s.n_kv_heads * s.head_dim,
        s.ffn,
    );
    let m = spec.matrix_dtype;
    add(
        OperandKey::global(Role::TokenEmbedding),
        spec.embed_dtype,
        vec![d, s.vocab],
        1.0,
        0.0,
    );
    for l in 0..s.n_layers {
        let k = |r| OperandKey::layer(l, r);
        add(k(Role::AttnNorm), DType::F32, vec![d], 0.2, 1.0);
        add(k(Role::AttnQ), m, vec![d, qd], 0.25, 0.0);
        add(k(Role::AttnK), m, vec![d, kvd], 0.25, 0.0);
        add(k(Role::AttnV), m, vec![d, kvd], 0.25, 0.0);
        add(k(Role::AttnOutput), m, vec![qd, d], 0.15, 0.0);
        if spec.bias {
            add(k(Role::AttnQBias), DType::F32, vec![qd], 0.3, 0.0);
            add(k(Role::AttnKBias), DType::F32, vec![kvd], 0.3, 0.0);
            add(k(Role::AttnVBias), DType::F32, vec![kvd], 0.3, 0.0);
        }
        add(k(Role::FfnNorm), DType::F32, vec![d], 0.2, 1.0);
        add(k(Role::FfnGate), m, vec![d, ff], 0.2, 0.0);
        add(k(Role::FfnUp), m, vec![d, ff], 0.2, 0.0);
        add(k(Role::FfnDown), m, vec![ff, d], 0.15, 0.0);
    }
    add(
        OperandKey::global(Role::OutputNorm),
        DType::F32,
        vec![d],
        0.2,
        1.0,
    );
    if !spec.tied {
        add(
            OperandKey::global(Role::Output),
            m,
            vec![d, s.vocab],
            0.5,
            0.0,
        );
    }
    Model {
        surface: s,
        operands,
    }
}

/// The operand decoded to f32, row-major `[rows][row_len]`.
pub fn dense(model: &dyn OperandSource, key: OperandKey) -> Vec<Vec<f32>> {
    let v = model.view(key).unwrap();
    (0..v.rows())
        .map(|r| {
            let mut out = vec![0.0; v.row_len()];
            codec::decode_row(v.dtype, v.row(r), &mut out).unwrap();
            out
        })
        .collect()
}

fn matvec(w: &[Vec<f32>], x: &[f32]) -> Vec<f32> {
    w.iter()
        .map(|r| {
            r.iter()
                .zip(x)
                .map(|(a, b)| (*a as f64) * (*b as f64))
                .sum::<f64>() as f32
        })
        .collect()
}

fn rms(x: &[f32], w: &[f32], eps: f32) -> Vec<f32> {
    let ms = x.iter().map(|v| (*v as f64) * (*v as f64)).sum::<f64>() / x.len() as f64;
    let inv = 1.0 / (ms + eps as f64).sqrt();
    x.iter()
        .zip(w)
        .map(|(a, b)| (*a as f64 * inv) as f32 * b)
        .collect()
}

fn rope(x: &mut [f32], pos: usize, hd: usize, theta: f32, pairing: RopePairing) {
    let half = hd / 2;
    for head in x.chunks_mut(hd) {
        let orig = head.to_vec();
        for i in 0..half {
            let ang = pos as f64 * (theta as f64).powf(-2.0 * i as f64 / hd as f64);
            let (s, c) = ang.sin_cos();
            let (ia, ib) = match pairing {
                RopePairing::Adjacent => (2 * i, 2 * i + 1),
                RopePairing::HalfSplit => (i, i + half),
            };
            let (a, b) = (orig[ia] as f64, orig[ib] as f64);
            head[ia] = (a * c - b * s) as f32;
            head[ib] = (a * s + b * c) as f32;
        }
    }
}

/// Logits at every position, by full recomputation (f64 accumulation).
pub fn naive_logits(model: &dyn OperandSource, ids: &[u32]) -> Vec<Vec<f32>> {
    let s = model.surface();
    let (hd, nh, nkv) = (s.head_dim, s.n_heads, s.n_kv_heads);
    let g = |key| dense(model, key);
    let vec1 = |key| g(key).concat();
    let emb = g(OperandKey::global(Role::TokenEmbedding));
    let mut x: Vec<Vec<f32>> = ids
        .iter()
        .map(|&i| {
            emb[i as usize]
                .iter()
                .map(|v| v * s.embedding_scale)
                .collect()
        })
        .collect();
    let n = ids.len();
    for l in 0..s.n_layers {
        let k = |r| OperandKey::layer(l, r);
        let (wq, wk, wv, wo) = (
            g(k(Role::AttnQ)),
            g(k(Role::AttnK)),
            g(k(Role::AttnV)),
            g(k(Role::AttnOutput)),
        );
        let an = vec1(k(Role::AttnNorm));
        let mut qs = Vec::new();
        let mut ks = Vec::new();
        let mut vs = Vec::new();
        for (p, xp) in x.iter().enumerate() {
            let h = rms(xp, &an, s.norm_eps);
            let (mut q, mut kk, mut v) = (matvec(&wq, &h), matvec(&wk, &h), matvec(&wv, &h));
            if s.attn_bias {
                for (a, b) in q.iter_mut().zip(vec1(k(Role::AttnQBias))) {
                    *a += b;
                }
                for (a, b) in kk.iter_mut().zip(vec1(k(Role::AttnKBias))) {
                    *a += b;
                }
                for (a, b) in v.iter_mut().zip(vec1(k(Role::AttnVBias))) {
                    *a += b;
                }
            }
            rope(&mut q, p, hd, s.rope_theta, s.rope_pairing);
            rope(&mut kk, p, hd, s.rope_theta, s.rope_pairing);
            qs.push(q);
            ks.push(kk);
            vs.push(v);
        }
        for p in 0..n {
            let mut o = vec![0.0f32; nh * hd];
            for h in 0..nh {
                let kvh = h / (nh / nkv);
                let q = &qs[p][h * hd..(h + 1) * hd];
                let sc: Vec<f64> = (0..=p)
                    .map(|t| {
                        let kt = &ks[t][kvh * hd..(kvh + 1) * hd];
                        q.iter()
                            .zip(kt)
                            .map(|(a, b)| *a as f64 * *b as f64)
                            .sum::<f64>()
                            / (hd as f64).sqrt()
                    })
                    .collect();
                let m = sc.iter().cloned().fold(f64::MIN, f64::max);
                let e: Vec<f64> = sc.iter().map(|v| (v - m).exp()).collect();
                let z: f64 = e.iter().sum();
                for t in 0..=p {
                    for j in 0..hd {
                        o[h * hd + j] += (e[t] / z * vs[t][kvh * hd + j] as f64) as f32;
                    }
                }
            }
            let delta = matvec(&wo, &o);
            for (a, b) in x[p].iter_mut().zip(delta) {
                *a += b;
            }
        }
        let (wg, wu, wd) = (g(k(Role::FfnGate)), g(k(Role::FfnUp)), g(k(Role::FfnDown)));
        let fnorm = vec1(k(Role::FfnNorm));
        for xp in x.iter_mut() {
            let h = rms(xp, &fnorm, s.norm_eps);
            let (gt, up) = (matvec(&wg, &h), matvec(&wu, &h));
            let act: Vec<f32> = gt
                .iter()
                .zip(&up)
                .map(|(g, u)| {
                    let g = *g as f64;
                    let a = match s.activation {
                        Activation::Silu => g / (1.0 + (-g).exp()),
                        Activation::Gelu => {
                            0.5 * g * (1.0 + (0.7978845608 * (g + 0.044715 * g * g * g)).tanh())
                        }
                    };
                    (a * *u as f64) as f32
                })
                .collect();
            for (a, b) in xp.iter_mut().zip(matvec(&wd, &act)) {
                *a += b;
            }
        }
    }
    let on = vec1(OperandKey::global(Role::OutputNorm));
    let head = if s.tied_head {
        emb
    } else {
        g(OperandKey::global(Role::Output))
    };
    x.iter()
        .map(|xp| matvec(&head, &rms(xp, &on, s.norm_eps)))
        .collect()
}

pub fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

pub fn arc<M: OperandSource + 'static>(model: M) -> Arc<dyn OperandSource> {
    Arc::new(model)
}
