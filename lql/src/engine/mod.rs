//! The engine: runs one statement's text against the session's state.
//!
//! ```text
//!  text ──lql_grammar::parse_statement──▶ Statement
//!       ──lql_planner::bind(&EngineCatalog)──▶ LogicalPlan ──dispatch──▶ Rows
//! ```
//!
//! [`dispatch`] is the single place where statements meet their executors: one function
//! per statement family, each in its own file of this folder (`bind.rs` for USE, `run.rs`
//! for INFER/GENERATE, `introspect.rs` for SHOW/STATS/TOKENIZE/EXPLAIN, …). A family that
//! is not built yet answers [`Error::not_supported_yet`] with the statement's name. To add
//! one: write `engine/<family>.rs` with `pub(crate) fn run(cx: &mut Cx<'_>, plan: &XPlan)
//! -> Result<Rows>`, declare the module below, and route its `LogicalPlan` variant to it.

mod bind;
mod catalog;
mod describe;
mod explain_infer;
mod introspect;
mod rowexec;
mod run;
mod select;
mod trace;
mod vindex;
mod walk;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use lql_exec::tokenizer::Tokenizer;
use lql_planner::LogicalPlan;
use lql_storage::Model;

use crate::error::{Error, Result};
use crate::progress::{Progress, ProgressHandler};
use crate::rows::Rows;

pub(crate) use catalog::EngineCatalog;

/// A bound model and what the engine derived from it: facts at USE; the executor and the
/// tokenizer on first use (a browse-only container never builds an executor).
pub(crate) struct Bound {
    /// The name it was bound by: a catalogue name or the path as given.
    pub name: String,
    pub model: Arc<Model>,
    /// The planner's view of it.
    pub facts: lql_planner::ModelFacts,
    pub executor: Option<lql_exec::Executor>,
    pub tokenizer: Option<Arc<Tokenizer>>,
}

impl Bound {
    pub fn new(name: String, model: Model) -> Bound {
        let facts = catalog::facts(&name, &model);
        Bound {
            name,
            model: Arc::new(model),
            facts,
            executor: None,
            tokenizer: None,
        }
    }
}

/// Session state behind a connection's mutex.
pub(crate) struct Engine {
    pub(crate) progress: Option<ProgressHandler>,
    pub(crate) tokens: Option<crate::progress::TokenHandler>,
    pub(crate) bound: Option<Bound>,
}

/// What a statement executor gets: the session, the cancel flag, the statement's text.
pub(crate) struct Cx<'a> {
    pub engine: &'a mut Engine,
    /// The connection's interrupt flag (cleared when a statement starts).
    pub cancel: &'a Arc<AtomicBool>,
    /// The statement's text; spans in errors are byte ranges into it.
    pub text: &'a str,
}

impl Cx<'_> {
    /// The bound model, or the "no model bound" error pointing at the statement.
    pub fn bound(&self) -> Result<&Bound> {
        self.engine.bound.as_ref().ok_or_else(|| {
            Error::semantic("no model is bound")
                .with_span(0..self.text.len())
                .with_help("bind one first: USE MODEL \"smollm2-135m-instruct\" or USE \"path/to/model.gguf\"")
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
            let source: Arc<dyn lql_storage::OperandSource> = b.model.clone();
            b.executor = Some(lql_exec::Executor::new(source, 0)?.with_cancel_flag(cancel));
        }
        b.executor
            .clone()
            .ok_or_else(|| Error::internal("executor not built"))
    }

    /// The bound model's tokenizer, built on first use.
    pub fn tokenizer(&mut self) -> Result<Arc<Tokenizer>> {
        self.bound()?;
        let b = self
            .engine
            .bound
            .as_mut()
            .ok_or_else(|| Error::internal("bound model vanished"))?;
        if let Some(t) = &b.tokenizer {
            return Ok(t.clone());
        }
        let spec = b.model.tokenizer_spec()?;
        let t = Arc::new(Tokenizer::from_spec_with_special(
            &spec,
            &b.model.surface.special,
        )?);
        b.tokenizer = Some(t.clone());
        Ok(t)
    }

    /// `Err(Interrupted)` once the interrupt handle has been used.
    pub fn check_cancel(&self) -> Result<()> {
        if self.cancel.load(Ordering::Relaxed) {
            Err(Error::interrupted())
        } else {
            Ok(())
        }
    }

    /// Sends a progress report to the embedder's handler, if any (for long statements:
    /// EXTRACT, COMPILE).
    #[allow(dead_code)]
    pub fn progress(&self, p: &Progress) {
        if let Some(h) = &self.engine.progress {
            h(p);
        }
    }
}

