//! The overlay arithmetic of the forward pass's FFN block: what edits (storage's
//! [`LayerOverlay`]) do to one layer, computed beside the base FFN so that quantised base
//! tensors are never decoded into a copy or re-encoded.
//!
//! ```text
//!  gate = W_gate·x, up = W_up·x            (base, unchanged)
//!  gate[f] *= gate_scale[f]                ← scale_gate   (before the activation)
//!  a = act(gate) ⊙ up
//!  a[f] *= down_scale[f]                   ← scale_activation
//!  Δ = W_down·a                            (base, unchanged)
//!  Δ += Σ_i act(g_i·x + b_i)(u_i·x + c_i)·d_i   ← add_features (added features)
//! ```
//!
//! With no overlay on a layer every function returns at once: the base pass is bit for bit
//! the pass without edits.

use lql_storage::overlay::LayerOverlay;
use lql_storage::surface::Activation;

use crate::kernels::glu;

/// Multiplies each position's gate pre-activations by the overlay's gate scales.
pub fn scale_gate(ov: Option<&LayerOverlay>, gate: &mut [f32], ffn: usize) {
    if let Some(s) = ov.and_then(|o| o.gate_scale.as_ref()) {
        scale_rows(gate, ffn, &s[..ffn.min(s.len())]);
    }
}

/// Multiplies each position's activations by the overlay's down scales.
pub fn scale_activation(ov: Option<&LayerOverlay>, act: &mut [f32], ffn: usize) {
    if let Some(s) = ov.and_then(|o| o.down_scale.as_ref()) {
        scale_rows(act, ffn, &s[..ffn.min(s.len())]);
    }
}

fn scale_rows(m: &mut [f32], width: usize, s: &[f32]) {
    for row in m.chunks_exact_mut(width) {
        for (v, k) in row.iter_mut().zip(s) {
            *v *= *k;
        }
    }
}

fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// The added features' gate pre-activations and activations, `[n × k]` each.
#[derive(Debug, Default, Clone)]
pub struct Added {
    pub gate: Vec<f32>,
    pub activation: Vec<f32>,
}

/// Adds the overlay's added features to `delta` (`[n × hidden]`) for the normed inputs `x`
/// (`[n × hidden]`); returns their gate pre-activations and activations (empty without
/// added features).
pub fn add_features(
    ov: Option<&LayerOverlay>,
    act: Activation,
    x: &[f32],
    delta: &mut [f32],
) -> Added {
    let Some(o) = ov.filter(|o| o.added() > 0) else {
        return Added::default();
    };
    let (d, k, ff) = (o.hidden, o.added(), o.ffn);
    let n = x.len() / d.max(1);
    let mut gate = vec![0.0f32; n * k];
    let mut up = vec![0.0f32; n * k];
    for (p, xr) in x.chunks_exact(d).enumerate() {
        for i in 0..k {
            let mut g = dot(&o.gate[i * d..(i + 1) * d], xr) + o.gate_bias[i];
            if let Some(s) = &o.gate_scale {
                g *= s[ff + i];
            }
            gate[p * k + i] = g;
            up[p * k + i] = dot(&o.up[i * d..(i + 1) * d], xr) + o.up_bias[i];
        }
    }
    let pre = gate.clone();
    glu(act, &mut gate, &up);
    if let Some(s) = &o.down_scale {
        for row in gate.chunks_exact_mut(k) {
            for (v, f) in row.iter_mut().zip(&s[ff..]) {
                *v *= *f;
            }
        }
    }
    for (p, dr) in delta.chunks_exact_mut(d).enumerate() {
        for i in 0..k {
            let a = gate[p * k + i];
            if a != 0.0 {
                for (y, w) in dr.iter_mut().zip(&o.down[i * d..(i + 1) * d]) {
                    *y += a * w;
                }
            }
        }
    }
    Added {
        gate: pre,
        activation: gate,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn overlay() -> LayerOverlay {
        LayerOverlay {
            hidden: 2,
            ffn: 3,
            gate: vec![1.0, 0.0],
            gate_bias: vec![0.0],
            up: vec![0.0, 0.0],
            up_bias: vec![1.0],
            down: vec![0.0, 2.0],
            gate_scale: None,
            down_scale: Some(vec![1.0, 0.0, 1.0, 0.5]),
        }
    }

    #[test]
    fn no_overlay_changes_nothing() {
        let mut g = vec![1.0, 2.0, 3.0];
        scale_gate(None, &mut g, 3);
        scale_activation(None, &mut g, 3);
        let mut delta = vec![0.5, 0.5];
        let a = add_features(None, Activation::Silu, &[1.0, 1.0], &mut delta);
        assert_eq!((g, delta), (vec![1.0, 2.0, 3.0], vec![0.5, 0.5]));
        assert!(a.activation.is_empty());
    }

    #[test]
    fn scales_and_added_feature() {
        let o = overlay();
        let mut a = vec![1.0, 2.0, 3.0, 1.0, 2.0, 3.0];
        scale_activation(Some(&o), &mut a, 3);
        assert_eq!(a, vec![1.0, 0.0, 3.0, 1.0, 0.0, 3.0]);
        let mut delta = vec![0.0, 0.0];
        let added = add_features(Some(&o), Activation::Silu, &[2.0, 5.0], &mut delta);
        let silu2 = 2.0 / (1.0 + (-2.0f32).exp());
        assert!((added.activation[0] - silu2 * 0.5).abs() < 1e-5);
        assert!((delta[1] - 2.0 * silu2 * 0.5).abs() < 1e-5);
        assert_eq!(delta[0], 0.0);
    }
}
