//! The capturing observer: copies, for every layer, the rows of the positions asked for —
//! the residual after the layer, the attention and FFN deltas, the normed FFN input and,
//! when asked, the gate pre-activations, the activations and the attention weights.

use std::ops::Range;

use crate::forward::LogitsWanted;
use crate::observer::{LayerRecord, Observer};
use crate::session::Executor;

use crate::error::{ExecError, Result};

/// Which positions a trace keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Positions {
    /// The last position of the prompt only (one row per layer).
    Last,
    /// Every position of the prompt.
    All,
}

/// What a [`TraceCapture`] records besides the residual, the deltas and the FFN input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CaptureOptions {
    pub positions: Positions,
    /// Attention weights of the kept positions (`[n_heads × context]` per position).
    pub attention: bool,
    /// Gate pre-activations and activations `act(gate) · up` (`[ffn]` per position).
    pub ffn_activity: bool,
}

impl Default for CaptureOptions {
    fn default() -> Self {
        CaptureOptions {
            positions: Positions::Last,
            attention: false,
            ffn_activity: false,
        }
    }
}

/// What one layer did at the kept positions; every matrix has one row per kept position.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LayerCapture {
    pub layer: usize,
    /// The residual after the layer, `[k × hidden]`.
    pub residual: Vec<f32>,
    /// `[k × hidden]`.
    pub attn_delta: Vec<f32>,
    /// `[k × hidden]`.
    pub ffn_delta: Vec<f32>,
    /// The normed FFN input, `[k × hidden]`.
    pub ffn_input: Vec<f32>,
    /// Gate pre-activations, `[k × ffn]` (with `ffn_activity`).
    pub gate: Option<Vec<f32>>,
    /// `act(gate) · up`, `[k × ffn]` (with `ffn_activity`).
    pub activation: Option<Vec<f32>>,
    /// Gate pre-activations of the features edits added to this layer (numbered
    /// `ffn + i`), `[k × added]` (with `ffn_activity`, on layers that have any).
    pub added_gate: Option<Vec<f32>>,
    /// Their activations, `[k × added]`.
    pub added_activation: Option<Vec<f32>>,
    /// Attention weights, `[k × n_heads × context]` (with `attention`); zero past each
    /// query's position.
    pub attention: Option<Vec<f32>>,
}

/// A captured forward pass.
#[derive(Debug, Clone, PartialEq)]
pub struct Trace {
    /// The prompt's token ids (every position, kept or not).
    pub tokens: Vec<u32>,
    /// The absolute positions kept, ascending.
    pub positions: Vec<usize>,
    pub hidden: usize,
    pub ffn: usize,
    pub n_heads: usize,
    /// Positions attended over (the prompt length): the last axis of `attention`.
    pub context: usize,
    /// The embedding rows entering layer 0 at the kept positions, `[k × hidden]`.
    pub embedding: Vec<f32>,
    /// One entry per layer, in order `0 .. n_layers`.
    pub layers: Vec<LayerCapture>,
    /// The model's logits at the last position (as INFER computes them); empty when the
    /// trace was loaded from a file that did not carry them.
    pub final_logits: Vec<f32>,
}

impl Trace {
    pub fn n_layers(&self) -> usize {
        self.layers.len()
    }

    /// The index of absolute position `pos` among the kept ones.
    pub fn slot(&self, pos: usize) -> Option<usize> {
        self.positions.binary_search(&pos).ok()
    }

    /// The row of kept slot `k` of a `[k × width]` matrix.
    pub fn row(m: &[f32], k: usize, width: usize) -> &[f32] {
        &m[k * width..(k + 1) * width]
    }

    /// The residual entering the final norm at kept slot `k` (after the last layer).
    pub fn final_residual(&self, k: usize) -> Option<&[f32]> {
        let last = self.layers.last()?;
        last.residual.get(k * self.hidden..(k + 1) * self.hidden)
    }
}

/// The observer behind [`run_trace`]. Attach it with [`Executor::observe`] for a single
/// pass over a prompt, then take the result with [`TraceCapture::finish`].
#[derive(Debug)]
pub struct TraceCapture {
    opts: CaptureOptions,
    /// Rows of the pass to keep (indices into the pass's positions).
    keep: Range<usize>,
    first_position: usize,
    context: usize,
    hidden: usize,
    ffn: usize,
    n_heads: usize,
    embedding: Vec<f32>,
    layers: Vec<LayerCapture>,
    passes: usize,
}

