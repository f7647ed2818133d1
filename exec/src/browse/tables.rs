//! The model-side scans behind SELECT's virtual tables `features` and `layers`.
//!
//! The engine's row executor filters, sorts and limits; these scans take what it could push
//! down — the layers, the feature numbers, whether label columns are needed at all and, when
//! nothing else constrains the order, a row limit — so that
//! `SELECT … FROM features WHERE layer = 5 LIMIT 10` reads one layer's shape and labels ten
//! features instead of 46 080. On a mixture-of-experts model a layer's rows are every
//! routed expert's gate rows, then the shared expert's (`expert` names which).

use std::sync::Arc;

use lql_storage::model::{OperandKey, OperandSource, Role};
use lql_storage::DType;

use super::experts::{matrix, BankLayout, ExpertId, ExpertRole};
use super::gate_scan::GateRegion;
use super::labels::{FeatureLabel, LabelCache};
use crate::error::{ExecError, Result};

/// Label batches are computed this many features at a time (one unembedding pass each).
pub const LABEL_BATCH: usize = super::labels::PASS_FEATURES;

/// One row of `features`.
#[derive(Debug, Clone, PartialEq)]
pub struct FeatureRow {
    pub layer: usize,
    /// On a bank layer, the row of `expert`'s gate matrix.
    pub feature: usize,
    /// The feature's expert on a bank layer; `None` on a dense FFN.
    pub expert: Option<ExpertId>,
    /// Present when labels were asked for.
    pub label: Option<Arc<FeatureLabel>>,
}

/// Which features of each layer a scan visits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FeatureSet {
    All,
    /// Exactly these feature numbers (ascending; out-of-range ones are skipped).
    Only(Vec<usize>),
    /// An inclusive range.
    Range(usize, usize),
}

impl FeatureSet {
    /// The selected feature numbers in `lo..hi`, ascending.
    fn features_in(&self, lo: usize, hi: usize) -> Vec<usize> {
        match self {
            FeatureSet::All => (lo..hi).collect(),
            FeatureSet::Only(v) => v.iter().copied().filter(|f| (lo..hi).contains(f)).collect(),
            FeatureSet::Range(a, b) => {
                let (a, b) = ((*a).max(lo), (*b).min(hi.saturating_sub(1)));
                if a > b || a >= hi {
                    Vec::new()
                } else {
                    (a..=b).collect()
                }
            }
        }
    }
}

/// Scans `features`: `layers` in order, the features of `set` in each, stopping after
/// `limit` rows; labels for every emitted row when `labels` is set, computed in batches
/// through `cache`. `cancelled` is polled between label batches (a full-table label scan
/// takes about a minute on SmolLM2).
pub fn scan_features(
    src: &dyn OperandSource,
    cache: &LabelCache,
    layers: &[usize],
    set: &FeatureSet,
    labels: bool,
    limit: Option<usize>,
    cancelled: &dyn Fn() -> bool,
) -> Result<Vec<FeatureRow>> {
    // Label keys: `(layer, feature)`.
    let mut keys: Vec<(usize, usize)> = Vec::new();
    let mut rows: Vec<FeatureRow> = Vec::new();
    let bank = BankLayout::of(src);
    'layers: for &l in layers {
        let units: Vec<(Option<ExpertId>, usize)> = match &bank {
            None => vec![(None, GateRegion::open(src, l)?.features())],
            Some(b) => b
                .experts()
                .into_iter()
                .map(|e| Ok((Some(e), matrix(src, b, l, e, ExpertRole::Gate)?.rows)))
                .collect::<Result<_>>()?,
        };
        for (expert, n) in units {
            // Bank features are numbered v1-flattened within the layer (seed 002 §15.2).
            let start = match (expert, &bank) {
                (Some(e), Some(b)) => b.flat(e, 0).unwrap_or(0),
                _ => 0,
            };
            for f in set.features_in(start, start + n) {
                if limit.is_some_and(|m| keys.len() >= m) {
                    break 'layers;
                }
                keys.push((l, f));
                rows.push(FeatureRow {
                    layer: l,
                    feature: f,
                    expert,
                    label: None,
                });
            }
        }
    }
    if labels {
        for (chunk, out) in keys.chunks(LABEL_BATCH).zip(rows.chunks_mut(LABEL_BATCH)) {
            if cancelled() {
                return Err(ExecError::Cancelled);
            }
            for (row, label) in out.iter_mut().zip(cache.labels(src, chunk)?) {
                row.label = Some(label);
            }
        }
    }
    Ok(rows)
}

/// One row of `layers`.
#[derive(Debug, Clone, PartialEq)]
pub struct LayerRow {
    pub layer: usize,
    /// Gate rows (walkable features).
    pub features: usize,
    pub gate_encoding: Option<DType>,
    /// Bytes of all the layer's operands.
    pub bytes: usize,
}

/// The `layers` table.
pub fn scan_layers_table(src: &dyn OperandSource, layers: &[usize]) -> Vec<LayerRow> {
    layers
        .iter()
        .map(|&l| {
            // A bank layer's features are its experts' gate rows (routed, then shared).
            let bank = BankLayout::of(src);
            let gate = match bank {
                None => src.view(OperandKey::layer(l, src.surface().feature_key_role())),
                Some(_) => src.view(OperandKey::layer(l, Role::FfnGateExps)),
            };
            let bytes = Role::ALL
                .iter()
                .filter_map(|&r| src.view(OperandKey::layer(l, r)))
                .map(|v| v.bytes.len())
                .sum();
            LayerRow {
                layer: l,
                features: match (bank, gate) {
                    (Some(b), Some(_)) => b.features(),
                    (_, g) => g.map_or(0, |g| g.rows()),
                },
                gate_encoding: gate.map(|g| g.dtype),
                bytes,
            }
        })
        .collect()
}
