//! AST → LogicalPlan: fills defaults, checks every value against the bound model's facts
//! and refuses with the span of the clause at fault.

use crate::catalog::{Catalog, ModelFacts, SourceKind};
use crate::error::PlanError;
use crate::logical::*;
use crate::pushdown::{expr_size, int_domain};
use crate::schema::{self, ColumnDef};
use lql_grammar::{
    self as g, suggest, Ident, LayerSpec, Span, Spanned, StageSource, Statement, StatementKind,
    SteeringSource, SteeringSpec,
};

type Result<T> = std::result::Result<T, PlanError>;

/// Default number of INFER candidates.
pub const DEFAULT_INFER_TOP: usize = 5;
/// Default number of features per layer for WALK.
pub const DEFAULT_WALK_TOP: usize = 10;
/// Contexts `ANALYZE FEATURES` keeps per feature by default, and at most.
pub const DEFAULT_ANALYZE_TOP: usize = 20;
pub const MAX_ANALYZE_TOP: usize = 100;
/// Default MAX for GENERATE.
pub const DEFAULT_MAX_TOKENS: usize = 64;
/// Most nodes (columns, literals, operators) a WHERE clause may have.
pub const MAX_WHERE_NODES: usize = 10_000;
/// Most interpolation steps `PATCH … BY ATTRIBUTION STEPS n` takes (each one forward and
/// one backward pass).
pub const MAX_ATTRIBUTION_STEPS: u64 = 256;

/// Refuses a WHERE clause larger than [`MAX_WHERE_NODES`].
pub(crate) fn check_where_size(f: &Spanned<Expr>) -> Result<()> {
    let n = expr_size(&f.value);
    if n > MAX_WHERE_NODES {
        return Err(PlanError::semantic(
            format!("the WHERE clause has {n} terms; at most {MAX_WHERE_NODES} are allowed"),
            f.span,
        )
        .with_help(
            "split the query, or use a range (BETWEEN) instead of a long IN list or OR chain",
        ));
    }
    Ok(())
}

/// Binds a parsed statement against the catalog.
pub fn bind(stmt: &Statement, catalog: &dyn Catalog) -> Result<LogicalPlan> {
    Binder {
        facts: catalog.bound(),
        backend: catalog.backend(),
        catalog,
        stmt_span: stmt.span,
    }
    .statement(stmt)
}

/// Binds a `WITH STEERING` spec against the catalog (the engine builds the steering before
/// its statement runs).
pub fn bind_steering(spec: &Spanned<SteeringSpec>, catalog: &dyn Catalog) -> Result<SteeringPlan> {
    Binder {
        facts: catalog.bound(),
        backend: catalog.backend(),
        catalog,
        stmt_span: spec.span,
    }
    .steering(spec)
}

pub(crate) struct Binder<'c> {
    facts: Option<ModelFacts>,
    /// The session's backend setting.
    backend: lql_grammar::BackendChoice,
    /// Asked what is not in the facts (the GPU adapter a USE would run on).
    catalog: &'c dyn Catalog,
    stmt_span: Span,
}

