//! The operation plan: the execution surface turned into a validated list of steps.
//!
//! Built once per executor from an [`OperandSource`] (the effective-state seam) and the
//! [`ExecutionSurface`] only: embedding (× scale) → per layer (RMSNorm, attention with
//! GQA, RoPE, optional Q/K/V biases, RMSNorm, FFN) → final norm → head, where each FFN is
//! dense or a bank programme (router, selection, routed experts read in place from their
//! stacked 3-D tensors, optional shared expert, weighted combine). Every
//! operand's presence, shape and byte size is checked here, up front, so the forward pass
//! never meets a malformed tensor. Small vectors (norm weights, biases) are decoded to f32
//! once; matrices stay encoded and are looked up by key at run time.

use std::fmt;

use lql_storage::model::{OperandKey, OperandSource, Role, TensorView};
use lql_storage::surface::{
    Activation, ExecutionSurface, ExpertSelection, FfnShape, NormKind, NormPlacement, QkNorm,
    RopePairing,
};

use crate::backend::encoded;
use crate::error::{ExecError, Result};

/// The operands and decoded vectors of one decoder layer.
#[derive(Debug, Clone)]
pub struct LayerPlan {
    pub index: usize,
    /// The norm before attention (empty when the block has none: post-norm only).
    pub attn_norm: Vec<f32>,
    pub q: OperandKey,
    pub k: OperandKey,
    pub v: OperandKey,
    pub o: OperandKey,
    pub q_bias: Option<Vec<f32>>,
    pub k_bias: Option<Vec<f32>>,
    pub v_bias: Option<Vec<f32>>,
    /// The norm before the FFN (empty when the block has none).
    pub ffn_norm: Vec<f32>,
    pub ffn: FfnPlan,
    /// The vectors of the block's other features (all `None` for the plain block).
    pub extra: LayerExtras,
    /// Which of [`Plan::ropes`] rotates this layer's queries and keys.
    pub rope: usize,
    /// The sliding window of this layer's attention; 0 = none.
    pub window: usize,
    /// What the layer computes, in order ([`crate::program::lower`]): every backend runs
    /// these.
    pub steps: Vec<crate::program::Step>,
}

/// The decoded vectors of a layer's block features beyond the plain block.
#[derive(Debug, Clone, Default)]
pub struct LayerExtras {
    /// LayerNorm biases of the norms before attention and FFN.
    pub attn_norm_bias: Option<Vec<f32>>,
    pub ffn_norm_bias: Option<Vec<f32>>,
    /// Q/K norm weights (`[head_dim]` per head or the whole projection's).
    pub q_norm: Option<Vec<f32>>,
    pub k_norm: Option<Vec<f32>>,
    /// The attention output projection's bias.
    pub o_bias: Option<Vec<f32>>,
    /// The norms after attention and after the FFN.
    pub attn_post_norm: Option<Vec<f32>>,
    pub ffn_post_norm: Option<Vec<f32>>,
}

/// How one set of layers rotates: over the first `dims` dimensions of each head, angle
/// `pos · scale · θ^(−2i/dims) / factor_i`.
#[derive(Debug, Clone, PartialEq)]
pub struct RopeSpec {
    pub dims: usize,
    pub theta: f32,
    pub freq_scale: f32,
    /// Per-dimension divisors (`[dims / 2]`), when the model stores them.
    pub factors: Option<Vec<f32>>,
}

/// The FFN of one layer.
#[derive(Debug, Clone)]
pub enum FfnPlan {
    /// `down · act(gate · h) * (up · h)`.
    Dense {
        gate: OperandKey,
        up: OperandKey,
        down: OperandKey,
        /// Optional biases of the gate and up projections, `[ffn]` each (a compiled
        /// knowledge edit's added features carry them; absent = zero).
        gate_bias: Option<Vec<f32>>,
        up_bias: Option<Vec<f32>>,
    },
    /// A bank of routed experts with an optional shared expert.
    Bank(BankPlan),
    /// `down · act(up · h + up_bias) + down_bias`: no gate (gpt2, gptneox).
    Mlp {
        up: OperandKey,
        down: OperandKey,
        up_bias: Option<Vec<f32>>,
        down_bias: Option<Vec<f32>>,
    },
}

