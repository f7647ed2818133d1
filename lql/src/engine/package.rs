//! Layer packages in the engine: `USE "dir" [LAYERS a-b]` and `USE "hf://org/repo[@rev]"`
//! bind a package (or one stage of it), [`run_stage`] runs the bound stage from a prompt
//! or an activation file (`Connection::run_stage`), and `VERIFY "dir"` on a package folder
//! reports every check as rows.
//!
//! `hf://` references resolve offline from `$LQL_HOME/packages/…` and are always
//! checksum-verified (cache hits included); local folders are verified unless
//! `LQL_PACKAGE_VERIFY=0`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use lql_exec::stage::{StageOutput, StageRunner};
use lql_planner::{LayerRange, SourceKind};
use lql_storage::format::package::activation::ActivationFrame;
use lql_storage::format::package::{self as pkg, hf, StageSpan, VerifyMode};

use super::{Bound, Cx, Engine};
use crate::database::SharedModel;
use crate::error::{Error, Result};
use crate::rows::Rows;
use crate::value::Value;

/// What the session remembers about a bound package.
#[derive(Debug, Clone)]
pub(crate) struct StageBinding {
    pub span: StageSpan,
    pub model_id: String,
    pub manifest_sha256: String,
    /// The package artifacts the binding mapped (repository-relative, selection order).
    pub files: Vec<String>,
}

