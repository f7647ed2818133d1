//! Scoring a fact's prompts and the metrics computed from the scores, by the definitions
//! the editing literature uses (docs/editing.md, "EVALUATE EDITS"):
//!
//! - ROME (`compute_rewrite_quality_counterfact` and `summarize.py`): a prompt's score for a
//!   target is the mean negative log-probability of the target's tokens, teacher-forced
//!   after the prompt and a space. Efficacy and paraphrase count the prompts where the new
//!   target's is lower than the true one's (P(new) > P(true), P the geometric mean of the
//!   token probabilities); neighbourhood counts the prompts where the true one's is lower;
//!   the magnitudes are the mean differences of those P.
//! - EasyEdit (`test_prediction_acc`, `compute_locality_quality`): accuracy is the share of
//!   the target's tokens that are the top-1 token at their teacher-forced position;
//!   locality is the share of the top-1 tokens over the true target on a neighbour prompt
//!   that equal the unedited state's.
//!
//! A fact's value is the mean over its prompts of each kind; an aggregate is the mean over
//! the facts that have the kind (ROME averages per-record means).

use lql_exec::{Executor, Logits, LogitsWanted};

use crate::error::{Error, Result};

/// One target's tokens after one prompt: their log-probabilities and the top-1 token at
/// each of their positions.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub(crate) struct TokenScores {
    pub tokens: Vec<u32>,
    pub logprobs: Vec<f64>,
    pub argmax: Vec<u32>,
}

impl TokenScores {
    /// ROME's per-prompt score: the mean negative log-probability of the tokens.
    pub fn mean_nll(&self) -> f64 {
        -self.logprobs.iter().sum::<f64>() / self.logprobs.len() as f64
    }

    /// EasyEdit's accuracy: the share of tokens that are the top-1 at their position.
    pub fn accuracy(&self) -> f64 {
        agreement(&self.argmax, &self.tokens)
    }
}

/// The share of positions where `a` and `b` hold the same token.
fn agreement(a: &[u32], b: &[u32]) -> f64 {
    let same = a.iter().zip(b).filter(|(x, y)| x == y).count();
    same as f64 / a.len().max(1) as f64
}

/// One prompt scored for both targets.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub(crate) struct PromptScores {
    pub prompt: String,
    pub target_new: TokenScores,
    pub target_true: TokenScores,
}

impl PromptScores {
    /// P(new) > P(true), ROME's way (`target_true > target_new` on the mean NLLs).
    fn new_wins(&self) -> bool {
        self.target_true.mean_nll() > self.target_new.mean_nll()
    }

    /// P(true) > P(new), ROME's neighbourhood way.
    fn true_wins(&self) -> bool {
        self.target_true.mean_nll() < self.target_new.mean_nll()
    }

    /// exp(−NLL(new)) − exp(−NLL(true)).
    fn diff(&self) -> f64 {
        (-self.target_new.mean_nll()).exp() - (-self.target_true.mean_nll()).exp()
    }
}

/// Every prompt of one fact, scored in one state.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub(crate) struct FactScores {
    pub rewrite: PromptScores,
    pub paraphrase: Vec<PromptScores>,
    pub neighbourhood: Vec<PromptScores>,
}

/// The metrics of one fact in one state (`None`: the fact has no prompt of that kind).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub(crate) struct Metrics {
    pub efficacy: Option<f64>,
    pub paraphrase: Option<f64>,
    pub neighbourhood: Option<f64>,
    pub efficacy_diff: Option<f64>,
    pub paraphrase_diff: Option<f64>,
    pub neighbourhood_diff: Option<f64>,
    pub efficacy_acc: Option<f64>,
    pub paraphrase_acc: Option<f64>,
    pub locality_acc: Option<f64>,
}

fn mean(v: impl Iterator<Item = f64>) -> Option<f64> {
    let (mut sum, mut n) = (0.0, 0usize);
    for x in v {
        sum += x;
        n += 1;
    }
    (n > 0).then(|| sum / n as f64)
}

