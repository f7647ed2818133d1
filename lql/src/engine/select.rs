//! SELECT's operators over the virtual tables `features`, `layers`, `tokens`, `tensors` and
//! `routes` (the router's choices over `WHERE prompt = '…'`, one forward pass), over
//! statements' rows (Relation) and joins of them (Join, in `join.rs`): TableScan, OneRow,
//! Relation, Filter, Aggregate, Distinct, Sort, Offset, Limit, LateLabels, Project.
//!
//! ```text
//!  TableScan (pushdown: layers × features; labels early if WHERE/ORDER BY read them)
//!  | Relation | Join | OneRow
//!    ─▶ Filter ─▶ Sort ─▶ Offset ─▶ Limit ─▶ [LateLabels: only the surviving rows] ─▶ Project
//! ```
//!
//! `features` has one row per gate row (30 × 1536 on SmolLM2). Its label columns
//! (`top_token`, `top_token_id`, `c_score`, `down_tokens`) cost an unembedding product per
//! feature, so the planner decides how late they are filled: `SELECT * FROM features WHERE
//! layer = 5 LIMIT 10` scans one layer's shape and labels ten features. `c_score` is the top
//! token's logit, `unembedding[top_token] · down_column` (LARQL's down_meta `c_score`).
//! The scan fills only the label columns the statement reads (`LabelSet`): a query of
//! `c_score` builds no token texts or `down_tokens` lists.

use std::collections::HashMap;
use std::sync::Arc;

use lql_exec::browse::labels::read_labels;
use lql_exec::browse::tables::{scan_features, scan_layers_table, FeatureSet};
use lql_exec::browse::FeatureLabel;
use lql_grammar::{Expr, Table};
use lql_planner::{LabelSet, LabelTiming, SortKey};
use lql_storage::Role;

use super::datum::Datum;
use super::interp::wrong_input;
use super::stream::{self, Stream};
use super::walk::DOWN_TOKENS;
use super::{aggregate, columns_of, rowexec, Cx};
use crate::error::{Error, Result};
use crate::rows::Column;
use crate::value::Value;

/// What a scan visits: the layers and features pushed down, and the rows it may stop after.
pub(crate) struct ScanRange<'a> {
    pub layers: Option<&'a [usize]>,
    pub features: Option<&'a [usize]>,
    pub limit: Option<usize>,
    /// WHERE, applied as the scan goes (a `features` scan under a LIMIT).
    pub filter: Option<&'a Expr>,
}

/// `TableScan table [layers] [features] [stop_after] [labels]`.
pub(crate) fn table_scan(
    cx: &mut Cx<'_>,
    table: Table,
    range: ScanRange<'_>,
    labels: LabelTiming,
    label_set: LabelSet,
) -> Result<Datum> {
    let defs = lql_planner::table_columns(table)
        .ok_or_else(|| Error::not_supported_yet(&format!("SELECT FROM {}", table.name())))?;
    let columns = columns_of(&defs);
    let mut rows = match table {
        Table::Features => {
            let early = labels == LabelTiming::Early;
            let scan = FeatureScan::new(cx, &range, &columns, early, label_set)?;
            return Ok(Datum::Stream(Stream::new(columns, scan)));
        }
        Table::Layers => layers_rows(cx)?,
        Table::Tokens => tokens_rows(cx)?,
        Table::Tensors => tensors_rows(cx)?,
        Table::Edges => super::edit::edges_rows(cx)?,
        Table::Representations
        | Table::Routes
        | Table::Attention
        | Table::Heads
        | Table::Contexts
        | Table::Histograms => {
            return Err(Error::not_supported_yet(&format!(
                "SELECT FROM {}",
                table.name()
            )))
        }
    };
    if let Some(n) = range.limit {
        rows.truncate(n);
    }
    Ok(Datum::Table { columns, rows })
}

pub(crate) fn table(input: Datum, op: &str) -> Result<(Vec<Column>, Vec<Vec<Value>>)> {
    match input {
        Datum::Table { columns, rows } => Ok((columns, rows)),
        Datum::Rows(r) => Ok((r.columns, r.rows)),
        other => Err(wrong_input(op, &other)),
    }
}