/// What a stage is run from.
#[derive(Debug, Clone, Copy)]
pub enum StageInput<'a> {
    /// A prompt (the stage must own the input boundary: layer 0).
    Prompt(&'a str),
    /// The previous stage's activation file.
    Activations(&'a Path),
}

/// What a stage produced.
#[derive(Debug, Clone, PartialEq)]
pub enum StageResult {
    /// Hidden states written to the output file, for the stage starting at `layer_end`.
    Activations {
        path: PathBuf,
        tokens: usize,
        layer_end: usize,
    },
    /// The logits of the last position (the stage owns the output boundary).
    Logits(Vec<f32>),
}

/// Whether `target` names a layer package (a folder with a manifest, or `hf://`).
pub(crate) fn is_package(target: &str) -> bool {
    hf::is_hf_ref(target) || Path::new(target).join(pkg::MANIFEST_NAME).exists()
}

/// Bind the package `target` (a folder or `hf://` reference), layers `layers` or all.
pub(crate) fn bind(cx: &mut Cx<'_>, target: &str, layers: Option<LayerRange>) -> Result<Rows> {
    let (dir, verify) = if hf::is_hf_ref(target) {
        (hf::resolve(target)?, VerifyMode::hashed())
    } else {
        (PathBuf::from(target), VerifyMode::default_local())
    };
    let range = layers.map(|l| (l.first as u64, l.last as u64));
    let p = pkg::open_package(&dir, range, &verify)?;
    cx.check_cancel()?;
    let span = p.span;
    let binding = StageBinding {
        span,
        model_id: p.manifest.model_id.clone(),
        manifest_sha256: p.manifest_sha256.clone(),
        files: p.selected_paths().iter().map(|s| s.to_string()).collect(),
    };
    let shared = Arc::new(SharedModel::new(p.model));
    let mut b = Bound::new(target.to_string(), shared);
    b.facts.source = SourceKind::Package;
    if !span.is_whole() {
        b.facts.stage = Some((span.first, span.last));
        b.facts.can_execute = false;
        b.facts.can_browse = false;
        b.facts.missing_for_execute = vec![format!(
            "layers outside {}-{} (a stage of the package; run it with Connection::run_stage)",
            span.first, span.last
        )];
        b.facts.missing_for_browse = b.facts.missing_for_execute.clone();
    }
    b.stage = Some(binding);
    cx.engine.bound = Some(b);
    cx.engine.version += 1;
    let mut rows = Rows::new(super::columns_of(&lql_planner::schema::use_columns()));
    if let Some(b) = &cx.engine.bound {
        rows.push(vec![
            Value::from(b.name.as_str()),
            Value::from(b.facts.source.to_string()),
            Value::from(b.model().surface.source_architecture.as_str()),
            Value::from(b.model().surface.n_layers),
            Value::from(dir.display().to_string()),
        ]);
    }
    Ok(rows)
}

/// The artifacts the bound package mapped (repository-relative), if a package is bound.
pub(crate) fn bound_files(engine: &Engine) -> Option<Vec<String>> {
    engine
        .bound
        .as_ref()
        .and_then(|b| b.stage.as_ref())
        .map(|s| s.files.clone())
}

/// Run the bound stage from `input`; hidden states go to `out` (required unless the stage
/// owns the output boundary, which returns logits).
pub(crate) fn run_stage(
    engine: &mut Engine,
    input: StageInput<'_>,
    out: Option<&Path>,
) -> Result<StageResult> {
    let b = engine.bound.as_ref().ok_or_else(|| {
        Error::semantic("no model is bound")
            .with_help("bind a package stage: USE \"dir\" LAYERS 0-9")
    })?;
    let st = b.stage.as_ref().ok_or_else(|| {
        Error::semantic(format!(
            "{} is not a layer package; stages run on packages",
            b.name
        ))
        .with_help("write one: EXTRACT MODEL \"m.gguf\" INTO \"dir\" FORMAT PACKAGE")
    })?;
    let runner = StageRunner::with_identity(
        b.model().clone(),
        st.span,
        st.model_id.clone(),
        st.manifest_sha256.clone(),
        0,
    )?;
    let output = match input {
        StageInput::Prompt(text) => {
            let tok = b.shared.tokenizer()?;
            let ids = tok.encode(text, true)?;
            runner.from_tokens(&ids)?
        }
        StageInput::Activations(path) => runner.from_frame(&ActivationFrame::read(path)?)?,
    };
    match output {
        StageOutput::Logits(l) => Ok(StageResult::Logits(l.values)),
        StageOutput::Hidden(frame) => {
            let out = out.ok_or_else(|| {
                Error::semantic(format!(
                    "this stage ends at layer {} of {}: name a file for its activations",
                    st.span.last, st.span.n_layers
                ))
            })?;
            frame.write(out)?;
            Ok(StageResult::Activations {
                path: out.to_path_buf(),
                tokens: frame.header.tokens as usize,
                layer_end: frame.header.layer_end as usize,
            })
        }
    }
}

/// `Write PACKAGE "dir"` (EXTRACT … FORMAT PACKAGE): slice the source GGUF into a layer
/// package; one row in EXTRACT's columns (path, objects = artifacts, tensors, payload
/// bytes, encoding `SOURCE`, seconds).
pub(crate) fn write(cx: &mut Cx<'_>, input: super::datum::Datum) -> Result<super::datum::Datum> {
    let super::datum::Datum::Source(model) = input else {
        return Err(super::interp::wrong_input("Write", &input));
    };
    let lql_planner::LogicalPlan::Extract(plan) = cx.plan else {
        return Err(Error::internal("Write PACKAGE outside EXTRACT"));
    };
    if model.kind != lql_storage::model::SourceKind::Gguf || !model.path.is_file() {
        return Err(Error::unsupported(format!(
            "not supported yet: a layer package from a {:?} source; EXTRACT … FORMAT PACKAGE slices a GGUF file",
            model.kind
        )));
    }
    let model_id = plan.model_id.clone().ok_or_else(|| {
        Error::semantic("a layer package needs MODEL_ID \"org/repo:distribution\" (a model coordinate, not a file name)")
    })?;
    let source_revision = plan.source_revision.clone().ok_or_else(|| {
        Error::semantic(
            "a layer package from a local file needs SOURCE_REVISION \"<commit or tag>\"",
        )
    })?;
    let t0 = std::time::Instant::now();
    let w = pkg::writer::write_package(&pkg::writer::WriteOptions {
        source: model.path.clone(),
        out_dir: PathBuf::from(&plan.output),
        model_id,
        source_revision,
        projectors: Vec::new(),
    })?;
    let m = &w.manifest;
    let arts: Vec<&pkg::Artifact> = [&m.shared.metadata, &m.shared.embeddings, &m.shared.output]
        .into_iter()
        .chain(m.layers.iter().map(|l| &l.artifact))
        .collect();
    let mut rows = Rows::new(super::result_columns(cx.plan));
    rows.push(vec![
        Value::from(plan.output.as_str()),
        Value::from(arts.len()),
        Value::from(arts.iter().map(|a| a.tensor_count as usize).sum::<usize>()),
        Value::from(arts.iter().map(|a| a.tensor_bytes).sum::<u64>()),
        Value::from("SOURCE"),
        Value::from(t0.elapsed().as_secs_f64()),
    ]);
    Ok(super::datum::Datum::Rows(rows))
}

/// `VERIFY "dir"` on a layer package: one row per check, in VERIFY's columns (the check in
/// `representation`, the artifact in `object`).
pub(crate) fn verify(cx: &Cx<'_>, dir: &Path, against: Option<&Path>) -> Result<Rows> {
    let mut rows = Rows::new(super::result_columns(cx.plan));
    for r in pkg::against::verify(dir, against)? {
        rows.push(vec![
            Value::from(r.artifact),
            Value::from(r.check),
            Value::from(""),
            Value::from(r.status),
            Value::from(""),
            Value::from(""),
            Value::from(r.detail),
        ]);
    }
    Ok(rows)
}
