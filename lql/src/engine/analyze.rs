//! `ANALYZE FEATURES FROM "corpus.txt"` and the tables that read what it stores.
//!
//! The statement runs the model over a corpus (one document per line, each cut into
//! contexts of [`CONTEXT_TOKENS`] tokens) with an observer that keeps, for every feature of
//! the layers asked for, its top-activating contexts and a histogram of its activations
//! (`lql_exec::browse::corpus`). The statistics are stored once per model and corpus in
//! LQL's folder (`feature-stats/<model>/<corpus>.lqlstats`, the format in
//! `lql_storage::format::feature_stats`), with a copy of the documents; running the
//! statement again on an unchanged corpus reuses them.
//!
//! `SELECT … FROM contexts | histograms WHERE corpus = '…'` reads a stored file feature by
//! feature (the layers and features WHERE names are pushed into the scan), so a feature's
//! page opens in milliseconds. The tables read only LQL's own store, never the corpus file:
//! like SQLite's `ANALYZE` tables, they answer from the last analysis until it is run again.

use std::path::{Path, PathBuf};
use std::time::Instant;

use lql_exec::browse::corpus::{bin_range, FeatureStats, BINS};
use lql_grammar::Table;
use lql_planner::AnalyzePlan;
use lql_storage::format::feature_stats::{self, StatsFile, StatsHeader};
use lql_storage::format::package::integrity::sha256_hex;
use lql_storage::{OperandKey, Role};

use super::datum::Datum;
use super::{columns_of, table_schema, Cx};
use crate::error::{Error, Result};
use crate::progress::report_items;
use crate::value::Value;

/// Most document tokens one context runs (a longer document runs as several contexts).
pub const CONTEXT_TOKENS: usize = 128;
/// Largest corpus file read.
const MAX_CORPUS_BYTES: u64 = 256 << 20;
/// Tokens shown before and after a context's token.
const BEFORE: usize = 12;
const AFTER: usize = 6;

/// Where the statistics of `corpus` on the bound model are kept.
struct StatsLocation {
    /// The statistics file: the model's identity and the corpus's absolute path name it.
    path: PathBuf,
    /// The model's identity (hex sha256).
    identity: String,
    /// The corpus's absolute path.
    corpus: String,
}

fn stats_location(cx: &Cx<'_>, corpus: &str) -> Result<StatsLocation> {
    let identity = lql_storage::fsutil::hex(cx.bound()?.shared.identity());
    let absolute = std::path::absolute(corpus)
        .map_err(|e| Error::semantic(format!("corpus {corpus:?}: {e}")))?
        .to_string_lossy()
        .into_owned();
    let key = sha256_hex(absolute.as_bytes());
    let dir = lql_storage::catalogue::home_dir()?
        .join("feature-stats")
        .join(&identity[..16]);
    Ok(StatsLocation {
        path: dir.join(format!("{}.lqlstats", &key[..16])),
        identity,
        corpus: absolute,
    })
}

/// The ids a document runs as: its tokens without the tokenizer's additions.
fn document_tokens(tok: &lql_exec::tokenizer::Tokenizer, text: &str) -> Result<Vec<u32>> {
    Ok(tok.encode(text, false)?)
}

/// The tokens the tokenizer puts before a text (BOS), which every context starts with.
fn context_prefix(tok: &lql_exec::tokenizer::Tokenizer) -> Result<Vec<u32>> {
    let probe = "The";
    let with = tok.encode(probe, true)?;
    let without = tok.encode(probe, false)?;
    let at = (0..=with.len().saturating_sub(without.len()))
        .find(|&k| with[k..].starts_with(&without))
        .unwrap_or(0);
    Ok(with[..at].to_vec())
}

/// The width of every analysed layer's dense FFN, which must agree.
fn ffn_width(cx: &Cx<'_>, plan: &AnalyzePlan) -> Result<usize> {
    let model = cx.model()?;
    if model.surface.moe.is_some() {
        return Err(Error::not_supported_yet(
            "ANALYZE FEATURES on a mixture-of-experts model (statistics of expert features)",
        ));
    }
    let mut width = None;
    for l in plan.layers.first..=plan.layers.last {
        let view =
            lql_storage::OperandSource::view(model.as_ref(), OperandKey::layer(l, Role::FfnDown))
                .ok_or_else(|| {
                Error::semantic(format!(
                    "layer {l} has no ffn_down: its features cannot be analysed"
                ))
            })?;
        match width {
            None => width = Some(view.row_len()),
            Some(w) if w != view.row_len() => {
                return Err(Error::not_supported_yet(&format!(
                    "ANALYZE FEATURES over layers of different widths (layer {l} has {} features, layer {} has {w}); analyse them one LAYERS range at a time",
                    view.row_len(),
                    plan.layers.first
                )))
            }
            _ => {}
        }
    }
    width.ok_or_else(|| Error::internal("no layers to analyse"))
}

