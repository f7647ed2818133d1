//! DESCRIBE: what an entity activates, as edges `entity → target` grouped into layer bands.
//!
//! 1. Query: RESIDUAL runs the entity's tokens after [`DescribeOptions::prefix`] (the BOS
//!    token) and uses the last position; EMBEDDING uses the mean of the tokens' scaled
//!    embedding rows. The prefix matters: a token at position 0 is the attention sink, and
//!    there every token's late-layer residual looks alike (on SmolLM2 the same layer-29
//!    features reach gates ≈ 49 for "Paris", "France", "the" or "water").
//! 2. Score every feature of the chosen layers the same way for a few reference words
//!    ([`REFERENCE_WORDS`]) and subtract their mean: the *contrast* removes features that
//!    fire for any input (SmolLM2's last layers have features with gates ≈ 45 on every
//!    token, whose labels say nothing about the entity).
//! 3. Keep a feature when its gate is positive and both its gate and its contrast are at
//!    least [`DESCRIBE_Z`] × the RMS of that layer's gates (resp. contrasts) — per-layer
//!    z-scores, so the
//!    threshold means the same on every model and in both modes; a fixed gate value like
//!    LARQL's 5.0 fits one model family), at most [`DESCRIBE_TOP`] per layer, by contrast.
//! 4. Label each hit by its feature's top down token; BRIEF and VERBOSE drop targets that are
//!    not content tokens (fewer than two alphanumeric characters) or are the entity itself,
//!    then merge hits by lower-cased target, keeping the strongest (its gate and layer) with
//!    every layer and the hit count. `also` lists up to three further content tokens of the
//!    strongest feature's label with a positive logit. RAW keeps every hit unmerged.
//! 5. Split into bands by the primary layer: early, middle and late thirds of the model's
//!    layers (the container may record its own bands; SmolLM2's 30 layers give 0-9, 10-19,
//!    20-29). Within a band edges sort by gate, descending; BRIEF keeps 10 per band,
//!    VERBOSE 30, RAW 100.

use std::collections::HashMap;

use lql_storage::model::OperandSource;

use super::experts::{flat_scores, BankLayout, ExpertId};
use super::gate_scan::GateRegion;
use super::labels::LabelCache;
use super::query::mean_embedding;
use super::residual::capture;
use super::vocab::{is_content, Vocab};
use super::walk::{layer_range, resolve_mode, WalkMode};
use crate::error::{ExecError, Result};
use crate::session::Executor;
use rayon::prelude::*;

/// Features kept per layer at most (the strongest contrasts).
pub const DESCRIBE_TOP: usize = 20;
/// Reference inputs whose mean score is the baseline of the contrast: common function
/// words, with and without a leading space (entities are tokenised without one).
pub const REFERENCE_WORDS: [&str; 8] = ["the", " the", "of", " of", "and", " and", "is", " is"];
/// A hit is kept when `gate > 0`, `gate ≥ DESCRIBE_Z × rms(layer gates)` and
/// `contrast ≥ DESCRIBE_Z × rms(layer contrasts)`.
pub const DESCRIBE_Z: f32 = 3.0;

/// How much DESCRIBE shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Detail {
    #[default]
    Brief,
    Verbose,
    Raw,
}

impl Detail {
    /// Edges kept per band.
    pub fn cap(self) -> usize {
        match self {
            Detail::Brief => 10,
            Detail::Verbose => 30,
            Detail::Raw => 100,
        }
    }
}

/// The clauses of a DESCRIBE.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DescribeOptions {
    /// Inclusive layer range (`AT LAYER n` is `(n, n)`); all layers when `None`.
    pub layers: Option<(usize, usize)>,
    pub detail: Detail,
    /// `None`: RESIDUAL when the binding can run, else EMBEDDING.
    pub mode: Option<WalkMode>,
    /// Tokens run before the entity (and each reference) in RESIDUAL mode, so that the entity
    /// is not at position 0: the BOS token when the model has one.
    pub prefix: Vec<u32>,
    /// Token ids of the reference inputs ([`REFERENCE_WORDS`], tokenised without special
    /// tokens); empty: no contrast (raw gates).
    pub baseline: Vec<Vec<u32>>,
}

