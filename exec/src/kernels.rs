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

/// A norm's `1/rms` when its mean square `ms` is finite, else NaN. A row of large but
/// finite values whose squares overflow would otherwise normalise to zeros (`1/√∞ = 0`):
/// every logit 0, a uniform answer that looks valid. NaN instead reaches the forward pass's
/// finiteness check, which names the layer (one comparison per row).
#[inline(always)]
fn overflow_to_nan(inv: f32, ms: f32) -> f32 {
    if ms.is_finite() {
        inv
    } else {
        f32::NAN
    }
}

/// RMSNorm of every row of `x` (rows of `weight.len()` elements) into `out`.
pub fn rmsnorm_rows(x: &[f32], weight: &[f32], eps: f32, out: &mut [f32]) {
    let d = weight.len();
    for (xr, or) in x.chunks_exact(d).zip(out.chunks_exact_mut(d)) {
        let ss = dot(xr, xr) / d as f32;
        let inv = overflow_to_nan(1.0 / (ss + eps).sqrt(), ss);
        for ((o, xi), w) in or.iter_mut().zip(xr).zip(weight) {
            *o = xi * inv * w;
        }
    }
}

/// LayerNorm of every row of `x` (rows of `weight.len()` elements) into `out`:
/// `(x − mean) / sqrt(var + eps) · w + b` (mean and variance over the row, in f32).
pub fn layernorm_rows(x: &[f32], weight: &[f32], bias: &[f32], eps: f32, out: &mut [f32]) {
    let d = weight.len();
    for (xr, or) in x.chunks_exact(d).zip(out.chunks_exact_mut(d)) {
        let mean = xr.iter().sum::<f32>() / d as f32;
        for (o, xi) in or.iter_mut().zip(xr) {
            *o = xi - mean;
        }
        let var = dot(or, or) / d as f32;
        let inv = overflow_to_nan(1.0 / (var + eps).sqrt(), var);
        for ((o, w), b) in or.iter_mut().zip(weight).zip(bias) {
            *o = *o * inv * w + b;
        }
    }
}

/// `cap · tanh(v / cap)` of every element (attention scores, logits).
pub fn softcap(values: &mut [f32], cap: f32) {
    for v in values {
        *v = cap * (*v / cap).tanh();
    }
}

/// `x = act(x)` element-wise (an MLP's hidden layer).
pub fn activate(act: Activation, x: &mut [f32]) {
    match act {
        Activation::Silu => x.iter_mut().for_each(|g| *g /= 1.0 + exp(-*g)),
        Activation::Gelu => x.iter_mut().for_each(|g| *g = gelu(*g)),
    }
}

/// GELU, tanh approximation (ggml's and gemma's).
#[inline(always)]
pub fn gelu(x: f32) -> f32 {
    const C: f32 = 0.797_884_6; // sqrt(2/pi)
    0.5 * x * (1.0 + (C * (x + 0.044_715 * x * x * x)).tanh())
}

/// `gate[i] = act(gate[i]) * up[i]`.
///
/// SiLU uses [`exp`] (within 2 ulp of `f32::exp`); compiled with AVX2 where the CPU has
/// it, with results bit-identical to the portable build (no fused multiply-add).
pub fn glu(act: Activation, gate: &mut [f32], up: &[f32]) {
    match act {
        Activation::Silu => silu_mul(gate, up),
        Activation::Gelu => {
            for (g, u) in gate.iter_mut().zip(up) {
                *g = gelu(*g) * u;
            }
        }
    }
}

