//! VINDEX3 statements: `EXTRACT MODEL … INTO … [ENCODING …]`, `VERIFY ["dir"]` and
//! `SHOW COMPONENTS | REPRESENTATIONS` (answered from the container artifact alone);
//! `SHOW CAPABILITIES` of the bound model (its FFN programmes and their maturity rungs).
//! `USE "container"` goes through `lql_storage::import::open` like every other source.

use std::path::{Path, PathBuf};

use lql_grammar::Encoding;
use lql_planner::{RepresentTarget, ShowPlan, ShowWhat};
use lql_storage::format::vindex3::{self, labels, ExtractEncoding};
use lql_storage::model::SourceKind;
use lql_storage::{catalogue, import};

use super::datum::Datum;
use super::Cx;
use crate::error::{Error, Result};
use crate::progress::report_bytes;
use crate::rows::Rows;
use crate::value::Value;

/// EXTRACT's `OpenSource "source"`: a GGUF file, HF folder, container or catalogue name.
pub(crate) fn open_source(cx: &mut Cx<'_>, target: &str) -> Result<Datum> {
    let offline = cx
        .engine
        .db
        .flags()
        .contains(crate::flags::OpenFlags::OFFLINE);
    let source = resolve_source(target, offline)?;
    cx.check_cancel()?;
    Ok(Datum::Source(Box::new(import::open(&source)?)))
}

/// `WriteContainer VINDEX3 "dir" encoding=…` (EXTRACT): one row (path, objects, tensors,
/// payload_bytes, encoding, seconds).
pub(crate) fn write(
    cx: &mut Cx<'_>,
    input: Datum,
    plan: &lql_planner::ExtractPlan,
) -> Result<Datum> {
    let Datum::Source(model) = input else {
        return Err(super::interp::wrong_input("WriteContainer", &input));
    };
    let encoding = match plan.encoding {
        Encoding::Source => ExtractEncoding::Source,
        Encoding::F32 => ExtractEncoding::F32,
        Encoding::F16 => ExtractEncoding::F16,
        Encoding::Bf16 => ExtractEncoding::BF16,
        Encoding::Q8_0 => ExtractEncoding::Q8_0,
    };
    if plan.labels && model.surface.moe.is_some() {
        // Refused before anything is written, so no container without its labels appears.
        return Err(Error::not_supported_yet(MOE_STORED_LABELS));
    }
    // The statement's own duration: the container and, WITH LABELS, its labels.
    let started = std::time::Instant::now();
    let task = format!("extract {}", plan.output);
    let handler = cx.engine.progress.clone();
    let cancel = cx.cancel.clone();
    let mut progress = |p: vindex3::ExtractProgress| {
        report_bytes(handler.as_ref(), &task, p.bytes_done, p.bytes_total, false)
    };
    let result = match plan.shape {
        lql_grammar::ExtractShape::Bank => vindex3::extract_bank(
            &model,
            Path::new(&plan.output),
            plan.group.map(|g| usize::try_from(g).unwrap_or(usize::MAX)),
            &mut progress,
            &cancel,
        ),
        lql_grammar::ExtractShape::Graph => vindex3::extract_cancellable(
            &model,
            Path::new(&plan.output),
            encoding,
            &mut progress,
            &cancel,
        ),
    };
    let report = match result {
        Ok(r) => r,
        Err(_) if cancel.load(std::sync::atomic::Ordering::Relaxed) => {
            return Err(Error::interrupted())
        }
        Err(e) => return Err(e.into()),
    };
    report_bytes(
        handler.as_ref(),
        &task,
        report.payload_bytes,
        report.payload_bytes,
        true,
    );
    if plan.labels {
        // The container is published; its labels are added as a derived segment and
        // recorded in index.json (written last), read back through the new container.
        let written = import::open(&report.path)?;
        store_labels(cx, &written, &report.path)?;
    }
    let mut rows = Rows::new(cx.result_columns());
    rows.push(vec![
        Value::from(report.path.display().to_string()),
        Value::from(report.objects),
        Value::from(report.tensors),
        Value::from(report.payload_bytes),
        Value::from(report.encoding.name()),
        Value::from(started.elapsed().as_secs_f64()),
    ]);
    Ok(Datum::Rows(rows))
}

