//! Corpus statistics of FFN features (`ANALYZE FEATURES`): while the model runs over a
//! corpus, context by context, an observer keeps for every feature of the layers asked for
//! its top-activating contexts (one entry per context: the context's largest activation and
//! where it was) and a histogram of its activations at every position.
//!
//! The histogram's bins are fixed and log-spaced, so one pass fills them without knowing a
//! feature's range: a zero bin for `|a| < 2^-10`, then two bins per octave from `2^-10` to
//! `2^10` on each side (the outermost bins take everything beyond). A bin is found from the
//! float's exponent and first mantissa bit, with no logarithm.

use std::ops::Range;

use lql_storage::format::feature_stats::StoredContext;

use crate::error::{ExecError, Result};
use crate::observer::{LayerRecord, Observer};
use crate::session::Executor;

/// Octaves each side of zero the histogram covers (from `2^-OCTAVES_BELOW`).
const OCTAVES: i32 = 20;
/// The smallest magnitude outside the zero bin is `2^-MIN_EXP`.
const MIN_EXP: i32 = 10;
/// Bins per side (two per octave).
const SIDE: usize = (OCTAVES * 2) as usize;
/// Bins of a feature's histogram: the negative side (most negative first), zero, positive.
pub const BINS: usize = 2 * SIDE + 1;

/// The histogram bin of an activation, without branches (so a row's bins vectorize):
/// `m = 2·(exponent + MIN_EXP) + first mantissa bit` is the magnitude bin (−1 below the
/// range: the zero bin), mirrored to the left of the zero bin for a negative value.
#[inline]
pub fn bin_of(a: f32) -> usize {
    let bits = a.to_bits();
    let magnitude = (bits & 0x7fff_ffff) >> 22;
    let m = (magnitude as i32 - 2 * (127 - MIN_EXP)).clamp(-1, SIDE as i32 - 1);
    let sign = 1 - 2 * (bits >> 31) as i32;
    (SIDE as i32 + sign * (m + 1)) as usize
}

/// The values bin `i` holds: `[lo, hi)` (the outermost bins reach ±infinity; the zero bin
/// is `(-2^-10, 2^-10)`).
pub fn bin_range(i: usize) -> (f64, f64) {
    let magnitude = |m: usize| -> (f64, f64) {
        let e = (m / 2) as i32 - MIN_EXP;
        let base = 2f64.powi(e);
        let lo = if m.is_multiple_of(2) {
            base
        } else {
            base * 1.5
        };
        let hi = if m + 1 == SIDE {
            f64::INFINITY
        } else if m.is_multiple_of(2) {
            base * 1.5
        } else {
            base * 2.0
        };
        (lo, hi)
    };
    match i.cmp(&SIDE) {
        std::cmp::Ordering::Equal => {
            let z = 2f64.powi(-MIN_EXP);
            (-z, z)
        }
        std::cmp::Ordering::Less => {
            let (lo, hi) = magnitude(SIDE - 1 - i);
            (-hi, -lo)
        }
        std::cmp::Ordering::Greater => magnitude(i - SIDE - 1),
    }
}

/// Statistics of every feature of some layers, accumulated context by context.
#[derive(Debug, Clone)]
pub struct FeatureStats {
    /// The layers, in order; their statistics follow in this order.
    pub layers: Vec<usize>,
    /// Features per layer.
    pub ffn: usize,
    /// Contexts kept per feature.
    pub top: usize,
    /// `[layer][feature][top]`, each feature's best first (empty slots last), as the
    /// statistics file stores them.
    pub contexts: Vec<StoredContext>,
    /// `[layer][feature][BINS]` counts.
    pub counts: Vec<u32>,
    /// Positions observed (per layer).
    pub tokens: u64,
    /// The running context's largest activation per `[layer][feature]`, and where.
    max: Vec<f32>,
    arg: Vec<u32>,
}

impl FeatureStats {
    pub fn new(layers: Vec<usize>, ffn: usize, top: usize) -> FeatureStats {
        let n = layers.len() * ffn;
        FeatureStats {
            contexts: vec![StoredContext::EMPTY; n * top],
            counts: vec![0; n * BINS],
            layers,
            ffn,
            top: top.max(1),
            tokens: 0,
            max: vec![f32::NEG_INFINITY; n],
            arg: vec![0; n],
        }
    }

