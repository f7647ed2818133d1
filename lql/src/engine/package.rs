//! Layer packages in the engine: `USE "dir" [LAYERS a-b]` and `USE "hf://org/repo[@rev]"`
//! bind a package (or one stage of it); `RUN STAGE … INTO "h.bin"`, `INFER FROM "h.bin"`
//! and [`run_stage`] (`Connection::run_stage`) run the bound stage from a prompt or an
//! activation file; `SHOW PACKAGE` reports the binding; `VERIFY "dir" [AGAINST "src"]` on
//! a package folder reports every check as rows.
//!
//! `hf://` references resolve to `$LQL_HOME/packages/…`, downloading what the stage needs
//! and the cache lacks (`storage::format::package::hub`), and are always checksum-verified
//! (cache hits included); local folders are verified unless `LQL_PACKAGE_VERIFY=0`.
//! `SHOW PACKAGE "dir|hf://…"` inspects a package without binding it (manifest and
//! metadata fragment only).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use lql_exec::stage::{StageOutput, StageRunner};
use lql_exec::Logits;
use lql_planner::{LayerRange, SourceKind, StageInput as PlanInput};
use lql_storage::format::package::activation::ActivationFrame;
use lql_storage::format::package::hub::{self, Need};
use lql_storage::format::package::integrity::Verified;
use lql_storage::format::package::loader::Selected;
use lql_storage::format::package::{self as pkg, hf, StageSpan, VerifyMode};

use super::datum::Datum;
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
    /// The manifest as validated at USE (SHOW PACKAGE reads it).
    pub manifest: Arc<pkg::Manifest>,
    /// The selected artifacts and how each was verified.
    pub selected: Vec<Selected>,
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
    let range = layers.map(|l| (l.first as u64, l.last as u64));
    let (dir, verify) = if hf::is_hf_ref(target) {
        (fetch(cx, target, Need::Stage(range))?, VerifyMode::hashed())
    } else {
        (PathBuf::from(target), VerifyMode::default_local())
    };
    let p = pkg::open_package(&dir, range, &verify)?;
    cx.check_cancel()?;
    let span = p.span;
    let binding = StageBinding {
        span,
        model_id: p.manifest.model_id.clone(),
        manifest_sha256: p.manifest_sha256.clone(),
        files: p.selected_paths().iter().map(|s| s.to_string()).collect(),
        manifest: Arc::new(p.manifest.clone()),
        selected: p.selected.clone(),
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
    Ok(super::use_model::summary(cx, Some(&dir)))
}