/// Stored labels have one width per layer and no expert axis; expert features are
/// labelled on demand.
const MOE_STORED_LABELS: &str =
    "stored labels of a mixture-of-experts model (expert features are labelled on demand, docs/moe.md)";

/// Every label of `model` (opened from the container `dir`), computed by batched
/// unembedding products and stored in `dir` as a derived segment recorded in index.json.
fn store_labels(
    cx: &Cx<'_>,
    model: &lql_storage::Model,
    dir: &Path,
) -> Result<(labels::FeatureLabelsEntry, labels::LabelTable)> {
    use lql_exec::browse::labels::{compute_all, LabelSource, LABEL_TOP_K};
    if model.kind != SourceKind::Vindex3 {
        return Err(Error::semantic(format!(
            "{}: stored labels go into a VINDEX3 container, and this is a {:?} source",
            dir.display(),
            model.kind
        )));
    }
    if model.surface.moe.is_some() {
        return Err(Error::not_supported_yet(MOE_STORED_LABELS));
    }
    let source = LabelSource::open(model)?.describe();
    let cancel = cx.cancel.clone();
    let (features, computed) =
        compute_all(model, &|| cancel.load(std::sync::atomic::Ordering::Relaxed))?;
    let top_k = LABEL_TOP_K.min(model.surface.vocab);
    let mut top = Vec::with_capacity(computed.len() * top_k);
    for (i, l) in computed.iter().enumerate() {
        if l.top.len() != top_k {
            return Err(Error::internal(format!(
                "label {i} has {} tokens; {top_k} expected",
                l.top.len()
            )));
        }
        top.extend_from_slice(&l.top);
    }
    let table = labels::LabelTable {
        layers: model.surface.n_layers,
        features,
        top_k,
        top,
    };
    let inputs = labels::inputs_of(
        model,
        &["text.embedding", "text.decoder_stack", "text.output_head"],
    )?;
    let entry = labels::write(dir, &table, &source, inputs)?;
    Ok((entry, table))
}

/// `REPRESENT LABELS ["dir"]`: every label of a container stored in it; one row (container,
/// segment, labels, top_k, bytes, sha256, seconds). `REPRESENT "obj"|ALL [FFN] AS encoding
/// [INTO "dir"]`: one row per representation added.
pub(crate) fn represent(
    cx: &mut Cx<'_>,
    target: &RepresentTarget,
    encoding: Option<Encoding>,
    ffn: bool,
    container: Option<&str>,
) -> Result<Datum> {
    if *target != RepresentTarget::Labels {
        return represent_objects(cx, target, encoding, ffn, container);
    }
    let started = std::time::Instant::now();
    let dir = container_dir(cx, container, "REPRESENT LABELS")?;
    let canon = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
    // The bound container is labelled through its binding (and its cache seeded); another
    // is opened for the statement.
    let bound = cx
        .bound()
        .ok()
        .filter(|b| canon(&b.model().path) == canon(&dir) && b.model().kind == SourceKind::Vindex3)
        .map(|b| b.shared.clone());
    let opened;
    let model: &lql_storage::Model = match &bound {
        Some(shared) => &shared.model,
        None => {
            opened = import::open(&dir)?;
            &opened
        }
    };
    let (entry, table) = store_labels(cx, model, &dir)?;
    if let Some(shared) = &bound {
        shared.seed_labels(entry.segment.clone(), &table);
        // The binding's facts (EXPLAIN's label source) follow; prepared plans re-bind.
        if let Some(b) = cx.engine.bound.as_mut() {
            b.facts.stored_labels = Some(entry.segment.clone());
        }
        cx.engine.version += 1;
    }
    let mut rows = Rows::new(cx.result_columns());
    rows.push(vec![
        Value::from(dir.display().to_string()),
        Value::from(entry.segment),
        Value::from(table.layers * table.features),
        Value::from(table.top_k),
        Value::from(entry.bytes),
        Value::from(entry.sha256),
        Value::from(started.elapsed().as_secs_f64()),
    ]);
    Ok(Datum::Rows(rows))
}

