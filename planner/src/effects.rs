//! What a statement does besides returning rows — its effects, declared once, on the bound
//! plan. Every decision about what a statement may do reads these declarations and
//! nothing else:
//!
//! - the read-only connection (`lql::OpenFlags::READ_ONLY`) refuses what
//!   [`Effects::modifies`] names;
//! - the engine re-checks the bound model's files before statements that
//!   [`Effects::reads_model`];
//! - a statement may stand in SELECT's FROM only when it [`Effects::only_reads_model`];
//! - `lql serve`'s HTTP gate decides from the whole declaration (closed for anything it
//!   does not know to be safe);
//! - `EXPLAIN PLAN` prints it as its last line.
//!
//! [`effects`] names every plan without a wildcard, so a statement added to the language
//! does not compile until its effects are declared here; and the gate destructures
//! [`Effects`] field by field, so a new kind of effect does not compile until the gate
//! decides it.

use crate::logical::{
    BindTarget, ExplainMode, LogicalPlan, ModelRef, SelectSource, ShowWhat, StageInput,
    SteeringPlan, SteeringPlanSource, SESSION_PATCH,
};

/// A file a statement reads or writes.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub enum FileRef {
    /// A path as the statement names it (relative paths are the process's).
    Path(String),
    /// The file the session's `BEGIN PATCH` named (SAVE PATCH writes it).
    RecordedPatch,
    /// The bound model's own files (REPRESENT without a container adds a segment to them).
    BoundModel,
}

impl std::fmt::Display for FileRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FileRef::Path(p) => write!(f, "{p:?}"),
            FileRef::RecordedPatch => f.write_str("the patch BEGIN PATCH named"),
            FileRef::BoundModel => f.write_str("the bound model's files"),
        }
    }
}

/// How a statement changes the connection's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum StateChange {
    /// Binds another model (USE).
    Binding,
    /// Changes a session setting (SET).
    Setting,
    /// Edits the model through the connection's overlay (INSERT, DELETE, UPDATE).
    Edits,
    /// Adds a patch to the connection's stack or removes one (APPLY/REMOVE PATCH).
    PatchStack,
    /// Starts recording the session's edits into a patch (BEGIN PATCH).
    Recording,
    /// Sets or clears the connection's steering vectors (SET STEERING).
    Steering,
}

impl StateChange {
    /// Whether the change alters what the model computes or stores (what a read-only
    /// connection refuses); binding, settings and steering are the connection's own.
    pub fn modifies_model(self) -> bool {
        matches!(
            self,
            StateChange::Edits | StateChange::PatchStack | StateChange::Recording
        )
    }

    fn describe(self) -> &'static str {
        match self {
            StateChange::Binding => "binds a model",
            StateChange::Setting => "changes a session setting",
            StateChange::Edits => "edits the model state",
            StateChange::PatchStack => "changes the model state by a patch",
            StateChange::Recording => "records edits into a patch",
            StateChange::Steering => "changes the connection's steering",
        }
    }
}

/// The effects of one statement.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize)]
pub struct Effects {
    /// Reads the bound model's mapped files (so a file changed since USE refuses it).
    pub reads_model: bool,
    /// Changes the connection's state.
    pub state: Option<StateChange>,
    /// Files it reads (besides the bound model).
    pub reads: Vec<FileRef>,
    /// Files it writes or creates.
    pub writes: Vec<FileRef>,
    /// May reach the network (a `hf://` source, a catalogue model not yet in the cache).
    pub network: bool,
    /// Work that grows with the model rather than a few forward passes (progress is
    /// reported; the interrupt handle stops it).
    pub long_running: bool,
}

impl Effects {
    /// Whether the statement only reads the bound model (or nothing): no state, no file,
    /// no network.
    pub fn only_reads_model(&self) -> bool {
        self.state.is_none()
            && self.reads.iter().all(|f| *f == FileRef::BoundModel)
            && self.writes.is_empty()
            && !self.network
    }

    /// What the statement modifies — files written, or the model state — in a few words
    /// (`None`: it modifies nothing; a read-only connection runs it).
    pub fn modifies(&self) -> Option<String> {
        let mut parts = Vec::new();
        if let Some(s) = self.state.filter(|s| s.modifies_model()) {
            parts.push(s.describe().to_string());
        }
        if !self.writes.is_empty() {
            parts.push(format!("writes {}", list(&self.writes)));
        }
        (!parts.is_empty()).then(|| parts.join(" and "))
    }