impl TraceCapture {
    pub fn new(opts: CaptureOptions) -> TraceCapture {
        TraceCapture {
            opts,
            keep: 0..0,
            first_position: 0,
            context: 0,
            hidden: 0,
            ffn: 0,
            n_heads: 0,
            embedding: Vec::new(),
            layers: Vec::new(),
            passes: 0,
        }
    }

    /// The captured trace of the pass over `tokens` (the ids that were run).
    pub fn finish(self, tokens: &[u32], final_logits: Vec<f32>) -> Result<Trace> {
        if self.passes != 1 {
            return Err(ExecError::Internal(format!(
                "a trace capture observes exactly one pass, saw {}",
                self.passes
            )));
        }
        let positions =
            (self.first_position + self.keep.start..self.first_position + self.keep.end).collect();
        Ok(Trace {
            tokens: tokens.to_vec(),
            positions,
            hidden: self.hidden,
            ffn: self.ffn,
            n_heads: self.n_heads,
            context: self.context,
            embedding: self.embedding,
            layers: self.layers,
            final_logits,
        })
    }

    fn rows(&self, m: &[f32], width: usize) -> Vec<f32> {
        m[self.keep.start * width..self.keep.end * width].to_vec()
    }
}

impl Observer for TraceCapture {
    fn wants_attention(&self) -> bool {
        self.opts.attention
    }

    fn on_embedding(&mut self, positions: Range<usize>, rows: &[f32]) {
        self.passes += 1;
        let n = positions.len();
        self.keep = match self.opts.positions {
            Positions::Last => n.saturating_sub(1)..n,
            Positions::All => 0..n,
        };
        self.first_position = positions.start;
        self.context = positions.end;
        self.hidden = rows.len().checked_div(n).unwrap_or(0);
        self.embedding = self.rows(rows, self.hidden);
        self.layers.clear();
    }

    fn on_layer(&mut self, r: &LayerRecord<'_>) {
        self.ffn = r.ffn;
        self.n_heads = r.n_heads;
        let (d, f) = (r.hidden, r.ffn);
        let per_query = r.n_heads * r.positions.end;
        let added = r.added_gate.len() / r.positions.len().max(1);
        let added_rows =
            |m: &[f32]| (self.opts.ffn_activity && added > 0).then(|| self.rows(m, added));
        let cap = LayerCapture {
            layer: r.layer,
            residual: self.rows(r.residual, d),
            attn_delta: self.rows(r.attn_delta, d),
            ffn_delta: self.rows(r.ffn_delta, d),
            ffn_input: self.rows(r.ffn_input, d),
            gate: self.opts.ffn_activity.then(|| self.rows(r.gate, f)),
            activation: self.opts.ffn_activity.then(|| self.rows(r.activation, f)),
            added_gate: added_rows(r.added_gate),
            added_activation: added_rows(r.added_activation),
            attention: if self.opts.attention {
                r.attention.map(|a| self.rows(a, per_query))
            } else {
                None
            },
        };
        self.layers.push(cap);
    }
}

/// Runs `ids` from an empty continuation with a [`TraceCapture`] attached; the logits of
/// the last position are kept beside the capture.
pub fn run_trace(exec: &Executor, ids: &[u32], opts: CaptureOptions) -> Result<Trace> {
    let mut cap = TraceCapture::new(opts);
    let mut logits = exec.observe(ids, LogitsWanted::Last, &mut cap)?;
    let last = logits
        .pop()
        .ok_or_else(|| ExecError::Internal("no logits for the last position".into()))?;
    let trace = cap.finish(ids, last.values)?;
    if trace.layers.len() != exec.surface().n_layers {
        return Err(ExecError::Internal(format!(
            "captured {} layers of {}",
            trace.layers.len(),
            exec.surface().n_layers
        )));
    }
    if opts.attention && trace.layers.iter().any(|l| l.attention.is_none()) {
        return Err(ExecError::Internal(
            "the backend did not provide attention weights".into(),
        ));
    }
    Ok(trace)
}
