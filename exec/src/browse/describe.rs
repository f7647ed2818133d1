//! DESCRIBE: what an entity activates, as edges `entity → target` grouped into layer bands.
//!
//! 1. Query: RESIDUAL runs the entity's tokens and walks the last position; EMBEDDING uses the
//!    mean of the tokens' scaled embedding rows.
//! 2. Walk the chosen layers, [`DESCRIBE_TOP`] features per layer.
//! 3. Drop weak hits: a hit is kept when its gate is positive and at least
//!    [`DESCRIBE_Z`] × the RMS of all that layer's gate scores (a per-layer z-score, so the
//!    threshold means the same on every model and in both modes; a fixed gate value like
//!    LARQL's 5.0 fits one model family).
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

use super::error::{BrowseError, Result};
use super::labels::LabelCache;
use super::query::mean_embedding;
use super::vocab::{is_content, Vocab};
use super::walk::{layer_range, resolve_mode, scan_with, walk, WalkMode, WalkOptions, WalkResult};
use crate::session::Executor;

/// Features walked per layer before filtering.
pub const DESCRIBE_TOP: usize = 20;
/// A hit is kept when `gate ≥ DESCRIBE_Z × rms(layer scores)` (and `gate > 0`).
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
    /// The strongest hit's layer and feature.
    pub layer: usize,
    pub feature: usize,
    /// Every layer a merged hit came from, ascending.
    pub layers: Vec<usize>,
    pub count: usize,
    pub also: Vec<String>,
}

/// The result of a DESCRIBE.
#[derive(Debug, Clone, PartialEq)]
pub struct DescribeResult {
    pub walk: WalkResult,
    pub bands: Vec<Band>,
    pub edges: Vec<DescribeEdge>,
    /// Hits above the threshold before merging.
    pub kept_hits: usize,
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
        return Err(BrowseError::EmptyInput(format!("{entity:?}")));
    }
    let n_layers = src.surface().n_layers;
    let layers = layer_range(n_layers, opts.layers)?;
    let (mode, _, _) = resolve_mode(src, exec, opts.mode)?;
    let w = match mode {
        WalkMode::Residual => walk(
            src,
            exec,
            ids,
            &WalkOptions {
                top: DESCRIBE_TOP,
                layers: opts.layers,
                mode: Some(mode),
            },
        )?,
        WalkMode::Embedding => {
            let q = mean_embedding(src, ids)?;
            let mut r = scan_with(src, &layers, DESCRIBE_TOP, |_| &q, None)?;
            r.tokens = ids.to_vec();
            r
        }
    };
    let (_, defaulted, note) = resolve_mode(src, exec, opts.mode)?;
    let mut w = w;
    w.mode = mode;
    w.mode_defaulted = defaulted;
    w.note = note;

    // Keep strong positive hits.
    let kept: Vec<(usize, usize, f32)> = w
        .layers
        .iter()
        .flat_map(|l| {
            let floor = DESCRIBE_Z * l.score_rms;
            l.hits
                .iter()
                .filter(move |h| h.gate > 0.0 && h.gate >= floor)
                .map(|h| (h.layer, h.feature, h.gate))
        })
        .collect();
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
    Ok(DescribeResult {
        walk: w,
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