/// A bank programme: `router` scores the experts, `selection` picks `n_used` of them with
/// weights, each picked expert `e` runs the gated FFN on matrix `e` of the stacked
/// `gate`/`up`/`down` operands, and the weighted sum (plus the shared expert's output)
/// is the layer's FFN delta.
#[derive(Debug, Clone)]
pub struct BankPlan {
    /// `[hidden, n_experts]`: one row of router weights per expert.
    pub router: OperandKey,
    /// `[hidden, expert_ffn, n_experts]`.
    pub gate: OperandKey,
    /// `[hidden, expert_ffn, n_experts]`.
    pub up: OperandKey,
    /// `[expert_ffn, hidden, n_experts]`.
    pub down: OperandKey,
    pub n_experts: usize,
    pub n_used: usize,
    pub expert_ffn: usize,
    pub selection: ExpertSelection,
    pub shared: Option<SharedPlan>,
}

/// Matrix `e` of a stacked `[row_len, rows, n]` operand, in place (`shape` is
/// `[row_len, rows]`).
pub fn expert<'a>(
    stacked: &TensorView<'a>,
    shape: &'a [usize; 2],
    e: usize,
) -> Result<TensorView<'a>> {
    let per = shape[1] * stacked.row_bytes();
    let bytes = stacked
        .bytes
        .get(e * per..(e + 1) * per)
        .ok_or_else(|| ExecError::Internal(format!("expert {e} is outside its operand")))?;
    Ok(TensorView {
        dtype: stacked.dtype,
        shape,
        bytes,
    })
}

/// The shared expert every token runs through.
#[derive(Debug, Clone)]
pub struct SharedPlan {
    pub gate: OperandKey,
    pub up: OperandKey,
    pub down: OperandKey,
    pub ffn: usize,
    /// The scalar gate's weights: the output is scaled by `sigmoid(gate · h)`.
    pub gate_inp: Option<Vec<f32>>,
}

/// A validated operation plan for a dense decoder-only transformer.
#[derive(Debug, Clone)]
pub struct Plan {
    pub surface: ExecutionSurface,
    /// `n_heads × head_dim`.
    pub q_dim: usize,
    /// `n_kv_heads × head_dim`.
    pub kv_dim: usize,
    pub embedding: OperandKey,
    pub layers: Vec<LayerPlan>,
    pub output_norm: Vec<f32>,
    /// The final LayerNorm's bias.
    pub output_norm_bias: Option<Vec<f32>>,
    /// The head matrix: the token embedding when the head is tied, else `output`.
    pub head: OperandKey,
    /// Learned position embeddings (`[hidden, context]`), added to the token embedding.
    pub positions: Option<OperandKey>,
    /// The RoPE of each set of layers ([`LayerPlan::rope`] indexes it); empty without RoPE.
    pub ropes: Vec<RopeSpec>,
    /// The part of the model this plan runs (the whole model unless built for a stage).
    pub stage: StageRange,
}

/// The layers and boundaries a plan runs: the whole model, or one pipeline stage of a
/// layer package (layers `first..=last`, with the embedding when it owns the input
/// boundary and the final norm and head when it owns the output boundary).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StageRange {
    pub first: usize,
    pub last: usize,
    pub input: bool,
    pub output: bool,
}

impl StageRange {
    /// Whether this is the whole model.
    pub fn is_whole(&self, n_layers: usize) -> bool {
        self.first == 0 && self.last + 1 == n_layers && self.input && self.output
    }
}

impl Plan {
    /// Validate `source` against its surface and build the plan.
    pub fn build(source: &dyn OperandSource) -> Result<Plan> {
        let n = source.surface().n_layers;
        Plan::build_stage(
            source,
            StageRange {
                first: 0,
                last: n.saturating_sub(1),
                input: true,
                output: true,
            },
        )
    }

