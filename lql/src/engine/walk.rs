//! WALK and EXPLAIN WALK, plus what the browse statements share: the per-binding label
//! cache, token texts, and the mapping of browse errors.
//!
//! `WALK "prompt" [TOP k] [LAYERS a-b] [MODE EMBEDDING | RESIDUAL]` → rows (layer, feature,
//! gate, activation, top_token, down_tokens, mode). Without a MODE clause the walk runs in
//! RESIDUAL when the binding can execute, else in EMBEDDING, and the `mode` column says
//! which and why.

use std::sync::{Arc, Mutex, Weak};
use std::time::Instant;

use lql_exec::browse::labels::LabelSource;
use lql_exec::browse::{self, BrowseError, LabelCache, WalkMode, WalkOptions, WalkResult};
use lql_grammar::{Statement, StatementKind};
use lql_planner::{LogicalPlan, WalkPlan};
use lql_storage::Model;

use super::select::DOWN_TOKENS;
use super::Cx;
use crate::error::{Error, ErrorKind, Result};
use crate::rows::{Column, Rows};
use crate::value::{Value, ValueType};

/// Maps a browse error to an LQL error.
pub(crate) fn browse_err(e: BrowseError) -> Error {
    match e {
        BrowseError::Exec(e) => Error::from(e),
        BrowseError::Storage(e) => Error::from(e),
        BrowseError::NotExecutable { .. } | BrowseError::Unsupported(_) => {
            Error::unsupported(e.to_string())
        }
        BrowseError::MissingOperand { .. } | BrowseError::Shape { .. } => {
            Error::new(ErrorKind::Format, e.to_string())
        }
        BrowseError::Internal(m) => Error::internal(m),
        BrowseError::Cancelled => Error::interrupted(),
        other => Error::semantic(other.to_string()),
    }
}

/// Label caches, one per bound model (held weakly: a cache lives as long as its model).
static CACHES: Mutex<Vec<(Weak<Model>, Arc<LabelCache>)>> = Mutex::new(Vec::new());

/// The label cache of a bound model.
pub(crate) fn label_cache(model: &Arc<Model>) -> Arc<LabelCache> {
    let mut all = CACHES.lock().unwrap_or_else(|e| e.into_inner());
    all.retain(|(m, _)| m.strong_count() > 0);
    let me = Arc::downgrade(model);
    if let Some((_, c)) = all.iter().find(|(m, _)| m.ptr_eq(&me)) {
        return c.clone();
    }
    let c = Arc::new(LabelCache::new());
    all.push((me, c.clone()));
    c
}

/// Token id → display text through the binding's tokenizer (`<id>` when it has none).
pub(crate) fn token_texts(cx: &mut Cx<'_>) -> Result<Box<dyn Fn(u32) -> String>> {
    match cx.tokenizer() {
        Ok(t) => Ok(Box::new(move |id| {
            t.token_text(id).unwrap_or_else(|| format!("<{id}>"))
        })),
        Err(_) => Ok(Box::new(|id| format!("<{id}>"))),
    }
}

/// The executor when the binding can run the model, else `None`.
pub(crate) fn executor_if_executable(cx: &mut Cx<'_>) -> Result<Option<lql_exec::Executor>> {
    if cx.bound()?.facts.can_execute {
        Ok(Some(cx.executor()?))
    } else {
        Ok(None)
    }
}

fn walk_columns() -> Vec<Column> {
    vec![
        Column::new("layer", ValueType::Int),
        Column::new("feature", ValueType::Int),
        Column::new("gate", ValueType::Float),
        Column::new("activation", ValueType::Float),
        Column::new("top_token", ValueType::Text),
        Column::new("down_tokens", ValueType::List),
        Column::new("mode", ValueType::Text),
    ]
}

/// A walk with its labels, ready to render.
struct Walked {
    result: WalkResult,
    prompt_ids: Vec<u32>,
    labels: Vec<Arc<browse::FeatureLabel>>,
    label_source: String,
    labels_missing: usize,
    labels_ms: f64,
    text: Box<dyn Fn(u32) -> String>,
}

fn run_walk(cx: &mut Cx<'_>, plan: &WalkPlan, stmt: &Statement) -> Result<Walked> {
    // The planner fills in EMBEDDING when MODE is absent; the statement says whether it was
    // written.
    let written = match &stmt.kind {
        StatementKind::Walk(w) => w.mode.as_ref().map(|m| m.value),
        StatementKind::Explain(inner) => match &inner.kind {
            StatementKind::Walk(w) => w.mode.as_ref().map(|m| m.value),
            _ => None,
        },
        _ => None,
    };
    let mode = written.map(|m| match m {
        lql_grammar::WalkMode::Embedding => WalkMode::Embedding,
        lql_grammar::WalkMode::Residual => WalkMode::Residual,
    });
    let exec = executor_if_executable(cx)?;
    let tok = cx.tokenizer()?;
    let ids = tok.encode(&plan.prompt, true)?;
    if ids.is_empty() {
        return Err(Error::semantic(
            "the prompt is empty: at least one token is needed",
        ));
    }
    let model = cx.bound()?.model.clone();
    let opts = WalkOptions {
        top: plan.top,
        layers: Some((plan.layers.first, plan.layers.last)),
        mode,
    };
    let result = browse::walk(model.as_ref(), exec.as_ref(), &ids, &opts).map_err(browse_err)?;
    cx.check_cancel()?;
    let keys: Vec<(usize, usize)> = result.hits().map(|h| (h.layer, h.feature)).collect();
    let cache = label_cache(&model);
    let labels_missing = cache.missing(&keys);
    let t0 = Instant::now();
    let labels = cache.labels(model.as_ref(), &keys).map_err(browse_err)?;
    let labels_ms = t0.elapsed().as_secs_f64() * 1e3;
    let label_source = LabelSource::open(model.as_ref())
        .map_err(browse_err)?
        .describe();
    Ok(Walked {
        result,
        prompt_ids: ids,
        labels,
        label_source,
        labels_missing,
        labels_ms,
        text: token_texts(cx)?,
    })
}

