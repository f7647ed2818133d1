//! DIFF and COMPILE: the operators that read whole model states through the material seam
//! (`lql_storage::material::MaterialSource`): `Current` (the bound model's state — its base
//! today, base + overlays once edits exist), `Open` of a second model by path,
//! `DiffOperands` (logical or PHYSICAL rows, `LAYER`, `LIMIT`; `INTO PATCH` in
//! engine/diff_patch.rs) and COMPILE's `Write`
//! (GGUF through `format::gguf::export`; VINDEX through the EXTRACT writer, stamped
//! derived, gated on INFER logits of a fixed probe set before it is renamed into place).

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use lql_grammar::CompileTarget;
use lql_planner::CompilePlan;
use lql_storage::diff::{self, DiffScope};
use lql_storage::format::gguf::export::export_gguf;
use lql_storage::format::vindex3::{self, Derivation, ExtractEncoding};
use lql_storage::material::MaterialSource;
use lql_storage::overlay::material::EffectiveMaterial;
use lql_storage::overlay::EffectiveModel;
use lql_storage::{import, OperandSource};

use super::datum::Datum;
use super::Cx;
use crate::error::{Error, Result};
use crate::progress::{report_bytes, report_items};
use crate::rows::Rows;
use crate::value::Value;

/// `Current`: the bound model's state.
pub(crate) fn current(cx: &mut Cx<'_>) -> Result<Datum> {
    // With edits in force, the effective state (base + overlays, edits folded into the
    // tensors they change); else the base.
    if let Some(state) = cx.bound()?.edits.state.clone() {
        let m = EffectiveMaterial::new(state, cx.bound()?.shared.identity())?;
        return Ok(Datum::Material(Arc::new(m)));
    }
    let model = cx.model()?;
    if !model.overlays.is_empty() {
        // A compiled container holding an overlay: its state is base + that overlay.
        let state = EffectiveModel::new(model, Vec::new()).map_err(Error::semantic)?;
        let m = EffectiveMaterial::new(Arc::new(state), cx.bound()?.shared.identity())?;
        return Ok(Datum::Material(Arc::new(m)));
    }
    Ok(Datum::Material(model))
}

/// `OpenModel "path"` under DIFF or COMPILE: a second model, opened without binding it.
pub(crate) fn open(cx: &mut Cx<'_>, path: &str) -> Result<Datum> {
    match super::vindex::open_source(cx, path)? {
        Datum::Source(m) => Ok(Datum::Material(Arc::new(*m))),
        other => Err(super::interp::wrong_input("OpenModel", &other)),
    }
}

fn material(d: Datum, op: &str) -> Result<Arc<dyn MaterialSource>> {
    match d {
        Datum::Material(m) => Ok(m),
        other => Err(super::interp::wrong_input(op, &other)),
    }
}

/// One PHYSICAL row in DIFF's columns.
fn physical_values(
    object: Value,
    layer: Value,
    role: Value,
    change: diff::Change,
    s: diff::ByteSides,
) -> Vec<Value> {
    vec![
        object,
        layer,
        role,
        Value::from(change.name()),
        Value::from(s.left_encoding),
        Value::from(s.right_encoding),
        Value::from(s.left_bytes),
        Value::from(s.right_bytes),
        Value::from(s.rows_differing),
        Value::from(s.left_sha256),
        Value::from(s.right_sha256),
    ]
}

fn layer_value(l: Option<usize>) -> Value {
    l.map_or(Value::Null, Value::from)
}

/// `DiffOperands`'s parameters.
pub(crate) struct DiffSpec<'a> {
    pub into_patch: Option<&'a str>,
    pub layer: Option<usize>,
    /// The LAYER clause, where an out-of-range layer is refused.
    pub layer_span: Option<lql_grammar::Span>,
    pub limit: Option<usize>,
    pub physical: bool,
}