    /// Validate the operands of `stage` only and build its plan: layers
    /// `stage.first..=stage.last`, the embedding if `stage.input`, the final norm and head
    /// if `stage.output`.
    pub fn build_stage(source: &dyn OperandSource, stage: StageRange) -> Result<Plan> {
        let s = source.surface().clone();
        check_surface(&s)?;
        if stage.first > stage.last || stage.last >= s.n_layers {
            return Err(ExecError::Surface(format!(
                "stage layers {}-{} are not inside the model's {} layers",
                stage.first, stage.last, s.n_layers
            )));
        }
        let q_dim = s.n_heads * s.head_dim;
        let kv_dim = s.n_kv_heads * s.head_dim;
        let b = &s.block;
        let embedding = OperandKey::global(Role::TokenEmbedding);
        if stage.input || (stage.output && s.tied_head) {
            matrix(source, embedding, s.hidden, s.vocab)?;
        }
        let positions = if b.learned_positions && stage.input {
            let key = OperandKey::global(Role::PositionEmbedding);
            Some(matrix(source, key, s.hidden, s.context_length)?)
        } else {
            None
        };
        let ropes = rope_specs(source, &s)?;
        let pre = b.placement != NormPlacement::Post;
        let post = matches!(b.placement, NormPlacement::Sandwich | NormPlacement::Post);
        let layer_norm = b.norm == NormKind::Layer;
        let mut layers = Vec::with_capacity(stage.last - stage.first + 1);
        for l in stage.first..=stage.last {
            let key = |role| OperandKey::layer(l, role);
            let bias = |role, len| -> Result<Option<Vec<f32>>> {
                if s.attn_bias {
                    vector(source, key(role), len).map(Some)
                } else {
                    Ok(None)
                }
            };
            let when = |on: bool, role, len| -> Result<Option<Vec<f32>>> {
                if on {
                    vector(source, key(role), len).map(Some)
                } else {
                    Ok(None)
                }
            };
            let (qn, kn) = match b.qk_norm {
                QkNorm::None => (0, 0),
                QkNorm::PerHead => (s.head_dim, s.head_dim),
                QkNorm::Whole => (q_dim, kv_dim),
            };
            let windowed = b.sliding.filter(|w| w.covers(l));
            let extra = LayerExtras {
                attn_norm_bias: when(pre && layer_norm, Role::AttnNormBias, s.hidden)?,
                ffn_norm_bias: when(pre && layer_norm, Role::FfnNormBias, s.hidden)?,
                q_norm: when(qn > 0, Role::AttnQNorm, qn)?,
                k_norm: when(kn > 0, Role::AttnKNorm, kn)?,
                o_bias: when(b.attn_out_bias, Role::AttnOutputBias, s.hidden)?,
                attn_post_norm: when(post, Role::AttnPostNorm, s.hidden)?,
                ffn_post_norm: when(post, Role::FfnPostNorm, s.hidden)?,
            };
            let mut lp = LayerPlan {
                index: l,
                attn_norm: if pre {
                    vector(source, key(Role::AttnNorm), s.hidden)?
                } else {
                    Vec::new()
                },
                q: matrix(source, key(Role::AttnQ), s.hidden, q_dim)?,
                k: matrix(source, key(Role::AttnK), s.hidden, kv_dim)?,
                v: matrix(source, key(Role::AttnV), s.hidden, kv_dim)?,
                o: matrix(source, key(Role::AttnOutput), q_dim, s.hidden)?,
                q_bias: bias(Role::AttnQBias, q_dim)?,
                k_bias: bias(Role::AttnKBias, kv_dim)?,
                v_bias: bias(Role::AttnVBias, kv_dim)?,
                ffn_norm: if pre {
                    vector(source, key(Role::FfnNorm), s.hidden)?
                } else {
                    Vec::new()
                },
                ffn: ffn_plan(source, &s, l)?,
                extra,
                rope: usize::from(windowed.is_some() && ropes.len() > 1),
                window: windowed.map_or(0, |w| w.window),
                steps: Vec::new(),
            };
            lp.steps = crate::program::lower(b, &lp);
            layers.push(lp);
        }
        let output_norm_bias = if stage.output && layer_norm {
            Some(vector(
                source,
                OperandKey::global(Role::OutputNormBias),
                s.hidden,
            )?)
        } else {
            None
        };
        let (output_norm, head) = if stage.output {
            let norm = vector(source, OperandKey::global(Role::OutputNorm), s.hidden)?;
            let head = if s.tied_head {
                embedding
            } else {
                matrix(source, OperandKey::global(Role::Output), s.hidden, s.vocab)?
            };
            (norm, head)
        } else {
            (Vec::new(), OperandKey::global(Role::Output))
        };
        Ok(Plan {
            surface: s,
            q_dim,
            kv_dim,
            embedding,
            layers,
            output_norm,
            output_norm_bias,
            head,
            positions,
            ropes,
            stage,
        })
    }