fn mode_text(r: &WalkResult) -> String {
    match (&r.note, r.mode_defaulted) {
        (Some(_), _) => format!("{} (default: browse-only binding)", r.mode.name()),
        (None, true) => format!("{} (default)", r.mode.name()),
        (None, false) => r.mode.name().to_string(),
    }
}

fn rows_of(w: &Walked) -> Rows {
    let mut rows = Rows::new(walk_columns());
    let mode = mode_text(&w.result);
    for (h, l) in w.result.hits().zip(&w.labels) {
        rows.push(vec![
            Value::from(h.layer),
            Value::from(h.feature),
            Value::from(h.gate),
            h.activation.into(),
            l.top_token_id().map(|t| (w.text)(t)).into(),
            Value::List(
                l.top
                    .iter()
                    .take(DOWN_TOKENS)
                    .map(|t| Value::Text((w.text)(t.0)))
                    .collect(),
            ),
            Value::from(mode.as_str()),
        ]);
    }
    rows
}

/// `WALK …`
pub(crate) fn walk(cx: &mut Cx<'_>, plan: &WalkPlan, stmt: &Statement) -> Result<Rows> {
    Ok(rows_of(&run_walk(cx, plan, stmt)?))
}

/// `EXPLAIN WALK …`: the physical plan as run — operators, mode, layers, the encoding and
/// bytes of each gate region read, the label source — then the walk's rows, one line each.
pub(crate) fn explain(cx: &mut Cx<'_>, plan: &LogicalPlan, stmt: &Statement) -> Result<Rows> {
    let LogicalPlan::Explain(inner) = plan else {
        return Err(Error::internal("explain::walk called without EXPLAIN"));
    };
    let LogicalPlan::Walk(wp) = inner.as_ref() else {
        return Err(Error::internal("explain::walk called on another statement"));
    };
    let w = run_walk(cx, wp, stmt)?;
    let r = &w.result;
    let mut lines: Vec<String> = Vec::new();
    lines.push(format!(
        "WALK {:?}  mode {}  top {}  layers {}-{}",
        wp.prompt,
        mode_text(r),
        wp.top,
        wp.layers.first,
        wp.layers.last
    ));
    if let Some(n) = &r.note {
        lines.push(format!("  note: {n}"));
    }
    let last = *w.prompt_ids.last().unwrap_or(&0);
    lines.push(format!(
        "Tokenize            {} tokens {:?}, last {} {:?}",
        w.prompt_ids.len(),
        w.prompt_ids,
        last,
        (w.text)(last)
    ));
    match r.mode {
        WalkMode::Embedding => lines.push(format!(
            "EmbedLookup         token_embedding row {last} × embedding_scale (no layer runs; one query for every layer)"
        )),
        WalkMode::Residual => lines.push(format!(
            "Forward             positions 0-{}, all layers, observer captures ffn_input and activation at the last position ({:.1} ms)",
            r.positions_run.saturating_sub(1),
            r.forward_ms
        )),
    }
    let total: usize = r.layers.iter().map(|l| l.bytes_read).sum();
    lines.push(format!(
        "GateScan            query {}, top {} by |score| per layer, in place through {} dot kernels, {} layers, {} bytes read ({:.1} ms)",
        match r.mode {
            WalkMode::Embedding => "embedding row",
            WalkMode::Residual => "normed FFN input (score = gate pre-activation)",
        },
        wp.top,
        lql_storage::codec::cpu::kernel_name(),
        r.layers.len(),
        total,
        r.scan_ms
    ));
    for l in &r.layers {
        lines.push(format!(
            "  L{:<3} ffn_gate {} [{}×{}]  {} bytes read",
            l.layer,
            l.encoding,
            cx.bound()?.model.surface.hidden,
            l.features,
            l.bytes_read
        ));
    }
    let n = w.labels.len();
    lines.push(format!(
        "FeatureLabels       source {}; computed lazily and cached per binding: {} labels, {} from cache, {} computed ({:.1} ms)",
        w.label_source,
        n,
        n - w.labels_missing.min(n),
        w.labels_missing,
        w.labels_ms
    ));
    lines.push(
        "Rows                layer, feature, gate, activation, top_token, down_tokens, mode".into(),
    );
    lines.push(String::new());
    for (h, l) in r.hits().zip(&w.labels) {
        let down: Vec<String> = l
            .top
            .iter()
            .take(DOWN_TOKENS)
            .map(|t| format!("{:?}", (w.text)(t.0)))
            .collect();
        lines.push(format!(
            "L{:<3} F{:<5} gate={:+.3}{}  top={:?}  down=[{}]",
            h.layer,
            h.feature,
            h.gate,
            h.activation
                .map_or(String::new(), |a| format!("  act={a:+.3}")),
            l.top_token_id().map(|t| (w.text)(t)).unwrap_or_default(),
            down.join(", ")
        ));
    }
    let mut rows = Rows::new(vec![Column::new("plan", ValueType::Text)]);
    for l in lines {
        rows.push(vec![Value::from(l)]);
    }
    Ok(rows)
}
