//! USE: binds a model to the session — a path (GGUF file, Hugging Face folder; VINDEX3
//! containers once storage opens them) or a catalogue name, fetched into the local cache
//! with progress reports. Opening maps files and parses headers only.

use std::path::Path;

use lql_planner::{BindTarget, UsePlan};
use lql_storage::catalogue;

use super::datum::Datum;
use super::{Bound, Cx};
use crate::error::{Error, Result};
use crate::progress::{Progress, ProgressUnit};
use crate::rows::Rows;
use crate::value::Value;

/// `Bind` (USE): binds a path, a package stage, a container's profile or a catalogue name
/// on the plan's backend; errors point at the model's path or name in the statement, an
/// unavailable backend at the BACKEND clause.
pub(crate) fn open(cx: &mut Cx<'_>, plan: &UsePlan) -> Result<Datum> {
    let at = |e: Error| e.or_span(plan.source_span.range());
    // `BACKEND gpu` without an adapter is refused before anything is bound.
    super::backend::check_available(plan.backend).map_err(|e| match plan.backend_span {
        Some(s) => e.or_span(s.range()),
        None => e,
    })?;
    let rows = match &plan.target {
        BindTarget::Catalogue(n) => bind_catalogue(cx, n),
        BindTarget::Path(target) => match (plan.layers, &plan.profile) {
            (Some(_), _) if !super::package::is_package(target) && is_another_format(target) => {
                Err(layers_need_a_package(target))
            }
            (layers, _) if layers.is_some() || super::package::is_package(target) => {
                super::package::bind(cx, target, layers)
            }
            (None, Some(p)) => bind_profile(cx, target, p),
            _ => bind_path(cx, target, None),
        },
    };
    let rows = rows.map_err(at)?;
    if let Some(b) = cx.engine.bound.as_mut() {
        b.backend = plan.backend;
        b.runs_on = plan.runs_on.clone();
    }
    Ok(Datum::Rows(rows))
}

/// Binds a path that exists as a file or folder, else a catalogue name (as
/// `Connection::open` does).
pub(crate) fn bind_any(cx: &mut Cx<'_>, path_or_name: &str) -> Result<Rows> {
    if super::package::is_package(path_or_name) {
        return super::package::bind(cx, path_or_name, None);
    }
    let p = Path::new(path_or_name);
    let looks_like_path =
        path_or_name.contains(std::path::MAIN_SEPARATOR) || p.extension().is_some();
    if p.exists() {
        return bind_path(cx, path_or_name, None);
    }
    let is_catalogue = catalogue::find(path_or_name)?.is_some();
    if looks_like_path && !is_catalogue {
        bind_path(cx, path_or_name, None)
    } else {
        bind_catalogue(cx, path_or_name)
    }
}

/// `USE "c" PROFILE "name"`: binds a VINDEX3 container with the variants the profile
/// selects (seed 002 §9.1); the profile must exist and select present variants, and a
/// profile claiming more authority than its selections allow is refused.
fn bind_profile(cx: &mut Cx<'_>, path: &str, profile: &str) -> Result<Rows> {
    let p = Path::new(path);
    if lql_storage::format::vindex3::detect(p).is_err() {
        return Err(Error::semantic(format!(
            "USE … PROFILE selects variants of a VINDEX3 container; {path} is not one"
        )));
    }
    let shared = cx.engine.db.model_profile(p, Some(profile))?;
    cx.engine.bound = Some(Bound::new(path.to_string(), shared));
    cx.engine.version += 1;
    Ok(summary(cx, None))
}

/// Opens `path` and binds it under `name` (default: the path as given).
pub(crate) fn bind_path(cx: &mut Cx<'_>, path: &str, name: Option<&str>) -> Result<Rows> {
    let p = Path::new(path);
    if !p.exists() {
        let mut e = Error::io(format!("{path}: no such file or folder"));
        if catalogue::find(path).ok().flatten().is_some() {
            e = e.with_help(format!("{path} is a catalogue model: USE MODEL \"{path}\""));
        }
        return Err(e);
    }
    let shared = cx.engine.db.model(p)?;
    let name = name.unwrap_or(path).to_string();
    cx.engine.bound = Some(Bound::new(name, shared));
    cx.engine.version += 1;
    Ok(summary(cx, None))
}

/// Resolves a catalogue name (fetching it if needed) and binds it.
pub(crate) fn bind_catalogue(cx: &mut Cx<'_>, name: &str) -> Result<Rows> {
    let entries = catalogue::entries()?;
    let Some(entry) = entries.iter().find(|e| e.name.eq_ignore_ascii_case(name)) else {
        let names: Vec<&str> = entries.iter().map(|e| e.name.as_str()).collect();
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
        if cx
            .engine
            .db
            .flags()
            .contains(crate::flags::OpenFlags::OFFLINE)
        {
            catalogue::resolve_offline(&entry.name, &mut report)
        } else {
            catalogue::resolve(&entry.name, &mut report)
        }
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
    bind_path(cx, &path.to_string_lossy(), Some(&entry.name))
}

/// The one-row result of USE: what got bound; `path` is shown as its path (a layer
/// package's folder), else the model's own.
pub(crate) fn summary(cx: &Cx<'_>, path: Option<&Path>) -> Rows {
    let mut rows = Rows::new(super::columns_of(&lql_planner::schema::use_columns()));
    if let Some(b) = &cx.engine.bound {
        rows.push(vec![
            Value::from(b.name.as_str()),
            Value::from(b.facts.source.to_string()),
            Value::from(b.model().surface.source_architecture.as_str()),
            Value::from(b.model().surface.n_layers),
            Value::from(path.unwrap_or(&b.model().path).display().to_string()),
        ]);
    }
    rows
}

/// Whether `target` is a model file or folder of a format other than a layer package.
/// Anything else under LAYERS goes to the package binder, whose seed checks
/// (`manifest_present` …) name what is missing.
fn is_another_format(target: &str) -> bool {
    lql_storage::import::detect(Path::new(target)).is_ok()
}

/// `USE "x" LAYERS a-b` where `x` is a model of another format: LAYERS selects a stage of
/// a layer package (seed 000), so the refusal names what `x` is instead.
fn layers_need_a_package(target: &str) -> Error {
    use lql_storage::import::SourceFormat;
    let what = match lql_storage::import::detect(Path::new(target)) {
        Ok(SourceFormat::Vindex3) => "a VINDEX3 container",
        Ok(SourceFormat::Gguf) => "a GGUF file",
        Ok(SourceFormat::HfFolder) => "a Hugging Face folder",
        Ok(SourceFormat::Package) => "a layer package",
        Err(_) => "not a model this build recognises",
    };
    Error::semantic(format!(
        "USE \"{target}\" LAYERS: LAYERS selects a stage of a layer package (a folder with \
         model-package.json, or hf://…); \"{target}\" is {what}: USE it without LAYERS"
    ))
}
