//! Small f32 kernels on activations: dot, RMSNorm, gated activations, softmax, RoPE.
//!
//! Written so the compiler vectorises them (independent accumulators, no early exits);
//! the heavy work on encoded weights lives in the storage codecs.

use lql_storage::surface::{Activation, RopePairing};

/// `a · b` with eight independent accumulators (vectorisable, order-stable).
#[inline(always)]
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    let mut acc = [0.0f32; 8];
    let mut ca = a.chunks_exact(8);
    let mut cb = b.chunks_exact(8);
    for (x, y) in (&mut ca).zip(&mut cb) {
        for i in 0..8 {
            acc[i] += x[i] * y[i];
        }
    }
    let mut s = 0.0f32;
    for (x, y) in ca.remainder().iter().zip(cb.remainder()) {
        s += x * y;
    }
    (acc[0] + acc[4]) + (acc[1] + acc[5]) + (acc[2] + acc[6]) + (acc[3] + acc[7]) + s
}

/// `y += a * x`.
#[inline(always)]
pub fn axpy(a: f32, x: &[f32], y: &mut [f32]) {
    for (yi, xi) in y.iter_mut().zip(x) {
        *yi += a * xi;
    }
}

/// `y += x` element-wise.
#[inline]
pub fn add_in_place(y: &mut [f32], x: &[f32]) {
    for (yi, xi) in y.iter_mut().zip(x) {
        *yi += xi;
    }
}

/// RMSNorm of every row of `x` (rows of `weight.len()` elements) into `out`.
pub fn rmsnorm_rows(x: &[f32], weight: &[f32], eps: f32, out: &mut [f32]) {
    let d = weight.len();
    for (xr, or) in x.chunks_exact(d).zip(out.chunks_exact_mut(d)) {
        let ss = dot(xr, xr) / d as f32;
        let inv = 1.0 / (ss + eps).sqrt();
        for ((o, xi), w) in or.iter_mut().zip(xr).zip(weight) {
            *o = xi * inv * w;
        }
    }
}

/// `gate[i] = act(gate[i]) * up[i]`.
pub fn glu(act: Activation, gate: &mut [f32], up: &[f32]) {
    match act {
        Activation::Silu => {
            for (g, u) in gate.iter_mut().zip(up) {
                *g = *g / (1.0 + (-*g).exp()) * u;
            }
        }
        Activation::Gelu => {
            const C: f32 = 0.797_884_6; // sqrt(2/pi)
            for (g, u) in gate.iter_mut().zip(up) {
                let x = *g;
                *g = 0.5 * x * (1.0 + (C * (x + 0.044_715 * x * x * x)).tanh()) * u;
            }
        }
    }
}

/// In-place softmax; returns nothing, leaves a probability vector.
pub fn softmax(x: &mut [f32]) {
    let m = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut s = 0.0f32;
    for v in x.iter_mut() {
        *v = (*v - m).exp();
        s += *v;
    }
    let inv = 1.0 / s;
    for v in x.iter_mut() {
        *v *= inv;
    }
}

/// cos/sin of `pos · θ_i` for a run of positions, `θ_i = theta^(−2i/head_dim)`.
#[derive(Debug, Clone)]
pub struct RopeTable {
    pub half: usize,
    /// `[n_positions × half]`
    pub cos: Vec<f32>,
    pub sin: Vec<f32>,
}

impl RopeTable {
    /// The table for positions `start .. start + n` (angles computed in f64).
    pub fn new(start: usize, n: usize, head_dim: usize, theta: f32) -> RopeTable {
        let half = head_dim / 2;
        let mut cos = Vec::with_capacity(n * half);
        let mut sin = Vec::with_capacity(n * half);
        let inv: Vec<f64> = (0..half)
            .map(|i| (theta as f64).powf(-2.0 * i as f64 / head_dim as f64))
            .collect();
        for p in start..start + n {
            for f in &inv {
                let (s, c) = (p as f64 * f).sin_cos();
                cos.push(c as f32);
                sin.push(s as f32);
            }
        }
        RopeTable { half, cos, sin }
    }
}

/// Rotate `x` = `[n_positions × n_heads × head_dim]` in place, position `t` using row `t`
/// of `table`.
pub fn rope(
    x: &mut [f32],
    n_heads: usize,
    head_dim: usize,
    table: &RopeTable,
    pairing: RopePairing,
) {
    let half = table.half;
    for (t, row) in x.chunks_exact_mut(n_heads * head_dim).enumerate() {
        let c = &table.cos[t * half..(t + 1) * half];
        let s = &table.sin[t * half..(t + 1) * half];
        for head in row.chunks_exact_mut(head_dim) {
            match pairing {
                RopePairing::Adjacent => {
                    for i in 0..half {
                        let (a, b) = (head[2 * i], head[2 * i + 1]);
                        head[2 * i] = a * c[i] - b * s[i];
                        head[2 * i + 1] = a * s[i] + b * c[i];
                    }
                }
                RopePairing::HalfSplit => {
                    let (lo, hi) = head.split_at_mut(half);
                    for i in 0..half {
                        let (a, b) = (lo[i], hi[i]);
                        lo[i] = a * c[i] - b * s[i];
                        hi[i] = a * s[i] + b * c[i];
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dot_matches_naive() {
        let a: Vec<f32> = (0..37).map(|i| i as f32 * 0.5 - 3.0).collect();
        let b: Vec<f32> = (0..37).map(|i| (i as f32).sin()).collect();
        let naive: f32 = a.iter().zip(&b).map(|(x, y)| x * y).sum();
        assert!((dot(&a, &b) - naive).abs() < 1e-4);
    }

    #[test]
    fn softmax_sums_to_one() {
        let mut x = vec![1.0, 2.0, 3.0, -1e9];
        softmax(&mut x);
        assert!((x.iter().sum::<f32>() - 1.0).abs() < 1e-6);
        assert!(x[3] == 0.0);
    }

    #[test]
    fn rope_pairings_agree_up_to_permutation() {
        // Adjacent rotation of permuted rows equals half-split rotation of the original.
        let hd = 8;
        let x: Vec<f32> = (0..hd).map(|i| i as f32 + 1.0).collect();
        let mut permuted = vec![0.0; hd];
        for i in 0..hd / 2 {
            for s in 0..2 {
                permuted[2 * i + s] = x[s * hd / 2 + i];
            }
        }
        let t = RopeTable::new(5, 1, hd, 10000.0);
        let mut a = x.clone();
        rope(&mut a, 1, hd, &t, RopePairing::HalfSplit);
        let mut b = permuted.clone();
        rope(&mut b, 1, hd, &t, RopePairing::Adjacent);
        for i in 0..hd / 2 {
            for s in 0..2 {
                assert!((b[2 * i + s] - a[s * hd / 2 + i]).abs() < 1e-6);
            }
        }
    }
}
