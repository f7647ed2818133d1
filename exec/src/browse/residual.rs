//! Residual capture for RESIDUAL-mode browse: runs the model with an observer and keeps, for
//! the layers asked for, the last position's normed FFN input, gate pre-activations and
//! activations (`act(gate) · up`).

use lql_storage::model::{OperandKey, OperandSource, Role};

use super::error::{BrowseError, Result};
use crate::forward::LogitsWanted;
use crate::observer::{LayerRecord, Observer};
use crate::session::Executor;

/// What one layer's FFN saw at the last position.
#[derive(Debug, Clone, Default)]
pub struct CapturedLayer {
    /// The normed FFN input (the query a gate scan dots with).
    pub ffn_input: Vec<f32>,
    /// Gate pre-activations, one per feature.
    pub gate: Vec<f32>,
    /// `act(gate) · up`, one per feature.
    pub activation: Vec<f32>,
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
        self.layers[r.layer] = Some(CapturedLayer {
            ffn_input: last(r.ffn_input, r.hidden),
            gate: last(r.gate, r.ffn),
            activation: last(r.activation, r.ffn),
        });
    }
}

/// Runs `ids` and returns the captures of `layers`, in that order.
pub fn capture(exec: &Executor, ids: &[u32], layers: &[usize]) -> Result<Vec<CapturedLayer>> {
    let n_layers = exec.surface().n_layers;
    let mut wanted = vec![false; n_layers];
    for &l in layers {
        if l >= n_layers {
            return Err(BrowseError::LayerOutOfRange { layer: l, n_layers });
        }
        wanted[l] = true;
    }
    let mut cap = Capture {
        layers: vec![None; n_layers],
        wanted,
    };
    exec.observe(ids, LogitsWanted::None, &mut cap)?;
    layers
        .iter()
        .map(|&l| {
            cap.layers[l]
                .clone()
                .ok_or_else(|| BrowseError::Internal(format!("layer {l} was not observed")))
        })
        .collect()
}

/// The operands a binding lacks to run the model, grouped per role ("attn_q of layers 0-29").
/// Empty when it can run.
pub fn missing_for_execution(src: &dyn OperandSource) -> Vec<String> {
    let s = src.surface();
    let mut out = Vec::new();
    for role in [Role::TokenEmbedding, Role::OutputNorm] {
        if src.view(OperandKey::global(role)).is_none() {
            out.push(role.name().to_string());
        }
    }
    if !s.tied_head && src.view(OperandKey::global(Role::Output)).is_none() {
        out.push(Role::Output.name().to_string());
    }
    let mut per_layer = vec![
        Role::AttnNorm,
        Role::AttnQ,
        Role::AttnK,
        Role::AttnV,
        Role::AttnOutput,
        Role::FfnNorm,
        Role::FfnGate,
        Role::FfnUp,
        Role::FfnDown,
    ];
    if s.attn_bias {
        per_layer.extend([Role::AttnQBias, Role::AttnKBias, Role::AttnVBias]);
    }
    for role in per_layer {
        let absent: Vec<usize> = (0..s.n_layers)
            .filter(|&l| src.view(OperandKey::layer(l, role)).is_none())
            .collect();
        if !absent.is_empty() {
            out.push(format!("{} of {}", role.name(), layer_list(&absent)));
        }
    }
    out
}

/// "layer 3", "layers 0-29", "layers 0-3, 7".
pub fn layer_list(layers: &[usize]) -> String {
    let mut parts = Vec::new();
    let mut i = 0;
    while i < layers.len() {
        let mut j = i;
        while j + 1 < layers.len() && layers[j + 1] == layers[j] + 1 {
            j += 1;
        }
        parts.push(if i == j {
            layers[i].to_string()
        } else {
            format!("{}-{}", layers[i], layers[j])
        });
        i = j + 1;
    }
    let word = if layers.len() == 1 { "layer" } else { "layers" };
    format!("{word} {}", parts.join(", "))
}

#[cfg(test)]
mod tests {
    use super::layer_list;

    #[test]
    fn layer_lists() {
        assert_eq!(layer_list(&[3]), "layer 3");
        assert_eq!(layer_list(&[0, 1, 2, 5, 7, 8]), "layers 0-2, 5, 7-8");
    }
}