/// `Filter predicate` (SQL three-valued logic; rows whose predicate is true), as rows are
/// pulled.
pub(crate) fn filter(input: Datum, predicate: &Expr) -> Result<Datum> {
    let predicate = predicate.clone();
    stream::map(input, "Filter", None, move |cx, columns, rows| {
        rowexec::filter(rows, columns, &predicate, cx.cancel)
    })
}

/// `Offset n`: the rows after the first `n`.
pub(crate) fn offset(input: Datum, n: usize) -> Result<Datum> {
    stream::through(input, "Offset", |input| stream::Offset { input, skip: n })
}

/// `OneRow`: a single row of no columns (SELECT without FROM).
pub(crate) fn one_row() -> Datum {
    Datum::Table {
        columns: Vec::new(),
        rows: vec![Vec::new()],
    }
}

/// `Relation`: a statement's rows as a table.
pub(crate) fn relation(input: Datum) -> Result<Datum> {
    stream::stream_of(input, "Relation").map(Datum::Stream)
}

/// `Sort keys` (stable; NULL first ascending).
pub(crate) fn sort(input: Datum, keys: &[SortKey]) -> Result<Datum> {
    let (columns, mut rows) = table(input, "Sort")?;
    rowexec::sort(&mut rows, &columns, keys)?;
    Ok(Datum::Table { columns, rows })
}

/// `Limit n`: pulls its input until `n` rows have passed, then stops.
pub(crate) fn limit(input: Datum, n: usize) -> Result<Datum> {
    stream::through(input, "Limit", |input| stream::Limit { input, left: n })
}

/// `LateLabels`: fills the label columns of the rows that reach it.
pub(crate) fn late_labels(input: Datum, label_set: LabelSet) -> Result<Datum> {
    stream::map(input, "LateLabels", None, move |cx, _, rows| {
        label_rows(cx, rows, label_set)
    })
}

/// The label columns of `features` rows filled in (LateLabels' work on one batch).
fn label_rows(
    cx: &mut Cx<'_>,
    rows: Vec<Vec<Value>>,
    label_set: LabelSet,
) -> Result<Vec<Vec<Value>>> {
    // The effective state: added features' labels.
    let model = cx.browse_source()?;
    // `(layer, feature)`: bank features are numbered v1-flattened, as the cache keys them.
    let keys: Vec<(usize, usize)> = rows
        .iter()
        .map(|r| {
            (
                r[0].as_i64().unwrap_or(0) as usize,
                r[1].as_i64().unwrap_or(0) as usize,
            )
        })
        .collect();
    let labels = cx.labels()?.labels(model.as_ref(), &keys)?;
    let text = cx.token_texts();
    Ok(rows
        .iter()
        .zip(keys)
        .zip(labels)
        .map(|((r, (l, f)), label)| {
            let mut row = feature_row(l, f, Some(&label), label_set, &text);
            // The columns after the labels (expert, the hidden ones) are the scan's.
            row.extend(r.iter().skip(row.len()).cloned());
            row
        })
        .collect())
}

/// `Project columns`: each result column computed by its expression over the input row.
pub(crate) fn project(
    input: Datum,
    defs: &[lql_planner::ColumnDef],
    exprs: &[Expr],
) -> Result<Datum> {
    let exprs = exprs.to_vec();
    stream::map(
        input,
        "Project",
        Some(columns_of(defs)),
        move |_, columns, rows| {
            rows.iter()
                .map(|row| {
                    exprs
                        .iter()
                        .map(|e| rowexec::eval(e, columns, row))
                        .collect::<Result<Vec<_>>>()
                })
                .collect()
        },
    )
}

/// `Distinct`: the first of each set of equal rows, in input order.
pub(crate) fn distinct(input: Datum) -> Result<Datum> {
    let (columns, rows) = table(input, "Distinct")?;
    let mut seen = std::collections::HashSet::new();
    let rows = rows
        .into_iter()
        .filter(|r| seen.insert(aggregate::row_key(r)))
        .collect();
    Ok(Datum::Table { columns, rows })
}