impl Engine {
    pub(crate) fn new() -> Self {
        Engine {
            progress: None,
            tokens: None,
            bound: None,
        }
    }

    pub(crate) fn bound_name(&self) -> Option<String> {
        self.bound.as_ref().map(|b| b.name.clone())
    }

    /// Binds a model file or folder (as `USE "path"`).
    pub(crate) fn bind_path(&mut self, path: &str, cancel: &Arc<AtomicBool>) -> Result<Rows> {
        let mut cx = Cx {
            engine: self,
            cancel,
            text: path,
        };
        bind::bind_path(&mut cx, path, None)
    }

    /// Binds a catalogue model (as `USE MODEL "name"`).
    pub(crate) fn bind_catalogue(&mut self, name: &str, cancel: &Arc<AtomicBool>) -> Result<Rows> {
        let mut cx = Cx {
            engine: self,
            cancel,
            text: name,
        };
        bind::bind_catalogue(&mut cx, name, None)
    }

    /// Parses, plans and runs one statement's text.
    pub(crate) fn run_text(&mut self, text: &str, cancel: &Arc<AtomicBool>) -> Result<Rows> {
        let stmt = lql_grammar::parse_statement(text)?;
        let plan = {
            let catalog = EngineCatalog::new(self.bound.as_ref());
            lql_planner::bind(&stmt, &catalog)?
        };
        let span = stmt.span.range();
        let mut cx = Cx {
            engine: self,
            cancel,
            text,
        };
        dispatch(&mut cx, &plan, &stmt).map_err(|e| e.or_span(span))
    }
}

/// Routes a bound statement to the function that runs its family.
fn dispatch(cx: &mut Cx<'_>, plan: &LogicalPlan, stmt: &lql_grammar::Statement) -> Result<Rows> {
    match plan {
        LogicalPlan::Use(p) => bind::run(cx, p, stmt),
        LogicalPlan::Infer(p) => run::infer(cx, p),
        LogicalPlan::Generate(p) => run::generate(cx, p),
        LogicalPlan::Show(p)
            if matches!(
                p.what,
                lql_planner::ShowWhat::Components | lql_planner::ShowWhat::Representations
            ) =>
        {
            vindex::show(cx, p)
        }
        LogicalPlan::Show(p) => introspect::show(cx, p, stmt),
        LogicalPlan::Stats => introspect::stats(cx),
        LogicalPlan::Tokenize { text } => introspect::tokenize(cx, text),
        LogicalPlan::Walk(p) => walk::walk(cx, p, stmt),
        LogicalPlan::Describe(p) => describe::describe(cx, p),
        LogicalPlan::Select(p) => select::select(cx, p),
        LogicalPlan::Explain(inner) if matches!(**inner, LogicalPlan::Walk(_)) => {
            walk::explain(cx, plan, stmt)
        }
        LogicalPlan::Trace(p) => trace::trace(cx, p),
        LogicalPlan::Explain(inner) if matches!(**inner, LogicalPlan::Infer(_)) => match &**inner {
            LogicalPlan::Infer(p) => explain_infer::explain_infer(cx, p),
            _ => Err(Error::internal("EXPLAIN INFER without INFER")),
        },
        LogicalPlan::Explain(_) => introspect::explain(cx, plan),
        LogicalPlan::Extract(p) => vindex::extract(cx, p),
        LogicalPlan::Verify { container } => vindex::verify(cx, container.as_deref()),
        other => Err(Error::not_supported_yet(other.name())),
    }
}

/// Checks the syntax of one statement (for `Connection::prepare`).
pub(crate) fn check_syntax(text: &str) -> Result<()> {
    lql_grammar::parse_statement(text)?;
    Ok(())
}