/// `REPRESENT "obj"|ALL [FFN] AS encoding [INTO "dir"]`: the representations added beside
/// the baselines (`vindex3::represent`); the binding, if it is this container, keeps what
/// it maps (existing segments are untouched) and sees the new profile on its next USE.
fn represent_objects(
    cx: &mut Cx<'_>,
    target: &RepresentTarget,
    encoding: Option<Encoding>,
    ffn: bool,
    container: Option<&str>,
) -> Result<Datum> {
    use vindex3::represent::{represent, RepresentScope};
    let dir = container_dir(cx, container, "REPRESENT")?;
    let encoding = match encoding {
        Some(Encoding::Source) | None => {
            return Err(Error::semantic(
                "REPRESENT … AS SOURCE would store the baseline's bytes again",
            )
            .with_help("name an encoding: AS F32, F16, BF16 or Q8_0"))
        }
        Some(Encoding::F32) => ExtractEncoding::F32,
        Some(Encoding::F16) => ExtractEncoding::F16,
        Some(Encoding::Bf16) => ExtractEncoding::BF16,
        Some(Encoding::Q8_0) => ExtractEncoding::Q8_0,
    };
    let objects = match target {
        RepresentTarget::Object(o) => Some(vec![o.clone()]),
        _ => None,
    };
    let scope = if ffn {
        RepresentScope::Ffn
    } else {
        RepresentScope::Whole
    };
    let task = format!("represent {}", dir.display());
    let handler = cx.engine.progress.clone();
    let cancel = cx.cancel.clone();
    let mut progress = |p: vindex3::ExtractProgress| {
        report_bytes(handler.as_ref(), &task, p.bytes_done, p.bytes_total, false)
    };
    let added = match represent(
        &dir,
        objects.as_deref(),
        scope,
        encoding,
        &mut progress,
        &cancel,
    ) {
        Ok(r) => r,
        Err(_) if cancel.load(std::sync::atomic::Ordering::Relaxed) => {
            return Err(Error::interrupted())
        }
        Err(e) => return Err(e.into()),
    };
    let mut rows = Rows::new(cx.result_columns());
    for r in added {
        rows.push(vec![
            Value::from(r.object),
            Value::from(r.representation),
            Value::from(r.variant),
            Value::from(r.base),
            Value::from(r.encoding),
            Value::from(r.fidelity),
            Value::from(r.segment),
            Value::from(r.tensors),
            Value::from(r.payload_bytes),
            Value::from(r.profile),
        ]);
    }
    Ok(Datum::Rows(rows))
}

/// `INSPECT "c"`, `DESCRIBE OBJECT "c" "obj"`, `PRECISION "c"`: answered from the
/// container's index.json, graph and segment headers (the code behind `lql vindex …`);
/// no model is bound and no payload byte is read.
pub(crate) fn artifact(
    cx: &mut Cx<'_>,
    what: lql_grammar::ArtifactWhat,
    container: &str,
    object: Option<&str>,
) -> Result<Rows> {
    use lql_grammar::ArtifactWhat as W;
    use vindex3::artifact as a;
    let dir = Path::new(container);
    let mut rows = Rows::new(cx.result_columns());
    match what {
        W::Inspect => {
            let doc = serde_json::to_value(a::inspect(dir)?)
                .map_err(|e| Error::internal(e.to_string()))?;
            if let serde_json::Value::Object(fields) = doc {
                for (k, v) in fields {
                    rows.push(vec![Value::from(k), json_value(v)]);
                }
            }
        }
        W::DescribeObject => {
            let object =
                object.ok_or_else(|| Error::internal("DESCRIBE OBJECT without an object"))?;
            for t in a::describe_object(dir, object)?.tensors {
                rows.push(vec![
                    Value::from(t.representation),
                    Value::from(t.name),
                    Value::from(t.dtype),
                    Value::from(t.shape),
                    Value::from(t.bytes),
                    Value::from(t.operands),
                ]);
            }
        }
        W::Precision => {
            for p in a::precision(dir)? {
                rows.push(vec![
                    Value::from(p.object),
                    Value::from(p.representation),
                    Value::from(p.encodings),
                    Value::from(p.weights),
                    Value::from(p.bytes),
                    Value::from(p.bits_per_weight),
                    Value::Bool(p.baseline),
                ]);
            }
        }
    }
    Ok(rows)
}