impl Binder<'_> {
    pub(crate) fn statement(&self, stmt: &Statement) -> Result<LogicalPlan> {
        use StatementKind as K;
        Ok(match &stmt.kind {
            K::Use(u) => self.use_stmt(u)?,
            K::Infer(i) => self.infer(i)?,
            K::Generate(gen) => self.generate(gen)?,
            K::Walk(w) => self.walk(w)?,
            K::Describe(d) => self.describe(d)?,
            K::Select(s) => self.select(s)?,
            K::Trace(t) => self.trace(t)?,
            K::Patch(p) => self.patch(p)?,
            K::Insert(i) => self.insert(i)?,
            K::EvaluateEdits(e) => self.evaluate_edits(e)?,
            K::AnalyzeFeatures(a) => self.analyze_features(a)?,
            K::Delete(d) => self.delete(d)?,
            K::Update(u) => self.update(u)?,
            K::BeginPatch(p) => {
                self.model()?;
                LogicalPlan::BeginPatch {
                    path: path(p, "patch file")?,
                }
            }
            K::SavePatch(p) => {
                self.model()?;
                LogicalPlan::SavePatch {
                    path: p.as_ref().map(|p| path(p, "patch file")).transpose()?,
                }
            }
            K::Set(s) => LogicalPlan::Set(s.value),
            K::SetSteering(s) => LogicalPlan::SetSteering(match s {
                None => None,
                Some(s) => Some(self.steering(s)?),
            }),
            K::SaveSteering(p) => {
                self.model()?;
                LogicalPlan::SaveSteering {
                    path: path(p, "control-vector file")?,
                }
            }
            K::Steered {
                steering,
                statement,
            } => {
                self.steering(steering)?;
                self.statement(statement)?
            }
            K::ApplyPatch(p) => {
                self.model()?;
                LogicalPlan::ApplyPatch {
                    path: path(p, "patch file")?,
                }
            }
            K::RemovePatch(p) => {
                self.model()?;
                LogicalPlan::RemovePatch {
                    path: path(p, "patch file")?,
                }
            }
            K::Diff(d) => self.diff(d)?,
            K::Compile(c) => {
                self.model_ref(&c.source)?;
                if c.target.value != CompileTarget::Package {
                    if let Some(sp) = c.model_id.as_ref().or(c.source_revision.as_ref()) {
                        return Err(PlanError::semantic(
                            "MODEL_ID and SOURCE_REVISION describe a layer package: COMPILE … INTO PACKAGE",
                            sp.span,
                        ));
                    }
                } else if c.model_id.is_none() || c.source_revision.is_none() {
                    return Err(missing_package_identity(
                        c.model_id.is_none(),
                        c.target.span,
                        "a compiled layer package",
                    ));
                }
                LogicalPlan::Compile(CompilePlan {
                    source: c.source.value.clone(),
                    target: c.target.value,
                    output: path(&c.output, "output path")?,
                    model_id: c.model_id.as_ref().map(|s| s.value.clone()),
                    source_revision: c.source_revision.as_ref().map(|s| s.value.clone()),
                })
            }
            K::Extract(e)
                if e.format
                    .as_ref()
                    .is_none_or(|f| f.value != ExtractFormat::Package)
                    && (e.model_id.is_some()
                        || e.source_revision.is_some()
                        || !e.projectors.is_empty()) =>
            {
                let sp = e
                    .model_id
                    .as_ref()
                    .or(e.source_revision.as_ref())
                    .or(e.projectors.first())
                    .map_or(self.stmt_span, |s| s.span);
                return Err(PlanError::semantic(
                    "MODEL_ID, SOURCE_REVISION and PROJECTOR describe a layer package: add FORMAT PACKAGE",
                    sp,
                ));
            }
            K::Extract(e)
                if e.format
                    .as_ref()
                    .is_some_and(|f| f.value == ExtractFormat::Package)
                    && (e.shape.is_some() || e.group.is_some()) =>
            {
                let sp = e.shape.as_ref().map_or_else(
                    || e.group.as_ref().map_or(self.stmt_span, |g| g.span),
                    |s| s.span,
                );
                return Err(PlanError::semantic(
                    "SHAPE and GROUP describe a VINDEX3 container: drop them or use FORMAT VINDEX3",
                    sp,
                ));
            }
            K::Extract(e)
                if e.group.is_some()
                    && e.shape
                        .as_ref()
                        .is_none_or(|s| s.value != ExtractShape::Bank) =>
            {
                return Err(PlanError::semantic(
                    "GROUP sizes the group extents of the bank shape: add SHAPE BANK",
                    e.group.as_ref().map_or(self.stmt_span, |g| g.span),
                ));
            }
            K::Extract(e)
                if e.format
                    .as_ref()
                    .is_some_and(|f| f.value == ExtractFormat::Package)
                    && (e.model_id.is_none() || e.source_revision.is_none()) =>
            {
                return Err(missing_package_identity(
                    e.model_id.is_none(),
                    e.format.as_ref().map_or(self.stmt_span, |f| f.span),
                    "a layer package from a local file",
                ));
            }
            K::Extract(e) => LogicalPlan::Extract(ExtractPlan {
                source: path(&e.source, "source")?,
                output: path(&e.output, "output path")?,
                format: e
                    .format
                    .as_ref()
                    .map_or(ExtractFormat::Vindex3, |f| f.value),
                shape: e.shape.as_ref().map_or(ExtractShape::Graph, |s| s.value),
                group: e.group.as_ref().map(|g| g.value),
                encoding: e.encoding.as_ref().map_or(Encoding::Source, |x| x.value),
                layers: e.layers.as_ref().map(unchecked_layers).transpose()?,
                model_id: e.model_id.as_ref().map(|s| s.value.clone()),
                source_revision: e.source_revision.as_ref().map(|s| s.value.clone()),
                projectors: e
                    .projectors
                    .iter()
                    .map(|p| path(p, "projector file"))
                    .collect::<Result<_>>()?,
                labels: e.labels.is_some(),
            }),
            K::Artifact(a) => LogicalPlan::Artifact {
                what: a.what,
                container: path(&a.container, "container path")?,
                object: a.object.as_ref().map(|o| o.value.clone()),
            },
            K::Represent(r) => {
                let container = r
                    .container
                    .as_ref()
                    .map(|p| path(p, "container path"))
                    .transpose()?;
                if container.is_none() {
                    self.model()?;
                }
                LogicalPlan::Represent(RepresentPlan {
                    target: r.target.value.clone(),
                    encoding: r.encoding.as_ref().map(|e| e.value),
                    ffn: r.ffn.is_some(),
                    container,
                })
            }
            K::Compact(c) => LogicalPlan::Compact {
                container: path(&c.container, "container path")?,
                into: c
                    .into
                    .as_ref()
                    .map(|p| path(p, "output path"))
                    .transpose()?,
            },
            K::Verify(v) => match &v.target {
                Some(p) => LogicalPlan::Verify {
                    container: Some(path(p, "container path")?),
                    against: v
                        .against
                        .as_ref()
                        .map(|a| path(a, "source path"))
                        .transpose()?,
                },
                None => {
                    self.model()?;
                    LogicalPlan::Verify {
                        container: None,
                        against: None,
                    }
                }
            },
            K::RunStage(r) => {
                let m = self.package_stage("RUN STAGE")?;
                let input = match &r.input {
                    StageSource::Prompt(p) => {
                        if m.layer_bounds().0 != 0 {
                            return Err(PlanError::semantic(
                                format!(
                                    "this stage starts at layer {}: it runs FROM the previous stage's activations, not from a prompt",
                                    m.layer_bounds().0
                                ),
                                p.span,
                            )
                            .with_help("RUN STAGE FROM \"h.bin\" INTO \"out.bin\""));
                        }
                        StageInput::Prompt(p.value.clone())
                    }
                    StageSource::File(h) => StageInput::File(path(h, "activation file")?),
                };
                if m.layer_bounds().1 + 1 == m.n_layers {
                    return Err(PlanError::semantic(
                        "this stage owns the output head: it ends in next-token probabilities, not activations",
                        r.into.span,
                    )
                    .with_help("INFER FROM \"h.bin\" (or INFER \"prompt\" on a whole model)"));
                }
                LogicalPlan::RunStage {
                    input,
                    into: path(&r.into, "output file")?,
                }
            }
            K::InferFrom(i) => {
                let m = self.package_stage("INFER FROM")?;
                if m.layer_bounds().1 + 1 != m.n_layers {
                    return Err(PlanError::semantic(
                        format!(
                            "this stage ends at layer {} of {}: only the last stage turns activations into probabilities",
                            m.layer_bounds().1,
                            m.n_layers
                        ),
                        i.file.span,
                    )
                    .with_help("RUN STAGE FROM \"h.bin\" INTO \"out.bin\" hands this stage's output on"));
                }
                LogicalPlan::InferFrom {
                    file: path(&i.file, "activation file")?,
                    top: match &i.top {
                        Some(t) => positive(t, "TOP", Some((m.vocab, "the vocabulary size")))?,
                        None => DEFAULT_INFER_TOP.min(m.vocab.max(1)),
                    },
                }
            }
            K::Show(s) => {
                let container = match &s.container {
                    Some(c)
                        if matches!(
                            s.what.value,
                            ShowWhat::Representations
                                | ShowWhat::Profiles
                                | ShowWhat::Components
                                | ShowWhat::Package
                        ) =>
                    {
                        Some(path(c, "container path")?)
                    }
                    Some(c) => {
                        return Err(PlanError::semantic(
                            format!(
                                "SHOW {} takes no container (SHOW REPRESENTATIONS, PROFILES, COMPONENTS and PACKAGE do)",
                                s.what.value
                            ),
                            c.span,
                        ))
                    }
                    None => None,
                };
                if container.is_none()
                    && !matches!(
                        s.what.value,
                        ShowWhat::Models
                            | ShowWhat::Patches
                            | ShowWhat::Tables
                            | ShowWhat::Backends
                            | ShowWhat::Architectures
                    )
                {
                    self.model()?;
                }
                if s.what.value == ShowWhat::Package && container.is_none() {
                    self.package_stage("SHOW PACKAGE")?;
                }
                LogicalPlan::Show(ShowPlan {
                    what: s.what.value,
                    container,
                    like: s.like.as_ref().map(|l| l.value.clone()),
                })
            }
            K::Stats => {
                self.model()?;
                LogicalPlan::Stats
            }
            K::Tokenize(t) => {
                self.tokenizer()?;
                LogicalPlan::Tokenize {
                    text: t.value.clone(),
                }
            }
            K::Explain(inner) | K::ExplainPlan(inner) | K::ExplainAnalyze(inner) => {
                let b = Binder {
                    facts: self.facts.clone(),
                    backend: self.backend,
                    catalog: self.catalog,
                    stmt_span: inner.span,
                };
                let bound = b.statement(inner)?;
                let mode = match (&stmt.kind, &bound) {
                    (K::ExplainAnalyze(_), _) => ExplainMode::Analyze,
                    (K::Explain(_), LogicalPlan::Walk(_) | LogicalPlan::Infer(_)) => {
                        ExplainMode::Trace
                    }
                    _ => ExplainMode::Plan,
                };
                LogicalPlan::Explain(ExplainPlan {
                    mode,
                    inner: Box::new(bound),
                })
            }
            K::DescribeTable(t) => {
                if schema::table_columns(t.value).is_none() {
                    return Err(unbuilt_table(t));
                }
                LogicalPlan::DescribeTable { table: t.value }
            }
        })
    }

    // ---- capability checks -----------------------------------------------------------

    pub(crate) fn model(&self) -> Result<&ModelFacts> {
        self.facts.as_ref().ok_or_else(|| {
            PlanError::no_model("no model bound; USE a model first", self.stmt_span)
                .with_label(self.stmt_span, "this statement needs a model")
                .with_help("USE \"path/to/model.gguf\" or USE MODEL \"name\" binds one")
        })
    }

    /// The bound model, which must be a layer package (a stage or the whole of one).
    fn package_stage(&self, what: &str) -> Result<&ModelFacts> {
        let m = self.model()?;
        if m.source != SourceKind::Package {
            return Err(PlanError::semantic(
                format!(
                    "{what} runs a stage of a layer package; {} is a {}",
                    m.name, m.source
                ),
                self.stmt_span,
            )
            .with_help("bind one stage: USE \"dir\" LAYERS 0-9"));
        }
        Ok(m)
    }

    fn tokenizer(&self) -> Result<&ModelFacts> {
        let m = self.model()?;
        if !m.can_tokenize {
            let why = m
                .tokenizer_problem
                .as_deref()
                .map_or(String::new(), |w| format!(": {w}"));
            return Err(PlanError::semantic(
                format!("{} has no tokenizer{why}", m.name),
                self.stmt_span,
            )
            .with_help("bind a model whose file carries tokenizer metadata or a tokenizer.json"));
        }
        Ok(m)
    }

    fn executable(&self, span: Span, what: &str) -> Result<&ModelFacts> {
        self.runnable(span)?;
        let m = self.tokenizer()?;
        if !m.can_execute {
            let missing = if m.missing_for_execute.is_empty() {
                "operands for a forward pass".to_string()
            } else {
                m.missing_for_execute.join(", ")
            };
            return Err(PlanError::semantic(
                format!("{what} needs a forward pass, but {} lacks {missing}", m.name),
                span,
            )
            .with_label(span, "needs the full model")
            .with_help("bind a model that carries all weights (e.g. a GGUF file or an inference-level container)"));
        }
        Ok(m)
    }

    /// The bound model, refused by name when its architecture cannot run (opened for
    /// inspection only).
    fn runnable(&self, span: Span) -> Result<&ModelFacts> {
        let m = self.model()?;
        if let Some(why) = &m.unsupported {
            return Err(PlanError::unsupported(why.clone(), span).with_help(
                "SHOW TENSORS, SELECT FROM tensors and STATS inspect it without running it",
            ));
        }
        Ok(m)
    }

    fn browsable(&self, span: Span, what: &str) -> Result<&ModelFacts> {
        self.runnable(span)?;
        let m = self.tokenizer()?;
        if !m.can_browse {
            let missing = if m.missing_for_browse.is_empty() {
                "FFN gate rows and the token embedding".to_string()
            } else {
                m.missing_for_browse.join(", ")
            };
            return Err(PlanError::semantic(
                format!("{what} reads FFN gates, but {} lacks {missing}", m.name),
                span,
            )
            .with_label(span, "needs gate rows and the embedding"));
        }
        Ok(m)
    }

    fn model_ref(&self, r: &Spanned<ModelRef>) -> Result<()> {
        match &r.value {
            ModelRef::Current => {
                if self.facts.is_none() {
                    return Err(PlanError::no_model(
                        "CURRENT needs a bound model; USE a model first",
                        r.span,
                    )
                    .with_label(r.span, "no model is bound"));
                }
                Ok(())
            }
            ModelRef::Path(p) if p.is_empty() => {
                Err(PlanError::semantic("empty path", r.span).with_label(r.span, "empty"))
            }
            ModelRef::Path(_) => Ok(()),
        }
    }

    // ---- steering -----------------------------------------------------------------------

    /// Binds a steering spec against the bound model (its layers, a finite scale; activation
    /// addition needs the layers it works at and texts on both sides).
    fn steering(&self, s: &Spanned<SteeringSpec>) -> Result<SteeringPlan> {
        let m = self.model()?.clone();
        let scale = match &s.value.scale {
            Some(v) if !v.value.is_finite() => {
                return Err(PlanError::semantic("SCALE must be a finite number", v.span))
            }
            Some(v) => v.value,
            None => 1.0,
        };
        let layers = match &s.value.layers {
            None => None,
            Some(l) => Some(self.layers(&m, Some(l))?),
        };
        let source = match &s.value.source {
            SteeringSource::File(p) => SteeringPlanSource::File(path(p, "control-vector file")?),
            SteeringSource::Difference { positive, negative } => {
                if layers.is_none() {
                    return Err(PlanError::semantic(
                        "activation addition needs the layer it works at",
                        s.span,
                    )
                    .with_help(
                        "add AT LAYER l (or LAYERS a-b): the difference is taken and added there",
                    ));
                }
                let texts = |v: &[Spanned<String>]| -> Result<Vec<String>> {
                    v.iter()
                        .map(|t| {
                            if t.value.is_empty() {
                                Err(PlanError::semantic("a steering text is empty", t.span))
                            } else {
                                Ok(t.value.clone())
                            }
                        })
                        .collect()
                };
                SteeringPlanSource::Difference {
                    positive: texts(positive)?,
                    negative: texts(negative)?,
                }
            }
        };
        Ok(SteeringPlan {
            source,
            scale,
            layers,
        })
    }

    // ---- layer ranges -----------------------------------------------------------------

    /// Resolves an optional LAYERS clause against the bound model.
    fn layers(&self, m: &ModelFacts, clause: Option<&Spanned<LayerSpec>>) -> Result<LayerRange> {
        let (lo, hi) = m.layer_bounds();
        let Some(clause) = clause else {
            return Ok(LayerRange::new(lo, hi));
        };
        match clause.value {
            LayerSpec::All => Ok(LayerRange::new(lo, hi)),
            LayerSpec::Range { first, last } => {
                let r = checked_range(first, last, clause.span)?;
                self.check_layer_range(m, r, clause.span)?;
                Ok(r)
            }
        }
    }

    fn check_layer_range(&self, m: &ModelFacts, r: LayerRange, span: Span) -> Result<()> {
        let (lo, hi) = m.layer_bounds();
        if r.last >= m.n_layers {
            let bad = if r.first >= m.n_layers {
                r.first
            } else {
                r.last
            };
            return Err(PlanError::out_of_range(
                format!(
                    "layer {bad} out of range: {} has {} layers (0-{})",
                    m.name,
                    m.n_layers,
                    m.n_layers.saturating_sub(1)
                ),
                span,
            )
            .with_label(
                span,
                format!("layers run 0-{}", m.n_layers.saturating_sub(1)),
            ));
        }
        if r.first < lo || r.last > hi {
            return Err(PlanError::out_of_range(
                format!("layers {r} are not in the bound stage ({lo}-{hi})"),
                span,
            )
            .with_label(span, format!("only layers {lo}-{hi} are bound")));
        }
        Ok(())
    }

    // ---- statements -----------------------------------------------------------------------

    fn use_stmt(&self, u: &g::Use) -> Result<LogicalPlan> {
        let target = match &u.source {
            g::UseSource::Path(p) => BindTarget::Path(path(p, "model path")?),
            g::UseSource::Model(n) => BindTarget::Catalogue(path(n, "model name")?),
        };
        let layers = match &u.layers {
            None => None,
            Some(l) => match l.value {
                LayerSpec::All => None,
                LayerSpec::Range { .. } => Some(unchecked_layers(l)?),
            },
        };
        let profile = u.profile.as_ref().map(|p| p.value.clone());
        if let (Some(p), Some(c)) = (&profile, &u.profile) {
            if p.is_empty() {
                return Err(PlanError::semantic("empty profile name", c.span));
            }
        }
        let backend = u.backend.as_ref().map_or(self.backend, |b| b.value);
        let runs_on = RunsOn::resolve(backend, || self.catalog.gpu_adapter());
        Ok(LogicalPlan::Use(UsePlan {
            target,
            layers,
            profile,
            backend,
            runs_on,
            source_span: match &u.source {
                g::UseSource::Path(s) | g::UseSource::Model(s) => s.span,
            },
            backend_span: u.backend.as_ref().map(|b| b.span),
        }))
    }

    fn infer(&self, i: &g::Infer) -> Result<LogicalPlan> {
        let m = self.executable(self.stmt_span, "INFER")?;
        if let Some(gen) = &i.generate {
            if let Some(top) = &i.top {
                return Err(PlanError::semantic(
                    "TOP has no effect with GENERATE: INFER … GENERATE n decodes greedily",
                    top.span,
                )
                .with_label(top.span, "remove this clause")
                .with_label(gen.span, "decoding chosen here"));
            }
            let max_tokens = self.max_tokens(m, gen)?;
            return Ok(LogicalPlan::Generate(GeneratePlan {
                prompt: i.prompt.value.clone(),
                layers: self.layers(m, None)?,
                max_tokens,
                sampling: Sampling::greedy(),
                stop: Vec::new(),
                constraint: None,
            }));
        }
        let top = match &i.top {
            Some(t) => positive(t, "TOP", Some((m.vocab, "the vocabulary size")))?,
            None => DEFAULT_INFER_TOP.min(m.vocab.max(1)),
        };
        Ok(LogicalPlan::Infer(InferPlan {
            prompt: i.prompt.value.clone(),
            layers: self.layers(m, None)?,
            top,
        }))
    }

    fn max_tokens(&self, m: &ModelFacts, clause: &Spanned<i64>) -> Result<usize> {
        let limit = m.context_length.map(|c| (c, "the context length"));
        positive(clause, "the number of tokens", limit)
    }

    fn generate(&self, gen: &g::Generate) -> Result<LogicalPlan> {
        let m = self.executable(self.stmt_span, "GENERATE")?;
        let max_tokens = match &gen.max {
            Some(c) => self.max_tokens(m, c)?,
            None => m
                .context_length
                .map_or(DEFAULT_MAX_TOKENS, |c| DEFAULT_MAX_TOKENS.min(c)),
        };
        let temperature = match &gen.temperature {
            Some(t) if t.value < 0.0 => {
                return Err(PlanError::out_of_range(
                    format!(
                        "TEMPERATURE must be at least 0, got {}",
                        as_written(t.value)
                    ),
                    t.span,
                )
                .with_label(t.span, "negative temperature")
                .with_help("TEMPERATURE 0 decodes greedily"));
            }
            // Sampling runs in f32: a value it cannot hold is refused as written.
            Some(t) if t.value > f32::MAX as f64 => {
                return Err(PlanError::out_of_range(
                    format!(
                        "TEMPERATURE must be at most {:e}, got {}",
                        f32::MAX,
                        as_written(t.value)
                    ),
                    t.span,
                )
                .with_label(t.span, "out of range"));
            }
            Some(t) => t.value,
            None => 0.0,
        };
        let top_k = gen
            .top_k
            .as_ref()
            .map(|k| positive(k, "TOP_K", Some((m.vocab, "the vocabulary size"))))
            .transpose()?;
        let top_p = match &gen.top_p {
            Some(p) if !(p.value > 0.0 && p.value <= 1.0) => {
                return Err(PlanError::out_of_range(
                    format!("TOP_P must be in (0, 1], got {}", as_written(p.value)),
                    p.span,
                )
                .with_label(p.span, "out of range"));
            }
            Some(p) if (p.value as f32) == 0.0 => {
                return Err(PlanError::out_of_range(
                    format!(
                        "TOP_P must be at least {:e} (sampling runs in f32), got {}",
                        f32::MIN_POSITIVE,
                        as_written(p.value)
                    ),
                    p.span,
                )
                .with_label(p.span, "out of range"));
            }
            Some(p) => Some(p.value),
            None => None,
        };
        let seed = match &gen.seed {
            Some(s) if s.value < 0 => {
                return Err(PlanError::semantic(
                    format!("SEED must be non-negative, got {}", s.value),
                    s.span,
                ))
            }
            Some(s) => Some(s.value as u64),
            None => None,
        };
        if temperature == 0.0 {
            // Every clause must change the computation: sampling knobs need sampling.
            let knobs = [
                gen.top_k.as_ref().map(|c| (c.span, "TOP_K")),
                gen.top_p.as_ref().map(|c| (c.span, "TOP_P")),
                gen.seed.as_ref().map(|c| (c.span, "SEED")),
            ];
            if let Some((span, name)) = knobs.into_iter().flatten().next() {
                return Err(PlanError::semantic(
                    format!("{name} has no effect with greedy decoding (TEMPERATURE 0)"),
                    span,
                )
                .with_label(span, "only used when sampling")
                .with_help("add TEMPERATURE t with t > 0 to sample"));
            }
        }
        let repeat_penalty = match &gen.repeat_penalty {
            Some(r) if !(r.value > 0.0 && r.value <= 100.0) => {
                return Err(PlanError::out_of_range(
                    format!(
                        "REPEAT_PENALTY must be in (0, 100], got {}",
                        as_written(r.value)
                    ),
                    r.span,
                )
                .with_label(r.span, "out of range")
                .with_help("1 is no penalty; llama.cpp and Ollama use 1.1"));
            }
            Some(r) => Some(r.value),
            None => None,
        };
        let openai_penalty = |p: &Option<Spanned<f64>>, name: &str| match p {
            Some(p) if !(-2.0..=2.0).contains(&p.value) => Err(PlanError::out_of_range(
                format!(
                    "{name} must be between -2 and 2, got {}",
                    as_written(p.value)
                ),
                p.span,
            )
            .with_label(p.span, "out of range")),
            Some(p) => Ok(Some(p.value)),
            None => Ok(None),
        };
        let frequency_penalty = openai_penalty(&gen.frequency_penalty, "FREQUENCY_PENALTY")?;
        let presence_penalty = openai_penalty(&gen.presence_penalty, "PRESENCE_PENALTY")?;
        let stop = match &gen.stop {
            Some(s) if s.value.iter().any(String::is_empty) => {
                return Err(PlanError::semantic(
                    "STOP strings must not be empty",
                    s.span,
                ))
            }
            Some(s) => s.value.clone(),
            None => Vec::new(),
        };
        let constraint = match &gen.constraint {
            Some(c) => Some(output_constraint(c)?),
            None => None,
        };
        Ok(LogicalPlan::Generate(GeneratePlan {
            prompt: gen.prompt.value.clone(),
            layers: self.layers(m, None)?,
            max_tokens,
            sampling: Sampling {
                temperature,
                top_k,
                top_p,
                seed,
                repeat_penalty,
                frequency_penalty,
                presence_penalty,
            },
            stop,
            constraint,
        }))
    }

    /// The browse mode: the MODE clause, else RESIDUAL when the binding can run the model
    /// and EMBEDDING when it cannot. Decided here, once; the executor runs what it is given.
    fn browse_mode(
        &self,
        m: &ModelFacts,
        clause: Option<&Spanned<WalkMode>>,
        what: &str,
    ) -> Result<(WalkMode, ModeChoice)> {
        match clause {
            Some(c) => {
                if c.value == WalkMode::Residual {
                    self.executable(c.span, &format!("{what} MODE RESIDUAL"))?;
                }
                Ok((c.value, ModeChoice::Written))
            }
            None if m.can_execute => Ok((WalkMode::Residual, ModeChoice::Default)),
            None => {
                let why = if m.missing_for_execute.is_empty() {
                    "the binding is browse-only".to_string()
                } else {
                    format!(
                        "the binding is browse-only (missing {})",
                        m.missing_for_execute
                            .iter()
                            .take(5)
                            .cloned()
                            .collect::<Vec<_>>()
                            .join(", ")
                    )
                };
                Ok((WalkMode::Embedding, ModeChoice::DefaultBrowseOnly(why)))
            }
        }
    }

    fn walk(&self, w: &g::Walk) -> Result<LogicalPlan> {
        let m = self.browsable(self.stmt_span, "WALK")?;
        let (mode, mode_choice) = self.browse_mode(m, w.mode.as_ref(), "WALK")?;
        let top = match &w.top {
            Some(t) => positive(t, "TOP", Some((m.ffn, "the features per layer")))?,
            None => DEFAULT_WALK_TOP.min(m.ffn.max(1)),
        };
        let layers = self.layers(m, w.layers.as_ref())?;
        Ok(LogicalPlan::Walk(WalkPlan {
            prompt: w.prompt.value.clone(),
            top,
            layers,
            mode,
            mode_choice,
            gate_encoding: m.gate_encoding.clone(),
            gate_bytes_per_layer: m.gate_bytes_per_layer,
        }))
    }

    fn describe(&self, d: &g::Describe) -> Result<LogicalPlan> {
        let m = self.browsable(self.stmt_span, "DESCRIBE")?;
        let layers = match &d.scope {
            None => self.layers(m, None)?,
            Some(s) => match s.value {
                g::DescribeScope::AtLayer(n) => {
                    let n = to_usize(n, s.span)?;
                    let r = LayerRange::new(n, n);
                    self.check_layer_range(m, r, s.span)?;
                    r
                }
                g::DescribeScope::Layers(spec) => {
                    self.layers(m, Some(&Spanned::new(spec, s.span)))?
                }
            },
        };
        let (mode, mode_choice) = self.browse_mode(m, None, "DESCRIBE")?;
        Ok(LogicalPlan::Describe(DescribePlan {
            entity: d.entity.value.clone(),
            layers,
            detail: d.detail.as_ref().map_or(Detail::Brief, |x| x.value),
            mode,
            mode_choice,
        }))
    }

    fn select(&self, s: &g::Select) -> Result<LogicalPlan> {
        crate::select::bind_select(self, s)
    }

    fn trace(&self, t: &g::Trace) -> Result<LogicalPlan> {
        let m = self.executable(self.stmt_span, "TRACE")?;
        let layers = self.layers(m, t.layers.as_ref())?;
        if let Some(f) = &t.target {
            if f.value.is_empty() {
                return Err(PlanError::semantic("FOR needs a non-empty token", f.span));
            }
        }
        let save = t.save.as_ref().map(|s| path(s, "trace file")).transpose()?;
        Ok(LogicalPlan::Trace(TracePlan {
            prompt: t.prompt.value.clone(),
            target: t.target.as_ref().map(|f| f.value.clone()),
            decompose: t.decompose.is_some(),
            layers,
            forward: self.layers(m, None)?,
            positions: t.positions.as_ref().map_or(Positions::Last, |p| p.value),
            save,
            head: true,
        }))
    }

    fn patch(&self, p: &g::Patch) -> Result<LogicalPlan> {
        let m = self.executable(self.stmt_span, "PATCH")?;
        let layers = self.layers(m, p.layers.as_ref())?;
        let component = p
            .component
            .as_ref()
            .map_or(PatchComponent::ResidPre, |c| c.value);
        if let (PatchComponent::Head(Some(h)), Some(c)) = (component, &p.component) {
            if m.n_heads > 0 && h >= m.n_heads as u64 {
                return Err(PlanError::semantic(
                    format!(
                        "head {h} does not exist: {} has {} heads per layer (0-{})",
                        m.name,
                        m.n_heads,
                        m.n_heads - 1
                    ),
                    c.span,
                )
                .with_label(c.span, format!("heads run 0-{}", m.n_heads - 1)));
            }
        }
        let non_empty = |s: &Spanned<String>, what: &str| -> Result<String> {
            if s.value.is_empty() {
                return Err(PlanError::semantic(format!("{what} is empty"), s.span)
                    .with_label(s.span, "needs at least one token"));
            }
            Ok(s.value.clone())
        };
        let corruption = match &p.corruption.value {
            g::Corruption::Prompt(clean) => PatchCorruption::Prompt {
                clean: non_empty(clean, "the clean prompt")?,
            },
            g::Corruption::Noise {
                subject,
                scale,
                seed,
            } => {
                let scale_v = scale.as_ref().map_or(DEFAULT_NOISE_SCALE, |s| s.value);
                if let Some(s) = scale.as_ref().filter(|s| s.value <= 0.0) {
                    return Err(PlanError::semantic(
                        format!("SCALE {} gives no noise", s.value),
                        s.span,
                    )
                    .with_label(s.span, "a positive multiple of the embeddings' deviation")
                    .with_help("ROME's causal tracing uses SCALE 3 (the default)"));
                }
                let seed_v = match seed {
                    Some(s) if s.value < 0 => {
                        return Err(PlanError::semantic("SEED must be 0 or more", s.span)
                            .with_label(s.span, "negative"))
                    }
                    Some(s) => s.value as u64,
                    None => 0,
                };
                PatchCorruption::Noise {
                    subject: non_empty(subject, "NOISE ON's subject")?,
                    scale: scale_v,
                    seed: seed_v,
                }
            }
        };
        if let Some(metric) = &p.metric {
            let tokens = match &metric.value {
                PatchMetric::LogitDiff(a, b) => vec![a, b],
                PatchMetric::Logit(a) | PatchMetric::Prob(a) => vec![a],
            };
            if tokens.iter().any(|t| t.is_empty()) {
                return Err(PlanError::semantic("a METRIC token is empty", metric.span)
                    .with_label(metric.span, "name one token, e.g. \" Paris\""));
            }
        }
        Ok(LogicalPlan::Patch(PatchPlan {
            corrupted: non_empty(&p.prompt, "the prompt")?,
            corruption,
            layers,
            positions: p
                .positions
                .as_ref()
                .map_or(PatchPositions::All, |x| x.value),
            component,
            metric: p.metric.as_ref().map(|m| m.value.clone()),
            window: match &p.window {
                None => 1,
                Some(w) if w.value == 0 || w.value > m.n_layers as u64 => {
                    return Err(PlanError::out_of_range(
                        format!("WINDOW {} is out of range", w.value),
                        w.span,
                    )
                    .with_label(
                        w.span,
                        format!("1 to {} layers (the model's count)", m.n_layers),
                    ))
                }
                Some(w) => w.value as usize,
            },
            method: match &p.method {
                None => PatchMethod::Runs,
                Some(m) => match m.value {
                    PatchMethod::Attribution(Some(n))
                        if !(1..=MAX_ATTRIBUTION_STEPS).contains(&n) =>
                    {
                        return Err(PlanError::out_of_range(
                            format!("STEPS {n} is out of range"),
                            m.span,
                        )
                        .with_label(
                            m.span,
                            format!("1 to {MAX_ATTRIBUTION_STEPS} interpolation steps"),
                        ))
                    }
                    v => v,
                },
            },
            save: p
                .save
                .as_ref()
                .map(|s| {
                    if !s.value.to_ascii_lowercase().ends_with(".svg") {
                        return Err(PlanError::semantic(
                            "PATCH saves its grid as an SVG heat map",
                            s.span,
                        )
                        .with_label(s.span, "name a .svg file"));
                    }
                    path(s, "heat map file")
                })
                .transpose()?,
        }))
    }

    fn edit_table(&self, t: &Spanned<Table>, allowed: &[Table], verb: &str) -> Result<Table> {
        if allowed.contains(&t.value) {
            return Ok(t.value);
        }
        let names: Vec<&str> = allowed.iter().map(|t| t.name()).collect();
        Err(PlanError::semantic(
            format!("{verb} cannot change table {}", t.value.name()),
            t.span,
        )
        .with_label(t.span, format!("{verb} works on {}", names.join(" or "))))
    }

    /// `INSERT INTO edges SELECT …`: the query bound as a SELECT, its columns found by name
    /// (entity, relation, target, and prompt when it has one), each holding text.
    fn insert_query(&self, q: &g::Select) -> Result<InsertQuery> {
        let plan = self.select(q)?;
        let columns = schema::statement_columns(&plan);
        let span = q.columns.span;
        let find = |name: &str| -> Result<Option<usize>> {
            let Some(k) = columns
                .iter()
                .position(|c| c.name.eq_ignore_ascii_case(name))
            else {
                return Ok(None);
            };
            match columns[k].ty {
                schema::ColumnType::Text | schema::ColumnType::Any => Ok(Some(k)),
                ty => Err(PlanError::wrong_type(
                    format!("INSERT INTO edges … SELECT: column {name} is {ty}; it must hold text"),
                    span,
                )),
            }
        };
        let need = |name: &str| -> Result<usize> {
            find(name)?.ok_or_else(|| {
                let names: Vec<&str> = columns.iter().map(|c| c.name.as_str()).collect();
                PlanError::semantic(
                    format!(
                        "INSERT INTO edges … SELECT needs a column named {name}; the query gives {}",
                        if names.is_empty() { "none".to_string() } else { names.join(", ") }
                    ),
                    span,
                )
                .with_help(format!("name it with AS: SELECT … AS {name}"))
            })
        };
        Ok(InsertQuery {
            entity: need("entity")?,
            relation: need("relation")?,
            target: need("target")?,
            prompt: find("prompt")?,
            plan: Box::new(plan),
        })
    }

    fn insert(&self, i: &g::Insert) -> Result<LogicalPlan> {
        let m = self.browsable(self.stmt_span, "INSERT")?;
        let table = self.edit_table(&i.table, &[Table::Edges], "INSERT")?;
        if let Some(file) = &i.file {
            return Ok(LogicalPlan::Insert(InsertPlan {
                table,
                rows: Vec::new(),
                file: Some(path(file, "fact file")?),
                query: None,
                settings: self.edit_settings(m, &i.at_layer, &i.alpha)?,
                confidence: unit(&i.confidence, "CONFIDENCE", true)?,
            }));
        }
        if let Some(q) = &i.select {
            return Ok(LogicalPlan::Insert(InsertPlan {
                table,
                rows: Vec::new(),
                file: None,
                query: Some(self.insert_query(q)?),
                settings: self.edit_settings(m, &i.at_layer, &i.alpha)?,
                confidence: unit(&i.confidence, "CONFIDENCE", true)?,
            }));
        }
        // Columns: entity, relation, target and optionally prompt (any order).
        let wanted = ["entity", "relation", "target", "prompt"];
        let mut index = [usize::MAX; 4];
        for (pos, c) in i.columns.iter().enumerate() {
            let lc = c.name.to_ascii_lowercase();
            let Some(k) = wanted.iter().position(|w| *w == lc) else {
                let mut e = PlanError::semantic(
                    format!(
                        "INSERT INTO edges takes columns entity, relation, target[, prompt]; not `{}`",
                        c.name
                    ),
                    c.span,
                );
                if let Some(s) = suggest(&c.name, wanted.iter().copied()) {
                    e = e.with_help(format!("did you mean {s}?"));
                }
                return Err(e);
            };
            if index[k] != usize::MAX {
                return Err(PlanError::semantic(
                    format!("column {} given twice", c.name),
                    c.span,
                ));
            }
            index[k] = pos;
        }
        if let Some(k) = index[..3].iter().position(|i| *i == usize::MAX) {
            let span = i.columns.first().map_or(self.stmt_span, |f| {
                f.span.to(i.columns[i.columns.len() - 1].span)
            });
            return Err(PlanError::semantic(
                format!("INSERT INTO edges needs column {}", wanted[k]),
                span,
            ));
        }
        let mut rows = Vec::new();
        for row in &i.rows {
            if row.value.len() != i.columns.len() {
                return Err(PlanError::semantic(
                    format!("{} values for {} columns", row.value.len(), i.columns.len()),
                    row.span,
                ));
            }
            let get = |k: usize| -> Result<String> {
                let v = &row.value[index[k]];
                match &v.value {
                    Value::String(s) if !s.is_empty() => Ok(s.clone()),
                    _ => Err(PlanError::semantic(
                        format!("{} must be a non-empty string", wanted[k]),
                        v.span,
                    )),
                }
            };
            rows.push(EdgeRow {
                entity: get(0)?,
                relation: get(1)?,
                target: get(2)?,
                prompt: if index[3] == usize::MAX {
                    None
                } else {
                    Some(get(3)?)
                },
            });
        }
        Ok(LogicalPlan::Insert(InsertPlan {
            table,
            rows,
            file: None,
            query: None,
            settings: self.edit_settings(m, &i.at_layer, &i.alpha)?,
            confidence: unit(&i.confidence, "CONFIDENCE", true)?,
        }))
    }

    /// The layers an edit writes and the strength's aim: AT LAYER and ALPHA as given, the
    /// defaults otherwise.
    fn edit_settings(
        &self,
        m: &ModelFacts,
        at_layer: &Option<Spanned<u64>>,
        alpha: &Option<Spanned<f64>>,
    ) -> Result<EditSettings> {
        let pinned = match at_layer {
            Some(l) => {
                let n = to_usize(l.value, l.span)?;
                self.check_layer_range(m, LayerRange::new(n, n), l.span)?;
                Some(n)
            }
            None => None,
        };
        let layer = pinned.unwrap_or_else(|| default_edit_layer(m.n_layers));
        let subject_layer =
            subject_layer(m.n_layers, pinned.is_some(), self.stmt_span)?.filter(|&sl| sl < layer);
        Ok(EditSettings {
            layer,
            pinned: pinned.is_some(),
            subject_layer,
            alpha: unit(alpha, "ALPHA", false)?.unwrap_or(DEFAULT_ALPHA),
            joint_rows: joint_rows(self.stmt_span)?,
        })
    }

    fn evaluate_edits(&self, e: &g::EvaluateEdits) -> Result<LogicalPlan> {
        let m = self.browsable(self.stmt_span, "EVALUATE EDITS")?;
        let count = |c: &Option<Spanned<i64>>, name: &str| -> Result<Option<usize>> {
            c.as_ref().map(|c| positive(c, name, None)).transpose()
        };
        Ok(LogicalPlan::EvaluateEdits(EvaluatePlan {
            facts: path(&e.facts, "fact file")?,
            batch: count(&e.batch, "SEQUENTIAL BATCH")?,
            limit: count(&e.limit, "LIMIT")?,
            per_fact: e.per_fact.is_some(),
            settings: self.edit_settings(m, &e.at_layer, &e.alpha)?,
            save: e.save.as_ref().map(|p| path(p, "file")).transpose()?,
        }))
    }

    fn analyze_features(&self, a: &g::AnalyzeFeatures) -> Result<LogicalPlan> {
        let m = self.browsable(self.stmt_span, "ANALYZE FEATURES")?;
        let top = match &a.top {
            Some(t) => positive(
                t,
                "TOP",
                Some((MAX_ANALYZE_TOP, "the contexts a feature keeps")),
            )?,
            None => DEFAULT_ANALYZE_TOP,
        };
        Ok(LogicalPlan::AnalyzeFeatures(AnalyzePlan {
            corpus: path(&a.corpus, "corpus file")?,
            layers: self.layers(m, a.layers.as_ref())?,
            top,
        }))
    }

    fn delete(&self, d: &g::Delete) -> Result<LogicalPlan> {
        self.model()?;
        let table = self.edit_table(&d.table, &[Table::Features, Table::Edges], "DELETE")?;
        let schema = schema::edit_columns(table);
        let Some(f) = &d.filter else {
            return Err(PlanError::semantic(
                format!("DELETE FROM {} needs a WHERE clause", table.name()),
                self.stmt_span,
            )
            .with_help("to delete every row, write WHERE TRUE"));
        };
        check_where_size(f)?;
        Ok(LogicalPlan::Delete(DeletePlan {
            table,
            filter: resolve_expr(&schema, table, &f.value)?,
        }))
    }

    fn update(&self, u: &g::Update) -> Result<LogicalPlan> {
        self.model()?;
        let table = self.edit_table(&u.table, &[Table::Features, Table::Edges], "UPDATE")?;
        let schema = schema::edit_columns(table);
        let mut assignments: Vec<(String, Value)> = Vec::new();
        let assignable = schema::assignable_columns(table);
        for a in &u.assignments {
            let col = resolve(&assignable, table, &a.column)?;
            if assignments.iter().any(|(n, _)| *n == col.name) {
                return Err(PlanError::semantic(
                    format!("column {} assigned twice", col.name),
                    a.span,
                ));
            }
            if table == Table::Features && matches!(col.name.as_str(), "gate_scale" | "down_scale")
            {
                check_scale(&col.name, &a.value)?;
            }
            if table == Table::Edges {
                if !matches!(
                    col.name.as_str(),
                    "entity" | "relation" | "target" | "prompt"
                ) {
                    return Err(PlanError::semantic(
                        format!(
                            "UPDATE edges sets entity, relation, target or prompt; {} follows from the edit",
                            col.name
                        ),
                        a.span,
                    ));
                }
                if !matches!(&a.value.value, Value::String(s) if !s.trim().is_empty()) {
                    return Err(PlanError::semantic(
                        format!("{} must be a non-empty string", col.name),
                        a.value.span,
                    ));
                }
            }
            assignments.push((col.name.clone(), a.value.value.clone()));
        }
        let Some(f) = &u.filter else {
            return Err(PlanError::semantic(
                format!("UPDATE {} needs a WHERE clause", table.name()),
                self.stmt_span,
            )
            .with_help("to update every row, write WHERE TRUE"));
        };
        check_where_size(f)?;
        let settings = match table {
            Table::Edges => Some(self.edit_settings(
                self.browsable(self.stmt_span, "UPDATE edges")?,
                &None,
                &None,
            )?),
            _ => None,
        };
        Ok(LogicalPlan::Update(UpdatePlan {
            table,
            assignments,
            filter: resolve_expr(&schema, table, &f.value)?,
            settings,
        }))
    }

    fn diff(&self, d: &g::Diff) -> Result<LogicalPlan> {
        self.model_ref(&d.left)?;
        if let Some(r) = &d.right {
            self.model_ref(r)?;
        } else if d.left.value != ModelRef::Current {
            return Err(PlanError::semantic(
                "DIFF with one operand compares CURRENT with its base; give two paths",
                d.left.span,
            )
            .with_help("DIFF \"a\" \"b\", DIFF \"a\" CURRENT or DIFF CURRENT"));
        }
        let limit = match &d.limit {
            Some(l) if l.value < 0 => {
                return Err(PlanError::semantic("LIMIT must be 0 or more", l.span))
            }
            Some(l) => Some(l.value as usize),
            None => None,
        };
        let layer = match &d.layer {
            Some(l) => Some(
                usize::try_from(l.value)
                    .map_err(|_| PlanError::out_of_range("LAYER is out of range", l.span))?,
            ),
            None => None,
        };
        if let Some(p) = &d.into_patch {
            let clause = [
                d.layer.as_ref().map(|l| ("LAYER", l.span)),
                d.limit.as_ref().map(|l| ("LIMIT", l.span)),
                d.physical.as_ref().map(|l| ("PHYSICAL", l.span)),
            ];
            if let Some((name, span)) = clause.into_iter().flatten().next() {
                return Err(PlanError::semantic(
                    format!(
                        "DIFF … INTO PATCH writes the whole change; {name} does not apply to it"
                    ),
                    span,
                )
                .with_help(format!(
                    "drop {name}, or drop INTO PATCH {:?} to list rows",
                    p.value
                )));
            }
        }
        Ok(LogicalPlan::Diff(DiffPlan {
            left: d.left.value.clone(),
            right: d.right.as_ref().map(|r| r.value.clone()),
            into_patch: d
                .into_patch
                .as_ref()
                .map(|p| path(p, "patch file"))
                .transpose()?,
            layer,
            layer_span: d.layer.as_ref().map(|l| l.span),
            limit,
            physical: d.physical.is_some(),
        }))
    }
}

