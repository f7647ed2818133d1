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

use rayon::prelude::*;

use lql_storage::codec::{axpy_f32 as axpy, dot_f32 as dot};

use crate::kernels::{add_in_place, glu};

/// Features per parallel task for the gate, up and down products: above [`PARALLEL_WORK`]
/// multiply-adds per position the added features run on the pass's threads (each output is
/// still summed in one fixed order, so results do not depend on the thread count). The down
/// product's chunks run [`CHUNKS_PER_WAVE`] at a time.
const FEATURES_PER_TASK: usize = 64;
const PARALLEL_WORK: usize = 1 << 16;
const CHUNKS_PER_WAVE: usize = 16;

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
    let parallel = n * k * d >= PARALLEL_WORK;
    // Gate and up, feature-major (`[k × n]`): each weight row is read once for all positions.
    let mut gate_t = vec![0.0f32; k * n];
    let mut up_t = vec![0.0f32; k * n];
    let products = |(c, (g, u)): (usize, (&mut [f32], &mut [f32]))| {
        for (j, (g, u)) in g.chunks_mut(n).zip(u.chunks_mut(n)).enumerate() {
            let i = c * FEATURES_PER_TASK + j;
            let (gw, uw) = (&o.gate[i * d..(i + 1) * d], &o.up[i * d..(i + 1) * d]);
            let scale = o.gate_scale.as_ref().map_or(1.0, |s| s[ff + i]);
            for (p, xr) in x.chunks_exact(d).enumerate() {
                g[p] = (dot(gw, xr) + o.gate_bias[i]) * scale;
                u[p] = dot(uw, xr) + o.up_bias[i];
            }
        }
    };
    let task = FEATURES_PER_TASK * n;
    if parallel {
        gate_t
            .par_chunks_mut(task)
            .zip(up_t.par_chunks_mut(task))
            .enumerate()
            .for_each(products);
    } else {
        gate_t
            .chunks_mut(task)
            .zip(up_t.chunks_mut(task))
            .enumerate()
            .for_each(products);
    }
    let mut gate = vec![0.0f32; n * k];
    let mut up = vec![0.0f32; n * k];
    for i in 0..k {
        for p in 0..n {
            gate[p * k + i] = gate_t[i * n + p];
            up[p * k + i] = up_t[i * n + p];
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
    // Δ += Σ_i a_i·d_i, each down row read once, whole and in order, by fixed chunks of
    // features; each chunk's partial sum (over its features in order) is added to Δ in
    // chunk order, so the bits do not depend on the thread count. The chunks run in waves
    // of a bounded number, so a long prompt does not hold every chunk's partial at once.
    let chunks = k.div_ceil(FEATURES_PER_TASK);
    let partial = |c: usize| {
        let mut part = vec![0.0f32; n * d];
        for i in c * FEATURES_PER_TASK..((c + 1) * FEATURES_PER_TASK).min(k) {
            let row = &o.down[i * d..(i + 1) * d];
            for (p, y) in part.chunks_exact_mut(d).enumerate() {
                let a = gate[p * k + i];
                if a != 0.0 {
                    axpy(a, row, y);
                }
            }
        }
        part
    };
    let wave = if parallel { CHUNKS_PER_WAVE } else { 1 };
    for first in (0..chunks).step_by(wave) {
        let span = first..(first + wave).min(chunks);
        let parts: Vec<Vec<f32>> = if parallel {
            span.into_par_iter().map(partial).collect()
        } else {
            span.map(partial).collect()
        };
        for part in &parts {
            add_in_place(delta, part);
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

    /// Many added features run on the pool's threads: the same bits on one thread and on
    /// three, and the arithmetic of the definition (checked in f64).
    #[test]
    fn many_features_in_parallel_match_the_definition() {
        let (d, k, n) = (64usize, 1100usize, 3usize);
        let v = |len: usize, seed: usize| -> Vec<f32> {
            (0..len)
                .map(|i| (((i * 7919 + seed * 104729) % 1000) as f32 / 1000.0 - 0.5) * 0.3)
                .collect()
        };
        let o = LayerOverlay {
            hidden: d,
            ffn: 5,
            gate: v(k * d, 1),
            gate_bias: v(k, 2),
            up: v(k * d, 3),
            up_bias: v(k, 4),
            down: v(k * d, 5),
            gate_scale: Some(v(5 + k, 6).iter().map(|x| 1.0 + x).collect()),
            down_scale: Some(v(5 + k, 7).iter().map(|x| 1.0 - x).collect()),
        };
        let x = v(n * d, 8);
        let run = |threads: usize| {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap();
            let mut delta = vec![0.25f32; n * d];
            let added = pool.install(|| add_features(Some(&o), Activation::Silu, &x, &mut delta));
            (delta, added.activation)
        };
        let (one, three) = (run(1), run(3));
        assert_eq!(one, three);
        let dot64 = |a: &[f32], b: &[f32]| -> f64 {
            a.iter().zip(b).map(|(p, q)| *p as f64 * *q as f64).sum()
        };
        let (gs, ds) = (
            o.gate_scale.as_ref().unwrap(),
            o.down_scale.as_ref().unwrap(),
        );
        for p in 0..n {
            let xr = &x[p * d..(p + 1) * d];
            let mut want = vec![0.25f64; d];
            for i in 0..k {
                let g = (dot64(&o.gate[i * d..(i + 1) * d], xr) + o.gate_bias[i] as f64)
                    * gs[5 + i] as f64;
                let u = dot64(&o.up[i * d..(i + 1) * d], xr) + o.up_bias[i] as f64;
                let a = g / (1.0 + (-g).exp()) * u * ds[5 + i] as f64;
                assert!(
                    (one.1[p * k + i] as f64 - a).abs() < 1e-5,
                    "activation {p},{i}"
                );
                for (w, dv) in want.iter_mut().zip(&o.down[i * d..(i + 1) * d]) {
                    *w += a * *dv as f64;
                }
            }
            for (j, w) in want.iter().enumerate() {
                assert!((one.0[p * d + j] as f64 - w).abs() < 1e-4, "delta {p},{j}");
            }
        }
    }
}
