//! Attention heads, one by one: the patterns (query × key weights), the standard head
//! scores, and each head's direct contribution to a token's logit.
//!
//! One pass over the prompt ([`capture`]) keeps every layer's attention weights, each
//! layer's head outputs `z` at the last position (through [`Observer::at_site`]) and the
//! residual after the last layer. From them:
//!
//! - [`scores`]: over the prompt's query positions q, `prev_token` is the mean weight on
//!   q − 1 (q ≥ 1); `duplicate_token` the mean, over the q whose token occurred before, of
//!   the weight on those earlier occurrences; `induction` the mean, over the q that have
//!   one, of the weight on the positions j + 1 right after an earlier occurrence j of q's
//!   token (j + 1 < q). A score no query qualifies for is `None`. On a repeated random
//!   sequence these are TransformerLens' head detectors.
//! - [`contributions`]: head h's output `W_O[:, h] z_h` read through the same fixed
//!   linearisation of the final norm as TRACE's `attn_contrib` ([`LogitDirection`]); with
//!   a post-attention norm (Gemma 2/3, OLMo 2) the RMS of the whole attention output is
//!   held at its value, as the final norm's is. A layer's heads plus its output bias (a
//!   separate term) add up to TRACE's `attn_contrib` for the layer.

use std::ops::Range;

use super::lens::LogitDirection;
use crate::block;
use crate::error::{ExecError, Result};
use crate::forward::LogitsWanted;
use crate::observer::{LayerRecord, Observer, Site};
use crate::session::{Executor, Logits};

/// What [`capture`] keeps of one pass.
#[derive(Debug, Clone)]
pub struct HeadsCapture {
    pub tokens: Vec<u32>,
    pub n_heads: usize,
    /// Per layer, the weights `[n × n_heads × n]` (query-major).
    attention: Vec<Vec<f32>>,
    /// Per layer, the heads' outputs at the last position, `[n_heads · head_dim]`.
    z_last: Vec<Vec<f32>>,
    /// The residual stream after the last layer at the last position.
    final_residual: Vec<f32>,
    /// The last position's logits (as INFER computes them).
    pub logits: Logits,
}

impl HeadsCapture {
    pub fn n_layers(&self) -> usize {
        self.attention.len()
    }

    /// The weight `head` of `layer` puts on `key` from `query`.
    pub fn weight(&self, layer: usize, head: usize, query: usize, key: usize) -> f32 {
        let n = self.tokens.len();
        self.attention[layer][(query * self.n_heads + head) * n + key]
    }
}

struct Keep {
    n_heads: usize,
    attention: Vec<Vec<f32>>,
    z_last: Vec<Vec<f32>>,
    final_residual: Vec<f32>,
}

impl Observer for Keep {
    fn wants_attention(&self) -> bool {
        true
    }
    fn wants_sites(&self) -> bool {
        true
    }
    fn at_site(&mut self, site: Site, _layer: usize, positions: Range<usize>, rows: &mut [f32]) {
        if site == Site::HeadOutputs && !positions.is_empty() {
            let width = rows.len() / positions.len();
            self.z_last.push(rows[rows.len() - width..].to_vec());
        }
    }
    fn on_layer(&mut self, r: &LayerRecord<'_>) {
        if let Some(a) = r.attention {
            self.attention.push(a.to_vec());
        }
        self.n_heads = r.n_heads;
        let d = r.hidden;
        self.final_residual = r.residual[r.residual.len() - d..].to_vec();
    }
}

/// Runs `ids` (a fresh continuation) keeping what the head tables read.
pub fn capture(exec: &Executor, ids: &[u32]) -> Result<HeadsCapture> {
    let mut keep = Keep {
        n_heads: 0,
        attention: Vec::new(),
        z_last: Vec::new(),
        final_residual: Vec::new(),
    };
    let mut logits = exec.observe(ids, LogitsWanted::Last, &mut keep)?;
    let n_layers = exec.plan().layers.len();
    if keep.attention.len() != n_layers || keep.z_last.len() != n_layers {
        return Err(ExecError::Internal(format!(
            "the pass kept {} attention maps and {} head outputs for {n_layers} layers",
            keep.attention.len(),
            keep.z_last.len()
        )));
    }
    Ok(HeadsCapture {
        tokens: ids.to_vec(),
        n_heads: keep.n_heads,
        attention: keep.attention,
        z_last: keep.z_last,
        final_residual: keep.final_residual,
        logits: logits
            .pop()
            .ok_or_else(|| ExecError::Internal("the pass gave no logits".into()))?,
    })
}