/// `DiffOperands`: one input compares CURRENT with its base; two compare left → right.
pub(crate) fn diff_operands(
    cx: &mut Cx<'_>,
    inputs: Vec<Datum>,
    spec: DiffSpec<'_>,
) -> Result<Datum> {
    let DiffSpec {
        into_patch,
        layer,
        layer_span,
        limit,
        physical,
    } = spec;
    let mut it = inputs.into_iter();
    let (left, right) = match (it.next(), it.next()) {
        (Some(a), None) => {
            let m = material(a, "DiffOperands")?;
            (None, m)
        }
        (Some(a), Some(b)) => (
            Some(material(a, "DiffOperands")?),
            material(b, "DiffOperands")?,
        ),
        _ => return Err(Error::internal("DiffOperands takes one or two inputs")),
    };
    let a: &dyn MaterialSource = match &left {
        Some(l) => l.as_ref(),
        None => right.base(),
    };
    let b: &dyn MaterialSource = right.as_ref();
    // Models opened for inspection only compare by tensor name, byte for byte (PHYSICAL);
    // their values cannot be read without knowing the family.
    if physical && into_patch.is_none() {
        if let Some(found) = diff::diff_uninterpreted(a.base(), b.base(), layer, cx.cancel) {
            let mut rows = Rows::new(cx.result_columns());
            for r in found?.into_iter().take(limit.unwrap_or(usize::MAX)) {
                rows.push(physical_values(
                    Value::Null,
                    layer_value(r.layer),
                    Value::from(r.name),
                    r.change,
                    r.sides,
                ));
            }
            return Ok(Datum::Rows(rows));
        }
    }
    for m in [a.base(), b.base()] {
        if let Some(u) = &m.uninterpreted {
            return Err(Error::not_supported_yet(&format!(
                "DIFF of values or INTO PATCH for a model whose architecture LQL cannot run ({}); DIFF … PHYSICAL between two such files compares their tensors byte for byte",
                u.reason
            )));
        }
    }
    if let Some(path) = into_patch {
        return super::diff_patch::write(cx, a, b, path).map(Datum::Rows);
    }
    if let Some(l) = layer {
        let n = a.base().surface.n_layers.max(b.base().surface.n_layers);
        if l >= n {
            let mut e = Error::semantic(format!(
                "LAYER {l} is out of range: the models have {n} layers (0-{})",
                n.saturating_sub(1)
            ));
            if let Some(sp) = layer_span {
                e = e.with_span(sp.range());
            }
            return Err(e);
        }
    }
    let scope = DiffScope { layer };
    let cancel = cx.cancel.clone();
    let interrupted = |e: lql_storage::StorageError| -> Error {
        if cancel.load(Ordering::Relaxed) {
            Error::interrupted()
        } else {
            e.into()
        }
    };
    let mut rows = Rows::new(cx.result_columns());
    let take = limit.unwrap_or(usize::MAX);
    if physical {
        for r in diff::diff_physical(a, b, scope, &cancel)
            .map_err(interrupted)?
            .into_iter()
            .take(take)
        {
            rows.push(physical_values(
                Value::from(r.object),
                layer_value(r.key.layer),
                Value::from(r.key.role.name()),
                r.change,
                r.sides,
            ));
        }
    } else {
        for r in diff::diff(a, b, scope, &cancel)
            .map_err(interrupted)?
            .into_iter()
            .take(take)
        {
            rows.push(vec![
                Value::from(r.object),
                layer_value(r.key.layer),
                Value::from(r.key.role.name()),
                Value::from(r.representation),
                Value::from(r.change.name()),
                Value::from(r.elements_changed),
                Value::from(r.max_abs_delta),
                Value::from(r.rel_frobenius_delta),
            ]);
        }
    }
    Ok(Datum::Rows(rows))
}