fn share(v: impl Iterator<Item = bool>) -> Option<f64> {
    mean(v.map(|b| if b { 1.0 } else { 0.0 }))
}

impl Metrics {
    /// The metrics of `now`, with `before` (the same fact scored in the state the statement
    /// started from) for EasyEdit's locality.
    pub fn of(now: &FactScores, before: &FactScores) -> Metrics {
        let r = std::iter::once(&now.rewrite);
        let p = &now.paraphrase;
        let n = &now.neighbourhood;
        Metrics {
            efficacy: share(r.clone().map(PromptScores::new_wins)),
            paraphrase: share(p.iter().map(PromptScores::new_wins)),
            neighbourhood: share(n.iter().map(PromptScores::true_wins)),
            efficacy_diff: mean(r.clone().map(PromptScores::diff)),
            paraphrase_diff: mean(p.iter().map(PromptScores::diff)),
            neighbourhood_diff: mean(n.iter().map(|s| -s.diff())),
            efficacy_acc: mean(r.map(|s| s.target_new.accuracy())),
            paraphrase_acc: mean(p.iter().map(|s| s.target_new.accuracy())),
            locality_acc: mean(
                n.iter()
                    .zip(&before.neighbourhood)
                    .map(|(a, b)| agreement(&a.target_true.argmax, &b.target_true.argmax)),
            ),
        }
    }

    /// The values in the result's column order.
    pub fn values(&self) -> [Option<f64>; 9] {
        [
            self.efficacy,
            self.paraphrase,
            self.neighbourhood,
            self.efficacy_diff,
            self.paraphrase_diff,
            self.neighbourhood_diff,
            self.efficacy_acc,
            self.paraphrase_acc,
            self.locality_acc,
        ]
    }

    /// The mean of each metric over the facts that have it.
    pub fn aggregate<'a>(all: impl Iterator<Item = &'a Metrics> + Clone) -> Metrics {
        let m = |f: fn(&Metrics) -> Option<f64>| mean(all.clone().filter_map(f));
        Metrics {
            efficacy: m(|x| x.efficacy),
            paraphrase: m(|x| x.paraphrase),
            neighbourhood: m(|x| x.neighbourhood),
            efficacy_diff: m(|x| x.efficacy_diff),
            paraphrase_diff: m(|x| x.paraphrase_diff),
            neighbourhood_diff: m(|x| x.neighbourhood_diff),
            efficacy_acc: m(|x| x.efficacy_acc),
            paraphrase_acc: m(|x| x.paraphrase_acc),
            locality_acc: m(|x| x.locality_acc),
        }
    }
}

/// A prompt and its two targets, tokenized once for every stage.
#[derive(Debug, Clone)]
pub(crate) struct PromptTokens {
    pub prompt: String,
    pub ids: Vec<u32>,
    pub target_new: Vec<u32>,
    pub target_true: Vec<u32>,
}

/// log Σ exp(logit), in f64.
fn log_sum_exp(logits: &Logits) -> f64 {
    let v = &logits.values;
    let max = v.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    max + v.iter().map(|&x| (x as f64 - max).exp()).sum::<f64>().ln()
}

/// Log-softmax of `token` in `logits`, in f64.
fn log_prob(logits: &Logits, token: u32) -> f64 {
    logits.values[token as usize] as f64 - log_sum_exp(logits)
}

/// The log-softmax of every token, in f64.
pub(crate) fn log_softmax(logits: &Logits) -> Vec<f64> {
    let lse = log_sum_exp(logits);
    logits.values.iter().map(|&x| x as f64 - lse).collect()
}

/// KL(p ‖ q) of two log-distributions, in nats.
pub(crate) fn kl(p: &[f64], q: &[f64]) -> f64 {
    p.iter().zip(q).map(|(a, b)| a.exp() * (a - b)).sum()
}