/// A JSON value as a cell: scalars as themselves, a list of scalars as a list, anything
/// else as its compact JSON text.
fn json_value(v: serde_json::Value) -> Value {
    use serde_json::Value as J;
    match v {
        J::Null => Value::Null,
        J::Bool(b) => Value::Bool(b),
        J::Number(n) => match n.as_i64() {
            Some(i) => Value::Int(i),
            None => Value::Float(n.as_f64().unwrap_or(f64::NAN)),
        },
        J::String(s) => Value::Text(s),
        J::Array(items) if items.iter().all(|i| !i.is_array() && !i.is_object()) => {
            Value::List(items.into_iter().map(json_value).collect())
        }
        other => Value::Text(other.to_string()),
    }
}

/// A source path as given, else a catalogue name resolved to its cached file (never
/// downloaded when `offline`).
fn resolve_source(source: &str, offline: bool) -> Result<PathBuf> {
    let p = Path::new(source);
    if p.exists() {
        return Ok(p.to_path_buf());
    }
    if let Some(entry) = catalogue::find(source)? {
        return Ok(if offline {
            catalogue::resolve_offline(&entry.name, &mut |_| {})?
        } else {
            catalogue::resolve(&entry.name, &mut |_| {})?
        });
    }
    Err(Error::io(format!(
        "{source}: no such file or folder, and not a catalogue model"
    ))
    .with_help("SHOW MODELS lists the catalogue"))
}

/// The container a statement names, or the bound model's when it is a VINDEX3 container.
fn container_dir(cx: &Cx<'_>, given: Option<&str>, what: &str) -> Result<PathBuf> {
    if let Some(d) = given {
        return Ok(PathBuf::from(d));
    }
    let b = cx.bound()?;
    if b.model().kind != SourceKind::Vindex3 {
        return Err(Error::semantic(format!(
            "{what} reads a VINDEX3 container, and the bound model {} is a {} source",
            b.name, b.facts.source
        ))
        .with_help(format!(
            "name a container ({what} \"dir\") or EXTRACT MODEL \"{}\" INTO \"dir\" first",
            b.name
        )));
    }
    Ok(b.model().path.clone())
}

/// `VERIFY ["dir"]`: one row per representation, graph and capability file.
pub(crate) fn verify(
    cx: &mut Cx<'_>,
    container: Option<&str>,
    against: Option<&str>,
) -> Result<Datum> {
    if let Some(d) = container.filter(|d| super::package::is_package(d)) {
        let rows = super::package::verify(cx, Path::new(d), against.map(Path::new))?;
        return Ok(Datum::Rows(with_fault(rows)));
    }
    let dir = container_dir(cx, container, "VERIFY")?;
    let mut rows = Rows::new(cx.result_columns());
    if let Some(src) = against {
        // The four authorities and payload equivalence, both ends re-hashed.
        let src = resolve_source(src, true)?;
        for r in vindex3::against::verify_against(&dir, &src)? {
            rows.push(vec![
                Value::from(r.authorities),
                Value::from(r.object),
                Value::from(r.check),
                Value::from(r.status.name()),
                Value::from(r.expected),
                Value::from(r.actual),
                Value::from(r.detail),
            ]);
        }
        return Ok(Datum::Rows(with_fault(rows)));
    }
    for r in vindex3::verify(&dir)? {
        rows.push(vec![
            Value::from(r.object),
            Value::from(r.representation),
            Value::from(r.encoding),
            Value::from(r.status.name()),
            Value::from(r.expected),
            Value::from(r.actual),
            Value::from(r.detail),
        ]);
    }
    Ok(Datum::Rows(with_fault(rows)))
}

