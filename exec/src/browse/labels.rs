//! Feature labels ("down tokens"): the tokens a feature writes toward.
//!
//! A feature's output direction is column `f` of its layer's `ffn_down` (ggml shape
//! `[ffn, hidden]`: `hidden` rows of `ffn` elements, so the column is element `f` of every
//! row). Its label is the top tokens of `unembedding · column` (seed 002 §15.3, LARQL's
//! `down_meta`): the output head, or the token embedding rows when the head is tied. `c_score`
//! is the top token's logit.
//!
//! Cost, and why labels are lazy. Gathering columns is cheap: one block per down row per
//! distinct block of requested features (a block-quantised block holds 32 or 256 adjacent
//! features, so a batch from one block costs one decode per row). The unembedding product
//! is not: `vocab × hidden` multiply-adds per feature (28 M for SmolLM2). It runs as a
//! blocked product — vocabulary rows decoded a chunk at a time into a small buffer, times
//! the batch of columns (faer GEMM), a running top-k per column — so a batch costs one pass
//! over the unembedding whatever its size. Labels for a WALK (≤ 10 × layers features) take
//! tens of milliseconds; all 46 080 features of SmolLM2 ([`compute_all`], passes of
//! [`PASS_FEATURES`] columns) are 1.3 × 10¹² multiply-adds, tens of seconds of CPU. So labels
//! are computed on demand, for the features a statement shows, and cached per binding in a
//! [`LabelCache`]; a container may carry them stored (`EXTRACT … WITH LABELS`, `REPRESENT
//! LABELS`: derived metadata, `lql_storage::format::vindex3::labels`), in which case the
//! engine seeds the cache from the segment ([`LabelCache::seed_stored`]).

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use faer::linalg::matmul::matmul;
use faer::{Accum, MatMut, MatRef, Par};
use lql_storage::codec;
use lql_storage::model::{OperandKey, OperandSource, Role, TensorView};
use rayon::prelude::*;

use super::gate_scan::check_matrix;
use super::topk::TopValues;
use crate::error::{ExecError, Result};

/// Tokens kept per feature label.
pub const LABEL_TOP_K: usize = 10;

/// Vocabulary rows decoded per block of the unembedding product.
const VOCAB_CHUNK: usize = 256;

/// Where labels are read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnembedKind {
    /// Tied head: the token embedding rows.
    TiedEmbedding,
    /// A separate output head.
    OutputHead,
}

/// The unembedding matrix labels are computed with.
#[derive(Debug, Clone, Copy)]
pub struct LabelSource<'a> {
    pub kind: UnembedKind,
    pub view: TensorView<'a>,
}