    /// Floats of key (or value) cache per position, over all layers.
    pub fn kv_floats_per_position(&self) -> usize {
        self.surface.n_layers * self.kv_dim
    }
}

/// The RoPE of the model's layers: one spec, or two when windowed layers rotate on their
/// own base or without the scaling (`LayerPlan::rope` 1 = the windowed one); none without
/// RoPE.
fn rope_specs(source: &dyn OperandSource, s: &ExecutionSurface) -> Result<Vec<RopeSpec>> {
    let b = &s.block;
    if !b.rope {
        return Ok(Vec::new());
    }
    let dims = s.rotary_dims();
    let factors = if b.rope_freq_factors {
        let f = vector(source, OperandKey::global(Role::RopeFreqs), dims / 2)?;
        if let Some(bad) = f.iter().find(|v| !(v.is_finite() && **v > 0.0)) {
            return Err(ExecError::Surface(format!(
                "RoPE frequency factor {bad} is not a positive number"
            )));
        }
        Some(f)
    } else {
        None
    };
    let global = RopeSpec {
        dims,
        theta: s.rope_theta,
        freq_scale: b.rope_freq_scale,
        factors,
    };
    let mut specs = vec![global.clone()];
    if let Some(w) = &b.sliding {
        let local = RopeSpec {
            theta: w.rope_theta.unwrap_or(s.rope_theta),
            ..if b.rope_scale_windowed {
                global.clone()
            } else {
                RopeSpec {
                    freq_scale: 1.0,
                    factors: None,
                    ..global.clone()
                }
            }
        };
        if local != global {
            specs.push(local);
        }
    }
    Ok(specs)
}

/// The FFN of layer `l`: dense, or the bank the surface's `moe` describes.
fn ffn_plan(source: &dyn OperandSource, s: &ExecutionSurface, l: usize) -> Result<FfnPlan> {
    let key = |role| OperandKey::layer(l, role);
    if s.moe.is_none() && s.block.ffn == FfnShape::Mlp {
        let bias = |role, len| -> Result<Option<Vec<f32>>> {
            if s.block.ffn_bias {
                vector(source, key(role), len).map(Some)
            } else {
                Ok(None)
            }
        };
        return Ok(FfnPlan::Mlp {
            up: matrix(source, key(Role::FfnUp), s.hidden, s.ffn)?,
            down: matrix(source, key(Role::FfnDown), s.ffn, s.hidden)?,
            up_bias: bias(Role::FfnUpBias, s.ffn)?,
            down_bias: bias(Role::FfnDownBias, s.hidden)?,
        });
    }
    let Some(m) = &s.moe else {
        let bias = |role| -> Result<Option<Vec<f32>>> {
            match source.view(key(role)) {
                Some(_) => vector(source, key(role), s.ffn).map(Some),
                None => Ok(None),
            }
        };
        return Ok(FfnPlan::Dense {
            gate: matrix(source, key(Role::FfnGate), s.hidden, s.ffn)?,
            up: matrix(source, key(Role::FfnUp), s.hidden, s.ffn)?,
            down: matrix(source, key(Role::FfnDown), s.ffn, s.hidden)?,
            gate_bias: bias(Role::FfnGateBias)?,
            up_bias: bias(Role::FfnUpBias)?,
        });
    };
    let (e, ef) = (m.n_experts, m.expert_ffn);
    let shared = if m.shared_ffn > 0 {
        let sf = m.shared_ffn;
        Some(SharedPlan {
            gate: matrix(source, key(Role::FfnGateShexp), s.hidden, sf)?,
            up: matrix(source, key(Role::FfnUpShexp), s.hidden, sf)?,
            down: matrix(source, key(Role::FfnDownShexp), sf, s.hidden)?,
            ffn: sf,
            gate_inp: if m.shared_gate {
                Some(vector(source, key(Role::FfnGateInpShexp), s.hidden)?)
            } else {
                None
            },
        })
    } else {
        None
    };
    Ok(FfnPlan::Bank(BankPlan {
        router: matrix(source, key(Role::FfnGateInp), s.hidden, e)?,
        gate: experts(source, key(Role::FfnGateExps), s.hidden, ef, e)?,
        up: experts(source, key(Role::FfnUpExps), s.hidden, ef, e)?,
        down: experts(source, key(Role::FfnDownExps), ef, s.hidden, e)?,
        n_experts: e,
        n_used: m.n_used,
        expert_ffn: ef,
        selection: m.selection,
        shared,
    }))
}

