//! Observers: hooks into the forward pass for TRACE, EXPLAIN INFER and WALK RESIDUAL.
//!
//! With no observer attached the forward pass does no extra work and makes no copies;
//! attention weights are only materialised when [`Observer::wants_attention`] says so.

use std::ops::Range;

/// What one decoder layer did, for the positions processed in this pass.
///
/// Every matrix is row-major with one row per position in `positions`.
#[derive(Debug, Clone)]
pub struct LayerRecord<'a> {
    pub layer: usize,
    /// Absolute positions processed (`start .. start + n`).
    pub positions: Range<usize>,
    pub hidden: usize,
    pub ffn: usize,
    pub n_heads: usize,
    /// The residual stream after this layer, `[n × hidden]`.
    pub residual: &'a [f32],
    /// The attention block's output added to the residual, `[n × hidden]`.
    pub attn_delta: &'a [f32],
    /// The FFN block's output added to the residual, `[n × hidden]`.
    pub ffn_delta: &'a [f32],
    /// The normed FFN input, `[n × hidden]`.
    pub ffn_input: &'a [f32],
    /// Gate pre-activations, `[n × ffn]`.
    pub gate: &'a [f32],
    /// FFN activations `act(gate) * up` (the input of the down projection), `[n × ffn]`.
    pub activation: &'a [f32],
    /// Gate pre-activations of the features edits added to this layer (numbered `ffn..`),
    /// `[n × added]`; empty when the layer has none.
    pub added_gate: &'a [f32],
    /// Activations of the added features, `[n × added]`; empty when none.
    pub added_activation: &'a [f32],
    /// Attention weights `[n × n_heads × positions.end]` (zero past each query's
    /// position), when the observer asked for them.
    pub attention: Option<&'a [f32]>,
    /// The router's choices when the FFN is a bank: `n_used` per position, in position
    /// order, each position's in descending weight. Empty for a dense FFN (whose `gate`
    /// and `activation` are then the ones given; a bank leaves those empty, `ffn` 0).
    pub routes: &'a [Route],
}

/// One routed expert a position used, with its weight in the combine.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Route {
    /// Absolute position.
    pub position: usize,
    pub expert: usize,
    pub weight: f32,
}

/// A place in a layer where an observer may read and replace the activations
/// ([`Observer::at_site`]); the names are TransformerLens' hook names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Site {
    /// The residual stream entering the layer (`[n × hidden]`; layer 0's is the embedding).
    ResidPre,
    /// The attention heads' outputs before the output projection, `[n × n_heads·head_dim]`
    /// (head `h` is columns `h·head_dim ..`): TransformerLens' `z`.
    HeadOutputs,
    /// What the attention sub-block adds to the residual stream (after its post-norm where
    /// the block has one), `[n × hidden]`.
    AttnOut,
    /// The residual stream between the attention and FFN sub-blocks (sequential blocks
    /// only), `[n × hidden]`.
    ResidMid,
    /// What the FFN sub-block adds to the residual stream, `[n × hidden]`.
    MlpOut,
}

impl Site {
    pub const ALL: [Site; 5] = [
        Site::ResidPre,
        Site::HeadOutputs,
        Site::AttnOut,
        Site::ResidMid,
        Site::MlpOut,
    ];

    /// The name used in LQL and in TransformerLens (`resid_pre`, `z`, …).
    pub fn name(self) -> &'static str {
        match self {
            Site::ResidPre => "resid_pre",
            Site::HeadOutputs => "z",
            Site::AttnOut => "attn_out",
            Site::ResidMid => "resid_mid",
            Site::MlpOut => "mlp_out",
        }
    }
}

/// Hooks called during a forward pass (on the backend's worker thread, hence `Send`).
/// All methods have empty defaults.
pub trait Observer: Send {
    /// Whether to materialise attention weights for [`LayerRecord::attention`].
    fn wants_attention(&self) -> bool {
        false
    }
    /// The embedding rows (already scaled) entering layer 0, `[n × hidden]`.
    fn on_embedding(&mut self, _positions: Range<usize>, _rows: &[f32]) {}
    /// Called after each layer.
    fn on_layer(&mut self, _record: &LayerRecord<'_>) {}
    /// The final-normed hidden states of the positions whose logits are computed
    /// (`[m × hidden]`, `positions` says which).
    fn on_final_norm(&mut self, _positions: Range<usize>, _normed: &[f32]) {}
    /// Whether to call [`Observer::at_site`] (a pass without it makes no site calls).
    fn wants_sites(&self) -> bool {
        false
    }
    /// Called at each [`Site`] of each layer with the rows of the new positions, which the
    /// observer may read or replace (activation patching, steering, noise): the pass goes
    /// on from what it leaves there.
    fn at_site(&mut self, _site: Site, _layer: usize, _positions: Range<usize>, _rows: &mut [f32]) {
    }
}