// ---- free helpers -----------------------------------------------------------------------

/// The refusal of a table that does not answer SELECT yet, pointing at its name.
pub(crate) fn unbuilt_table(t: &Spanned<Table>) -> PlanError {
    let answering: Vec<&str> = schema::QUERYABLE_TABLES.iter().map(|t| t.name()).collect();
    PlanError::unsupported(
        format!("not supported yet: SELECT FROM {}", t.value.name()),
        t.span,
    )
    .with_label(t.span, "this table does not answer queries yet")
    .with_help(format!("tables that answer: {}", answering.join(", ")))
}

/// Label columns of `features`: each costs an unembedding product per feature.
const LABEL_COLUMNS: [&str; 4] = ["top_token", "top_token_id", "c_score", "down_tokens"];

/// The pushdown rule: the layers and features WHERE allows, and when labels are needed:
/// `early` lists the columns read before LIMIT (WHERE, ORDER BY, GROUP BY, aggregates),
/// `late` those only the projection reads.
pub(crate) fn pushdown(
    m: &ModelFacts,
    table: Table,
    filter: Option<&Expr>,
    early: &[String],
    late: &[String],
) -> ScanSpec {
    let (lo, hi) = m.layer_bounds();
    let domain = |col: &str, max: usize| -> Option<Vec<usize>> {
        let f = filter?;
        int_domain(f, col, 0, max as i64)
            .map(|v| v.into_iter().map(|x| x as usize).collect::<Vec<_>>())
    };
    let layers = domain("layer", hi).map(|v| v.into_iter().filter(|&l| l >= lo).collect());
    let features = domain("feature", m.ffn.saturating_sub(1));
    if matches!(table, Table::Contexts | Table::Histograms) {
        // Corpus statistics are read feature by feature: the scan reads only these.
        return ScanSpec {
            layers,
            features,
            ..ScanSpec::full()
        };
    }
    if table != Table::Features {
        return ScanSpec::full();
    }
    let is_label = |c: &String| LABEL_COLUMNS.contains(&c.to_ascii_lowercase().as_str());
    let mut label_set = LabelSet::default();
    for c in early.iter().chain(late) {
        label_set.add(c);
    }
    let labels = if early.iter().any(is_label) {
        LabelTiming::Early
    } else if late.iter().any(is_label) {
        LabelTiming::Late
    } else {
        LabelTiming::None
    };
    let n_layers = layers
        .as_ref()
        .map_or(hi + 1 - lo, |v: &Vec<usize>| v.len()) as u64;
    let rows = n_layers * features.as_ref().map_or(m.ffn, |v| v.len()) as u64;
    let stored = m.stored_labels.is_some();
    let labelled = if labels == LabelTiming::Early {
        rows
    } else {
        0
    };
    let estimate = Some(ScanEstimate {
        rows,
        labels: labelled,
        label_macs: if stored {
            0
        } else {
            labelled * (m.vocab * m.hidden) as u64
        },
        layers: n_layers,
        labels_everything: !stored
            && labels == LabelTiming::Early
            && layers.is_none()
            && n_layers > 1,
        stored,
    });
    ScanSpec {
        layers,
        features,
        labels,
        label_set,
        estimate,
        prompt: None,
        token: None,
        corpus: None,
        limit: None,
        filter: None,
    }
}

