//! The engine: a connection's session state plus one interpreter over the physical plan.
//!
//! ```text
//!  text ──lql_grammar::parse_statement──▶ Statement
//!       ──lql_planner::bind(&EngineCatalog)──▶ LogicalPlan ──check_built──▶
//!       ──lql_planner::lower──▶ PhysicalPlan ──interp::run──▶ Rows
//! ```
//!
//! Every statement runs through [`interp`]: it executes the nodes of the lowered tree,
//! leaves first, each operator in the file of its family (`run.rs` for Forward / Head /
//! TopK / DecodeLoop / Detokenize, `walk.rs` for EmbedLookup / GateScan / FeatureLabels,
//! `select.rs` for the table pipeline, `trace.rs`, `activation_patch.rs` for PATCH, `describe.rs`, `introspect.rs`, `bind.rs`
//! for Open, `vindex.rs`, `explain.rs`). No family re-decides what the binder decided:
//! modes, layer ranges and pushdown arrive as operator parameters.

mod activation_patch;
mod aggregate;
mod analyze;
mod backend;
mod datum;
mod describe;
mod diff_patch;
mod edit;
mod evaluate;
mod explain;
mod facts;
mod heads;
mod interp;
mod introspect;
mod join;
mod package;
mod patch;
mod persist;
mod planner_catalog;
mod protect;
mod rowexec;
mod run;
mod scalar;
mod select;
mod steering;
mod stream;
mod subquery;
mod trace;
mod use_model;
mod vindex;
mod walk;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use lql_exec::browse::LabelCache;
use lql_exec::tokenizer::Tokenizer;
use lql_planner::{LogicalPlan, PhysicalPlan};
use lql_storage::Model;

use crate::database::{Database, SharedModel};
use crate::error::{Error, Result};
use crate::progress::ProgressHandler;
use crate::rows::{Column, Rows};

pub use evaluate::UNRELATED_PROMPTS;
pub(crate) use package::{bound_files, run_stage};
pub use package::{StageInput, StageResult};
pub(crate) use planner_catalog::EngineCatalog;

/// A bound model and what the session derived from it: the shared model (mapped files,
/// tokenizer, label cache) and this connection's executor, built on first use.
pub(crate) struct Bound {
    /// The name it was bound by: a catalogue name or the path as given.
    pub name: String,
    pub shared: Arc<SharedModel>,
    /// The planner's view of it.
    pub facts: lql_planner::ModelFacts,
    pub executor: Option<lql_exec::Executor>,
    /// When a layer package was bound: its identity and the stage's layers.
    pub stage: Option<package::StageBinding>,
    /// This connection's patch stack and the effective state it makes (engine/edit.rs).
    pub edits: edit::Edits,
    /// Where its forward passes run (`USE … BACKEND`, `SET backend`).
    pub backend: lql_grammar::BackendChoice,
    /// Where its passes run: `backend` as the binder resolved it (`auto` → an adapter or the
    /// CPU), so EXPLAIN PLAN of the USE showed what runs.
    pub runs_on: lql_planner::RunsOn,
    /// The connection's steering (`SET STEERING`), added in every pass.
    pub steering: Option<Arc<lql_exec::steer::Steering>>,
    /// The running statement's steering (`WITH STEERING`), in place of the connection's.
    pub statement_steering: Option<Arc<lql_exec::steer::Steering>>,
    /// Bytes the executor's operators read from the operands, per encoding (EXPLAIN
    /// ANALYZE's `read=`): the executor runs over a `Metered` source counting into it.
    pub meter: Arc<lql_storage::meter::ReadMeter>,
    /// Decoder layers the executor's passes ran (EXPLAIN ANALYZE's `layers_run=`): every
    /// executor built for the binding counts into it as each layer runs.
    pub layers_run: Arc<std::sync::atomic::AtomicU64>,
}