    /// The declaration in one line, as EXPLAIN PLAN prints it.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if self.reads_model {
            parts.push("reads the model".to_string());
        }
        parts.extend(self.parts(true));
        if self.long_running {
            parts.push("long-running".into());
        }
        if parts.is_empty() {
            "none".into()
        } else {
            parts.join("; ")
        }
    }

    /// What takes the statement beyond reading the bound model, in a few words.
    pub fn describe_beyond_reading(&self) -> String {
        self.parts(false).join("; ")
    }

    /// State, files and network, in words (`bound_reads`: name reads of the bound model's
    /// own files too).
    fn parts(&self, bound_reads: bool) -> Vec<String> {
        let mut parts = Vec::new();
        if let Some(s) = self.state {
            parts.push(s.describe().to_string());
        }
        let reads: Vec<FileRef> = self
            .reads
            .iter()
            .filter(|f| bound_reads || **f != FileRef::BoundModel)
            .cloned()
            .collect();
        if !reads.is_empty() {
            parts.push(format!("reads {}", list(&reads)));
        }
        if !self.writes.is_empty() {
            parts.push(format!("writes {}", list(&self.writes)));
        }
        if self.network {
            parts.push("may use the network".into());
        }
        parts
    }

    /// Both declarations' effects (a statement that runs another inside it, a statement
    /// under WITH STEERING).
    pub fn union(mut self, other: Effects) -> Effects {
        self.reads_model |= other.reads_model;
        self.state = self.state.or(other.state);
        for f in other.reads {
            if !self.reads.contains(&f) {
                self.reads.push(f);
            }
        }
        for f in other.writes {
            if !self.writes.contains(&f) {
                self.writes.push(f);
            }
        }
        self.network |= other.network;
        self.long_running |= other.long_running;
        self
    }
}