/// `Aggregate keys calls`: one row per group (see `aggregate.rs`).
pub(crate) fn aggregate(
    cx: &Cx<'_>,
    input: Datum,
    keys: &[Expr],
    calls: &[lql_planner::AggCall],
    defs: &[lql_planner::ColumnDef],
) -> Result<Datum> {
    let (columns, rows) = table(input, "Aggregate")?;
    let out = aggregate::run(&columns, rows, keys, calls, cx.cancel)?;
    Ok(Datum::Table {
        columns: columns_of(defs),
        rows: out,
    })
}

/// One row of `features`; of a label, only the columns in `set` are filled (the statement
/// reads no other).
fn feature_row(
    layer: usize,
    feature: usize,
    label: Option<&Arc<FeatureLabel>>,
    set: LabelSet,
    text: &dyn Fn(u32) -> String,
) -> Vec<Value> {
    let when = |wanted: bool, v: &dyn Fn(&FeatureLabel) -> Value| match label {
        Some(l) if wanted => v(l),
        _ => Value::Null,
    };
    vec![
        Value::from(layer),
        Value::from(feature),
        when(set.top_token, &|l| l.top_token_id().map(text).into()),
        when(set.top_token_id, &|l| l.top_token_id().into()),
        when(set.c_score, &|l| l.c_score().into()),
        when(set.down_tokens, &|l| {
            Value::List(
                l.top
                    .iter()
                    .take(DOWN_TOKENS)
                    .map(|t| Value::Text(text(t.0)))
                    .collect(),
            )
        }),
    ]
}

fn features_rows(
    cx: &mut Cx<'_>,
    range: &ScanRange<'_>,
    labels_now: bool,
    label_set: LabelSet,
) -> Result<Vec<Vec<Value>>> {
    let model = cx.model()?;
    let all: Vec<usize> = (0..model.surface.n_layers).collect();
    let layers = range.layers.unwrap_or(&all);
    let set = match range.features {
        Some(v) => FeatureSet::Only(v.to_vec()),
        None => FeatureSet::All,
    };
    let cache = cx.labels()?;
    let cancel = cx.cancel.clone();
    // The effective state: features edits added follow the base ones (`ffn + i`).
    let src = cx.browse_source()?;
    let scan = scan_features(
        src.as_ref(),
        &cache,
        layers,
        &set,
        labels_now,
        range.limit,
        &|| cancel.load(std::sync::atomic::Ordering::Relaxed),
    )?;
    let text = cx.token_texts();
    let read = |role: Role, wanted: bool| -> Result<HashMap<(usize, usize), Value>> {
        let mut out = HashMap::new();
        if !wanted {
            return Ok(out);
        }
        let mut by_layer: std::collections::BTreeMap<usize, Vec<usize>> = Default::default();
        for r in &scan {
            by_layer.entry(r.layer).or_default().push(r.feature);
        }
        for (layer, features) in by_layer {
            cx.check_cancel()?;
            let tops = read_labels(src.as_ref(), layer, &features, role, DOWN_TOKENS)?;
            for (f, top) in features.into_iter().zip(tops) {
                let list = top.iter().map(|t| Value::Text(text(t.0))).collect();
                out.insert((layer, f), Value::List(list));
            }
        }
        Ok(out)
    };
    let gate = read(Role::FfnGate, label_set.gate_tokens)?;
    let up = read(Role::FfnUp, label_set.up_tokens)?;
    let hidden = |m: &HashMap<(usize, usize), Value>, l: usize, f: usize| {
        m.get(&(l, f)).cloned().unwrap_or(Value::Null)
    };
    Ok(scan
        .iter()
        .map(|r| {
            let mut row = feature_row(r.layer, r.feature, r.label.as_ref(), label_set, &text);
            row.push(r.expert.map(|e| e.column()).into());
            row.push(hidden(&gate, r.layer, r.feature));
            row.push(hidden(&up, r.layer, r.feature));
            row
        })
        .collect())
}