/// One head's scores over the captured prompt (see the module doc).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HeadScores {
    pub prev_token: Option<f64>,
    pub duplicate_token: Option<f64>,
    pub induction: Option<f64>,
}

/// The scores of `head` at `layer`.
pub fn scores(cap: &HeadsCapture, layer: usize, head: usize) -> HeadScores {
    let ids = &cap.tokens;
    let n = ids.len();
    let w = |q: usize, k: usize| cap.weight(layer, head, q, k) as f64;
    let mean = |v: &[f64]| (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64);
    let prev: Vec<f64> = (1..n).map(|q| w(q, q - 1)).collect();
    let mut dup = Vec::new();
    let mut ind = Vec::new();
    for q in 0..n {
        let earlier: Vec<usize> = (0..q).filter(|&j| ids[j] == ids[q]).collect();
        if !earlier.is_empty() {
            dup.push(earlier.iter().map(|&j| w(q, j)).sum());
        }
        let targets: Vec<usize> = earlier.iter().map(|j| j + 1).filter(|&t| t < q).collect();
        if !targets.is_empty() {
            ind.push(targets.iter().map(|&t| w(q, t)).sum());
        }
    }
    HeadScores {
        prev_token: mean(&prev),
        duplicate_token: mean(&dup),
        induction: mean(&ind),
    }
}

/// One layer's direct contributions to a token's logit at the last position.
#[derive(Debug, Clone, PartialEq)]
pub struct LayerHeadTerms {
    /// One per head.
    pub heads: Vec<f64>,
    /// The attention output's bias, when the family has one.
    pub bias: Option<f64>,
}

/// Each head's (and the output bias's) direct contribution to `token`'s logit at the last
/// position, per layer.
pub fn contributions(
    exec: &Executor,
    cap: &HeadsCapture,
    token: u32,
) -> Result<Vec<LayerHeadTerms>> {
    let plan = exec.plan();
    let s = &plan.surface;
    let d = s.hidden;
    let dir = LogitDirection::new(exec, &cap.final_residual, token)?;
    let source = exec.source().as_ref();
    let be = exec.backend();
    let mut out = Vec::with_capacity(plan.layers.len());
    let mut failed: Option<ExecError> = None;
    be.scope(&mut || {
        for (lp, z) in plan.layers.iter().zip(&cap.z_last) {
            let w = match block::view(source, lp.o) {
                Ok(w) => w,
                Err(e) => {
                    failed = Some(e);
                    return;
                }
            };
            let width = z.len() / cap.n_heads;
            let mut heads = Vec::with_capacity(cap.n_heads);
            let mut masked = vec![0.0f32; z.len()];
            let mut terms = vec![vec![0.0f32; d]; cap.n_heads];
            for (h, term) in terms.iter_mut().enumerate() {
                let cols = h * width..(h + 1) * width;
                masked.iter_mut().for_each(|v| *v = 0.0);
                masked[cols.clone()].copy_from_slice(&z[cols]);
                if let Err(e) = be.matmul(&w, &masked, 1, term) {
                    failed = Some(e);
                    return;
                }
            }
            let bias = lp.extra.o_bias.clone();
            // With a post-attention norm the whole output's RMS scales every term.
            let post = lp.extra.attn_post_norm.as_ref().map(|w_post| {
                let mut whole = vec![0.0f64; d];
                for t in &terms {
                    for (a, &b) in whole.iter_mut().zip(t) {
                        *a += b as f64;
                    }
                }
                if let Some(b) = &bias {
                    for (a, &x) in whole.iter_mut().zip(b) {
                        *a += x as f64;
                    }
                }
                let ms = whole.iter().map(|v| v * v).sum::<f64>() / d as f64;
                let rms = (ms + s.norm_eps as f64).sqrt();
                w_post.iter().map(|&x| x as f64 / rms).collect::<Vec<f64>>()
            });
            let read = |v: &[f32]| -> f64 {
                match &post {
                    Some(scale) => {
                        let scaled: Vec<f64> =
                            v.iter().zip(scale).map(|(&a, &k)| a as f64 * k).collect();
                        dir.apply_f64(&scaled)
                    }
                    None => dir.apply(v),
                }
            };
            for t in &terms {
                heads.push(read(t));
            }
            out.push(LayerHeadTerms {
                heads,
                bias: bias.as_deref().map(read),
            });
        }
    });
    if let Some(e) = failed {
        return Err(e);
    }
    Ok(out)
}
