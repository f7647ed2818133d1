//! SELECT over the virtual tables `features`, `layers`, `tokens` and `tensors`.
//!
//! ```text
//!  SelectPlan ─▶ pushdown (layer / feature domains from WHERE) ─▶ table scan (cheap columns)
//!            ─▶ [labels now, if WHERE or ORDER BY reads them] ─▶ filter ─▶ sort ─▶ limit
//!            ─▶ [labels late, for the surviving rows only] ─▶ project ─▶ Rows
//! ```
//!
//! `features` has one row per gate row (30 × 1536 on SmolLM2). Its label columns
//! (`top_token`, `top_token_id`, `c_score`, `down_tokens`) cost an unembedding product per
//! feature, so they are filled as late as the query allows: `SELECT * FROM features WHERE
//! layer = 5 LIMIT 10` scans one layer's shape and labels ten features. `c_score` is the top
//! token's logit, `unembedding[top_token] · down_column` (LARQL's down_meta `c_score`).

use std::sync::Arc;

use lql_exec::browse::tables::{scan_features, scan_layers_table, FeatureSet};
use lql_exec::browse::FeatureLabel;
use lql_grammar::Table;
use lql_planner::{ColumnDef, ColumnType, SelectPlan};

use super::rowexec;
use super::walk::{browse_err, label_cache, token_texts};
use super::Cx;
use crate::error::{Error, Result};
use crate::rows::{Column, Rows};
use crate::value::{Value, ValueType};

/// Down tokens shown per feature.
pub(crate) const DOWN_TOKENS: usize = 5;

const LABEL_COLUMNS: [&str; 4] = ["top_token", "top_token_id", "c_score", "down_tokens"];

/// The columns of the browse tables (others fall back to the planner's defaults).
pub(crate) fn table_columns(table: Table) -> Option<Vec<Column>> {
    use ValueType::*;
    let cols: &[(&str, ValueType)] = match table {
        Table::Features => &[
            ("layer", Int),
            ("feature", Int),
            ("top_token", Text),
            ("top_token_id", Int),
            ("c_score", Float),
            ("down_tokens", List),
        ],
        Table::Layers => &[
            ("layer", Int),
            ("features", Int),
            ("gate_encoding", Text),
            ("bytes", Int),
        ],
        Table::Tokens => &[("id", Int), ("text", Text), ("kind", Text)],
        Table::Tensors => &[
            ("name", Text),
            ("object", Text),
            ("layer", Int),
            ("role", Text),
            ("dtype", Text),
            ("shape", List),
            ("bytes", Int),
        ],
        Table::Edges | Table::Representations => return None,
    };
    Some(cols.iter().map(|(n, t)| Column::new(*n, *t)).collect())
}

/// The browse tables' schema as the planner sees it (lists show as text there; the
/// planner resolves names, this executor checks types).
pub(crate) fn planner_columns(table: Table) -> Option<Vec<ColumnDef>> {
    table_columns(table).map(|cols| {
        cols.iter()
            .map(|c| {
                ColumnDef::new(
                    &c.name,
                    match c.ty {
                        ValueType::Int => ColumnType::Int,
                        ValueType::Float => ColumnType::Float,
                        ValueType::Bool => ColumnType::Bool,
                        _ => ColumnType::Text,
                    },
                )
            })
            .collect()
    })
}

/// Runs a SELECT.
pub(crate) fn select(cx: &mut Cx<'_>, plan: &SelectPlan) -> Result<Rows> {
    let cols = table_columns(plan.table)
        .ok_or_else(|| Error::not_supported_yet(&format!("SELECT FROM {}", plan.table.name())))?;
    if let Some(f) = &plan.filter {
        rowexec::check_predicate(f, &cols)?;
    }
    // Which columns the filter and the sort read.
    let mut early: Vec<String> = Vec::new();
    if let Some(f) = &plan.filter {
        rowexec::columns_in(f, &mut early);
    }
    early.extend(plan.order_by.iter().map(|k| k.column.to_ascii_lowercase()));
    let projected: Vec<usize> = plan
        .columns
        .iter()
        .map(|c| {
            cols.iter()
                .position(|x| x.name.eq_ignore_ascii_case(&c.name))
                .ok_or_else(|| Error::semantic(format!("unknown column `{}`", c.name)))
        })
        .collect::<Result<_>>()?;

    let mut rows = match plan.table {
        Table::Features => return select_features(cx, plan, &cols, &early, &projected),
        Table::Layers => layers_rows(cx)?,
        Table::Tokens => tokens_rows(cx)?,
        Table::Tensors => tensors_rows(cx)?,
        Table::Edges | Table::Representations => unreachable_table(plan.table)?,
    };
    rows = finish(rows, &cols, plan)?;
    Ok(project(&cols, &projected, rows))
}

fn unreachable_table(t: Table) -> Result<Vec<Vec<Value>>> {
    Err(Error::not_supported_yet(&format!(
        "SELECT FROM {}",
        t.name()
    )))
}

