//! WALK: the top-k features of each requested layer for a prompt's last token.
//!
//! EMBEDDING mode dots the last token's scaled embedding row with every layer's gate rows
//! (LARQL's browse: no layer runs, deep layers see a vector from the wrong basis). RESIDUAL
//! mode runs the model and, at each layer, dots the normed FFN input of the last position
//! with the gate rows — the gate pre-activation — and reports the activation
//! `act(gate) · up` beside it. RESIDUAL is the default when the binding can run the model.

use std::time::Instant;

use lql_storage::model::{missing_for_execution, OperandSource};
use lql_storage::DType;
use rayon::prelude::*;

use super::experts::{self, BankLayout, ExpertId};
use super::gate_scan::scan_layers;
use super::query::embedding_row;
use super::residual::capture;
use crate::error::{ExecError, Result};
use crate::session::Executor;

/// How a walk builds its query vector.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WalkMode {
    Embedding,
    Residual,
}

impl WalkMode {
    pub fn name(self) -> &'static str {
        match self {
            WalkMode::Embedding => "EMBEDDING",
            WalkMode::Residual => "RESIDUAL",
        }
    }
}

/// The clauses of a WALK.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WalkOptions {
    /// Features kept per layer (`TOP k`).
    pub top: usize,
    /// Inclusive layer range (`LAYERS a-b`); all layers when `None`.
    pub layers: Option<(usize, usize)>,
    /// `MODE …`; `None` picks RESIDUAL when the binding can run, else EMBEDDING.
    pub mode: Option<WalkMode>,
}

impl Default for WalkOptions {
    fn default() -> Self {
        WalkOptions {
            top: 10,
            layers: None,
            mode: None,
        }
    }
}

/// One feature found by a walk.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WalkHit {
    pub layer: usize,
    pub feature: usize,
    /// Gate row · query (in RESIDUAL mode: the gate pre-activation).
    pub gate: f32,
    /// `act(gate) · up` (RESIDUAL mode only).
    pub activation: Option<f32>,
    /// The expert the feature belongs to on a bank layer (`None` on a dense FFN); `feature`
    /// is then its v1-flattened number in the layer (seed 002 §15.2: routed expert `e`'s row
    /// `r` is `e × expert_ffn + r`, the shared expert's rows follow).
    pub expert: Option<ExpertId>,
}

/// One layer of a walk, with what its scan read.
#[derive(Debug, Clone, PartialEq)]
pub struct WalkLayer {
    pub layer: usize,
    pub encoding: DType,
    pub features: usize,
    /// Gate bytes the scan read.
    pub bytes_read: usize,
    pub hits: Vec<WalkHit>,
    /// Root-mean-square of all this layer's scores (DESCRIBE's threshold scale).
    pub score_rms: f32,
    /// The experts whose gate rows were scanned, on a bank layer (empty when dense).
    pub experts: Vec<ExpertId>,
}

/// The result of a walk.
#[derive(Debug, Clone, PartialEq)]
pub struct WalkResult {
    pub mode: WalkMode,
    /// True when the mode was chosen by default rather than written.
    pub mode_defaulted: bool,
    /// Why the default was EMBEDDING, when it was.
    pub note: Option<String>,
    /// The tokens the query came from (the last one for WALK; all for DESCRIBE's mean).
    pub tokens: Vec<u32>,
    pub layers: Vec<WalkLayer>,
    /// Positions run through the model (RESIDUAL), else 0.
    pub positions_run: usize,
    pub forward_ms: f64,
    pub scan_ms: f64,
}

impl WalkResult {
    pub fn hits(&self) -> impl Iterator<Item = &WalkHit> {
        self.layers.iter().flat_map(|l| l.hits.iter())
    }
}

/// The layers of an inclusive range, checked against the model.
pub fn layer_range(n_layers: usize, range: Option<(usize, usize)>) -> Result<Vec<usize>> {
    match range {
        None => Ok((0..n_layers).collect()),
        Some((a, b)) => {
            if a > b {
                return Err(ExecError::EmptyLayerRange { start: a, end: b });
            }
            if b >= n_layers {
                return Err(ExecError::LayerOutOfRange { layer: b, n_layers });
            }
            Ok((a..=b).collect())
        }
    }
}