/// A probability-like clause value: in (0, 1], or [0, 1] when `zero_ok`.
fn unit(c: &Option<Spanned<f64>>, name: &str, zero_ok: bool) -> Result<Option<f64>> {
    match c {
        Some(v) if v.value > 1.0 || v.value < 0.0 || (!zero_ok && v.value == 0.0) => {
            Err(PlanError::out_of_range(
                format!(
                    "{name} must be in {}, got {}",
                    if zero_ok { "[0, 1]" } else { "(0, 1]" },
                    v.value
                ),
                v.span,
            ))
        }
        Some(v) => Ok(Some(v.value)),
        None => Ok(None),
    }
}

fn path(p: &Spanned<String>, what: &str) -> Result<String> {
    if p.value.trim().is_empty() {
        return Err(PlanError::semantic(format!("empty {what}"), p.span)
            .with_label(p.span, format!("a {what} is needed here")));
    }
    Ok(p.value.clone())
}

/// A number as the user most likely wrote it: exponent form for very large or very small
/// magnitudes (`1e39`, not forty digits), plain otherwise.
fn as_written(v: f64) -> String {
    let a = v.abs();
    if a != 0.0 && !(1e-4..1e16).contains(&a) {
        format!("{v:e}")
    } else {
        format!("{v}")
    }
}