/// A FAILED row is a fault the caller must not miss (the shell exits non-zero).
fn with_fault(mut rows: Rows) -> Rows {
    let status = rows.column_index("status");
    rows.fault = status.is_some_and(|i| {
        rows.rows
            .iter()
            .any(|r| r[i].to_string().eq_ignore_ascii_case("failed"))
    });
    rows
}

/// `SHOW COMPONENTS | REPRESENTATIONS [LIKE "pattern"]` of the bound container.
pub(crate) fn show(cx: &mut Cx<'_>, plan: &ShowPlan) -> Result<Rows> {
    let word = match plan.what {
        ShowWhat::Components => "SHOW COMPONENTS",
        ShowWhat::Profiles => "SHOW PROFILES",
        _ => "SHOW REPRESENTATIONS",
    };
    let dir = container_dir(cx, plan.container.as_deref(), word)?;
    let mut rows = match plan.what {
        ShowWhat::Components => {
            let mut rows = Rows::new(cx.result_columns());
            for c in vindex3::show_components(&dir)? {
                rows.push(vec![
                    Value::from(c.id),
                    Value::from(c.role),
                    Value::from(c.num_layers),
                    Value::from(c.hidden_size),
                    Value::from(c.operands),
                    Value::from(c.objects),
                    Value::from(c.source_artifact),
                ]);
            }
            rows
        }
        ShowWhat::Profiles => {
            let mut rows = Rows::new(cx.result_columns());
            for p in vindex3::artifact::profiles(&dir)? {
                rows.push(vec![
                    Value::from(p.profile),
                    Value::from(p.authority),
                    Value::Bool(p.standard),
                    Value::from(
                        p.select
                            .iter()
                            .map(|(o, v)| format!("{o} = {v}"))
                            .collect::<Vec<_>>()
                            .join(", "),
                    ),
                ]);
            }
            rows
        }
        _ => {
            let mut rows = Rows::new(cx.result_columns());
            // `selected`: what the binding actually maps (a USE … PROFILE may select other
            // variants than the baselines); a named container that is not bound maps nothing.
            let canon = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
            let in_use = match cx.bound() {
                Ok(b) if canon(&b.model().path) == canon(&dir) => vindex3::Container::load(&dir)
                    .and_then(|c| vindex3::provenance::in_use(b.model(), &c))
                    .ok(),
                _ => None,
            };
            for mut r in vindex3::show_representations(&dir)? {
                if let Some(u) = &in_use {
                    r.selected = u.get(&r.object) == Some(&r.representation);
                }
                rows.push(vec![
                    Value::from(r.object),
                    Value::from(r.representation),
                    Value::from(r.encoding),
                    Value::from(r.fidelity),
                    Value::Bool(r.selected),
                    Value::from(r.segment),
                    Value::from(r.tensors),
                    Value::from(r.payload_bytes),
                    Value::from(r.payload_sha256),
                ]);
            }
            rows
        }
    };
    if let Some(pattern) = &plan.like {
        rows.rows.retain(|r| {
            r.first()
                .is_some_and(|v| super::introspect::like(&v.to_string(), pattern))
        });
    }
    Ok(rows)
}

/// `SHOW CAPABILITIES`: one row per (programme, bank, formats, grouping, rung) of the bound
/// model's FFNs (seed 002 §10–11), computed from its operands (a missing region shows as
/// `representable` with what is missing).
pub(crate) fn show_capabilities(cx: &mut Cx<'_>) -> Result<Rows> {
    let model = cx.model()?;
    let mut rows = Rows::new(cx.result_columns());
    for r in vindex3::bank_reader::capabilities(&model) {
        rows.push(vec![
            Value::from(r.programme),
            Value::from(r.bank),
            Value::from(r.formats),
            Value::from(r.grouping),
            Value::from(r.maturity.name()),
            Value::from(r.layers),
            Value::from(r.detail),
        ]);
    }
    Ok(rows)
}