/// Resolves the mode: explicit RESIDUAL without an executor refuses naming what is missing.
pub fn resolve_mode(
    src: &dyn OperandSource,
    exec: Option<&Executor>,
    mode: Option<WalkMode>,
) -> Result<(WalkMode, bool, Option<String>)> {
    match (mode, exec) {
        (Some(WalkMode::Residual), None) => {
            let missing = missing_for_execution(src);
            Err(ExecError::NotExecutable {
                missing: if missing.is_empty() {
                    vec!["an executor (the binding was opened for browsing only)".into()]
                } else {
                    missing
                },
            })
        }
        (Some(m), _) => Ok((m, false, None)),
        (None, Some(_)) => Ok((WalkMode::Residual, true, None)),
        (None, None) => {
            let missing = missing_for_execution(src);
            let why = if missing.is_empty() {
                "the binding is browse-only".to_string()
            } else {
                format!(
                    "the binding is browse-only (missing {})",
                    missing.join(", ")
                )
            };
            Ok((
                WalkMode::Embedding,
                true,
                Some(format!("MODE EMBEDDING by default: {why}")),
            ))
        }
    }
}

/// Walks the last token of `tokens` (EMBEDDING) or the whole prompt (RESIDUAL).
pub fn walk(
    src: &dyn OperandSource,
    exec: Option<&Executor>,
    tokens: &[u32],
    opts: &WalkOptions,
) -> Result<WalkResult> {
    let last = *tokens
        .last()
        .ok_or_else(|| ExecError::EmptyInput("the prompt".into()))?;
    let (mode, mode_defaulted, note) = resolve_mode(src, exec, opts.mode)?;
    let layers = layer_range(src.surface().n_layers, opts.layers)?;
    match mode {
        WalkMode::Embedding => {
            let q = embedding_row(src, last)?;
            let mut r = match BankLayout::of(src) {
                Some(b) => scan_bank(src, &b, &layers, opts.top, |_| (&q, None))?,
                None => scan_with(src, &layers, opts.top, |_| &q, None)?,
            };
            r.mode = mode;
            r.mode_defaulted = mode_defaulted;
            r.note = note;
            r.tokens = vec![last];
            Ok(r)
        }
        WalkMode::Residual => {
            let exec =
                exec.ok_or_else(|| ExecError::Internal("RESIDUAL without executor".into()))?;
            let t0 = Instant::now();
            let caps = capture(exec, tokens, &layers)?;
            let forward_ms = t0.elapsed().as_secs_f64() * 1e3;
            let at = |l: usize| layers.iter().position(|&x| x == l).unwrap_or(0);
            let mut r = if let Some(b) = BankLayout::of(src) {
                scan_bank(src, &b, &layers, opts.top, |l| {
                    let c = &caps[at(l)];
                    (&c.ffn_input, Some(&c.routes[..]))
                })?
            } else {
                scan_with(
                    src,
                    &layers,
                    opts.top,
                    |l| &caps[layers.iter().position(|&x| x == l).unwrap_or(0)].ffn_input,
                    Some(&|l: usize, f: usize| {
                        let i = layers.iter().position(|&x| x == l)?;
                        caps[i].activation.get(f).copied()
                    }),
                )?
            };
            r.mode = mode;
            r.mode_defaulted = mode_defaulted;
            r.note = note;
            r.tokens = tokens.to_vec();
            r.positions_run = tokens.len();
            r.forward_ms = forward_ms;
            Ok(r)
        }
    }
}