/// A `features` scan pulled a few layers at a time (as many as one labelling pass takes):
/// each pull scans, labels (when the plan labels early) and filters the next layers, and
/// the scan stops once `stop_after` rows have passed, so the labels of layers a LIMIT never
/// reaches are never computed.
struct FeatureScan {
    layers: Vec<usize>,
    /// Layers per pull.
    chunk: usize,
    /// Index into `layers` of the next pull's first layer.
    at: usize,
    features: Option<Vec<usize>>,
    /// Rows still wanted (`stop_after`).
    left: Option<usize>,
    /// WHERE, applied as the scan goes, with the scan's columns.
    filter: Option<(Expr, Vec<Column>)>,
    labels_now: bool,
    label_set: LabelSet,
}

impl FeatureScan {
    /// The scan of `range`, filtering over `columns` (the table's).
    fn new(
        cx: &mut Cx<'_>,
        range: &ScanRange<'_>,
        columns: &[Column],
        labels_now: bool,
        label_set: LabelSet,
    ) -> Result<FeatureScan> {
        let surface = cx.model()?.surface.clone();
        let layers = match range.layers {
            Some(l) => l.to_vec(),
            None => (0..surface.n_layers).collect(),
        };
        let per_layer = range.features.map_or(surface.ffn, <[usize]>::len).max(1);
        Ok(FeatureScan {
            layers,
            chunk: (lql_exec::browse::labels::PASS_FEATURES / per_layer).max(1),
            at: 0,
            features: range.features.map(<[usize]>::to_vec),
            left: range.limit,
            filter: range.filter.map(|p| (p.clone(), columns.to_vec())),
            labels_now,
            label_set,
        })
    }
}

impl stream::Pull for FeatureScan {
    fn pull(
        &mut self,
        cx: &mut Cx<'_>,
        _: &mut super::interp::Run,
    ) -> Result<Option<Vec<Vec<Value>>>> {
        if self.at >= self.layers.len() || self.left == Some(0) {
            return Ok(None);
        }
        let end = (self.at + self.chunk).min(self.layers.len());
        let part = ScanRange {
            layers: Some(&self.layers[self.at..end]),
            features: self.features.as_deref(),
            // Without a filter, every scanned row passes: the scan itself stops at the limit.
            limit: if self.filter.is_none() {
                self.left
            } else {
                None
            },
            filter: None,
        };
        let mut rows = features_rows(cx, &part, self.labels_now, self.label_set)?;
        self.at = end;
        if let Some((predicate, columns)) = &self.filter {
            rows = rowexec::filter(rows, columns, predicate, cx.cancel)?;
        }
        if let Some(left) = &mut self.left {
            rows.truncate(*left);
            *left -= rows.len();
        }
        Ok(Some(rows))
    }
}

fn layers_rows(cx: &mut Cx<'_>) -> Result<Vec<Vec<Value>>> {
    let model = cx.model()?;
    let layers: Vec<usize> = (0..model.surface.n_layers).collect();
    Ok(scan_layers_table(model.as_ref(), &layers)
        .into_iter()
        .map(|r| {
            vec![
                Value::from(r.layer),
                Value::from(r.features),
                r.gate_encoding.map(|d| d.name()).into(),
                Value::from(r.bytes),
            ]
        })
        .collect())
}

fn tokens_rows(cx: &mut Cx<'_>) -> Result<Vec<Vec<Value>>> {
    let tok = cx.tokenizer()?;
    Ok((0..tok.vocab_size() as u32)
        .map(|id| {
            vec![
                Value::from(id),
                tok.token_text(id).into(),
                Value::from(tok.token_kind(id).name()),
            ]
        })
        .collect())
}

/// The rows of `tensors` (also SHOW TENSORS).
pub(crate) fn tensors_rows(cx: &mut Cx<'_>) -> Result<Vec<Vec<Value>>> {
    Ok(tensor_rows(cx.model()?.as_ref()))
}