/// `AnalyzeFeatures corpus=… layers=… top=…`.
pub(crate) fn analyze(cx: &mut Cx<'_>, plan: &AnalyzePlan) -> Result<Datum> {
    let b = cx.bound()?;
    if b.edits.state.is_some() {
        return Err(Error::semantic(
            "ANALYZE FEATURES describes the model's own features, but patches or edits are in force",
        )
        .with_help("remove them first (SHOW PATCHES; REMOVE PATCH \"…\"), then analyse"));
    }
    if b.steering.is_some() || b.statement_steering.is_some() {
        return Err(Error::semantic(
            "ANALYZE FEATURES describes the model's own features, but steering is in force",
        )
        .with_help("SET STEERING OFF first"));
    }
    let ffn = ffn_width(cx, plan)?;
    let text =
        lql_storage::fsutil::read_capped_text(Path::new(&plan.corpus), "corpus", MAX_CORPUS_BYTES)?;
    let corpus_sha256 = sha256_hex(text.as_bytes());
    let StatsLocation {
        path,
        identity,
        corpus,
    } = stats_location(cx, &plan.corpus)?;
    let layers: Vec<usize> = (plan.layers.first..=plan.layers.last).collect();
    if let Ok(stored) = StatsFile::open(&path) {
        let h = &stored.header;
        if h.model_sha256 == identity
            && h.corpus_sha256 == corpus_sha256
            && h.layers == layers
            && h.top == plan.top
            && h.bins == BINS
            && h.context_tokens == CONTEXT_TOKENS
        {
            return Ok(summary(plan, h, true, &path));
        }
    }
    let documents: Vec<&str> = text.lines().collect();
    let tok = cx.tokenizer()?;
    let prefix = context_prefix(&tok)?;
    let mut tokenized = Vec::with_capacity(documents.len());
    for d in &documents {
        tokenized.push(if d.trim().is_empty() {
            Vec::new()
        } else {
            document_tokens(&tok, d)?
        });
    }
    let total: usize = tokenized.iter().map(Vec::len).sum();
    if total == 0 {
        return Err(Error::semantic(format!(
            "corpus {:?} has no text: it needs one document per line",
            plan.corpus
        )));
    }
    let exec = cx.executor()?;
    let started = Instant::now();
    let mut stats = FeatureStats::new(layers.clone(), ffn, plan.top);
    let (mut done, mut contexts) = (0usize, 0usize);
    let task = format!("ANALYZE FEATURES: tokens of {}", plan.corpus);
    let mut ids = Vec::with_capacity(prefix.len() + CONTEXT_TOKENS);
    for (d, body) in tokenized.iter().enumerate() {
        for (c, chunk) in body.chunks(CONTEXT_TOKENS).enumerate() {
            cx.check_cancel()?;
            ids.clear();
            ids.extend_from_slice(&prefix);
            ids.extend_from_slice(chunk);
            stats.observe(
                &exec,
                &ids,
                prefix.len(),
                d as u32,
                (c * CONTEXT_TOKENS) as u32,
            )?;
            done += chunk.len();
            contexts += 1;
            report_items(
                cx.engine.progress.as_ref(),
                &task,
                done as u64,
                total as u64,
                false,
            );
        }
    }
    report_items(
        cx.engine.progress.as_ref(),
        &task,
        done as u64,
        total as u64,
        true,
    );
    let header = StatsHeader {
        model_sha256: identity,
        corpus_sha256,
        corpus,
        layers,
        ffn,
        top: stats.top,
        bins: BINS,
        documents: documents.len(),
        contexts,
        context_tokens: CONTEXT_TOKENS,
        tokens: stats.tokens,
        seconds: started.elapsed().as_secs_f64(),
    };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| lql_storage::StorageError::io(dir, e))?;
    }
    feature_stats::write(&path, &header, &stats.contexts, &stats.counts, &documents)?;
    Ok(summary(plan, &header, false, &path))
}

fn summary(plan: &AnalyzePlan, h: &StatsHeader, reused: bool, path: &Path) -> Datum {
    let defs = lql_planner::analyze_features_columns();
    Datum::Table {
        columns: columns_of(&defs),
        rows: vec![vec![
            Value::from(plan.corpus.as_str()),
            Value::from(h.corpus_sha256.as_str()),
            Value::from(h.documents),
            Value::from(h.contexts),
            Value::Int(h.tokens as i64),
            Value::from(h.layers.len()),
            Value::from(h.layers.len() * h.ffn),
            Value::from(h.top),
            Value::Float(h.seconds),
            Value::Bool(reused),
            Value::from(path.to_string_lossy().as_ref()),
        ]],
    }
}