fn check_surface(s: &ExecutionSurface) -> Result<()> {
    let bad = |m: String| Err(ExecError::Surface(m));
    if s.n_layers == 0 || s.hidden == 0 || s.ffn == 0 || s.vocab == 0 || s.head_dim == 0 {
        return bad(format!(
            "zero dimension (layers {}, hidden {}, ffn {}, vocab {}, head_dim {})",
            s.n_layers, s.hidden, s.ffn, s.vocab, s.head_dim
        ));
    }
    if s.n_heads == 0 || s.n_kv_heads == 0 || !s.n_heads.is_multiple_of(s.n_kv_heads) {
        return bad(format!(
            "{} attention heads cannot be grouped over {} key/value heads",
            s.n_heads, s.n_kv_heads
        ));
    }
    if s.block.rope && !s.head_dim.is_multiple_of(2) {
        return bad(format!("head_dim {} is odd; RoPE needs pairs", s.head_dim));
    }
    let rot = s.rotary_dims();
    if s.block.rope && (rot == 0 || rot > s.head_dim || !rot.is_multiple_of(2)) {
        return bad(format!(
            "{rot} rotary dimensions do not fit a head of {}",
            s.head_dim
        ));
    }
    if !(s.block.rope_freq_scale.is_finite() && s.block.rope_freq_scale > 0.0) {
        return bad(format!(
            "RoPE position scale {} is not a positive number",
            s.block.rope_freq_scale
        ));
    }
    for (what, v) in [
        ("query scale", s.block.attn_scale),
        ("attention softcap", s.block.attn_softcap),
        ("final softcap", s.block.final_softcap),
    ] {
        if !(v.is_finite() && v >= 0.0) {
            return bad(format!("{what} {v} is not a number ≥ 0"));
        }
    }
    if let Some(w) = &s.block.sliding {
        if w.window == 0 {
            return bad("a sliding window of 0 positions".into());
        }
    }
    if s.context_length == 0 {
        return bad("context length is zero".into());
    }
    if !(s.rope_theta.is_finite() && s.rope_theta > 0.0) {
        return bad(format!(
            "RoPE theta {} is not a positive number",
            s.rope_theta
        ));
    }
    if !(s.norm_eps.is_finite() && s.norm_eps >= 0.0) {
        return bad(format!("norm epsilon {} is invalid", s.norm_eps));
    }
    if !s.embedding_scale.is_finite() {
        return bad("embedding scale is not finite".into());
    }
    if let Some(m) = &s.moe {
        if m.n_experts == 0
            || m.n_experts > lql_storage::surface::MAX_EXPERTS
            || m.n_used == 0
            || m.n_used > m.n_experts
            || m.expert_ffn == 0
        {
            return bad(format!(
                "bank of {} experts of width {}, {} used per token",
                m.n_experts, m.expert_ffn, m.n_used
            ));
        }
    }
    Ok(())
}

fn fetch(source: &dyn OperandSource, key: OperandKey) -> Result<TensorView<'_>> {
    source.view(key).ok_or(ExecError::MissingOperand {
        operand: key.role.name(),
        layer: key.layer,
    })
}

fn shape_err(key: OperandKey, message: String) -> ExecError {
    ExecError::Shape {
        operand: key.role.name(),
        layer: key.layer,
        message,
    }
}

/// Check that the operand's encoded bytes hold exactly `rows × row_len` elements.
fn check_bytes(key: OperandKey, v: &TensorView<'_>) -> Result<()> {
    let elems = v.row_len().checked_mul(v.rows());
    let want = elems.and_then(|e| v.dtype.bytes_for(e as u64));
    if !v.row_len().is_multiple_of(v.dtype.block_elems()) {
        return Err(shape_err(
            key,
            format!(
                "row length {} is not a whole number of {} blocks ({} elements)",
                v.row_len(),
                v.dtype,
                v.dtype.block_elems()
            ),
        ));
    }
    match want {
        Some(b) if b == v.bytes.len() as u64 => Ok(()),
        _ => Err(shape_err(
            key,
            format!(
                "{} bytes of {} do not hold shape {:?}",
                v.bytes.len(),
                v.dtype,
                v.shape
            ),
        )),
    }
}

