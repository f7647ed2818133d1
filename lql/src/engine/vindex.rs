//! VINDEX3 statements: `EXTRACT MODEL … INTO … [ENCODING …]`, `VERIFY ["dir"]` and
//! `SHOW COMPONENTS | REPRESENTATIONS` (answered from the container artifact alone);
//! `SHOW CAPABILITIES` of the bound model (its FFN programmes and their maturity rungs).
//! `USE "container"` goes through `lql_storage::import::open` like every other source.

use std::path::{Path, PathBuf};

use lql_grammar::Encoding;
use lql_planner::{LogicalPlan, ShowPlan, ShowWhat};
use lql_storage::format::vindex3::{self, ExtractEncoding};
use lql_storage::model::SourceKind;
use lql_storage::{catalogue, import};

use super::datum::Datum;
use super::Cx;
use crate::error::{Error, Result};
use crate::progress::report_bytes;
use crate::rows::Rows;
use crate::value::Value;

/// EXTRACT's `Open "source"`: a GGUF file, HF folder, container or catalogue name.
pub(crate) fn open_source(cx: &mut Cx<'_>, op: &lql_planner::Operator) -> Result<Datum> {
    let lql_planner::Operator::Open { target, .. } = op else {
        return Err(Error::internal("open_source needs Open"));
    };
    let source = resolve_source(target)?;
    cx.check_cancel()?;
    Ok(Datum::Source(Box::new(import::open(&source)?)))
}

/// `Write VINDEX3 "dir" encoding=…` (EXTRACT): one row (path, objects, tensors,
/// payload_bytes, encoding, seconds).
pub(crate) fn write(cx: &mut Cx<'_>, input: Datum, _op: &lql_planner::Operator) -> Result<Datum> {
    let Datum::Source(model) = input else {
        return Err(super::interp::wrong_input("Write", &input));
    };
    let LogicalPlan::Extract(plan) = cx.plan else {
        return Err(Error::not_supported_yet(
            "writing anything but EXTRACT's container",
        ));
    };
    let encoding = match plan.encoding {
        Encoding::Source => ExtractEncoding::Source,
        Encoding::F32 => ExtractEncoding::F32,
        Encoding::F16 => ExtractEncoding::F16,
        Encoding::Bf16 => ExtractEncoding::BF16,
        Encoding::Q8_0 => ExtractEncoding::Q8_0,
    };
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
    let mut rows = Rows::new(super::result_columns(cx.plan));
    rows.push(vec![
        Value::from(report.path.display().to_string()),
        Value::from(report.objects),
        Value::from(report.tensors),
        Value::from(report.payload_bytes),
        Value::from(report.encoding.name()),
        Value::from(report.seconds),
    ]);
    Ok(Datum::Rows(rows))
}

/// A source path as given, else a catalogue name resolved to its cached file.
fn resolve_source(source: &str) -> Result<PathBuf> {
    let p = Path::new(source);
    if p.exists() {
        return Ok(p.to_path_buf());
    }
    if let Some(entry) = catalogue::find(source) {
        return Ok(catalogue::resolve(entry.name, &mut |_| {})?);
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
    if against.is_some() {
        return Err(Error::not_supported_yet(
            "VERIFY … AGAINST a source for a VINDEX3 container (layer packages only)",
        ));
    }
    let dir = container_dir(cx, container, "VERIFY")?;
    let mut rows = Rows::new(super::result_columns(cx.plan));
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
    let dir = container_dir(cx, None, word)?;
    let mut rows = match plan.what {
        ShowWhat::Components => {
            let mut rows = Rows::new(super::result_columns(cx.plan));
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
            let mut rows = Rows::new(super::result_columns(cx.plan));
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
            let mut rows = Rows::new(super::result_columns(cx.plan));
            // `selected`: what the binding actually maps (a USE … PROFILE may select other
            // variants than the baselines).
            let bound = cx.bound()?.model();
            let in_use = vindex3::Container::load(&dir)
                .and_then(|c| vindex3::provenance::in_use(bound, &c))
                .ok();
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
    let mut rows = Rows::new(super::result_columns(cx.plan));
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