/// The stored statistics of `corpus` on the bound model, or the error that says to
/// compute them.
fn open_stats(cx: &Cx<'_>, table: Table, corpus: Option<&str>) -> Result<StatsFile> {
    let corpus = corpus.ok_or_else(|| {
        Error::semantic(format!(
            "SELECT FROM {} needs WHERE corpus = '…'",
            table.name()
        ))
    })?;
    let StatsLocation { path, identity, .. } = stats_location(cx, corpus)?;
    if !path.exists() {
        return Err(Error::semantic(format!(
            "no feature statistics of corpus {corpus:?} on this model"
        ))
        .with_help(format!(
            "compute them once: ANALYZE FEATURES FROM {corpus:?}"
        )));
    }
    let f = StatsFile::open(&path)?;
    if f.header.model_sha256 != identity || f.header.bins != BINS {
        return Err(Error::semantic(format!(
            "the statistics in {} are of another model or version",
            path.display()
        ))
        .with_help(format!(
            "compute them again: ANALYZE FEATURES FROM {corpus:?}"
        )));
    }
    Ok(f)
}

/// The (layer index, layer) pairs and features a scan visits.
fn scan_range(
    f: &StatsFile,
    layers: Option<&[usize]>,
    features: Option<&[usize]>,
) -> (Vec<(usize, usize)>, Vec<usize>) {
    let layers: Vec<(usize, usize)> = match layers {
        Some(ls) => ls
            .iter()
            .filter_map(|&l| f.layer_index(l).map(|i| (i, l)))
            .collect(),
        None => f.header.layers.iter().copied().enumerate().collect(),
    };
    let features = match features {
        Some(fs) => fs.iter().copied().filter(|&x| x < f.header.ffn).collect(),
        None => (0..f.header.ffn).collect(),
    };
    (layers, features)
}

/// `TableScan contexts corpus=…`.
pub(crate) fn contexts_scan(
    cx: &mut Cx<'_>,
    corpus: Option<&str>,
    layers: Option<&[usize]>,
    features: Option<&[usize]>,
) -> Result<Datum> {
    let f = open_stats(cx, Table::Contexts, corpus)?;
    let tok = cx.tokenizer()?;
    let (layers, features) = scan_range(&f, layers, features);
    let corpus = Value::from(corpus.unwrap_or_default());
    let mut documents: std::collections::HashMap<u32, Vec<u32>> = Default::default();
    let mut rows = Vec::new();
    for &(li, layer) in &layers {
        for &feature in &features {
            for (rank, c) in f.contexts(li, feature).iter().enumerate() {
                cx.check_cancel()?;
                let ids = match documents.entry(c.document) {
                    std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
                    std::collections::hash_map::Entry::Vacant(e) => {
                        let text = f.document(c.document as usize)?;
                        e.insert(document_tokens(&tok, text)?)
                    }
                };
                let p = c.position as usize;
                let (token, before, after) = if p < ids.len() {
                    (
                        Value::from(tok.decode(&ids[p..p + 1])?),
                        Value::from(tok.decode(&ids[p.saturating_sub(BEFORE)..p])?),
                        Value::from(tok.decode(&ids[p + 1..(p + 1 + AFTER).min(ids.len())])?),
                    )
                } else {
                    (Value::Null, Value::Null, Value::Null)
                };
                rows.push(vec![
                    corpus.clone(),
                    Value::from(layer),
                    Value::from(feature),
                    Value::from(rank + 1),
                    Value::Float(c.activation as f64),
                    Value::Int(c.document as i64 + 1),
                    Value::Int(c.position as i64),
                    token,
                    before,
                    after,
                ]);
            }
        }
    }
    Ok(Datum::Table {
        columns: table_schema(Table::Contexts)?,
        rows,
    })
}

/// `TableScan histograms corpus=…`.
pub(crate) fn histograms_scan(
    cx: &mut Cx<'_>,
    corpus: Option<&str>,
    layers: Option<&[usize]>,
    features: Option<&[usize]>,
) -> Result<Datum> {
    let f = open_stats(cx, Table::Histograms, corpus)?;
    let (layers, features) = scan_range(&f, layers, features);
    let corpus = Value::from(corpus.unwrap_or_default());
    let mut rows = Vec::new();
    for &(li, layer) in &layers {
        cx.check_cancel()?;
        for &feature in &features {
            for (bin, count) in f.histogram(li, feature).into_iter().enumerate() {
                let (lo, hi) = bin_range(bin);
                rows.push(vec![
                    corpus.clone(),
                    Value::from(layer),
                    Value::from(feature),
                    Value::from(bin),
                    Value::Float(lo),
                    Value::Float(hi),
                    Value::Int(count as i64),
                ]);
            }
        }
    }
    Ok(Datum::Table {
        columns: table_schema(Table::Histograms)?,
        rows,
    })
}
