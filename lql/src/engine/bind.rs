//! USE: binds a model to the session — a path (GGUF file, Hugging Face folder; VINDEX3
//! containers once storage opens them) or a catalogue name, fetched into the local cache
//! with progress reports. Opening maps files and parses headers only.

use std::path::Path;

use lql_planner::{BindTarget, UsePlan};
use lql_storage::catalogue;

use super::{Bound, Cx};
use crate::error::{Error, Result};
use crate::progress::{Progress, ProgressUnit};
use crate::rows::{Column, Rows};
use crate::value::{Value, ValueType};

/// `USE "path" | USE MODEL "name" [LAYERS a-b] [PROFILE "p"]`.
pub(crate) fn run(cx: &mut Cx<'_>, plan: &UsePlan, stmt: &lql_grammar::Statement) -> Result<Rows> {
    let (source_span, layers_span, profile_span) = match &stmt.kind {
        lql_grammar::StatementKind::Use(u) => (
            match &u.source {
                lql_grammar::UseSource::Path(s) | lql_grammar::UseSource::Model(s) => {
                    Some(s.span.range())
                }
            },
            u.layers.as_ref().map(|l| l.span.range()),
            u.profile.as_ref().map(|p| p.span.range()),
        ),
        _ => (None, None, None),
    };
    if plan.layers.is_some() {
        let mut e = Error::not_supported_yet("USE … LAYERS (binding one stage of a layer package)");
        if let Some(s) = layers_span {
            e = e.with_span(s);
        }
        return Err(e);
    }
    if plan.profile.is_some() {
        let mut e = Error::not_supported_yet("USE … PROFILE");
        if let Some(s) = profile_span {
            e = e.with_span(s);
        }
        return Err(e);
    }
    let at = |e: Error| match &source_span {
        Some(s) => e.or_span(s.clone()),
        None => e,
    };
    match &plan.target {
        BindTarget::Path(p) => bind_path(cx, p, None).map_err(at),
        BindTarget::Catalogue(n) => bind_catalogue(cx, n, None).map_err(at),
    }
}

/// Opens `path` and binds it under `name` (default: the path as given).
pub(crate) fn bind_path(cx: &mut Cx<'_>, path: &str, name: Option<&str>) -> Result<Rows> {
    let p = Path::new(path);
    if !p.exists() {
        let mut e = Error::io(format!("{path}: no such file or folder"));
        if catalogue::find(path).is_some() {
            e = e.with_help(format!("{path} is a catalogue model: USE MODEL \"{path}\""));
        }
        return Err(e);
    }
    let model = lql_storage::import::open(p)?;
    let name = name.unwrap_or(path).to_string();
    cx.engine.bound = Some(Bound::new(name, model));
    Ok(summary(cx))
}

/// Resolves a catalogue name (fetching it if needed) and binds it.
pub(crate) fn bind_catalogue(cx: &mut Cx<'_>, name: &str, _: Option<()>) -> Result<Rows> {
    let Some(entry) = catalogue::find(name) else {
        let names: Vec<&str> = catalogue::ENTRIES.iter().map(|e| e.name).collect();
        let mut e = Error::semantic(format!("no model named {name:?} in the catalogue"))
            .with_help(format!("catalogue models: {}", names.join(", ")));
        if let Some(s) = lql_grammar::suggest(name, names.iter().copied()) {
            e = e.with_help(format!("did you mean {s:?}?"));
        }
        if Path::new(name).extension().is_some() {
            e = e.with_help(format!("to open a file, give its path: USE \"{name}\""));
        }
        return Err(e);
    };
    let mut last_task: Option<String> = None;
    let handler = cx.engine.progress.clone();
    let path = {
        let mut report = |p: catalogue::Progress| {
            let verb = match p.stage {
                catalogue::Stage::Verifying => "verify",
                catalogue::Stage::Downloading => "download",
                catalogue::Stage::Extracting => "extract",
            };
            let task = format!("{verb} {}", entry.name);
            if let Some(h) = &handler {
                if let Some(prev) = last_task.as_ref().filter(|t| **t != task) {
                    h(&Progress {
                        task: prev.clone(),
                        done: 0,
                        total: None,
                        unit: ProgressUnit::Bytes,
                        finished: true,
                    });
                }
                h(&Progress {
                    task: task.clone(),
                    done: p.done,
                    total: p.total,
                    unit: ProgressUnit::Bytes,
                    finished: false,
                });
            }
            last_task = Some(task);
        };
        catalogue::resolve(entry.name, &mut report)
    };
    if let (Some(h), Some(task)) = (&handler, last_task) {
        h(&Progress {
            task,
            done: 0,
            total: None,
            unit: ProgressUnit::Bytes,
            finished: true,
        });
    }
    let path = path?;
    cx.check_cancel()?;
    bind_path(cx, &path.to_string_lossy(), Some(entry.name))
}

/// The one-row result of USE: what got bound.
fn summary(cx: &Cx<'_>) -> Rows {
    let mut rows = Rows::new(vec![
        Column::new("model", ValueType::Text),
        Column::new("format", ValueType::Text),
        Column::new("architecture", ValueType::Text),
        Column::new("layers", ValueType::Int),
        Column::new("path", ValueType::Text),
    ]);
    if let Some(b) = &cx.engine.bound {
        rows.push(vec![
            Value::from(b.name.as_str()),
            Value::from(b.facts.source.to_string()),
            Value::from(b.model.surface.source_architecture.as_str()),
            Value::from(b.model.surface.n_layers),
            Value::from(b.model.path.display().to_string()),
        ]);
    }
    rows
}