pub(crate) fn to_usize(v: u64, span: Span) -> Result<usize> {
    usize::try_from(v).map_err(|_| PlanError::semantic(format!("{v} is too large"), span))
}

fn checked_range(first: u64, last: u64, span: Span) -> Result<LayerRange> {
    if first > last {
        return Err(
            PlanError::semantic(format!("layer range {first}-{last} is reversed"), span)
                .with_help(format!("write LAYERS {last}-{first}")),
        );
    }
    Ok(LayerRange::new(
        to_usize(first, span)?,
        to_usize(last, span)?,
    ))
}

/// A LAYERS clause checked for order only (no model to check against yet).
fn unchecked_layers(l: &Spanned<LayerSpec>) -> Result<LayerRange> {
    match l.value {
        LayerSpec::All => Err(PlanError::semantic(
            "LAYERS ALL is not meaningful here; give a range",
            l.span,
        )),
        LayerSpec::Range { first, last } => checked_range(first, last, l.span),
    }
}

/// The default layer of an added feature, as a fraction of the model's depth (layer 18 of
/// 30 on SmolLM2; docs/editing.md: chosen by the fact-set measurements).
pub const DEFAULT_EDIT_LAYER_FRACTION: f64 = 0.6;
/// The default ALPHA: the probability the edit prompt must give the target.
pub const DEFAULT_ALPHA: f64 = 0.9;
/// The default layer of the subject write, as a fraction of the model's depth (layer 6 of
/// 30 on SmolLM2; docs/editing.md).
pub const SUBJECT_LAYER_FRACTION: f64 = 0.2;