/// A named range of layers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Band {
    pub name: String,
    pub first: usize,
    pub last: usize,
}

/// Early, middle and late thirds of `n_layers`.
pub fn default_bands(n_layers: usize) -> Vec<Band> {
    let a = n_layers / 3;
    let b = (2 * n_layers) / 3;
    let mut out = Vec::new();
    for (name, lo, hi) in [("early", 0, a), ("middle", a, b), ("late", b, n_layers)] {
        if hi > lo {
            out.push(Band {
                name: name.to_string(),
                first: lo,
                last: hi - 1,
            });
        }
    }
    out
}

/// One edge of a description.
#[derive(Debug, Clone, PartialEq)]
pub struct DescribeEdge {
    pub band: String,
    pub target: String,
    pub target_id: u32,
    /// The strongest hit's gate.
    pub gate: f32,
    /// The strongest hit's layer and feature (on a bank layer, the row of `expert`'s gate
    /// matrix).
    pub layer: usize,
    pub feature: usize,
    /// The strongest hit's expert on a bank layer; `None` on a dense FFN.
    pub expert: Option<ExpertId>,
    /// Every layer a merged hit came from, ascending.
    pub layers: Vec<usize>,
    pub count: usize,
    pub also: Vec<String>,
}

/// The result of a DESCRIBE.
#[derive(Debug, Clone, PartialEq)]
pub struct DescribeResult {
    pub mode: WalkMode,
    pub mode_defaulted: bool,
    pub note: Option<String>,
    pub bands: Vec<Band>,
    pub edges: Vec<DescribeEdge>,
    /// Hits above the threshold before merging.
    pub kept_hits: usize,
}

/// Every feature's score in each of `layers` for the input `ids`: gate pre-activations at
/// the last position (RESIDUAL) or the mean embedding · gate rows (EMBEDDING).
pub fn layer_scores(
    src: &dyn OperandSource,
    exec: Option<&Executor>,
    mode: WalkMode,
    ids: &[u32],
    layers: &[usize],
) -> Result<Vec<Vec<f32>>> {
    match (mode, exec) {
        (WalkMode::Residual, Some(exec)) => Ok(capture(exec, ids, layers)?
            .into_iter()
            .map(|c| c.gate)
            .collect()),
        (WalkMode::Residual, None) => Err(ExecError::Internal("RESIDUAL without executor".into())),
        (WalkMode::Embedding, _) => {
            let q = mean_embedding(src, ids)?;
            layers
                .par_iter()
                .map(|&l| GateRegion::open(src, l)?.scores(&q))
                .collect()
        }
    }
}

/// Per layer: every feature's score in flat order, and whether its expert ran.
pub type BankScores = (Vec<Vec<f32>>, Vec<Vec<bool>>);

/// [`layer_scores`] of bank layers, in flat feature order (every routed expert, then the
/// shared one), with which features belong to experts that ran: RESIDUAL scores every
/// expert's gate rows against the captured FFN input and marks the experts the router
/// chose at the last position plus the shared one; EMBEDDING marks every expert.
pub fn bank_scores(
    src: &dyn OperandSource,
    exec: Option<&Executor>,
    mode: WalkMode,
    bank: &BankLayout,
    ids: &[u32],
    layers: &[usize],
) -> Result<BankScores> {
    let all = |q: &[f32], l: usize| flat_scores(src, bank, l, q);
    match (mode, exec) {
        (WalkMode::Residual, Some(exec)) => {
            let caps = capture(exec, ids, layers)?;
            let mut scores = Vec::with_capacity(layers.len());
            let mut ran = Vec::with_capacity(layers.len());
            for (c, &l) in caps.iter().zip(layers) {
                scores.push(all(&c.ffn_input, l)?);
                let mut mask = vec![false; bank.features()];
                for e in super::walk::scanned_experts(bank, Some(&c.routes)) {
                    let start = bank.flat(e, 0).unwrap_or(0);
                    let w = bank.width(e);
                    mask[start..start + w].fill(true);
                }
                ran.push(mask);
            }
            Ok((scores, ran))
        }
        (WalkMode::Residual, None) => Err(ExecError::Internal("RESIDUAL without executor".into())),
        (WalkMode::Embedding, _) => {
            let q = mean_embedding(src, ids)?;
            let scores = layers
                .par_iter()
                .map(|&l| all(&q, l))
                .collect::<Result<Vec<_>>>()?;
            let ran = vec![vec![true; bank.features()]; layers.len()];
            Ok((scores, ran))
        }
    }
}

