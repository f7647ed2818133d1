//! Sampling: greedy, temperature, top-k, top-p, with a seeded PRNG (splitmix64) so runs
//! are reproducible.

use crate::error::{ExecError, Result};

/// How the next token is chosen. The default is greedy.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sampling {
    /// 0 (or less): greedy argmax.
    pub temperature: f32,
    /// Keep the `k` most likely tokens (0: no limit).
    pub top_k: usize,
    /// Keep the smallest set whose probability reaches `p` (1.0: no limit).
    pub top_p: f32,
    pub seed: u64,
}

impl Default for Sampling {
    fn default() -> Self {
        Sampling {
            temperature: 0.0,
            top_k: 0,
            top_p: 1.0,
            seed: 0,
        }
    }
}

impl Sampling {
    /// Greedy decoding.
    pub fn greedy() -> Sampling {
        Sampling::default()
    }

    /// Refuse options that make no sense.
    pub fn validate(&self) -> Result<()> {
        if !self.temperature.is_finite() || self.temperature < 0.0 {
            return Err(ExecError::InvalidOption(format!(
                "temperature {} must be a finite number ≥ 0",
                self.temperature
            )));
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return Err(ExecError::InvalidOption(format!(
                "top_p {} must be in (0, 1]",
                self.top_p
            )));
        }
        Ok(())
    }
}

/// splitmix64: a small, fast, well-distributed generator.
#[derive(Debug, Clone)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    pub fn new(seed: u64) -> SplitMix64 {
        SplitMix64(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)`.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
}

/// Picks tokens from logits according to [`Sampling`].
#[derive(Debug, Clone)]
pub struct Sampler {
    opts: Sampling,
    rng: SplitMix64,
}

impl Sampler {
    pub fn new(opts: Sampling) -> Result<Sampler> {
        opts.validate()?;
        Ok(Sampler {
            opts,
            rng: SplitMix64::new(opts.seed),
        })
    }

    /// The next token.
    pub fn sample(&mut self, logits: &[f32]) -> u32 {
        let o = self.opts;
        if o.temperature <= 0.0 || o.top_k == 1 {
            return argmax(logits);
        }
        // Candidates, best first (ties: lower id first).
        let mut idx: Vec<u32> = (0..logits.len() as u32).collect();
        let cmp = |a: &u32, b: &u32| {
            logits[*b as usize]
                .total_cmp(&logits[*a as usize])
                .then(a.cmp(b))
        };
        if o.top_k > 0 && o.top_k < idx.len() {
            idx.select_nth_unstable_by(o.top_k - 1, cmp);
            idx.truncate(o.top_k);
        }
        idx.sort_by(cmp);
        let inv_t = 1.0 / o.temperature as f64;
        let max = logits[idx[0] as usize] as f64;
        let mut probs: Vec<f64> = idx
            .iter()
            .map(|&i| ((logits[i as usize] as f64 - max) * inv_t).exp())
            .collect();
        let total: f64 = probs.iter().sum();
        probs.iter_mut().for_each(|p| *p /= total);
        if o.top_p < 1.0 {
            let mut cum = 0.0;
            let mut keep = probs.len();
            for (i, p) in probs.iter().enumerate() {
                cum += p;
                if cum >= o.top_p as f64 {
                    keep = i + 1;
                    break;
                }
            }
            probs.truncate(keep);
            idx.truncate(keep);
        }
        let total: f64 = probs.iter().sum();
        let mut u = self.rng.next_f64() * total;
        for (i, p) in probs.iter().enumerate() {
            if u < *p {
                return idx[i];
            }
            u -= p;
        }
        // Rounding left `u` past the end: the last token with any probability (never one a
        // grammar masked to −∞).
        let last = probs.iter().rposition(|&p| p > 0.0).unwrap_or(0);
        idx[last]
    }
}

/// The highest logit's index (the lowest id among ties).
pub fn argmax(logits: &[f32]) -> u32 {
    let mut best = 0usize;
    for (i, &v) in logits.iter().enumerate() {
        if v > logits[best] {
            best = i;
        }
    }
    best as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn greedy_is_argmax() {
        let mut s = Sampler::new(Sampling::greedy()).unwrap();
        assert_eq!(s.sample(&[0.1, 3.0, 3.0, -1.0]), 1);
    }

    #[test]
    fn seeded_runs_repeat() {
        let logits: Vec<f32> = (0..100).map(|i| ((i * 37 % 11) as f32) * 0.3).collect();
        let opts = Sampling {
            temperature: 1.0,
            top_k: 20,
            top_p: 0.9,
            seed: 42,
        };
        let run = || {
            let mut s = Sampler::new(opts).unwrap();
            (0..50).map(|_| s.sample(&logits)).collect::<Vec<_>>()
        };
        assert_eq!(run(), run());
        let distinct: std::collections::BTreeSet<_> = run().into_iter().collect();
        assert!(distinct.len() > 1);
    }

    #[test]
    fn top_k_and_top_p_restrict() {
        let logits = [5.0, 4.9, 0.0, -3.0, 1.0];
        let mut s = Sampler::new(Sampling {
            temperature: 1.0,
            top_k: 2,
            top_p: 1.0,
            seed: 7,
        })
        .unwrap();
        for _ in 0..200 {
            assert!(s.sample(&logits) <= 1);
        }
        let mut s = Sampler::new(Sampling {
            temperature: 1.0,
            top_k: 0,
            top_p: 0.01,
            seed: 7,
        })
        .unwrap();
        for _ in 0..50 {
            assert_eq!(s.sample(&logits), 0);
        }
    }

    #[test]
    fn bad_options_refused() {
        let bad = Sampling {
            temperature: -1.0,
            ..Sampling::default()
        };
        assert!(Sampler::new(bad).is_err());
        let bad = Sampling {
            top_p: 0.0,
            ..Sampling::default()
        };
        assert!(Sampler::new(bad).is_err());
    }
}