/// INSERT's layer when AT LAYER does not pin it.
pub fn default_edit_layer(n_layers: usize) -> usize {
    ((n_layers as f64 * DEFAULT_EDIT_LAYER_FRACTION) as usize).min(n_layers.saturating_sub(1))
}

/// The layer of INSERT's subject write: `LQL_EDIT_SUBJECT_LAYER` (a layer, or `off` for
/// none; a measurement switch, docs/editing.md); else none when AT LAYER pins the edit
/// (one feature there), else [`SUBJECT_LAYER_FRACTION`] of the depth. An unreadable value
/// is refused by name.
fn subject_layer(n_layers: usize, pinned: bool, span: Span) -> Result<Option<usize>> {
    match std::env::var("LQL_EDIT_SUBJECT_LAYER") {
        Ok(v) if v == "off" => Ok(None),
        Ok(v) => v.parse().map(Some).map_err(|_| {
            PlanError::semantic(
                format!("LQL_EDIT_SUBJECT_LAYER={v:?} is neither a layer nor \"off\""),
                span,
            )
        }),
        Err(_) if pinned => Ok(None),
        Err(_) => Ok(Some((n_layers as f64 * SUBJECT_LAYER_FRACTION) as usize)),
    }
}

/// The most rows `LQL_EDIT_JOINT_ROWS` lets optimise together (the pass keeps about 25 MiB
/// of activations per row on SmolLM2 for the backward pass).
pub const MAX_JOINT_ROWS: usize = 64;