impl<'a> LabelSource<'a> {
    /// The output head, or the token embedding when the head is tied (or absent).
    pub fn open(src: &'a dyn OperandSource) -> Result<LabelSource<'a>> {
        let s = src.surface();
        let head = (!s.tied_head)
            .then(|| src.view(OperandKey::global(Role::Output)))
            .flatten();
        let (kind, view, name) = match head {
            Some(v) => (UnembedKind::OutputHead, v, "output"),
            None => (
                UnembedKind::TiedEmbedding,
                src.view(OperandKey::global(Role::TokenEmbedding)).ok_or(
                    ExecError::MissingOperand {
                        operand: "token_embedding",
                        layer: None,
                    },
                )?,
                "token_embedding",
            ),
        };
        check_matrix(&view, name, None, s.hidden, None)?;
        Ok(LabelSource { kind, view })
    }

    /// "token_embedding (tied head) Q8_0 [576×49152]" — for EXPLAIN.
    pub fn describe(&self) -> String {
        let name = match self.kind {
            UnembedKind::TiedEmbedding => "token_embedding (tied head)",
            UnembedKind::OutputHead => "output head",
        };
        format!(
            "{name} {} [{}×{}]",
            self.view.dtype,
            self.view.row_len(),
            self.view.rows()
        )
    }
}

/// The label of one feature: its top tokens by logit, best first.
#[derive(Debug, Clone, PartialEq)]
pub struct FeatureLabel {
    pub top: Vec<(u32, f32)>,
}

impl FeatureLabel {
    pub fn top_token_id(&self) -> Option<u32> {
        self.top.first().map(|t| t.0)
    }
    /// The top token's logit (LARQL's `c_score`).
    pub fn c_score(&self) -> Option<f32> {
        self.top.first().map(|t| t.1)
    }
}

/// Gathers down columns `features` of `layer`: the result is `hidden × n`, row-major (row
/// `r` holds element `r` of every requested column). Features past the layer's base width
/// are the ones edits added (`ffn + i`): their down vectors come from the layer's overlay.
/// On a bank layer `features` are flat numbers ([`super::experts::BankLayout`]) and each
/// column comes from its expert's down rows, read in place.
pub fn down_columns(src: &dyn OperandSource, layer: usize, features: &[usize]) -> Result<Vec<f32>> {
    if let Some(layout) = super::experts::BankLayout::of(src) {
        return expert_down_columns(src, &layout, layer, features);
    }
    let s = src.surface();
    let view =
        src.view(OperandKey::layer(layer, Role::FfnDown))
            .ok_or(ExecError::MissingOperand {
                operand: "ffn_down",
                layer: Some(layer),
            })?;
    let ffn = view.row_len();
    check_matrix(&view, "ffn_down", Some(layer), ffn, Some(s.hidden))?;
    let overlay = src.ffn_overlay(layer).filter(|o| o.hidden == s.hidden);
    let width = ffn + overlay.map_or(0, |o| o.added());
    if let Some(&f) = features.iter().find(|&&f| f >= width) {
        return Err(ExecError::Internal(format!(
            "feature {layer}:{f} is out of range: layer {layer} has {width} features"
        )));
    }
    if features.iter().any(|&f| f >= ffn) {
        let base: Vec<usize> = features.iter().map(|&f| f.min(ffn - 1)).collect();
        let mut out = down_columns(src, layer, &base)?;
        let n = features.len();
        if let Some(o) = overlay {
            for (j, &f) in features.iter().enumerate().filter(|(_, &f)| f >= ffn) {
                let d = &o.down[(f - ffn) * s.hidden..(f - ffn + 1) * s.hidden];
                for (r, v) in d.iter().enumerate() {
                    out[r * n + j] = *v;
                }
            }
        }
        return Ok(out);
    }
    gather_columns(view.dtype, &|r| view.row(r), s.hidden, features)
}

/// [`down_columns`] of a bank layer: flat feature numbers grouped by expert, each group
/// gathered from that expert's down matrix and scattered back into request order.
fn expert_down_columns(
    src: &dyn OperandSource,
    layout: &super::experts::BankLayout,
    layer: usize,
    features: &[usize],
) -> Result<Vec<f32>> {
    use super::experts::{matrix, ExpertRole};
    let hidden = src.surface().hidden;
    let n = features.len();
    let mut groups: std::collections::BTreeMap<_, Vec<(usize, usize)>> = Default::default();
    for (j, &flat) in features.iter().enumerate() {
        let (e, f) = layout.split(flat).ok_or_else(|| {
            ExecError::Internal(format!(
                "feature {layer}:{flat} is out of range: layer {layer} has {} features",
                layout.features()
            ))
        })?;
        groups.entry(e).or_default().push((j, f));
    }
    let mut out = vec![0.0f32; hidden * n];
    for (e, slots) in groups {
        let m = matrix(src, layout, layer, e, ExpertRole::Down)?;
        let feats: Vec<usize> = slots.iter().map(|&(_, f)| f).collect();
        let part = gather_columns(m.dtype, &|r| m.row(r), hidden, &feats)?;
        let k = feats.len();
        for r in 0..hidden {
            for (i, &(j, _)) in slots.iter().enumerate() {
                out[r * n + j] = part[r * k + i];
            }
        }
    }
    Ok(out)
}

/// Element `f` of each of `hidden` encoded rows (`row(r)`), for every `f` of `features`:
/// `hidden × n` row-major. Each distinct block holding a requested element is decoded once
/// per row.
fn gather_columns<'r>(
    dtype: lql_storage::DType,
    row: &(dyn Fn(usize) -> &'r [u8] + Sync),
    hidden: usize,
    features: &[usize],
) -> Result<Vec<f32>> {
    let (be, bb) = (dtype.block_elems(), dtype.block_bytes());
    // Distinct blocks, each with the output slots it feeds.
    let mut blocks: Vec<(usize, Vec<(usize, usize)>)> = Vec::new();
    let mut order: Vec<usize> = (0..features.len()).collect();
    order.sort_by_key(|&j| features[j]);
    for j in order {
        let f = features[j];
        let b = f / be;
        match blocks.last_mut() {
            Some((lb, slots)) if *lb == b => slots.push((j, f % be)),
            _ => blocks.push((b, vec![(j, f % be)])),
        }
    }
    let n = features.len();
    let mut out = vec![0.0f32; hidden * n];
    if n == 0 {
        return Ok(out);
    }
    out.par_chunks_mut(n).enumerate().try_for_each(|(r, o)| {
        let row = row(r);
        let mut buf = vec![0.0f32; be];
        for (b, slots) in &blocks {
            codec::decode_row(dtype, &row[b * bb..(b + 1) * bb], &mut buf)?;
            for &(j, i) in slots {
                o[j] = buf[i];
            }
        }
        Ok::<(), ExecError>(())
    })?;
    Ok(out)
}

/// Top `k` tokens of `unembedding · column` for each of the `n` columns of `cols`
/// (`hidden × n` row-major, as [`down_columns`] returns).
pub fn unembed_top(
    source: &LabelSource<'_>,
    cols: &[f32],
    n: usize,
    k: usize,
) -> Result<Vec<Vec<(u32, f32)>>> {
    let view = source.view;
    let hidden = view.row_len();
    let vocab = view.rows();
    if cols.len() != hidden * n {
        return Err(ExecError::Internal(format!(
            "unembed_top: {} column values for {n} columns of {hidden}",
            cols.len()
        )));
    }
    if n == 0 {
        return Ok(Vec::new());
    }
    let rhs = MatRef::from_row_major_slice(cols, hidden, n);
    let rb = view.row_bytes();
    let n_chunks = vocab.div_ceil(VOCAB_CHUNK);
    let empty = || (0..n).map(|_| TopValues::new(k)).collect::<Vec<_>>();
    let merged = (0..n_chunks)
        .into_par_iter()
        .try_fold(empty, |mut acc, c| {
            let start = c * VOCAB_CHUNK;
            let rows = VOCAB_CHUNK.min(vocab - start);
            let mut buf = vec![0.0f32; rows * hidden];
            codec::decode_rows(
                view.dtype,
                &view.bytes[start * rb..(start + rows) * rb],
                hidden,
                &mut buf,
            )?;
            let lhs = MatRef::from_row_major_slice(&buf, rows, hidden);
            let mut logits = vec![0.0f32; rows * n];
            let dst = MatMut::from_column_major_slice_mut(&mut logits, rows, n);
            matmul(dst, Accum::Replace, lhs, rhs, 1.0f32, Par::Seq);
            for (j, t) in acc.iter_mut().enumerate() {
                let col = &logits[j * rows..(j + 1) * rows];
                let mut th = t.threshold();
                for (i, &v) in col.iter().enumerate() {
                    if v >= th {
                        t.push((start + i) as u32, v);
                        th = t.threshold();
                    }
                }
            }
            Ok::<_, ExecError>(acc)
        })
        .try_reduce(empty, |mut a, b| {
            for (x, y) in a.iter_mut().zip(b) {
                x.merge(y);
            }
            Ok(a)
        })?;
    Ok(merged.into_iter().map(TopValues::into_sorted).collect())
}

/// The tokens a feature reads: the top `k` tokens of `unembedding · row` for the gate
/// (`Role::FfnGate`) or up (`Role::FfnUp`) row of each of `features` of a dense `layer`
/// (the input directions, read through the same unembedding as the labels; on a model with
/// tied embeddings that is the token embedding). Features past the base width come from
/// the layer's overlay (edits).
pub fn read_labels(
    src: &dyn OperandSource,
    layer: usize,
    features: &[usize],
    role: Role,
    k: usize,
) -> Result<Vec<Vec<(u32, f32)>>> {
    let name = match role {
        Role::FfnGate => "ffn_gate",
        Role::FfnUp => "ffn_up",
        _ => return Err(ExecError::Internal(format!("read_labels of {role:?}"))),
    };
    if super::experts::BankLayout::of(src).is_some() {
        return Err(ExecError::Unsupported(format!(
            "the {name} tokens of expert features"
        )));
    }
    let s = src.surface();
    let view = src
        .view(OperandKey::layer(layer, role))
        .ok_or(ExecError::MissingOperand {
            operand: name,
            layer: Some(layer),
        })?;
    check_matrix(&view, name, Some(layer), s.hidden, None)?;
    let ffn = view.rows();
    let overlay = src.ffn_overlay(layer).filter(|o| o.hidden == s.hidden);
    let n = features.len();
    let mut cols = vec![0.0f32; s.hidden * n];
    let mut row = vec![0.0f32; s.hidden];
    for (j, &f) in features.iter().enumerate() {
        if f < ffn {
            codec::decode_row(view.dtype, view.row(f), &mut row)?;
        } else {
            let added = overlay.map(|o| {
                if role == Role::FfnGate {
                    &o.gate
                } else {
                    &o.up
                }
            });
            let at = (f - ffn) * s.hidden;
            match added.and_then(|m| m.get(at..at + s.hidden)) {
                Some(r) => row.copy_from_slice(r),
                None => {
                    return Err(ExecError::Internal(format!(
                        "feature {layer}:{f} is out of range: layer {layer} has {ffn} features"
                    )))
                }
            }
        }
        for (r, v) in row.iter().enumerate() {
            cols[r * n + j] = *v;
        }
    }
    unembed_top(&LabelSource::open(src)?, &cols, n, k)
}

/// Computes the labels of `features` of one layer, uncached.
pub fn compute_labels(
    src: &dyn OperandSource,
    layer: usize,
    features: &[usize],
) -> Result<Vec<FeatureLabel>> {
    compute_many(
        src,
        &features.iter().map(|&f| (layer, f)).collect::<Vec<_>>(),
    )
}

/// Features labelled per unembedding pass: large enough that decoding a vocabulary chunk is
/// noise beside its product, small enough that the column batch (`hidden × n` f32) and each
/// thread's logits block (`256 × n` f32, 4 MiB) stay small.
pub const PASS_FEATURES: usize = 4096;

/// Computes labels for `(layer, feature)` pairs from any layers, [`PASS_FEATURES`] per
/// unembedding pass.
pub fn compute_many(
    src: &dyn OperandSource,
    wanted: &[(usize, usize)],
) -> Result<Vec<FeatureLabel>> {
    let mut out = Vec::with_capacity(wanted.len());
    for chunk in wanted.chunks(PASS_FEATURES) {
        out.extend(compute_pass(src, chunk)?);
    }
    Ok(out)
}

/// Every feature of every layer, layer-major, in passes of [`PASS_FEATURES`] (the whole
/// model as a sequence of blocked matrix products); `cancelled` is polled between passes.
/// Returns the features per layer and the labels.
pub fn compute_all(
    src: &dyn OperandSource,
    cancelled: &dyn Fn() -> bool,
) -> Result<(usize, Vec<FeatureLabel>)> {
    let s = src.surface();
    if s.moe.is_some() {
        // Labels of expert features are computed on demand (keyed by flat numbers); the
        // stored table has one width per layer and no expert axis.
        return Err(ExecError::Unsupported(
            "stored labels of a mixture-of-experts model (its expert features are labelled on demand)".into(),
        ));
    }
    let mut ffn = None;
    for l in 0..s.n_layers {
        let v = src
            .view(OperandKey::layer(l, Role::FfnDown))
            .ok_or(ExecError::MissingOperand {
                operand: "ffn_down",
                layer: Some(l),
            })?;
        match ffn {
            None => ffn = Some(v.row_len()),
            Some(f) if f != v.row_len() => {
                return Err(ExecError::Internal(format!(
                    "layer {l} has {} features and layer 0 has {f}: stored labels need one width",
                    v.row_len()
                )))
            }
            _ => {}
        }
    }
    let ffn = ffn.unwrap_or(0);
    let wanted: Vec<(usize, usize)> = (0..s.n_layers)
        .flat_map(|l| (0..ffn).map(move |f| (l, f)))
        .collect();
    let mut out = Vec::with_capacity(wanted.len());
    for chunk in wanted.chunks(PASS_FEATURES) {
        if cancelled() {
            return Err(ExecError::Cancelled);
        }
        out.extend(compute_pass(src, chunk)?);
    }
    Ok((ffn, out))
}

/// One unembedding pass over the columns of `wanted`.
fn compute_pass(src: &dyn OperandSource, wanted: &[(usize, usize)]) -> Result<Vec<FeatureLabel>> {
    let s = src.surface();
    let source = LabelSource::open(src)?;
    let n = wanted.len();
    let mut cols = vec![0.0f32; s.hidden * n];
    // Group by layer, gather each layer's columns, scatter into the batch.
    let mut by_layer: HashMap<usize, Vec<usize>> = HashMap::new();
    for (j, &(l, _)) in wanted.iter().enumerate() {
        by_layer.entry(l).or_default().push(j);
    }
    for (layer, js) in by_layer {
        if layer >= s.n_layers {
            return Err(ExecError::LayerOutOfRange {
                layer,
                n_layers: s.n_layers,
            });
        }
        let feats: Vec<usize> = js.iter().map(|&j| wanted[j].1).collect();
        let part = down_columns(src, layer, &feats)?;
        let m = feats.len();
        for r in 0..s.hidden {
            for (i, &j) in js.iter().enumerate() {
                cols[r * n + j] = part[r * m + i];
            }
        }
    }
    Ok(unembed_top(&source, &cols, n, LABEL_TOP_K)?
        .into_iter()
        .map(|top| FeatureLabel { top })
        .collect())
}

/// Labels computed so far for one binding, keyed by `(layer, feature)`.
///
/// The engine keeps one per bound model and drops it when the effective weights change
/// (rebinding, patches).
#[derive(Debug, Default)]
pub struct LabelCache {
    map: Mutex<HashMap<(usize, usize), Arc<FeatureLabel>>>,
    /// Where seeded labels came from (a stored labels segment), for EXPLAIN.
    stored: Mutex<Option<String>>,
    computed: AtomicUsize,
    served: AtomicUsize,
}

/// Counters of a [`LabelCache`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LabelStats {
    /// Labels held.
    pub cached: usize,
    /// Labels computed since creation.
    pub computed: usize,
    /// Labels served from the cache.
    pub served: usize,
}

