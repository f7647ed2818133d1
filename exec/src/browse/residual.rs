//! Residual capture for RESIDUAL-mode browse: runs the model with an observer and keeps, for
//! the layers asked for, the last position's normed FFN input, gate pre-activations and
//! activations (`act(gate) · up`), or a bank layer's routed experts at that position; the
//! features edits added to a dense layer follow its base features (numbered `ffn + i`, as the
//! gate scan numbers them).

use crate::error::{ExecError, Result};
use crate::observer::{LayerRecord, Observer};
use crate::session::Executor;

/// What one layer's FFN saw at the last position.
#[derive(Debug, Clone, Default)]
pub struct CapturedLayer {
    /// The normed FFN input (the query a gate scan dots with).
    pub ffn_input: Vec<f32>,
    /// Gate pre-activations, one per feature (base, then added).
    pub gate: Vec<f32>,
    /// `act(gate) · up`, one per feature (base, then added).
    pub activation: Vec<f32>,
    /// A bank layer's routed experts at the last position, with their weights, best
    /// first (empty for a dense FFN, whose `gate` and `activation` are given instead).
    pub routes: Vec<(usize, f32)>,
}

/// Observer that copies the last row of the FFN records of selected layers.
struct Capture {
    /// Indexed by layer; `None` for layers not wanted.
    layers: Vec<Option<CapturedLayer>>,
    wanted: Vec<bool>,
}

impl Observer for Capture {
    fn on_layer(&mut self, r: &LayerRecord<'_>) {
        if !self.wanted.get(r.layer).copied().unwrap_or(false) || r.positions.is_empty() {
            return;
        }
        let n = r.positions.len();
        let last = |m: &[f32], w: usize| m[(n - 1) * w..n * w].to_vec();
        let k = r.added_gate.len() / n;
        let mut gate = last(r.gate, r.ffn);
        let mut activation = last(r.activation, r.ffn);
        if k > 0 {
            gate.extend_from_slice(&last(r.added_gate, k));
            activation.extend_from_slice(&last(r.added_activation, k));
        }
        self.layers[r.layer] = Some(CapturedLayer {
            ffn_input: last(r.ffn_input, r.hidden),
            gate,
            activation,
            routes: r
                .routes
                .iter()
                .filter(|x| x.position + 1 == r.positions.end)
                .map(|x| (x.expert, x.weight))
                .collect(),
        });
    }
}

/// Runs `ids` and returns the captures of `layers`, in that order.
pub fn capture(exec: &Executor, ids: &[u32], layers: &[usize]) -> Result<Vec<CapturedLayer>> {
    let n_layers = exec.surface().n_layers;
    let mut wanted = vec![false; n_layers];
    for &l in layers {
        if l >= n_layers {
            return Err(ExecError::LayerOutOfRange { layer: l, n_layers });
        }
        wanted[l] = true;
    }
    let mut cap = Capture {
        layers: vec![None; n_layers],
        wanted,
    };
    // Only the layers up to the last one asked for run.
    let last = layers.iter().copied().max().unwrap_or(0);
    exec.observe_layers(ids, last, &mut cap)?;
    layers
        .iter()
        .map(|&l| {
            cap.layers[l]
                .clone()
                .ok_or_else(|| ExecError::Internal(format!("layer {l} was not observed")))
        })
        .collect()
}