/// filter → sort → limit.
fn finish(
    mut rows: Vec<Vec<Value>>,
    cols: &[Column],
    plan: &SelectPlan,
) -> Result<Vec<Vec<Value>>> {
    if let Some(f) = &plan.filter {
        rows = rowexec::filter(rows, cols, f)?;
    }
    if !plan.order_by.is_empty() {
        rowexec::sort(&mut rows, cols, &plan.order_by)?;
    }
    if let Some(n) = plan.limit {
        rows.truncate(n);
    }
    Ok(rows)
}

fn project(cols: &[Column], projected: &[usize], rows: Vec<Vec<Value>>) -> Rows {
    let mut out = Rows::new(projected.iter().map(|&i| cols[i].clone()).collect());
    for r in rows {
        out.push(projected.iter().map(|&i| r[i].clone()).collect());
    }
    out
}

fn select_features(
    cx: &mut Cx<'_>,
    plan: &SelectPlan,
    cols: &[Column],
    early: &[String],
    projected: &[usize],
) -> Result<Rows> {
    let b = cx.bound()?;
    let model = b.model.clone();
    let s = &model.surface;
    let n_layers = s.n_layers as i64;
    let ffn = s.ffn as i64;
    // Pushdown: the layers and features WHERE allows.
    let layers: Vec<usize> = match plan
        .filter
        .as_ref()
        .and_then(|f| rowexec::int_domain(f, "layer", 0, n_layers - 1))
    {
        Some(v) => v.into_iter().map(|l| l as usize).collect(),
        None => (0..s.n_layers).collect(),
    };
    let set = match plan
        .filter
        .as_ref()
        .and_then(|f| rowexec::int_domain(f, "feature", 0, ffn - 1))
    {
        Some(v) => FeatureSet::Only(v.into_iter().map(|f| f as usize).collect()),
        None => FeatureSet::All,
    };
    let needs_labels_early = early.iter().any(|c| LABEL_COLUMNS.contains(&c.as_str()));
    let needs_labels = needs_labels_early
        || projected
            .iter()
            .any(|&i| LABEL_COLUMNS.contains(&cols[i].name.as_str()));
    let cache = label_cache(&model);
    let cancel = cx.cancel.clone();
    let scan = scan_features(
        model.as_ref(),
        &cache,
        &layers,
        &set,
        needs_labels_early,
        None,
        &|| cancel.load(std::sync::atomic::Ordering::Relaxed),
    )
    .map_err(browse_err)?;
    let vocab = token_texts(cx)?;
    let row_of = |layer: usize, feature: usize, label: Option<&Arc<FeatureLabel>>| -> Vec<Value> {
        let (top, id, c, down) = match label {
            Some(l) => (
                l.top_token_id().map(&vocab).into(),
                l.top_token_id().into(),
                l.c_score().into(),
                Value::List(
                    l.top
                        .iter()
                        .take(DOWN_TOKENS)
                        .map(|t| Value::Text(vocab(t.0)))
                        .collect(),
                ),
            ),
            None => (Value::Null, Value::Null, Value::Null, Value::Null),
        };
        vec![Value::from(layer), Value::from(feature), top, id, c, down]
    };
    let rows: Vec<Vec<Value>> = scan
        .iter()
        .map(|r| row_of(r.layer, r.feature, r.label.as_ref()))
        .collect();
    let mut rows = finish(rows, cols, plan)?;
    if needs_labels && !needs_labels_early {
        // Late labels: only for the rows that survived.
        let keys: Vec<(usize, usize)> = rows
            .iter()
            .map(|r| {
                (
                    r[0].as_i64().unwrap_or(0) as usize,
                    r[1].as_i64().unwrap_or(0) as usize,
                )
            })
            .collect();
        let labels = cache.labels(model.as_ref(), &keys).map_err(browse_err)?;
        for (r, l) in rows.iter_mut().zip(labels) {
            *r = row_of(
                r[0].as_i64().unwrap_or(0) as usize,
                r[1].as_i64().unwrap_or(0) as usize,
                Some(&l),
            );
        }
    }
    Ok(project(cols, projected, rows))
}

fn layers_rows(cx: &mut Cx<'_>) -> Result<Vec<Vec<Value>>> {
    let model = cx.bound()?.model.clone();
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

fn tensors_rows(cx: &mut Cx<'_>) -> Result<Vec<Vec<Value>>> {
    let model = cx.bound()?.model.clone();
    Ok(model
        .operands
        .iter()
        .map(|(k, op)| {
            vec![
                Value::from(op.source_name.as_str()),
                Value::from(k.role.object()),
                k.layer.into(),
                Value::from(k.role.name()),
                Value::from(op.dtype.name()),
                Value::List(op.shape.iter().map(|&d| Value::from(d)).collect()),
                Value::from(op.len),
            ]
        })
        .collect())
}