impl Bound {
    pub fn new(name: String, shared: Arc<SharedModel>) -> Bound {
        let facts = planner_catalog::facts(&name, &shared.model);
        Bound {
            name,
            shared,
            facts,
            executor: None,
            stage: None,
            edits: edit::Edits::default(),
            backend: lql_grammar::BackendChoice::Cpu,
            runs_on: lql_planner::RunsOn::Cpu,
            steering: None,
            statement_steering: None,
            meter: Arc::default(),
            layers_run: Arc::default(),
        }
    }

    pub fn model(&self) -> &Arc<Model> {
        &self.shared.model
    }
}

/// Session state behind a connection's mutex.
pub(crate) struct Engine {
    pub(crate) db: Database,
    pub(crate) progress: Option<ProgressHandler>,
    pub(crate) tokens: Option<crate::progress::TokenHandler>,
    pub(crate) bound: Option<Bound>,
    /// The session's `backend` setting: where the passes of models bound later run.
    pub(crate) backend: lql_grammar::BackendChoice,
    /// Bumped whenever the session state a plan depends on changes (USE, every edit).
    pub(crate) version: u64,
}

/// What an operator gets: the session, the cancel flag, the statement's text, and the
/// columns of the rows it answers in. Everything else an operator does is in its own
/// parameters (the plan node): it never reads the statement or the logical plan.
pub(crate) struct Cx<'a> {
    pub engine: &'a mut Engine,
    /// The connection's interrupt flag (cleared when a statement starts).
    pub cancel: &'a Arc<AtomicBool>,
    /// The statement's text; spans in errors are byte ranges into it.
    pub text: &'a str,
    /// The columns declared by the nearest `Rows` node above the running one: the rows an
    /// operator that answers the statement directly (SHOW, EXTRACT, DIFF …) builds.
    pub columns: &'a [lql_planner::ColumnDef],
}