/// COMPILE's `Compile GGUF|VINDEX|PACKAGE "out"`: one row (path, format, tensors, bytes,
/// derived_from_model, applied_patches, max_abs_logit_delta, seconds).
pub(crate) fn compile(cx: &mut Cx<'_>, input: Datum, plan: &CompilePlan) -> Result<Datum> {
    let state = material(input, "Compile")?;
    let started = Instant::now();
    let out = PathBuf::from(&plan.output);
    let identity = state.source_identity()?;
    let patches = state.applied_patches();
    let (format, tensors, bytes, gate) = match plan.target {
        CompileTarget::Gguf => {
            let task = format!("compile {}", out.display());
            let report = |done: u64, finished: bool| {
                report_items(cx.engine.progress.as_ref(), &task, done, 1, finished)
            };
            report(0, false);
            let r = export_gguf(state.as_ref(), &out, &identity)?;
            report(1, true);
            ("GGUF", r.tensors, r.bytes, None)
        }
        CompileTarget::Vindex => {
            let derivation = Derivation {
                derived_from_model: identity.clone(),
                applied_patches: patches.clone(),
                changed_objects: changed_objects(state.as_ref())?,
            };
            let (tensors, bytes, delta) = compile_vindex(cx, state.as_ref(), &out, &derivation)?;
            ("VINDEX", tensors, bytes, Some(delta))
        }
        CompileTarget::Package => {
            let (tensors, bytes) = compile_package(state.as_ref(), &out, &identity, plan)?;
            ("PACKAGE", tensors, bytes, None)
        }
    };
    let mut rows = Rows::new(cx.result_columns());
    rows.push(vec![
        Value::from(out.display().to_string()),
        Value::from(format),
        Value::from(tensors),
        Value::from(bytes),
        Value::from(identity),
        Value::from(patches.len()),
        Value::from(gate),
        Value::from(started.elapsed().as_secs_f64()),
    ]);
    Ok(Datum::Rows(rows))
}

/// COMPILE … INTO PACKAGE: the state exported as a GGUF under a staging name beside the
/// package folder (the same bytes COMPILE … INTO GGUF writes), sliced by the layer-package
/// writer (fragments, README, manifest last), the staging file removed whatever happens.
fn compile_package(
    state: &dyn MaterialSource,
    out: &Path,
    identity: &str,
    plan: &lql_planner::CompilePlan,
) -> Result<(usize, u64)> {
    use lql_storage::format::package as pkg;
    // The binder refused a package without its identity.
    let (Some(model_id), Some(source_revision)) =
        (plan.model_id.clone(), plan.source_revision.clone())
    else {
        return Err(Error::internal(
            "a layer package reached Compile without MODEL_ID and SOURCE_REVISION",
        ));
    };
    let parent = match out.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let staging = parent.join(format!(
        ".lql-compile-package-{}-{nanos}.gguf",
        std::process::id()
    ));
    // The staging file is gone after the write: the manifest names the source artifact as
    // the GGUF that COMPILE … INTO GGUF of this state writes (the same bytes, the same sha256).
    let recorded_as = format!(
        "{}.gguf",
        out.file_name()
            .map(|f| f.to_string_lossy().into_owned())
            .unwrap_or_else(|| "compiled".into())
    );
    let written = export_gguf(state, &staging, identity).and_then(|_| {
        pkg::writer::write_package(&pkg::writer::WriteOptions {
            source: staging.clone(),
            out_dir: out.to_path_buf(),
            model_id,
            source_revision,
            projectors: Vec::new(),
            recorded_as: Some(recorded_as),
        })
    });
    let _ = std::fs::remove_file(&staging);
    let m = written?.manifest;
    let arts: Vec<&pkg::Artifact> = [&m.shared.metadata, &m.shared.embeddings, &m.shared.output]
        .into_iter()
        .chain(m.layers.iter().map(|l| &l.artifact))
        .collect();
    Ok((
        arts.iter().map(|a| a.tensor_count as usize).sum(),
        arts.iter().map(|a| a.tensor_bytes).sum(),
    ))
}