    /// Runs one context of `document` and adds what its layers did. `ids` is what runs
    /// (`prefix` tokens, such as BOS, first: they run but are not counted); `first` is the
    /// document position of the first counted token.
    pub fn observe(
        &mut self,
        exec: &Executor,
        ids: &[u32],
        prefix: usize,
        document: u32,
        first: u32,
    ) -> Result<()> {
        let Some(&last) = self.layers.iter().max() else {
            return Ok(());
        };
        if prefix >= ids.len() {
            return Ok(());
        }
        let n_layers = exec.surface().n_layers;
        if last >= n_layers {
            return Err(ExecError::LayerOutOfRange {
                layer: last,
                n_layers,
            });
        }
        let mut slot = vec![None; n_layers];
        for (i, &l) in self.layers.iter().enumerate() {
            slot[l] = Some(i);
        }
        self.max.fill(f32::NEG_INFINITY);
        let mut obs = Accumulate {
            stats: self,
            slot,
            prefix,
            first,
            error: None,
        };
        exec.observe_layers(ids, last, &mut obs)?;
        if let Some(e) = obs.error.take() {
            return Err(e);
        }
        self.tokens += (ids.len() - prefix) as u64;
        self.keep_context(document);
        Ok(())
    }

    /// Enters the finished context into every feature's top list where it beats the last.
    fn keep_context(&mut self, document: u32) {
        let top = self.top;
        for (i, (&a, &position)) in self.max.iter().zip(&self.arg).enumerate() {
            let list = &mut self.contexts[i * top..(i + 1) * top];
            // NaN never enters a list (every comparison with it is false).
            if a.partial_cmp(&list[top - 1].activation) != Some(std::cmp::Ordering::Greater) {
                continue;
            }
            let at = list
                .iter()
                .position(|c| a > c.activation)
                .unwrap_or(top - 1);
            list.copy_within(at..top - 1, at + 1);
            list[at] = StoredContext {
                activation: a,
                document,
                position,
            };
        }
    }

    /// Adds rows `rows` of one layer's activations (`[n × ffn]`), whose first row is
    /// document position `first`. Each row's bins are found first (a loop the compiler
    /// vectorizes), then counted; the running maxima are a second vectorizable loop.
    fn add(&mut self, li: usize, activation: &[f32], rows: Range<usize>, first: u32) {
        let ffn = self.ffn;
        let counts = &mut self.counts[li * ffn * BINS..(li + 1) * ffn * BINS];
        let max = &mut self.max[li * ffn..(li + 1) * ffn];
        let arg = &mut self.arg[li * ffn..(li + 1) * ffn];
        let mut bins = vec![0u32; ffn];
        for (k, p) in rows.enumerate() {
            let row = &activation[p * ffn..(p + 1) * ffn];
            let pos = first + k as u32;
            for (i, (b, &a)) in bins.iter_mut().zip(row).enumerate() {
                *b = (i * BINS + bin_of(a)) as u32;
            }
            for &b in &bins {
                counts[b as usize] += 1;
            }
            for ((m, g), &a) in max.iter_mut().zip(arg.iter_mut()).zip(row) {
                let more = a > *m;
                *m = if more { a } else { *m };
                *g = if more { pos } else { *g };
            }
        }
    }
}

/// The observer of one context.
struct Accumulate<'a> {
    stats: &'a mut FeatureStats,
    /// Layer → index in `stats.layers`.
    slot: Vec<Option<usize>>,
    prefix: usize,
    first: u32,
    error: Option<ExecError>,
}

impl Observer for Accumulate<'_> {
    fn on_layer(&mut self, r: &LayerRecord<'_>) {
        let Some(li) = self.slot.get(r.layer).copied().flatten() else {
            return;
        };
        if self.error.is_some() {
            return;
        }
        let n = r.positions.len();
        if r.ffn != self.stats.ffn || r.activation.len() != n * r.ffn {
            self.error = Some(ExecError::Unsupported(format!(
                "corpus statistics of layer {}: its FFN is not a dense layer of {} features",
                r.layer, self.stats.ffn
            )));
            return;
        }
        // Positions before `prefix` (BOS) run but are not counted.
        let skip = self.prefix.saturating_sub(r.positions.start).min(n);
        let first = self.first + (r.positions.start + skip - self.prefix) as u32;
        self.stats.add(li, r.activation, skip..n, first);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_value_falls_in_the_bin_whose_range_holds_it() {
        let mut x = -3000.0f32;
        while x < 3000.0 {
            for v in [x, x * 1e-4, x * 1e-6] {
                let (lo, hi) = bin_range(bin_of(v));
                let v = v as f64;
                assert!(
                    lo <= v && v < hi || (bin_of(v as f32) == SIDE && v.abs() < hi),
                    "{v} in bin {} = [{lo}, {hi})",
                    bin_of(v as f32)
                );
            }
            x += 0.37;
        }
        assert_eq!(bin_of(0.0), SIDE);
        assert_eq!(bin_of(-0.0), SIDE);
        assert_eq!(bin_of(f32::MAX), BINS - 1);
        assert_eq!(bin_of(f32::MIN), 0);
    }

    #[test]
    fn bins_tile_the_line_in_order() {
        for i in 0..BINS - 1 {
            assert_eq!(bin_range(i).1, bin_range(i + 1).0, "bins {i} and {}", i + 1);
        }
    }
}