/// Walks with the query `query(layer)` on each layer of `layers`; `activation(layer,
/// feature)` fills the activation column when given.
pub fn scan_with<'q>(
    src: &dyn OperandSource,
    layers: &[usize],
    top: usize,
    query: impl Fn(usize) -> &'q [f32] + Sync,
    activation: Option<&dyn Fn(usize, usize) -> Option<f32>>,
) -> Result<WalkResult> {
    let t0 = Instant::now();
    // The top-k and the score RMS both come from one scan per layer.
    let scans = scan_layers(src, layers, top, &query)?;
    let scan_ms = t0.elapsed().as_secs_f64() * 1e3;
    let layers = scans
        .into_iter()
        .map(|s| WalkLayer {
            layer: s.layer,
            encoding: s.encoding,
            features: s.features,
            bytes_read: s.bytes_read,
            score_rms: s.score_rms,
            experts: Vec::new(),
            hits: s
                .hits
                .iter()
                .map(|h| WalkHit {
                    layer: s.layer,
                    feature: h.feature,
                    gate: h.score,
                    activation: activation.and_then(|a| a(s.layer, h.feature)),
                    expert: None,
                })
                .collect(),
        })
        .collect();
    Ok(WalkResult {
        mode: WalkMode::Embedding,
        mode_defaulted: false,
        note: None,
        tokens: Vec::new(),
        layers,
        positions_run: 0,
        forward_ms: 0.0,
        scan_ms,
    })
}

/// The walk of bank layers: at each layer `layer_input(layer)` gives the query and, in
/// RESIDUAL mode, the routed experts that ran at the scanned position. The scan covers
/// those experts (every routed expert when `None`: EMBEDDING) and the shared expert; with
/// routes, each hit's activation `act(gate) · up` is computed from the expert's own rows.
pub fn scan_bank<'q>(
    src: &dyn OperandSource,
    layout: &BankLayout,
    layers: &[usize],
    top: usize,
    layer_input: impl Fn(usize) -> (&'q [f32], Option<&'q [(usize, f32)]>) + Sync,
) -> Result<WalkResult> {
    let t0 = Instant::now();
    let act = src.surface().activation;
    let scans = layers
        .par_iter()
        .map(|&l| {
            let (q, routes) = layer_input(l);
            let chosen = scanned_experts(layout, routes);
            let scan = experts::scan_layer(src, layout, l, &chosen, q, top)?;
            let hits = scan
                .hits
                .iter()
                .map(|h| {
                    let activation = match routes {
                        Some(_) => Some(experts::activation(
                            src, layout, l, h.expert, h.feature, q, act,
                        )?),
                        None => None,
                    };
                    Ok(WalkHit {
                        layer: l,
                        // v1-flattened (§15.2): the expert's rows numbered within the layer.
                        feature: layout.flat(h.expert, h.feature).unwrap_or(h.feature),
                        gate: h.score,
                        activation,
                        expert: Some(h.expert),
                    })
                })
                .collect::<Result<Vec<_>>>()?;
            Ok(WalkLayer {
                layer: l,
                encoding: scan.encoding,
                features: scan.features,
                bytes_read: scan.bytes_read,
                hits,
                score_rms: scan.score_rms,
                experts: scan.experts,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(WalkResult {
        mode: WalkMode::Embedding,
        mode_defaulted: false,
        note: None,
        tokens: Vec::new(),
        layers: scans,
        positions_run: 0,
        forward_ms: 0.0,
        scan_ms: t0.elapsed().as_secs_f64() * 1e3,
    })
}

/// The experts a bank layer's scan covers: the routed ones the router chose (in ascending
/// order; every one when `routes` is `None`), then the shared expert.
pub fn scanned_experts(layout: &BankLayout, routes: Option<&[(usize, f32)]>) -> Vec<ExpertId> {
    let mut out: Vec<ExpertId> = match routes {
        None => (0..layout.n_experts).map(ExpertId::Routed).collect(),
        Some(r) => {
            let mut e: Vec<usize> = r.iter().map(|x| x.0).collect();
            e.sort_unstable();
            e.dedup();
            e.into_iter().map(ExpertId::Routed).collect()
        }
    };
    if layout.shared_ffn > 0 {
        out.push(ExpertId::Shared);
    }
    out
}