/// Largest |Δ logit| the equivalence gate accepts between the state and its compiled
/// container (unedited states written in their source encodings measure exactly 0).
pub const GATE_MAX_ABS_LOGIT_DELTA: f64 = 1e-5;

/// The logical objects whose operands in `state` differ from the base's (dtype, shape or
/// bytes), or exist on one side only: what an edit changed, for the fidelity COMPILE
/// records (seed 002 §9.2).
fn changed_objects(state: &dyn MaterialSource) -> Result<std::collections::BTreeSet<String>> {
    let model = state.as_model()?;
    let base = state.base();
    let mut changed = std::collections::BTreeSet::new();
    if std::ptr::eq(model.as_ref(), base) {
        return Ok(changed);
    }
    let keys: std::collections::BTreeSet<_> = model
        .operands
        .keys()
        .chain(base.operands.keys())
        .copied()
        .collect();
    for key in keys {
        let same = match (model.view(key), base.view(key)) {
            (Some(a), Some(b)) => {
                a.dtype == b.dtype
                    && a.shape == b.shape
                    && (std::ptr::eq(a.bytes, b.bytes) || a.bytes == b.bytes)
            }
            _ => false,
        };
        if !same {
            changed.insert(key.role.object().to_string());
        }
    }
    Ok(changed)
}

/// Writes the container under a staging name beside `out`, re-opens it, compares INFER
/// logits on the probe set with the state's, and renames it to `out` only when they agree.
fn compile_vindex(
    cx: &mut Cx<'_>,
    state: &dyn MaterialSource,
    out: &Path,
    derivation: &Derivation,
) -> Result<(usize, u64, f64)> {
    if std::fs::symlink_metadata(out).is_ok() {
        return Err(Error::io(format!(
            "{}: COMPILE target exists; refusing to overwrite it",
            out.display()
        )));
    }
    let staging = vindex3::compact::sibling(out, "compiling")?;
    // The folder both the staging name and the target live in (synced after the rename).
    let parent = staging
        .parent()
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf);
    let model = state.as_model()?;
    let task = format!("compile {}", out.display());
    let handler = cx.engine.progress.clone();
    let cancel = cx.cancel.clone();
    let report = vindex3::extract_stamped(
        &model,
        &staging,
        ExtractEncoding::Source,
        Some(derivation),
        &mut |p| report_bytes(handler.as_ref(), &task, p.bytes_done, p.bytes_total, false),
        &cancel,
    );
    let report = match report {
        Ok(r) => r,
        Err(_) if cancel.load(Ordering::Relaxed) => return Err(Error::interrupted()),
        Err(e) => return Err(e.into()),
    };
    let gated = gate(state.executable(), &staging).and_then(|delta| {
        if delta.is_finite() && delta <= GATE_MAX_ABS_LOGIT_DELTA {
            Ok(delta)
        } else {
            Err(Error::semantic(format!(
                "COMPILE equivalence gate failed: the compiled container's logits differ from the state's by {delta:e} (limit {GATE_MAX_ABS_LOGIT_DELTA:e}); nothing was written"
            )))
        }
    });
    let delta = match gated {
        Ok(d) => d,
        Err(e) => {
            let _ = std::fs::remove_dir_all(&staging);
            return Err(e);
        }
    };
    if std::fs::symlink_metadata(out).is_ok() {
        let _ = std::fs::remove_dir_all(&staging);
        return Err(Error::io(format!(
            "{}: appeared while COMPILE ran; refusing to overwrite it",
            out.display()
        )));
    }
    std::fs::rename(&staging, out).map_err(|e| {
        let _ = std::fs::remove_dir_all(&staging);
        Error::io(format!("{}: {e}", out.display()))
    })?;
    lql_storage::fsutil::sync_dir(&parent)?;
    report_bytes(
        handler.as_ref(),
        &task,
        report.payload_bytes,
        report.payload_bytes,
        true,
    );
    Ok((report.tensors, report.payload_bytes, delta))
}