/// Scores `p` in `exec`'s state: the prompt runs once, and each target's tokens continue
/// from it (all but the last, whose logits are not needed).
pub(crate) fn score(exec: &Executor, p: &PromptTokens) -> Result<PromptScores> {
    let mut session = exec.session();
    let first = session.prefill(&p.ids)?;
    first.check_finite(p.ids.len())?;
    let held = session.position();
    let mut target = |tokens: &[u32]| -> Result<TokenScores> {
        if tokens.is_empty() {
            return Err(Error::internal("a scored target has no tokens"));
        }
        let mut logits = vec![first.clone()];
        if tokens.len() > 1 {
            logits.extend(session.extend(&tokens[..tokens.len() - 1], LogitsWanted::All, None)?);
        }
        session.truncate(held);
        Ok(TokenScores {
            tokens: tokens.to_vec(),
            logprobs: logits
                .iter()
                .zip(tokens)
                .map(|(l, &t)| log_prob(l, t))
                .collect(),
            argmax: logits.iter().map(Logits::argmax).collect(),
        })
    };
    let target_new = target(&p.target_new)?;
    let target_true = target(&p.target_true)?;
    Ok(PromptScores {
        prompt: p.prompt.clone(),
        target_new,
        target_true,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scores(new: &[f64], tru: &[f64]) -> PromptScores {
        let t = |lp: &[f64]| TokenScores {
            tokens: vec![1; lp.len()],
            logprobs: lp.to_vec(),
            argmax: vec![1; lp.len()],
        };
        PromptScores {
            prompt: String::new(),
            target_new: t(new),
            target_true: t(tru),
        }
    }

    #[test]
    fn rome_compares_mean_token_nlls() {
        // new: mean NLL 1.0; true: mean NLL 2.0 → P(new) > P(true).
        let s = scores(&[-0.5, -1.5], &[-2.0]);
        assert!(s.new_wins() && !s.true_wins());
        assert!((s.diff() - ((-1.0f64).exp() - (-2.0f64).exp())).abs() < 1e-12);
        let f = FactScores {
            rewrite: s.clone(),
            paraphrase: vec![s.clone(), scores(&[-3.0], &[-1.0])],
            neighbourhood: vec![scores(&[-3.0], &[-1.0])],
        };
        let m = Metrics::of(&f, &f);
        assert_eq!(m.efficacy, Some(1.0));
        assert_eq!(m.paraphrase, Some(0.5));
        assert_eq!(m.neighbourhood, Some(1.0));
        assert_eq!(m.locality_acc, Some(1.0));
    }

    #[test]
    fn easyedit_accuracy_is_the_share_of_top1_tokens() {
        let t = TokenScores {
            tokens: vec![5, 6, 7, 8],
            logprobs: vec![0.0; 4],
            argmax: vec![5, 0, 7, 0],
        };
        assert_eq!(t.accuracy(), 0.5);
    }

    #[test]
    fn aggregates_skip_facts_without_the_kind() {
        let a = Metrics {
            paraphrase: Some(1.0),
            efficacy: Some(1.0),
            ..Default::default()
        };
        let b = Metrics {
            efficacy: Some(0.0),
            ..Default::default()
        };
        let m = Metrics::aggregate([a, b].iter());
        assert_eq!(m.efficacy, Some(0.5));
        assert_eq!(m.paraphrase, Some(1.0));
        assert_eq!(m.neighbourhood, None);
    }

    #[test]
    fn kl_of_a_distribution_with_itself_is_zero() {
        let l = Logits {
            values: vec![1.0, 2.0, 3.0],
        };
        let p = log_softmax(&l);
        assert!(kl(&p, &p).abs() < 1e-15);
        let q = log_softmax(&Logits {
            values: vec![3.0, 2.0, 1.0],
        });
        assert!(kl(&p, &q) > 0.0);
        assert!((log_prob(&l, 2) - p[2]).abs() < 1e-12);
    }
}