/// Describes the entity whose tokens are `ids` (tokenised without special tokens); `entity`
/// is its text, used to drop self-references.
pub fn describe(
    src: &dyn OperandSource,
    exec: Option<&Executor>,
    vocab: &dyn Vocab,
    cache: &LabelCache,
    entity: &str,
    ids: &[u32],
    opts: &DescribeOptions,
) -> Result<DescribeResult> {
    if ids.is_empty() {
        return Err(ExecError::EmptyInput(format!("{entity:?}")));
    }
    let n_layers = src.surface().n_layers;
    let layers = layer_range(n_layers, opts.layers)?;
    let (mode, mode_defaulted, note) = resolve_mode(src, exec, opts.mode)?;
    let run = |x: &[u32]| -> Vec<u32> {
        match mode {
            WalkMode::Residual => opts.prefix.iter().chain(x).copied().collect(),
            WalkMode::Embedding => x.to_vec(),
        }
    };
    let bank = BankLayout::of(src);
    let (scores, ran) = match &bank {
        None => (layer_scores(src, exec, mode, &run(ids), &layers)?, None),
        Some(b) => {
            let (s, ran) = bank_scores(src, exec, mode, b, &run(ids), &layers)?;
            (s, Some(ran))
        }
    };
    let mut baseline: Vec<Vec<f32>> = scores.iter().map(|s| vec![0.0; s.len()]).collect();
    let refs: Vec<&Vec<u32>> = opts.baseline.iter().filter(|r| !r.is_empty()).collect();
    for r in &refs {
        let reference = match &bank {
            None => layer_scores(src, exec, mode, &run(r), &layers)?,
            Some(b) => bank_scores(src, exec, mode, b, &run(r), &layers)?.0,
        };
        for (b, s) in baseline.iter_mut().zip(reference) {
            for (x, y) in b.iter_mut().zip(s) {
                *x += y / refs.len() as f32;
            }
        }
    }
    // Keep strong positive hits whose contrast stands out.
    let mut kept: Vec<(usize, usize, f32)> = Vec::new();
    for (i, ((&layer, s), b)) in layers.iter().zip(&scores).zip(&baseline).enumerate() {
        // On a bank layer only the features of experts that ran count (all of them in
        // EMBEDDING mode), for the scales and for the hits.
        let ran_here = ran.as_ref().map(|r| &r[i]);
        let counts = |f: usize| ran_here.is_none_or(|r| r[f]);
        let contrast: Vec<f32> = s.iter().zip(b).map(|(x, y)| x - y).collect();
        let rms_of = |v: &[f32]| {
            let (sum, n) = v
                .iter()
                .enumerate()
                .filter(|&(f, _)| counts(f))
                .fold((0.0f64, 0usize), |(a, n), (_, &c)| {
                    (a + (c as f64) * (c as f64), n + 1)
                });
            (sum / n.max(1) as f64).sqrt() as f32
        };
        let rms = rms_of(&contrast);
        let rms_gate = rms_of(s);
        let mut order: Vec<usize> = (0..s.len())
            .filter(|&f| {
                counts(f)
                    && s[f] >= DESCRIBE_Z * rms_gate
                    && s[f] > 0.0
                    && contrast[f] >= DESCRIBE_Z * rms
            })
            .collect();
        order.sort_by(|&a, &b| contrast[b].total_cmp(&contrast[a]).then(a.cmp(&b)));
        order.truncate(DESCRIBE_TOP);
        kept.extend(order.into_iter().map(|f| (layer, f, s[f])));
    }
    let keys: Vec<(usize, usize)> = kept.iter().map(|&(l, f, _)| (l, f)).collect();
    let labels = cache.labels(src, &keys)?;
    let bands = default_bands(n_layers);
    let band_of = |layer: usize| {
        bands
            .iter()
            .find(|b| (b.first..=b.last).contains(&layer))
            .map_or_else(|| "?".to_string(), |b| b.name.clone())
    };
    let norm = |s: &str| s.trim().to_lowercase();
    let entity_key = norm(entity);
    let text = |id: u32| vocab.text(id).unwrap_or_else(|| format!("<{id}>"));

    let mut edges: Vec<DescribeEdge> = Vec::new();
    if opts.detail == Detail::Raw {
        for (&(layer, feature, gate), label) in kept.iter().zip(&labels) {
            let Some(top) = label.top_token_id() else {
                continue;
            };
            edges.push(DescribeEdge {
                band: band_of(layer),
                target: text(top),
                target_id: top,
                gate,
                layer,
                feature,
                expert: None,
                layers: vec![layer],
                count: 1,
                also: label.top[1..]
                    .iter()
                    .filter(|t| t.1 > 0.0)
                    .take(3)
                    .map(|t| text(t.0))
                    .collect(),
            });
        }
    } else {
        let mut index: HashMap<String, usize> = HashMap::new();
        for (&(layer, feature, gate), label) in kept.iter().zip(&labels) {
            let Some(top) = label.top_token_id() else {
                continue;
            };
            let target = text(top);
            let key = norm(&target);
            if vocab.is_special(top) || !is_content(&target) || key == entity_key {
                continue;
            }
            let also = || {
                let mut seen = vec![key.clone(), entity_key.clone()];
                let mut out = Vec::new();
                for &(id, logit) in &label.top[1..] {
                    let t = text(id);
                    let k = norm(&t);
                    if logit > 0.0 && is_content(&t) && !vocab.is_special(id) && !seen.contains(&k)
                    {
                        seen.push(k);
                        out.push(t);
                        if out.len() == 3 {
                            break;
                        }
                    }
                }
                out
            };
            match index.get(&key) {
                Some(&i) => {
                    let e = &mut edges[i];
                    e.count += 1;
                    if !e.layers.contains(&layer) {
                        e.layers.push(layer);
                        e.layers.sort_unstable();
                    }
                    if gate > e.gate {
                        e.gate = gate;
                        e.layer = layer;
                        e.feature = feature;
                        e.target = target;
                        e.target_id = top;
                        e.band = band_of(layer);
                        e.also = also();
                    }
                }
                None => {
                    index.insert(key.clone(), edges.len());
                    edges.push(DescribeEdge {
                        band: band_of(layer),
                        target: target.clone(),
                        target_id: top,
                        gate,
                        layer,
                        feature,
                        expert: None,
                        layers: vec![layer],
                        count: 1,
                        also: also(),
                    });
                }
            }
        }
    }
    let band_rank = |name: &str| {
        bands
            .iter()
            .position(|b| b.name == name)
            .unwrap_or(usize::MAX)
    };
    edges.sort_by(|a, b| {
        band_rank(&a.band)
            .cmp(&band_rank(&b.band))
            .then(b.gate.total_cmp(&a.gate))
            .then(a.layer.cmp(&b.layer))
            .then(a.feature.cmp(&b.feature))
    });
    let cap = opts.detail.cap();
    let mut per_band: HashMap<String, usize> = HashMap::new();
    edges.retain(|e| {
        let n = per_band.entry(e.band.clone()).or_default();
        *n += 1;
        *n <= cap
    });
    if let Some(b) = &bank {
        // The expert of each flat (v1-flattened, §15.2) feature number; the number stays.
        for e in &mut edges {
            if let Some((x, _)) = b.split(e.feature) {
                e.expert = Some(x);
            }
        }
    }
    Ok(DescribeResult {
        mode,
        mode_defaulted,
        note,
        bands,
        edges,
        kept_hits: kept.len(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thirds() {
        let b = default_bands(30);
        assert_eq!(
            b.iter().map(|b| (b.first, b.last)).collect::<Vec<_>>(),
            vec![(0, 9), (10, 19), (20, 29)]
        );
        assert_eq!(default_bands(1).len(), 1);
        assert_eq!(default_bands(2).len(), 2);
    }
}