/// The cache folder of the `hf://` reference `target` holding what `need` asks for,
/// downloaded unless the connection is offline (`OpenFlags::OFFLINE`, `--offline`) or the
/// environment says so (`HF_HUB_OFFLINE`, `LQL_OFFLINE`).
fn fetch(cx: &Cx<'_>, target: &str, need: Need) -> Result<PathBuf> {
    let mut cfg = hub::HubConfig::from_env()?;
    cfg.offline |= cx
        .engine
        .db
        .flags()
        .contains(crate::flags::OpenFlags::OFFLINE);
    Ok(hub::resolve_with(target, need, &cfg)?)
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
    match run_stage_output(engine, input)? {
        (StageOutput::Logits(l), _) => Ok(StageResult::Logits(l.values)),
        (StageOutput::Hidden(frame), span) => {
            let out = out.ok_or_else(|| {
                Error::semantic(format!(
                    "this stage ends at layer {} of {}: name a file for its activations",
                    span.last, span.n_layers
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

/// Run the bound stage from `input`: its output and the stage it ran.
fn run_stage_output(
    engine: &mut Engine,
    input: StageInput<'_>,
) -> Result<(StageOutput, StageSpan)> {
    let b = engine.bound.as_ref().ok_or_else(|| {
        Error::semantic("no model is bound")
            .with_code(crate::Code::NoModel)
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
    Ok((output, st.span))
}

/// The `Stage` operator (RUN STAGE, INFER FROM): hidden states written to `into` (one row
/// in RUN STAGE's columns), or the last stage's logits handed to TopK.
pub(crate) fn stage(cx: &mut Cx<'_>, input: &PlanInput, into: Option<&str>) -> Result<Datum> {
    cx.check_cancel()?;
    let input = match input {
        PlanInput::Prompt(p) => StageInput::Prompt(p),
        PlanInput::File(f) => StageInput::Activations(Path::new(f)),
    };
    match (run_stage_output(cx.engine, input)?, into) {
        ((StageOutput::Logits(l), _), None) => Ok(Datum::Logits(Logits { values: l.values })),
        ((StageOutput::Hidden(frame), span), Some(path)) => {
            super::protect::refuse_overwrite(cx, path, "RUN STAGE … INTO", &[])?;
            frame.write(Path::new(path))?;
            let mut rows = Rows::new(cx.result_columns());
            rows.push(vec![
                Value::from(path),
                Value::from(frame.header.tokens as usize),
                Value::from(format!("{}-{}", span.first, span.last)),
                Value::from(frame.header.layer_end as usize),
            ]);
            Ok(Datum::Rows(rows))
        }
        ((_, span), _) => Err(Error::internal(format!(
            "stage {}-{} of {} gave the other kind of output than its plan expects",
            span.first, span.last, span.n_layers
        ))),
    }
}

/// `SHOW PACKAGE`: the bound package's identity, ABI, stage, the artifacts this binding
/// mapped (size, how each was verified), projectors and the resolved generation policy.
/// `SHOW PACKAGE "dir|hf://…"`: the same for a package that is not bound ([`inspect`]).
pub(crate) fn show(cx: &mut Cx<'_>, container: Option<&str>) -> Result<Rows> {
    if let Some(target) = container {
        return inspect(cx, target);
    }
    let b = cx
        .engine
        .bound
        .as_ref()
        .ok_or_else(|| Error::semantic("no model is bound"))?;
    let st = b
        .stage
        .as_ref()
        .ok_or_else(|| Error::semantic(format!("{} is not a layer package", b.name)))?;
    let m = &st.manifest;
    let mut rows = PackageRows::new(cx);
    rows.identity(m, &st.manifest_sha256);
    rows.push(
        "stage",
        "layers",
        format!("{}-{}", st.span.first, st.span.last),
        format!(
            "of {} layers{}{}",
            st.span.n_layers,
            if st.span.input {
                "; owns the input (embedding)"
            } else {
                ""
            },
            if st.span.output {
                "; owns the output (head)"
            } else {
                ""
            },
        ),
    );
    for s in &st.selected {
        rows.artifact(&s.artifact, role_of(s), verified_text(s.verified));
    }
    rows.projectors_and_policy(m);
    Ok(rows.rows)
}

/// `SHOW PACKAGE "dir|hf://…"`: metadata-only inspection (seed 000): the manifest and the
/// shared metadata fragment are validated (and, for `hf://`, downloaded and hashed); every
/// other artifact is listed with whether it is present, without reading it. Nothing is
/// bound and no layer range is needed.
fn inspect(cx: &mut Cx<'_>, target: &str) -> Result<Rows> {
    let (dir, verify) = if hf::is_hf_ref(target) {
        (fetch(cx, target, Need::Metadata)?, VerifyMode::hashed())
    } else {
        (PathBuf::from(target), VerifyMode::default_local())
    };
    let (loaded, metadata) = pkg::loader::open_metadata(&dir, &verify)?;
    cx.check_cancel()?;
    let m = &loaded.manifest;
    let mut rows = PackageRows::new(cx);
    rows.identity(m, &loaded.sha256);
    rows.push(
        "stage",
        "layers",
        "none".into(),
        format!(
            "of {} layers; metadata-only inspection, nothing bound",
            m.layer_count
        ),
    );
    rows.artifact(
        &metadata.artifact,
        "metadata".into(),
        verified_text(metadata.verified),
    );
    let absent = if hf::is_hf_ref(target) {
        "not downloaded"
    } else {
        "missing"
    };
    let mut others: Vec<(String, &pkg::Artifact)> =
        vec![("embeddings".into(), &m.shared.embeddings)];
    others.extend(
        m.layers
            .iter()
            .map(|l| (format!("layer {}", l.layer_index), &l.artifact)),
    );
    others.push(("output".into(), &m.shared.output));
    for (role, a) in others {
        let state = match std::fs::metadata(dir.join(&a.path)) {
            Ok(f) if f.is_file() && f.len() == a.artifact_bytes => "present (not read)",
            Ok(_) => "present with another size",
            Err(_) => absent,
        };
        rows.artifact(a, role, state.into());
    }
    rows.projectors_and_policy(m);
    Ok(rows.rows)
}

fn role_of(s: &Selected) -> String {
    match s.layer_index {
        Some(l) => format!("{} {l}", s.role),
        None => s.role.to_string(),
    }
}

fn verified_text(v: Option<Verified>) -> String {
    match v {
        Some(Verified::Hashed) => "sha256 verified".to_string(),
        Some(Verified::Cached) => "sha256 verified (checksum cache)".to_string(),
        None => "size checked; hashing off (LQL_PACKAGE_VERIFY=0)".to_string(),
    }
}

/// SHOW PACKAGE's rows (item, name, value, detail).
struct PackageRows {
    rows: Rows,
}

impl PackageRows {
    fn new(cx: &Cx<'_>) -> PackageRows {
        PackageRows {
            rows: Rows::new(cx.result_columns()),
        }
    }

    fn push(&mut self, item: &str, name: &str, value: String, detail: String) {
        self.rows.push(vec![
            Value::from(item),
            Value::from(name),
            Value::from(value),
            Value::from(detail),
        ]);
    }

    fn identity(&mut self, m: &pkg::Manifest, manifest_sha256: &str) {
        self.push("identity", "model_id", m.model_id.clone(), String::new());
        self.push(
            "identity",
            "manifest_sha256",
            manifest_sha256.to_string(),
            "the package's identity".into(),
        );
        self.push(
            "identity",
            "source_model",
            m.source_model.path.clone(),
            format!("sha256 {}", m.source_model.sha256),
        );
        if let Some(r) = &m.source_model.revision {
            self.push("identity", "source_revision", r.clone(), String::new());
        }
        self.push(
            "abi",
            "skippy_abi_version",
            m.skippy_abi_version.clone(),
            format!("this runtime: {}", pkg::runtime_abi_string()),
        );
    }

    fn artifact(&mut self, a: &pkg::Artifact, role: String, state: String) {
        self.push(
            "artifact",
            &a.path,
            a.artifact_bytes.to_string(),
            format!("{role}; {} tensors; {state}", a.tensor_count),
        );
    }

    fn projectors_and_policy(&mut self, m: &pkg::Manifest) {
        for p in &m.projectors {
            self.push(
                "projector",
                &p.artifact.path,
                p.artifact.artifact_bytes.to_string(),
                format!("kind {}; not mapped", p.kind),
            );
        }
        for r in pkg::generation::resolve(m.generation.as_ref()) {
            self.push(
                "policy",
                &r.field,
                r.declared,
                format!("{}: {} ({})", r.status, r.resolved, r.reason),
            );
        }
    }
}

/// `WritePackage "dir"` (EXTRACT … FORMAT PACKAGE): slice the source GGUF into a layer
/// package; one row in EXTRACT's columns (path, objects = artifacts, tensors, payload
/// bytes, encoding `SOURCE`, seconds).
pub(crate) fn write(
    cx: &mut Cx<'_>,
    input: super::datum::Datum,
    plan: &lql_planner::ExtractPlan,
) -> Result<super::datum::Datum> {
    let super::datum::Datum::Source(model) = input else {
        return Err(super::interp::wrong_input("WritePackage", &input));
    };
    if model.kind != lql_storage::model::SourceKind::Gguf || !model.path.is_file() {
        return Err(Error::unsupported(format!(
            "not supported yet: a layer package from a {:?} source; EXTRACT … FORMAT PACKAGE slices a GGUF file",
            model.kind
        )));
    }
    // The binder refused a package without its identity.
    let (Some(model_id), Some(source_revision)) =
        (plan.model_id.clone(), plan.source_revision.clone())
    else {
        return Err(Error::internal(
            "a layer package reached WritePackage without MODEL_ID and SOURCE_REVISION",
        ));
    };
    let t0 = std::time::Instant::now();
    let w = pkg::writer::write_package(&pkg::writer::WriteOptions {
        source: model.path.clone(),
        out_dir: PathBuf::from(&plan.output),
        model_id,
        source_revision,
        projectors: plan.projectors.iter().map(PathBuf::from).collect(),
        recorded_as: None,
    })?;
    let m = &w.manifest;
    let arts: Vec<&pkg::Artifact> = [&m.shared.metadata, &m.shared.embeddings, &m.shared.output]
        .into_iter()
        .chain(m.layers.iter().map(|l| &l.artifact))
        .collect();
    let mut rows = Rows::new(cx.result_columns());
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
    let mut rows = Rows::new(cx.result_columns());
    for r in pkg::against::verify(dir, against)? {
        rows.push(match against {
            // VERIFY … AGAINST's columns: authorities, object, check, status, ….
            Some(_) => vec![
                Value::from("package ↔ source"),
                Value::from(r.artifact),
                Value::from(r.check),
                Value::from(r.status),
                Value::from(""),
                Value::from(""),
                Value::from(r.detail),
            ],
            None => vec![
                Value::from(r.artifact),
                Value::from(r.check),
                Value::from(""),
                Value::from(r.status),
                Value::from(""),
                Value::from(""),
                Value::from(r.detail),
            ],
        });
    }
    Ok(rows)
}