/// How many rows of an INSERT have their subject values optimised together:
/// `LQL_EDIT_JOINT_ROWS` (1 to [`MAX_JOINT_ROWS`]) for measurement, else 1 — each row alone,
/// which measured better (docs/editing.md, "A batch's subject values optimised together").
fn joint_rows(span: Span) -> Result<usize> {
    match std::env::var("LQL_EDIT_JOINT_ROWS") {
        Ok(v) => match v.parse::<usize>() {
            Ok(n) if (1..=MAX_JOINT_ROWS).contains(&n) => Ok(n),
            _ => Err(PlanError::semantic(
                format!("LQL_EDIT_JOINT_ROWS={v:?} is not a row count from 1 to {MAX_JOINT_ROWS}"),
                span,
            )),
        },
        Err(_) => Ok(1),
    }
}

/// The largest factor UPDATE features SET gate_scale/down_scale takes (in magnitude).
pub const MAX_FEATURE_SCALE: f64 = 1e6;

/// A feature scale's value: a finite number of magnitude at most [`MAX_FEATURE_SCALE`].
fn check_scale(column: &str, v: &Spanned<Value>) -> Result<()> {
    let x = match &v.value {
        Value::Int(i) => *i as f64,
        Value::Float(f) => *f,
        other => {
            return Err(PlanError::wrong_type(
                format!("{column} takes a number, not {}", value_kind(other)),
                v.span,
            ))
        }
    };
    if !x.is_finite() || x.abs() > MAX_FEATURE_SCALE {
        return Err(PlanError::out_of_range(
            format!("{column} = {x} is out of range (|x| ≤ 1e6)"),
            v.span,
        ));
    }
    Ok(())
}