fn silu_mul(gate: &mut [f32], up: &[f32]) {
    #[cfg(target_arch = "x86_64")]
    if lql_storage::codec::cpu::has_avx2() {
        // SAFETY: AVX2 is present (checked at run time).
        unsafe { silu_mul_avx2(gate, up) };
        return;
    }
    silu_mul_body(gate, up)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn silu_mul_avx2(gate: &mut [f32], up: &[f32]) {
    silu_mul_body(gate, up)
}

#[inline(always)]
fn silu_mul_body(gate: &mut [f32], up: &[f32]) {
    for (g, u) in gate.iter_mut().zip(up) {
        *g = *g / (1.0 + exp(-*g)) * u;
    }
}

/// `e^x` in f32 without a library call, so loops over it vectorise: Cephes' `expf`
/// (range reduction by ln 2 in two parts, degree-6 polynomial), within 2 ulp of
/// `f32::exp` on `[-87, 88]`; below that it returns 0 (never a subnormal), above it `e^88`.
/// NaN propagates.
#[inline(always)]
pub fn exp(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    const C1: f32 = 0.693_359_4;
    const C2: f32 = -2.121_944_4e-4;
    const ROUND: f32 = 12_582_912.0; // 1.5 · 2^23: adding it rounds to an integer
    let underflow = x < -87.0;
    let x = x.clamp(-87.0, 88.0);
    let n = (x * LOG2E + ROUND) - ROUND;
    let r = x - n * C1 - n * C2;
    let mut p = 1.987_569_1e-4f32;
    p = p * r + 1.398_199_9e-3;
    p = p * r + 8.333_452e-3;
    p = p * r + 4.166_579_6e-2;
    p = p * r + 1.666_666_5e-1;
    p = p * r + 0.5;
    let e = p * (r * r) + r + 1.0;
    // 2^n through the exponent bits; n lies in [-126, 127] after the clamp.
    let scale = f32::from_bits(((n as i32 + 127) as u32) << 23);
    if underflow {
        0.0
    } else {
        e * scale
    }
}

/// In-place softmax (exponentials by [`exp`]); leaves a probability vector.
pub fn softmax(x: &mut [f32]) {
    let m = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut s = 0.0f32;
    for v in x.iter_mut() {
        *v = exp(*v - m);
        s += *v;
    }
    let inv = 1.0 / s;
    for v in x.iter_mut() {
        *v *= inv;
    }
}

/// cos/sin of `pos · θ_i` for a run of positions, `θ_i = theta^(−2i/head_dim)`; a table
/// rotates the first `2 · half` dimensions of each head (all of them unless the block's
/// rotary is partial).
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

    /// The table of `spec` at each of `positions` (row `i` is position `positions[i]`):
    /// angle `pos · scale · θ^(−2i/dims) / factor_i`, computed in f64 (with scale 1 and no
    /// factors, exactly [`RopeTable::new`]'s angles).
    pub fn at(positions: &[usize], spec: &crate::plan::RopeSpec) -> RopeTable {
        let half = spec.dims / 2;
        let scale = spec.freq_scale as f64;
        let inv: Vec<f64> = (0..half)
            .map(|i| {
                let f = (spec.theta as f64).powf(-2.0 * i as f64 / spec.dims as f64);
                match &spec.factors {
                    Some(d) => f / d[i] as f64,
                    None => f,
                }
            })
            .collect();
        let mut cos = Vec::with_capacity(positions.len() * half);
        let mut sin = Vec::with_capacity(positions.len() * half);
        for &p in positions {
            let p = if scale == 1.0 {
                p as f64
            } else {
                p as f64 * scale
            };
            for f in &inv {
                let (s, c) = (p * f).sin_cos();
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
    rope_from(x, 0, n_heads, head_dim, table, pairing)
}

/// [`rope`] of a run of positions that starts at row `first` of `table` (a part of a
/// larger block, rotated on its own).
pub fn rope_from(
    x: &mut [f32],
    first: usize,
    n_heads: usize,
    head_dim: usize,
    table: &RopeTable,
    pairing: RopePairing,
) {
    let half = table.half;
    for (t, row) in x.chunks_exact_mut(n_heads * head_dim).enumerate() {
        let t = first + t;
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
                    let (lo, hi) = head[..2 * half].split_at_mut(half);
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
    fn exp_is_within_two_ulp_of_libm() {
        let mut x = -87.0f32;
        while x < 88.0 {
            let (got, want) = (exp(x), x.exp());
            let ulp = (got.to_bits() as i64 - want.to_bits() as i64).abs();
            assert!(ulp <= 2, "exp({x}) = {got}, libm {want} ({ulp} ulp)");
            x += 0.0137;
        }
        assert_eq!(exp(-1000.0), 0.0);
        assert!(exp(1000.0) > 1e38 && exp(1000.0).is_finite());
        assert!(exp(f32::NAN).is_nan());
    }

    #[test]
    fn silu_simd_equals_portable_bitwise_and_libm_closely() {
        let gate: Vec<f32> = (0..1037).map(|i| (i as f32 * 0.37).sin() * 12.0).collect();
        let up: Vec<f32> = (0..1037).map(|i| (i as f32 * 0.11).cos()).collect();
        let mut a = gate.clone();
        glu(Activation::Silu, &mut a, &up);
        let mut b = gate.clone();
        silu_mul_body(&mut b, &up);
        for (((x, y), g), u) in a.iter().zip(&b).zip(&gate).zip(&up) {
            assert_eq!(x.to_bits(), y.to_bits());
            let want = g / (1.0 + (-g).exp()) * u;
            assert!(
                (x - want).abs() <= 1e-6 * (1.0 + want.abs()),
                "{x} vs {want}"
            );
        }
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