fn list(files: &[FileRef]) -> String {
    files
        .iter()
        .map(|f| f.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// A source fetched over the network (`hf://namespace/repo…`).
fn is_remote(path: &str) -> bool {
    path.starts_with("hf://")
}

fn path(p: &str) -> FileRef {
    FileRef::Path(p.to_string())
}

/// Effects that read the bound model and nothing else.
fn model_read() -> Effects {
    Effects {
        reads_model: true,
        ..Default::default()
    }
}

/// A statement that reads these files (the network when one is remote).
fn reading(files: impl IntoIterator<Item = String>) -> Effects {
    let reads: Vec<FileRef> = files.into_iter().map(FileRef::Path).collect();
    Effects {
        network: reads
            .iter()
            .any(|f| matches!(f, FileRef::Path(p) if is_remote(p))),
        reads,
        ..Default::default()
    }
}

fn model_or_file(m: &ModelRef) -> Effects {
    match m {
        ModelRef::Current => model_read(),
        ModelRef::Path(p) => reading([p.clone()]),
    }
}

/// The effects of a bound steering (SET STEERING's, or WITH STEERING's for one statement).
pub fn steering_effects(s: &SteeringPlan) -> Effects {
    match &s.source {
        SteeringPlanSource::File(f) => reading([f.clone()]),
        // The residuals of the texts are computed by forward passes.
        SteeringPlanSource::Difference { .. } => model_read(),
    }
}

fn select_source_effects(s: &SelectSource) -> Effects {
    match s {
        SelectSource::Table { .. } => model_read(),
        SelectSource::Statement { plan, .. } => effects(plan),
        SelectSource::Join { left, right, .. } => {
            select_source_effects(left).union(select_source_effects(right))
        }
        SelectSource::OneRow => Effects::default(),
    }
}

/// The effects of a bound statement.
pub fn effects(plan: &LogicalPlan) -> Effects {
    let state = |s: StateChange, base: Effects| Effects {
        state: Some(s),
        ..base
    };
    let writing = |mut base: Effects, out: FileRef| {
        base.writes.push(out);
        base
    };
    let long = |base: Effects| Effects {
        long_running: true,
        ..base
    };
    match plan {
        LogicalPlan::Use(u) => {
            let base = match &u.target {
                BindTarget::Path(p) => reading([p.clone()]),
                // A catalogue model is fetched into the local cache on first use.
                BindTarget::Catalogue(_) => Effects {
                    network: true,
                    long_running: true,
                    ..Default::default()
                },
            };
            let long_running = base.network;
            Effects {
                state: Some(StateChange::Binding),
                long_running,
                ..base
            }
        }
        LogicalPlan::Infer(_)
        | LogicalPlan::Generate(_)
        | LogicalPlan::Walk(_)
        | LogicalPlan::Describe(_)
        | LogicalPlan::Stats
        | LogicalPlan::Tokenize { .. } => model_read(),
        LogicalPlan::Select(s) => s
            .subqueries
            .iter()
            .fold(select_source_effects(&s.source), |e, q| {
                e.union(effects(&q.plan))
            }),
        LogicalPlan::Trace(t) => match &t.save {
            Some(f) => writing(model_read(), path(f)),
            None => model_read(),
        },
        // Activation patching runs the model once per cell.
        LogicalPlan::Patch(p) => match &p.save {
            Some(f) => long(writing(model_read(), path(f))),
            None => long(model_read()),
        },
        LogicalPlan::Insert(i) => match (&i.file, &i.query) {
            (Some(f), _) => long(state(
                StateChange::Edits,
                model_read().union(reading([f.clone()])),
            )),
            // INSERT … SELECT: and whatever its query does.
            (None, Some(q)) => long(state(
                StateChange::Edits,
                model_read().union(effects(&q.plan)),
            )),
            (None, None) => long(state(StateChange::Edits, model_read())),
        },
        // The statistics go to the model's cache folder (like downloaded models), not to a
        // path the statement names.
        LogicalPlan::AnalyzeFeatures(a) => long(model_read().union(reading([a.corpus.clone()]))),
        LogicalPlan::EvaluateEdits(e) => {
            let read = model_read().union(reading([e.facts.clone()]));
            let e = match &e.save {
                Some(f) => writing(read, path(f)),
                None => read,
            };
            long(state(StateChange::Edits, e))
        }
        // UPDATE edges writes its edges again, as INSERT does.
        LogicalPlan::Update(u) if u.settings.is_some() => {
            long(state(StateChange::Edits, model_read()))
        }
        LogicalPlan::Delete(_) | LogicalPlan::Update(_) => state(StateChange::Edits, model_read()),
        LogicalPlan::BeginPatch { path: p } => {
            writing(state(StateChange::Recording, model_read()), path(p))
        }
        LogicalPlan::SavePatch { path: None } => writing(model_read(), FileRef::RecordedPatch),
        LogicalPlan::SavePatch { path: Some(p) } => {
            writing(state(StateChange::PatchStack, model_read()), path(p))
        }
        // `REMOVE PATCH "(session)"` ends the session's unsaved edits: no file is named.
        LogicalPlan::RemovePatch { path: p } if p == SESSION_PATCH => {
            state(StateChange::PatchStack, model_read())
        }
        LogicalPlan::ApplyPatch { path: p } | LogicalPlan::RemovePatch { path: p } => state(
            StateChange::PatchStack,
            model_read().union(reading([p.clone()])),
        ),
        LogicalPlan::SetSteering(Some(s)) => state(StateChange::Steering, steering_effects(s)),
        LogicalPlan::SetSteering(None) => state(StateChange::Steering, Effects::default()),
        LogicalPlan::SaveSteering { path: p } => writing(model_read(), path(p)),
        LogicalPlan::Set(_) => state(StateChange::Setting, Effects::default()),
        LogicalPlan::Diff(d) => {
            let mut e = model_or_file(&d.left);
            if let Some(r) = &d.right {
                e = e.union(model_or_file(r));
            }
            if d.right.is_none() {
                // CURRENT against its base: the bound model.
                e.reads_model = true;
            }
            if let Some(out) = &d.into_patch {
                e = writing(e, path(out));
            }
            long(e)
        }
        LogicalPlan::Compile(c) => long(writing(model_or_file(&c.source), path(&c.output))),
        // EXTRACT reads its source itself (the bound model is not consulted).
        LogicalPlan::Extract(x) => long(writing(
            reading(std::iter::once(x.source.clone()).chain(x.projectors.iter().cloned())),
            path(&x.output),
        )),
        LogicalPlan::Represent(r) => match &r.container {
            Some(c) => long(writing(reading([c.clone()]), path(c))),
            None => long(writing(Effects::default(), FileRef::BoundModel)),
        },
        LogicalPlan::Artifact { container, .. } => reading([container.clone()]),
        LogicalPlan::Compact { container, into } => long(match into {
            Some(out) => writing(reading([container.clone()]), path(out)),
            None => writing(reading([container.clone()]), path(container)),
        }),
        // VERIFY reads the files itself, the bound model's included (a changed container
        // is a FAILED row, not a refusal).
        LogicalPlan::Verify { container, against } => {
            let mut e = reading(container.iter().chain(against.iter()).cloned());
            if container.is_none() {
                e.reads.insert(0, FileRef::BoundModel);
            }
            long(e)
        }
        LogicalPlan::RunStage { input, into } => {
            let base = match input {
                StageInput::Prompt(_) => model_read(),
                StageInput::File(f) => model_read().union(reading([f.clone()])),
            };
            writing(base, path(into))
        }
        LogicalPlan::InferFrom { file, .. } => model_read().union(reading([file.clone()])),
        LogicalPlan::Show(s) => match &s.container {
            Some(c) => reading([c.clone()]),
            None => match s.what {
                ShowWhat::Models
                | ShowWhat::Tables
                | ShowWhat::Backends
                | ShowWhat::Architectures => Effects::default(),
                ShowWhat::Layers
                | ShowWhat::Components
                | ShowWhat::Representations
                | ShowWhat::Tensors
                | ShowWhat::Profiles
                | ShowWhat::Patches
                | ShowWhat::Package
                | ShowWhat::Capabilities
                | ShowWhat::Steering => model_read(),
            },
        },
        LogicalPlan::DescribeTable { .. } => Effects::default(),
        // EXPLAIN PLAN runs nothing; the other forms run their statement.
        LogicalPlan::Explain(e) => match e.mode {
            ExplainMode::Plan => Effects::default(),
            ExplainMode::Analyze | ExplainMode::Trace => effects(&e.inner),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{bind, ModelFacts};

    fn plan(text: &str) -> LogicalPlan {
        let facts = ModelFacts {
            name: "m".into(),
            n_layers: 30,
            vocab: 49152,
            hidden: 576,
            ffn: 1536,
            can_execute: true,
            can_browse: true,
            can_tokenize: true,
            ..Default::default()
        };
        bind(&lql_grammar::parse_statement(text).unwrap(), &facts).unwrap()
    }

    fn of(text: &str) -> Effects {
        effects(&plan(text))
    }

    #[test]
    fn modifiers_and_readers() {
        for w in [
            "INSERT INTO edges (entity, relation, target) VALUES ('A', 'r', 'B')",
            "DELETE FROM edges WHERE entity = 'A'",
            "SAVE PATCH",
            "BEGIN PATCH 'p.vlp'",
            "APPLY PATCH 'p.vlp'",
            "EXTRACT MODEL 'm.gguf' INTO 'o.vindex'",
            "COMPILE CURRENT INTO GGUF 'o.gguf'",
            "COMPACT 'c.vindex'",
            "REPRESENT LABELS 'c.vindex'",
            "REPRESENT LABELS",
            "TRACE 'x' SAVE 't.trace'",
            "EXPLAIN ANALYZE COMPACT 'c.vindex'",
            "SAVE STEERING 'v.gguf'",
        ] {
            assert!(of(w).modifies().is_some(), "{w}");
        }
        for r in [
            "INFER 'x'",
            "SELECT * FROM layers",
            "TRACE 'x'",
            "DIFF CURRENT",
            "VERIFY",
            "EXPLAIN PLAN COMPACT 'c.vindex'",
            "STATS",
            "INSPECT 'c.vindex'",
            "PRECISION 'c.vindex'",
            "USE 'x.gguf'",
            "SET STEERING = OFF",
        ] {
            assert!(of(r).modifies().is_none(), "{r}");
        }
    }

    #[test]
    fn files_state_and_network_are_declared() {
        let e = of("EXTRACT MODEL 'a.gguf' INTO 'o.vindex'");
        assert_eq!(e.reads, vec![path("a.gguf")]);
        assert_eq!(e.writes, vec![path("o.vindex")]);
        assert!(e.long_running && !e.network && !e.reads_model);
        assert!(of("USE 'hf://org/repo'").network);
        assert!(of("USE MODEL 'smollm2-135m-instruct'").network);
        assert_eq!(of("USE 'x.gguf'").state, Some(StateChange::Binding));
        assert!(of("SHOW PACKAGE 'hf://org/repo@main'").network);
        let a = of("APPLY PATCH 'p.vlp'");
        assert_eq!(a.state, Some(StateChange::PatchStack));
        assert_eq!(a.reads, vec![path("p.vlp")]);
        assert_eq!(of("SAVE PATCH").writes, vec![FileRef::RecordedPatch]);
        assert_eq!(of("SAVE PATCH 'p.vlp'").writes, vec![path("p.vlp")]);
        assert_eq!(of("REPRESENT LABELS").writes, vec![FileRef::BoundModel]);
        assert_eq!(
            of("COMPACT 'c.vindex'").writes,
            vec![path("c.vindex")],
            "in place"
        );
        let s = of("SET STEERING = 'v.gguf'");
        assert_eq!(s.state, Some(StateChange::Steering));
        assert_eq!(s.reads, vec![path("v.gguf")]);
        assert!(of("EXPLAIN PLAN EXTRACT MODEL 'a' INTO 'b'") == Effects::default());
        assert_eq!(
            of("EXPLAIN ANALYZE TRACE 'x' SAVE 't.svg'").writes,
            vec![path("t.svg")]
        );
        assert!(of("SELECT layer FROM TRACE('x')").only_reads_model());
        assert_eq!(of("DESCRIBE TABLE layers"), Effects::default());
        assert_eq!(
            of("INSERT INTO edges (entity, relation, target) VALUES ('A', 'r', 'B')").describe(),
            "reads the model; edits the model state; long-running"
        );
        assert_eq!(of("SELECT 1 + 1").describe(), "none");
    }
}