impl LabelCache {
    pub fn new() -> Self {
        LabelCache::default()
    }

    pub fn get(&self, layer: usize, feature: usize) -> Option<Arc<FeatureLabel>> {
        self.lock().get(&(layer, feature)).cloned()
    }

    /// Seeds a label (from precomputed metadata).
    pub fn insert(&self, layer: usize, feature: usize, label: FeatureLabel) {
        self.lock().insert((layer, feature), Arc::new(label));
    }

    /// Seeds every label of a stored table (`top[(layer × features + feature) × k ..]`)
    /// and remembers `origin` (the segment) for EXPLAIN.
    pub fn seed_stored(&self, origin: String, features: usize, top_k: usize, top: &[(u32, f32)]) {
        if features == 0 || top_k == 0 {
            return;
        }
        let mut map = self.lock();
        for (i, t) in top.chunks_exact(top_k).enumerate() {
            map.insert(
                (i / features, i % features),
                Arc::new(FeatureLabel { top: t.to_vec() }),
            );
        }
        drop(map);
        *self.stored.lock().unwrap_or_else(|e| e.into_inner()) = Some(origin);
    }

    /// The stored labels segment this cache was seeded from, if any.
    pub fn stored_origin(&self) -> Option<String> {
        self.stored
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Labels of `wanted`, computing the missing ones in one batch.
    ///
    /// Features past the base width (`ffn + i`: added by edits, which differ between
    /// connections and states) are computed from `src` on every call and never cached, so
    /// no state is ever served another's label; base features' labels do not depend on
    /// edits (scales do not change a down column's direction).
    pub fn labels(
        &self,
        src: &dyn OperandSource,
        wanted: &[(usize, usize)],
    ) -> Result<Vec<Arc<FeatureLabel>>> {
        let ffn = src.surface().ffn;
        let added = |k: &(usize, usize)| k.1 >= ffn;
        let missing: Vec<(usize, usize)> = {
            let map = self.lock();
            let mut seen = std::collections::HashSet::new();
            wanted
                .iter()
                .copied()
                .filter(|k| (added(k) || !map.contains_key(k)) && seen.insert(*k))
                .collect()
        };
        let mut fresh_added: HashMap<(usize, usize), Arc<FeatureLabel>> = HashMap::new();
        if !missing.is_empty() {
            let fresh = compute_many(src, &missing)?;
            self.computed.fetch_add(missing.len(), Ordering::Relaxed);
            let mut map = self.lock();
            for (k, v) in missing.iter().zip(fresh) {
                if added(k) {
                    fresh_added.insert(*k, Arc::new(v));
                } else {
                    map.insert(*k, Arc::new(v));
                }
            }
        }
        self.served
            .fetch_add(wanted.len() - missing.len(), Ordering::Relaxed);
        let map = self.lock();
        wanted
            .iter()
            .map(|k| {
                map.get(k)
                    .or_else(|| fresh_added.get(k))
                    .cloned()
                    .ok_or_else(|| ExecError::Internal(format!("label {}:{} not cached", k.0, k.1)))
            })
            .collect()
    }

    /// How many of `wanted` are not cached yet.
    pub fn missing(&self, wanted: &[(usize, usize)]) -> usize {
        let map = self.lock();
        wanted.iter().filter(|k| !map.contains_key(k)).count()
    }

    pub fn stats(&self) -> LabelStats {
        LabelStats {
            cached: self.lock().len(),
            computed: self.computed.load(Ordering::Relaxed),
            served: self.served.load(Ordering::Relaxed),
        }
    }

    /// Drops every label (the weights changed).
    pub fn clear(&self) {
        self.lock().clear();
        *self.stored.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(usize, usize), Arc<FeatureLabel>>> {
        // A poisoned cache only means a panic elsewhere; its entries are still whole.
        self.map.lock().unwrap_or_else(|e| e.into_inner())
    }
}
