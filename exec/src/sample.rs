//! Sampling: greedy, temperature, top-k, top-p, with a seeded PRNG (splitmix64) so runs
//! are reproducible; and the repetition penalties of llama.cpp's and OpenAI's APIs
//! (`repeat_penalty`, `frequency_penalty`, `presence_penalty`) over the last
//! `repeat_last_n` tokens of the prompt and the text so far, applied to the logits before
//! any of them (as llama.cpp's penalties sampler does).

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
    /// llama.cpp's repetition penalty: a token seen in the window has a positive logit
    /// divided by it and a negative one multiplied by it (1.0: none).
    pub repeat_penalty: f32,
    /// OpenAI's: subtracted from a token's logit once per time it occurs in the window (0: none).
    pub frequency_penalty: f32,
    /// OpenAI's: subtracted from the logit of every token that occurs in the window (0: none).
    pub presence_penalty: f32,
    /// The window the penalties look at: the last `n` tokens of prompt and text (llama.cpp's
    /// `repeat_last_n`, default 64).
    pub repeat_last_n: usize,
}

impl Default for Sampling {
    fn default() -> Self {
        Sampling {
            temperature: 0.0,
            top_k: 0,
            top_p: 1.0,
            seed: 0,
            repeat_penalty: 1.0,
            frequency_penalty: 0.0,
            presence_penalty: 0.0,
            repeat_last_n: 64,
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
        if !(self.repeat_penalty.is_finite() && self.repeat_penalty > 0.0) {
            return Err(ExecError::InvalidOption(format!(
                "repeat_penalty {} must be a finite number > 0",
                self.repeat_penalty
            )));
        }
        for (name, v) in [
            ("frequency_penalty", self.frequency_penalty),
            ("presence_penalty", self.presence_penalty),
        ] {
            if !(-2.0..=2.0).contains(&v) {
                return Err(ExecError::InvalidOption(format!(
                    "{name} {v} must be between -2 and 2"
                )));
            }
        }
        if self.repeat_last_n > MAX_REPEAT_LAST_N {
            return Err(ExecError::InvalidOption(format!(
                "repeat_last_n {} must be at most {MAX_REPEAT_LAST_N}",
                self.repeat_last_n
            )));
        }
        Ok(())
    }

    /// Whether any penalty changes the logits.
    pub fn penalizes(&self) -> bool {
        self.repeat_last_n > 0
            && (self.repeat_penalty != 1.0
                || self.frequency_penalty != 0.0
                || self.presence_penalty != 0.0)
    }
}

/// The largest penalty window (tokens).
pub const MAX_REPEAT_LAST_N: usize = 1 << 20;

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
    /// The penalty window: the last `repeat_last_n` tokens and how often each occurs.
    window: std::collections::VecDeque<u32>,
    counts: std::collections::HashMap<u32, u32>,
    /// The penalized logits (reused between steps).
    scratch: Vec<f32>,
}

impl Sampler {
    pub fn new(opts: Sampling) -> Result<Sampler> {
        opts.validate()?;
        Ok(Sampler {
            opts,
            rng: SplitMix64::new(opts.seed),
            window: std::collections::VecDeque::new(),
            counts: std::collections::HashMap::new(),
            scratch: Vec::new(),
        })
    }

    /// Records tokens of the prompt or the text for the penalties (a no-op without them).
    pub fn accept(&mut self, ids: &[u32]) {
        if !self.opts.penalizes() {
            return;
        }
        let n = self.opts.repeat_last_n;
        for &id in ids.iter().skip(ids.len().saturating_sub(n)) {
            if self.window.len() == n {
                if let Some(old) = self.window.pop_front() {
                    if let Some(c) = self.counts.get_mut(&old) {
                        *c -= 1;
                        if *c == 0 {
                            self.counts.remove(&old);
                        }
                    }
                }
            }
            self.window.push_back(id);
            *self.counts.entry(id).or_insert(0) += 1;
        }
    }

    /// The next token.
    pub fn sample(&mut self, logits: &[f32]) -> u32 {
        if self.counts.is_empty() {
            return self.pick(logits);
        }
        let mut scratch = std::mem::take(&mut self.scratch);
        scratch.clear();
        scratch.extend_from_slice(logits);
        let o = self.opts;
        for (&id, &count) in &self.counts {
            let Some(l) = scratch.get_mut(id as usize) else {
                continue;
            };
            if *l > 0.0 {
                *l /= o.repeat_penalty;
            } else {
                *l *= o.repeat_penalty;
            }
            *l -= count as f32 * o.frequency_penalty + o.presence_penalty;
        }
        let id = self.pick(&scratch);
        self.scratch = scratch;
        id
    }

    fn pick(&mut self, logits: &[f32]) -> u32 {
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
            ..Sampling::default()
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
            ..Sampling::default()
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
            ..Sampling::default()
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
        for bad in [
            Sampling {
                repeat_penalty: 0.0,
                ..Sampling::default()
            },
            Sampling {
                repeat_penalty: f32::NAN,
                ..Sampling::default()
            },
            Sampling {
                frequency_penalty: 2.5,
                ..Sampling::default()
            },
            Sampling {
                presence_penalty: -3.0,
                ..Sampling::default()
            },
            Sampling {
                repeat_last_n: MAX_REPEAT_LAST_N + 1,
                ..Sampling::default()
            },
        ] {
            assert!(Sampler::new(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn penalties_act_on_the_window_as_llama_cpp_computes_them() {
        // Token 0 leads; once seen it is penalised below token 1.
        let logits = [2.0, 1.9, -1.0, 0.5];
        let mut s = Sampler::new(Sampling {
            repeat_penalty: 1.1,
            repeat_last_n: 3,
            ..Sampling::default()
        })
        .unwrap();
        assert_eq!(s.sample(&logits), 0);
        s.accept(&[0]);
        assert_eq!(s.sample(&logits), 1); // 2.0 / 1.1 = 1.82 < 1.9
                                          // Negative logits are multiplied: seen tokens 0 and 2 fall below token 1.
        s.accept(&[2]);
        assert_eq!(s.sample(&[-1.0, -1.05, -0.99, -5.0]), 1); // −1.1, −1.05, −1.089
                                                              // The window forgets: three more tokens push 0 and 2 out.
        s.accept(&[3, 3, 3]);
        assert_eq!(s.sample(&logits), 0);

        // Frequency and presence: logit − count × f − p.
        let mut s = Sampler::new(Sampling {
            frequency_penalty: 0.3,
            presence_penalty: 0.2,
            ..Sampling::default()
        })
        .unwrap();
        s.accept(&[0]);
        assert_eq!(s.sample(&[2.0, 1.6]), 1); // 2.0 − 0.3 − 0.2 = 1.5 < 1.6
        s.accept(&[1, 1]);
        assert_eq!(s.sample(&[2.0, 1.6]), 0); // 1.6 − 0.6 − 0.2 = 0.8
    }
}