/// A matrix of `rows` rows of `row_len` elements (ggml shape `[row_len, rows]`).
fn matrix(
    source: &dyn OperandSource,
    key: OperandKey,
    row_len: usize,
    rows: usize,
) -> Result<OperandKey> {
    let v = fetch(source, key)?;
    if v.shape.len() != 2 || v.shape[0] != row_len || v.shape[1] != rows {
        return Err(shape_err(
            key,
            format!("expected shape [{row_len}, {rows}], found {:?}", v.shape),
        ));
    }
    check_bytes(key, &v)?;
    encoded::check_supported(v.dtype).map_err(|m| shape_err(key, m))?;
    Ok(key)
}

/// `n` matrices of `rows` rows of `row_len` elements stacked in one operand (ggml shape
/// `[row_len, rows, n]`; matrix `e` is rows `e·rows ..`).
fn experts(
    source: &dyn OperandSource,
    key: OperandKey,
    row_len: usize,
    rows: usize,
    n: usize,
) -> Result<OperandKey> {
    let v = fetch(source, key)?;
    if v.shape != [row_len, rows, n] {
        return Err(shape_err(
            key,
            format!(
                "expected shape [{row_len}, {rows}, {n}], found {:?}",
                v.shape
            ),
        ));
    }
    check_bytes(key, &v)?;
    encoded::check_supported(v.dtype).map_err(|m| shape_err(key, m))?;
    Ok(key)
}

/// A vector of `len` elements, decoded to f32.
fn vector(source: &dyn OperandSource, key: OperandKey, len: usize) -> Result<Vec<f32>> {
    let v = fetch(source, key)?;
    if v.row_len() != len || v.rows() != 1 {
        return Err(shape_err(
            key,
            format!(
                "expected a vector of {len} elements, found shape {:?}",
                v.shape
            ),
        ));
    }
    check_bytes(key, &v)?;
    let mut out = vec![0.0f32; len];
    encoded::decode_row(v.dtype, v.bytes, &mut out).map_err(|m| shape_err(key, m))?;
    Ok(out)
}

impl fmt::Display for Plan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = &self.surface;
        writeln!(
            f,
            "Embed[vocab {}, hidden {}]{}",
            s.vocab,
            s.hidden,
            if s.embedding_scale != 1.0 {
                format!(" × {}", s.embedding_scale)
            } else {
                String::new()
            }
        )?;
        let pairing = match s.rope_pairing {
            RopePairing::Adjacent => "adjacent",
            RopePairing::HalfSplit => "half-split",
        };
        let act = match s.activation {
            Activation::Silu => "silu",
            Activation::Gelu => "gelu",
        };
        let ffn = match &s.moe {
            None if s.block.ffn == FfnShape::Mlp => format!("MLP({act}, {})", s.ffn),
            None => format!("FFN({act}, {})", s.ffn),
            Some(m) => format!(
                "Bank(router → {} of {} experts, {}; experts {act} {}{})",
                m.n_used,
                m.n_experts,
                m.selection.name(),
                m.expert_ffn,
                match (m.shared_ffn, m.shared_gate) {
                    (0, _) => String::new(),
                    (w, true) => format!(" + shared {w} × sigmoid gate"),
                    (w, false) => format!(" + shared {w}"),
                }
            ),
        };
        writeln!(
            f,
            "Layers 0-{} × [RMSNorm → Attention(heads {}, kv heads {}, head_dim {}, RoPE {pairing} θ={}{}) → RMSNorm → {ffn}]",
            s.n_layers - 1,
            s.n_heads,
            s.n_kv_heads,
            s.head_dim,
            s.rope_theta,
            if s.attn_bias { ", biases" } else { "" },
        )?;
        let features = s.block.features();
        if !features.is_empty() {
            writeln!(f, "Block: {}", features.join(", "))?;
        }
        write!(
            f,
            "{} → Head[{}]",
            match s.block.norm {
                NormKind::Rms => "RMSNorm",
                NormKind::Layer => "LayerNorm",
            },
            if s.tied_head {
                "tied to embedding"
            } else {
                "output"
            }
        )
    }
}