impl Cx<'_> {
    /// The columns of the rows this operator answers in ([`Cx::columns`]).
    pub fn result_columns(&self) -> Vec<Column> {
        columns_of(self.columns)
    }

    /// The bound model, or the "no model bound" error pointing at the statement.
    pub fn bound(&self) -> Result<&Bound> {
        self.engine.bound.as_ref().ok_or_else(|| {
            Error::semantic("no model is bound")
                .with_code(crate::Code::NoModel)
                .with_span(0..self.text.len())
                .with_help("bind one first: USE MODEL \"smollm2-135m-instruct\" or USE \"path/to/model.gguf\"")
        })
    }

    /// The bound model, to change the connection's state of it.
    pub fn bound_mut(&mut self) -> Result<&mut Bound> {
        self.bound()?;
        self.engine
            .bound
            .as_mut()
            .ok_or_else(|| Error::internal("bound model vanished"))
    }

    /// The bound model.
    pub fn model(&self) -> Result<Arc<Model>> {
        Ok(self.bound()?.model().clone())
    }

    /// What browse statements read (WALK, DESCRIBE, SELECT FROM features): the effective
    /// state when edits are in force (added features and scales visible), else the model.
    pub fn browse_source(&self) -> Result<Arc<dyn lql_storage::OperandSource>> {
        let b = self.bound()?;
        Ok(match &b.edits.state {
            Some(state) => state.clone(),
            None => b.model().clone(),
        })
    }

    /// The bound model's executor, built on first use with the connection's cancel flag.
    pub fn executor(&mut self) -> Result<lql_exec::Executor> {
        self.bound()?;
        let cancel = self.cancel.clone();
        let text_len = self.text.len();
        let b = self
            .engine
            .bound
            .as_mut()
            .ok_or_else(|| Error::internal("bound model vanished"))?;
        if let Some(st) = b.stage.as_ref().filter(|s| !s.span.is_whole()) {
            return Err(Error::semantic(format!(
                "{} is bound as layers {}-{} of a {}-layer package; INFER and GENERATE need every layer",
                b.name, st.span.first, st.span.last, st.span.n_layers
            ))
            .with_span(0..text_len)
            .with_help("run the stage with Connection::run_stage, or bind the whole package: USE \"dir\""));
        }
        if !b.facts.can_execute {
            return Err(Error::semantic(format!(
                "{} cannot run: operands missing: {}",
                b.name,
                b.facts
                    .missing_for_execute
                    .iter()
                    .take(5)
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
            .with_span(0..text_len));
        }
        if b.executor.is_none() {
            let source: Arc<dyn lql_storage::OperandSource> = match &b.edits.state {
                Some(state) => state.clone(),
                None => b.model().clone(),
            };
            let metered = lql_storage::meter::Metered::new(source, b.meter.clone());
            // Building the plan checks shapes through views; it reads no payload.
            let exec = b
                .meter
                .paused(|| backend::executor(Arc::new(metered), &b.runs_on))?;
            b.executor = Some(
                exec.with_cancel_flag(cancel)
                    .with_layer_counter(b.layers_run.clone()),
            );
        }
        let steering = b.statement_steering.clone().or_else(|| b.steering.clone());
        let exec = b
            .executor
            .clone()
            .ok_or_else(|| Error::internal("executor not built"))?;
        Ok(exec.with_steering(steering)?)
    }

    /// The bound model's tokenizer (shared by every connection of the database).
    pub fn tokenizer(&mut self) -> Result<Arc<Tokenizer>> {
        self.bound()?.shared.tokenizer()
    }

    /// The bound model's feature-label cache (shared by every connection).
    pub fn labels(&self) -> Result<Arc<LabelCache>> {
        self.bound()?.shared.labels()
    }

    /// Token id → display text through the binding's tokenizer (`<id>` when it has none).
    pub fn token_texts(&mut self) -> Box<dyn Fn(u32) -> String> {
        match self.tokenizer() {
            Ok(t) => Box::new(move |id| t.token_text(id).unwrap_or_else(|| format!("<{id}>"))),
            Err(_) => Box::new(|id| format!("<{id}>")),
        }
    }

    /// `Err(Interrupted)` once the interrupt handle has been used.
    pub fn check_cancel(&self) -> Result<()> {
        if self.cancel.load(Ordering::Relaxed) {
            Err(Error::interrupted())
        } else {
            Ok(())
        }
    }
}

/// The columns of a virtual table a scan answers with (an internal error for a table
/// without a schema: the planner binds no scan of one).
pub(crate) fn table_schema(table: lql_grammar::Table) -> Result<Vec<Column>> {
    let defs = lql_planner::table_columns(table)
        .ok_or_else(|| Error::internal(format!("{} has no schema", table.name())))?;
    Ok(columns_of(&defs))
}

/// The lql columns of a planner schema.
pub(crate) fn columns_of(defs: &[lql_planner::ColumnDef]) -> Vec<Column> {
    defs.iter()
        .map(|c| Column::new(c.name.as_str(), crate::value::ValueType::from_column(c.ty)))
        .collect()
}

/// The columns of the statement's result (the planner's schema).
pub(crate) fn result_columns(plan: &LogicalPlan) -> Vec<Column> {
    columns_of(&lql_planner::statement_columns(plan))
}

/// A bound, lowered statement ready to run (what a prepared statement keeps).
pub(crate) struct Prepared {
    pub stmt: lql_grammar::Statement,
    pub logical: LogicalPlan,
    pub physical: PhysicalPlan,
    /// `WITH STEERING`: the steering the statement runs under, bound with it.
    pub steering: Option<lql_planner::SteeringPlan>,
    /// The session version it was bound against.
    pub version: u64,
}

impl Prepared {
    /// What the statement does besides returning rows (its plan's declared effects, and
    /// the steering file it reads under `WITH STEERING`).
    pub fn effects(&self) -> lql_planner::Effects {
        let e = lql_planner::effects(&self.logical);
        match &self.steering {
            Some(s) => e.union(lql_planner::steering_effects(s)),
            None => e,
        }
    }
}

/// Decides, from a statement's declared effects, whether it may run: the engine calls it
/// on the bound plan right before the statement runs (`lql serve`'s HTTP gate).
pub type Gate<'a> = &'a dyn Fn(&lql_planner::Effects) -> Result<()>;

impl Engine {
    pub(crate) fn new(db: Database) -> Self {
        Engine {
            db,
            progress: None,
            tokens: None,
            bound: None,
            backend: lql_grammar::BackendChoice::Cpu,
            version: 0,
        }
    }

    pub(crate) fn bound_name(&self) -> Option<String> {
        self.bound.as_ref().map(|b| b.name.clone())
    }

    /// Binds a model file, folder or catalogue name (as `USE`), through the database so
    /// that connections share mapped files.
    pub(crate) fn bind(&mut self, path_or_name: &str, cancel: &Arc<AtomicBool>) -> Result<Rows> {
        let columns = lql_planner::schema::use_columns();
        let _interruptible = lql_storage::interrupt::Scope::new(cancel);
        let mut cx = Cx {
            engine: self,
            cancel,
            text: path_or_name,
            columns: &columns,
        };
        use_model::bind_any(&mut cx, path_or_name)
    }

    /// Parses, binds and lowers one statement's text.
    pub(crate) fn prepare(&self, text: &str) -> Result<Prepared> {
        self.prepare_parsed(lql_grammar::parse_statement(text)?)
    }

    /// Binds and lowers a parsed statement (a prepared statement's, its parameters' values
    /// already in place).
    pub(crate) fn prepare_parsed(&self, stmt: lql_grammar::Statement) -> Result<Prepared> {
        let logical = {
            let catalog = EngineCatalog::new(self.bound.as_ref(), self.backend);
            lql_planner::bind(&stmt, &catalog)?
        };
        let steering = match &stmt.kind {
            lql_grammar::StatementKind::Steered { steering, .. } => {
                let catalog = EngineCatalog::new(self.bound.as_ref(), self.backend);
                Some(lql_planner::bind_steering(steering, &catalog)?)
            }
            _ => None,
        };
        let physical = lql_planner::lower(&logical);
        Ok(Prepared {
            stmt,
            logical,
            physical,
            steering,
            version: self.version,
        })
    }

    /// Parses, plans and runs one statement's text.
    pub(crate) fn run_text(
        &mut self,
        text: &str,
        cancel: &Arc<AtomicBool>,
        gate: Option<Gate<'_>>,
    ) -> Result<Rows> {
        let p = self.prepare(text)?;
        self.run_prepared(&p, text, cancel, gate)
    }

    /// Runs a prepared statement to its last row.
    pub(crate) fn run_prepared(
        &mut self,
        p: &Prepared,
        text: &str,
        cancel: &Arc<AtomicBool>,
        gate: Option<Gate<'_>>,
    ) -> Result<Rows> {
        let mut running = self.start(p, text, cancel, gate)?;
        let mut rows = Rows::new(running.columns.clone());
        let out = loop {
            match self.pull(&mut running, text, cancel) {
                Ok(Some(batch)) => rows.rows.extend(batch),
                Ok(None) => break Ok(()),
                Err(e) => break Err(e),
            }
        };
        rows.fault = running.fault;
        self.finish(running);
        out.map(|()| rows)
    }

    /// Starts a prepared statement: checks that it may run, then runs its plan up to its
    /// first row. The rows are then pulled with [`Engine::pull`], and [`Engine::finish`]
    /// ends the statement (also when it is dropped before its last row).
    pub(crate) fn start(
        &mut self,
        p: &Prepared,
        text: &str,
        cancel: &Arc<AtomicBool>,
        gate: Option<Gate<'_>>,
    ) -> Result<Running> {
        let span = p.stmt.span.range();
        let effects = p.effects();
        if self.db.flags().contains(crate::flags::OpenFlags::READ_ONLY) {
            if let Some(what) = effects.modifies() {
                return Err(Error::semantic(format!(
                    "read-only connection: {} {what}",
                    p.logical.name()
                ))
                .with_code(crate::Code::ReadOnly)
                .with_span(span)
                .with_help("open the connection without OpenFlags::READ_ONLY to write"));
            }
        }
        if let Some(gate) = gate {
            gate(&effects).map_err(|e| e.or_span(span.clone()))?;
        }
        lql_planner::check_built(&p.stmt, &p.logical)?;
        // A mapped file replaced or truncated since USE would give wrong answers or SIGBUS.
        if let Some(b) = &self.bound {
            if effects.reads_model {
                b.model().check_unchanged().map_err(|e| {
                    Error::from(e)
                        .with_code(crate::Code::ModelChanged)
                        .with_help("bind it again: USE the same path or name")
                })?;
            }
        }
        // Storage loops over file-declared counts poll this statement's interrupt flag.
        let _interruptible = lql_storage::interrupt::Scope::new(cancel);
        let mut cx = Cx {
            engine: self,
            cancel,
            text,
            columns: p.physical.columns(),
        };
        if let Some(plan) = &p.steering {
            let s = steering::build(&mut cx, plan).map_err(|e| e.or_span(span.clone()))?;
            cx.bound_mut()?.statement_steering = Some(s);
        }
        let mut running = Running {
            columns: columns_of(p.physical.columns()),
            defs: p.physical.columns().to_vec(),
            steered: p.steering.is_some(),
            span: span.clone(),
            rows: None,
            run: None,
            fault: false,
        };
        match interp::start(&mut cx, &p.physical, interp::Mode::Plain) {
            Ok((out, run)) => {
                running.run = Some(run);
                match out {
                    datum::Datum::Stream(s) => running.rows = Some(s),
                    datum::Datum::Rows(rows) => {
                        running.fault = rows.fault;
                        running.rows = Some(stream::stream_of(datum::Datum::Rows(rows), "Rows")?);
                    }
                    other => {
                        self.finish(running);
                        return Err(Error::internal(format!(
                            "the plan's root produced {} instead of rows",
                            other.kind()
                        )));
                    }
                }
                Ok(running)
            }
            Err(e) => {
                self.finish(running);
                Err(e.or_span(span))
            }
        }
    }

    /// The next batch of a started statement's rows (`None` after the last).
    pub(crate) fn pull(
        &mut self,
        running: &mut Running,
        text: &str,
        cancel: &Arc<AtomicBool>,
    ) -> Result<Option<stream::Batch>> {
        let (Some(rows), Some(run)) = (running.rows.as_mut(), running.run.as_mut()) else {
            return Ok(None);
        };
        let _interruptible = lql_storage::interrupt::Scope::new(cancel);
        let mut cx = Cx {
            engine: self,
            cancel,
            text,
            columns: &running.defs,
        };
        match rows.next_batch(&mut cx, run) {
            Ok(Some(batch)) => Ok(Some(batch)),
            Ok(None) => {
                running.rows = None;
                Ok(None)
            }
            Err(e) => {
                running.rows = None;
                Err(e.or_span(running.span.clone()))
            }
        }
    }

    /// Ends a started statement: the statement's steering (`WITH STEERING`) stops.
    pub(crate) fn finish(&mut self, running: Running) {
        if running.steered {
            if let Some(b) = self.bound.as_mut() {
                b.statement_steering = None;
            }
        }
    }
}

/// A statement that started and whose rows are being pulled.
pub(crate) struct Running {
    /// The columns of its rows.
    pub columns: Vec<Column>,
    /// The planner's declaration of them (what its operators answer in).
    defs: Vec<lql_planner::ColumnDef>,
    /// Whether it runs under `WITH STEERING`, to be reset when it ends.
    steered: bool,
    span: std::ops::Range<usize>,
    /// Its rows still to pull (`None` once done or failed).
    rows: Option<stream::Stream>,
    run: Option<interp::Run>,
    /// Whether its rows report a fault (see [`Rows::fault`]).
    pub fault: bool,
}