fn value_kind(v: &Value) -> &'static str {
    match v {
        Value::Int(_) | Value::Float(_) => "a number",
        Value::String(_) => "a string",
        Value::Bool(_) => "a boolean",
        Value::Null => "NULL",
    }
}

/// A count clause: at least 1, at most `limit` when given.
fn positive(c: &Spanned<i64>, name: &str, limit: Option<(usize, &str)>) -> Result<usize> {
    if c.value < 1 {
        return Err(PlanError::out_of_range(
            format!("{name} must be at least 1, got {}", c.value),
            c.span,
        )
        .with_label(c.span, "must be positive"));
    }
    let v = usize::try_from(c.value)
        .map_err(|_| PlanError::out_of_range(format!("{} is too large", c.value), c.span))?;
    if let Some((max, what)) = limit {
        if v > max {
            return Err(PlanError::out_of_range(
                format!("{name} {v} exceeds {what} ({max})"),
                c.span,
            )
            .with_label(c.span, format!("at most {max}")));
        }
    }
    Ok(v)
}

pub(crate) fn resolve<'s>(
    schema: &'s [ColumnDef],
    table: Table,
    c: &Ident,
) -> Result<&'s ColumnDef> {
    if let Some(col) = schema.iter().find(|d| d.name.eq_ignore_ascii_case(&c.name)) {
        return Ok(col);
    }
    let names: Vec<&str> = schema.iter().map(|d| d.name.as_str()).collect();
    let mut e = PlanError::unknown_column(
        format!("unknown column `{}` in table {}", c.name, table.name()),
        c.span,
    )
    .with_label(c.span, format!("columns: {}", names.join(", ")));
    if let Some(s) = suggest(&c.name, names.iter().copied()) {
        e = e.with_help(format!("did you mean {s}?"));
    }
    Err(e)
}

/// Resolves every column of an expression; names are normalised to the schema's.
pub(crate) fn resolve_expr(schema: &[ColumnDef], table: Table, e: &Expr) -> Result<Expr> {
    let kind = match &e.kind {
        ExprKind::Column(c) => {
            let col = resolve(schema, table, c)?;
            ExprKind::Column(Ident {
                name: col.name.clone(),
                span: c.span,
            })
        }
        other => other.try_map_children(&mut |x| resolve_expr(schema, table, x))?,
    };
    Ok(Expr { kind, span: e.span })
}

/// GENERATE's SCHEMA or GRAMMAR clause, checked as far as binding can: a schema must be
/// JSON, an object or a boolean (the grammar itself compiles when the statement runs).
fn output_constraint(c: &Spanned<OutputConstraint>) -> Result<OutputConstraint> {
    match &c.value {
        OutputConstraint::Schema(text) => match serde_json::from_str::<serde_json::Value>(text) {
            Ok(v) if v.is_object() || v.is_boolean() => Ok(c.value.clone()),
            Ok(_) => Err(PlanError::semantic(
                "SCHEMA must be a JSON schema: a JSON object (or true/false)",
                c.span,
            )),
            Err(e) => Err(
                PlanError::semantic(format!("SCHEMA is not valid JSON: {e}"), c.span)
                    .with_label(c.span, "this schema"),
            ),
        },
        OutputConstraint::Grammar(text) if text.trim().is_empty() => Err(PlanError::semantic(
            "GRAMMAR is empty: give a GBNF grammar with a `root` rule",
            c.span,
        )),
        OutputConstraint::Grammar(_) => Ok(c.value.clone()),
    }
}

/// The refusal of a layer package without its identity, decided when it binds: MODEL_ID (a
/// model coordinate; `model_id_missing`) else SOURCE_REVISION (the source's commit or tag),
/// pointing at the PACKAGE clause; `what` names the package.
fn missing_package_identity(model_id_missing: bool, at: Span, what: &str) -> PlanError {
    if model_id_missing {
        PlanError::semantic(
            "a layer package needs MODEL_ID \"org/repo:distribution\" (a model coordinate, not a file name)",
            at,
        )
        .with_help("add MODEL_ID \"org/repo:distribution\" SOURCE_REVISION \"<commit or tag>\"")
    } else {
        PlanError::semantic(
            format!("{what} needs SOURCE_REVISION \"<commit or tag>\""),
            at,
        )
    }
}