/// One row per tensor of `model`: global operands first (embedding, final norm, head),
/// then layer by layer. A model of an architecture LQL cannot run lists its tensors as
/// stored, their layer read from a `blk.N.` name, with no object or role.
pub(crate) fn tensor_rows(model: &lql_storage::Model) -> Vec<Vec<Value>> {
    let row = |op: &lql_storage::model::Operand, object: Value, layer: Value, role: Value| {
        vec![
            Value::from(op.source_name.as_str()),
            object,
            layer,
            role,
            Value::from(op.dtype.name()),
            Value::List(op.shape.iter().map(|&d| Value::from(d)).collect()),
            Value::from(op.len),
        ]
    };
    if let Some(u) = &model.uninterpreted {
        return u
            .tensors
            .iter()
            .map(|op| {
                let layer = lql_storage::diff::tensor_layer(&op.source_name);
                row(op, Value::Null, layer.into(), Value::Null)
            })
            .collect();
    }
    let mut ops: Vec<_> = model.operands.iter().collect();
    ops.sort_by_key(|(k, _)| (k.layer.map_or(0, |l| l + 1), k.role));
    ops.into_iter()
        .map(|(k, op)| {
            row(
                op,
                Value::from(k.role.object()),
                k.layer.into(),
                Value::from(k.role.name()),
            )
        })
        .collect()
}

/// The tokens of a table scan's prompt (with BOS when the tokenizer adds one), refusing a
/// prompt of none; the tokenizer too, for the rows' token texts.
pub(crate) fn prompt_ids(
    cx: &mut Cx<'_>,
    prompt: &str,
) -> Result<(Arc<lql_exec::tokenizer::Tokenizer>, Vec<u32>)> {
    let tok = cx.tokenizer()?;
    let ids = tok.encode(prompt, true)?;
    if ids.is_empty() {
        return Err(Error::semantic(
            "the prompt is empty: at least one token is needed",
        ));
    }
    Ok((tok, ids))
}

/// `TableScan routes prompt='…'`: one forward pass over the prompt (with BOS when the
/// tokenizer adds one) with an observer copying each bank layer's routes: one row per
/// (layer, position, chosen expert), best first. A model whose FFNs are dense has no router
/// and is refused by name.
pub(crate) fn routes_scan(cx: &mut Cx<'_>, prompt: Option<&str>) -> Result<Datum> {
    let prompt = prompt.ok_or_else(|| Error::internal("routes scan without a prompt"))?;
    let defs = lql_planner::table_columns(Table::Routes)
        .ok_or_else(|| Error::internal("routes has no schema"))?;
    let columns = columns_of(&defs);
    let model = cx.model()?;
    if model.surface.moe.is_none() {
        return Err(Error::semantic(
            "SELECT FROM routes: the bound model's FFNs are dense; it has no router to choose experts",
        ));
    }
    let (tok, ids) = prompt_ids(cx, prompt)?;
    let exec = cx.executor()?;
    struct Capture(Vec<(usize, Vec<lql_exec::Route>)>);
    impl lql_exec::Observer for Capture {
        fn on_layer(&mut self, r: &lql_exec::LayerRecord<'_>) {
            self.0.push((r.layer, r.routes.to_vec()));
        }
    }
    let mut cap = Capture(Vec::new());
    let last = model.surface.n_layers.saturating_sub(1);
    exec.observe_layers(&ids, last, &mut cap)?;
    let texts: Vec<Value> = ids.iter().map(|&i| tok.token_text(i).into()).collect();
    let mut rows = Vec::new();
    for (layer, routes) in cap.0 {
        let mut rank = 0;
        let mut at = usize::MAX;
        for r in routes {
            rank = if r.position == at { rank + 1 } else { 1 };
            at = r.position;
            rows.push(vec![
                Value::from(prompt),
                Value::from(r.position),
                Value::from(ids[r.position]),
                texts[r.position].clone(),
                Value::from(layer),
                Value::from(rank),
                Value::from(r.expert),
                Value::from(r.weight as f64),
            ]);
        }
    }
    Ok(Datum::Table { columns, rows })
}