/// The probe set: three fixed token sequences spread over the vocabulary.
pub(crate) fn probe_ids(vocab: usize) -> Vec<Vec<u32>> {
    let v = vocab.max(1) as u64;
    (0..3u64)
        .map(|p| {
            (0..8u64)
                .map(|i| ((i * 7919 + p * 104_729 + 13) % v) as u32)
                .collect()
        })
        .collect()
}

/// max |Δ logit| over every position of every probe between `state` and the container
/// at `dir`.
fn gate(a: Arc<dyn OperandSource>, dir: &Path) -> Result<f64> {
    let compiled = import::open(dir)?;
    let vocab = a.surface().vocab;
    let b: Arc<dyn OperandSource> = Arc::new(compiled);
    let ea = lql_exec::Executor::new(a, 0)?;
    let eb = lql_exec::Executor::new(b, 0)?;
    let mut worst = 0f64;
    for ids in probe_ids(vocab) {
        let la = ea.logits_all(&ids)?;
        let lb = eb.logits_all(&ids)?;
        for (x, y) in la.iter().zip(lb.iter()) {
            if x.values.len() != y.values.len() {
                return Ok(f64::INFINITY);
            }
            for (p, q) in x.values.iter().zip(y.values.iter()) {
                let d = (*p as f64 - *q as f64).abs();
                if d.is_nan() {
                    return Ok(f64::INFINITY);
                }
                worst = worst.max(d);
            }
        }
    }
    Ok(worst)
}

/// `Compact "c" [into "out"]`: stage the compacted container (every referenced file kept
/// byte for byte, unreferenced ones discarded by name), check its logits on the probe set
/// are bit-identical to the container's when this build can run it, then publish it; one
/// row per file kept, discarded or carried.
pub(crate) fn compact(cx: &mut Cx<'_>, container: &str, into: Option<&str>) -> Result<Datum> {
    use lql_storage::format::vindex3::compact as c;
    let dir = PathBuf::from(container);
    let task = format!("compact {container}");
    let handler = cx.engine.progress.clone();
    let cancel = cx.cancel.clone();
    // In place the source tree goes away after the swap, so kept files are hard-linked;
    // INTO writes an artifact independent of its source.
    let placement = match into {
        Some(_) => c::Placement::Copy,
        None => c::Placement::Link,
    };
    let staged = c::stage(
        &dir,
        placement,
        &mut |p| report_bytes(handler.as_ref(), &task, p.bytes_done, p.bytes_total, false),
        &cancel,
    );
    let staged = match staged {
        Ok(s) => s,
        Err(_) if cancel.load(Ordering::Relaxed) => return Err(Error::interrupted()),
        Err(e) => return Err(e.into()),
    };
    // The answers, where this build can compute them (an operand in an encoding it cannot
    // decode is carried, not run).
    if let Some(model) = staged.model.as_ref().filter(|m| m.absent.is_empty()) {
        match gate(Arc::new(model.clone()), &staged.staging) {
            Ok(d) if d <= 0.0 => {}
            Ok(d) => {
                c::abandon(&staged);
                return Err(Error::semantic(format!(
                    "COMPACT equivalence check failed: the compacted container's logits differ by {d:e}; the container is unchanged"
                )));
            }
            Err(e) => {
                c::abandon(&staged);
                return Err(e);
            }
        }
    }
    if cancel.load(Ordering::Relaxed) {
        c::abandon(&staged);
        return Err(Error::interrupted());
    }
    c::publish(&staged, into.map(Path::new))?;
    report_items(handler.as_ref(), &task, 1, 1, true);
    let mut rows = Rows::new(cx.result_columns());
    for r in staged.rows {
        rows.push(vec![
            Value::from(r.action),
            Value::from(r.kind),
            Value::from(r.path),
            Value::from(r.bytes),
            Value::from(r.detail),
        ]);
    }
    Ok(Datum::Rows(rows))
}
