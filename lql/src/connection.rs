//! `Connection`: a session with (at most) one bound model, running LQL text.
//!
//! A connection belongs to a [`Database`] (which shares mapped models, tokenizers and label
//! caches between connections); `Connection::open` makes both in one call. A connection is
//! `Send + Sync`: its session sits behind a mutex, so statements on one connection run one at
//! a time, while different connections of one database run concurrently. An
//! [`InterruptHandle`] cancels the statement running now from any thread (the REPL's
//! Ctrl-C), as `rusqlite::InterruptHandle` does. A handler or callback that panics is
//! caught (`panics.rs`) and answered as an error with code `LQL-E0205`; the connection
//! stays usable.

use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::database::{Database, SharedModel};
use crate::engine::{Engine, Gate};
use crate::error::{Error, Result};
use crate::flags::OpenFlags;
use crate::panics::{catch_closure, PanicSlot};
use crate::progress::{Progress, ProgressHandler};
use crate::rows::Rows;
use crate::statement::Statement;
use crate::stream::RowStream;
pub use lql_exec::bench::BenchReport;
use lql_planner::Effects;

/// What [`Connection::start`] starts: a prepared statement's kept plan, or a parsed
/// statement (its parameters' values in place) to bind now.
pub(crate) enum ToStart<'p> {
    Kept(&'p mut crate::engine::Prepared),
    Parsed(Box<lql_grammar::Statement>),
}

/// The result of one statement of a script.
#[derive(Debug, Clone, PartialEq)]
pub struct StatementResult {
    /// The statement's text (without its `;`).
    pub text: String,
    /// Its byte range in the script.
    pub span: Range<usize>,
    pub rows: Rows,
}

/// A session: a bound model (or none, until `USE`) and the statements run against it.
pub struct Connection {
    db: Database,
    engine: Mutex<Engine>,
    interrupt: Arc<AtomicBool>,
    /// A panic of one of the connection's handlers during the running statement.
    panicked: PanicSlot,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("db", &self.db)
            .finish_non_exhaustive()
    }
}

/// Cancels the statement a connection is running now; harmless when none is.
#[derive(Debug, Clone)]
pub struct InterruptHandle {
    flag: Arc<AtomicBool>,
}

impl InterruptHandle {
    /// Asks the running statement to stop; it returns an `Interrupted` error soon after.
    /// Safe to call from a signal handler (it stores one atomic flag).
    pub fn interrupt(&self) {
        self.flag.store(true, Ordering::SeqCst);
    }
}

impl Connection {
    /// A connection on its own new database, with no model bound; `USE …` binds one.
    pub fn open_in_memory() -> Result<Connection> {
        Database::new().connect()
    }

    /// A connection on `db` (see [`Database::connect`]).
    pub(crate) fn on(db: Database) -> Connection {
        Connection {
            engine: Mutex::new(Engine::new(db.clone())),
            db,
            interrupt: Arc::new(AtomicBool::new(false)),
            panicked: PanicSlot::default(),
        }
    }

    /// [`Connection::open_in_memory`] with options ([`OpenFlags`]: offline, read-only).
    pub fn open_in_memory_with_flags(flags: OpenFlags) -> Result<Connection> {
        Database::new_with_flags(flags).connect()
    }

    /// [`Connection::open`] with options: with [`OpenFlags::OFFLINE`] a catalogue name that
    /// is not in the cache is refused (naming the cache path) instead of downloaded; with
    /// [`OpenFlags::READ_ONLY`] statements that write files or edit the model state are
    /// refused with code `LQL-E0204`.
    pub fn open_with_flags(path_or_name: impl AsRef<str>, flags: OpenFlags) -> Result<Connection> {
        let conn = Connection::open_in_memory_with_flags(flags)?;
        conn.bind(path_or_name.as_ref())?;
        Ok(conn)
    }

    /// Opens a model: a path that exists is opened as a file or folder (GGUF, Hugging Face
    /// folder, …); anything else is taken as a catalogue name, fetched into the local cache
    /// if needed. The connection has a database of its own ([`Connection::database`]) on
    /// which more connections can be made.
    pub fn open(path_or_name: impl AsRef<str>) -> Result<Connection> {
        let conn = Connection::open_in_memory()?;
        conn.bind(path_or_name.as_ref())?;
        Ok(conn)
    }

    /// The database this connection belongs to.
    pub fn database(&self) -> &Database {
        &self.db
    }

    /// Binds an already-open shared model (a new connection of a database).
    pub(crate) fn bind_shared(&self, name: &str, shared: Arc<SharedModel>) {
        if let Ok(mut e) = self.engine() {
            e.bound = Some(crate::engine::Bound::new(name.to_string(), shared));
            e.version += 1;
        }
    }

    /// The bound model as shared by the database.
    pub(crate) fn bound_shared(&self) -> Option<(String, Arc<SharedModel>)> {
        let e = self.engine().ok()?;
        e.bound.as_ref().map(|b| (b.name.clone(), b.shared.clone()))
    }

    /// Like [`Connection::open`], with a progress handler installed first (so a download
    /// draws progress).
    pub fn open_with_progress(
        path_or_name: impl AsRef<str>,
        handler: impl Fn(&Progress) + Send + Sync + 'static,
    ) -> Result<Connection> {
        let conn = Connection::open_in_memory()?;
        conn.set_progress_handler(Some(handler));
        conn.bind(path_or_name.as_ref())?;
        Ok(conn)
    }

    /// Binds a model as [`Connection::open`] does, replacing the bound one.
    pub fn bind(&self, path_or_name: &str) -> Result<Rows> {
        let mut engine = self.engine()?;
        self.interrupt.store(false, Ordering::SeqCst);
        self.panicked
            .run(|| engine.bind(path_or_name, &self.interrupt))
    }

    /// Installs (or removes, with `None`) the progress handler.
    pub fn set_progress_handler<F>(&self, handler: Option<F>)
    where
        F: Fn(&Progress) + Send + Sync + 'static,
    {
        let handler = handler.map(|h| {
            Arc::new(
                self.panicked
                    .wrap("the progress handler", self.interrupt.clone(), h),
            ) as ProgressHandler
        });
        if let Ok(mut e) = self.engine() {
            e.progress = handler;
        }
    }

    /// Installs (or removes, with `None`) a handler that sees GENERATE's text as it is
    /// produced, piece by piece (a shell can show the generation live).
    pub fn set_token_handler<F>(&self, handler: Option<F>)
    where
        F: Fn(&str) + Send + Sync + 'static,
    {
        let handler = handler.map(|h| {
            Arc::new(
                self.panicked
                    .wrap("the token handler", self.interrupt.clone(), h),
            ) as crate::progress::TokenHandler
        });
        if let Ok(mut e) = self.engine() {
            e.tokens = handler;
        }
    }

    /// A handle that cancels the running statement from another thread.
    pub fn interrupt_handle(&self) -> InterruptHandle {
        InterruptHandle {
            flag: self.interrupt.clone(),
        }
    }

    /// Runs every statement of `text` and returns the rows of the last one (empty rows
    /// when the text holds no statement). The first error stops the run.
    pub fn execute(&self, text: &str) -> Result<Rows> {
        let mut last = Rows::empty();
        self.execute_each(text, |r| {
            last = r.rows;
            Ok(())
        })?;
        Ok(last)
    }

    /// Runs every statement of `text` and returns each one's result.
    pub fn execute_batch(&self, text: &str) -> Result<Vec<StatementResult>> {
        let mut all = Vec::new();
        self.execute_each(text, |r| {
            all.push(r);
            Ok(())
        })?;
        Ok(all)
    }

    /// Runs the statements of `text` one at a time, handing each result to `on_result` as
    /// soon as it completes (the REPL prints it then). Stops at the first error, from a
    /// statement or from `on_result` (a panic of `on_result` is caught and answered with code
    /// `LQL-E0205`). Spans in errors are byte ranges in `text`.
    pub fn execute_each<F>(&self, text: &str, on_result: F) -> Result<()>
    where
        F: FnMut(StatementResult) -> Result<()>,
    {
        self.run_each(text, None, on_result)
    }

    /// [`Connection::execute_each`] with a gate, as SQLite's authorizer: before each
    /// statement runs, `gate` sees the [`Effects`] declared by its bound plan (files read
    /// and written, state changed, network) and refuses it by returning an error, which
    /// stops the run with the statement's span. `lql serve` decides what HTTP may do here.
    ///
    /// ```no_run
    /// # fn main() -> lql::Result<()> {
    /// let conn = lql::Connection::open("smollm2-135m-instruct")?;
    /// let only_reads = |e: &lql::Effects| match e.modifies() {
    ///     None => Ok(()),
    ///     Some(what) => Err(lql::Error::semantic(format!("refused: it {what}"))),
    /// };
    /// let err = conn
    ///     .execute_each_gated("STATS; COMPILE CURRENT INTO GGUF 'o.gguf'", &only_reads, |_| Ok(()))
    ///     .unwrap_err();
    /// assert!(err.message.contains("writes \"o.gguf\""));
    /// # Ok(()) }
    /// ```
    pub fn execute_each_gated<F>(&self, text: &str, gate: Gate<'_>, on_result: F) -> Result<()>
    where
        F: FnMut(StatementResult) -> Result<()>,
    {
        self.run_each(text, Some(gate), on_result)
    }

    /// The effects the statement of `text` declares (its bound plan's), without running
    /// it: what [`Connection::execute_each_gated`]'s gate will see. Text with more than
    /// one statement is refused.
    pub fn effects(&self, text: &str) -> Result<Effects> {
        self.prepare(text)?.effects(())
    }

    fn run_each<F>(&self, text: &str, gate: Option<Gate<'_>>, mut on_result: F) -> Result<()>
    where
        F: FnMut(StatementResult) -> Result<()>,
    {
        let mut engine = self.engine()?;
        self.interrupt.store(false, Ordering::SeqCst);
        for span in lql_grammar::split_statements(text) {
            let span = span.range();
            if self.interrupt.load(Ordering::SeqCst) {
                return Err(Error::interrupted().with_span(span));
            }
            let stmt_text = &text[span.clone()];
            let rows = self
                .panicked
                .run(|| engine.run_text(stmt_text, &self.interrupt, gate))
                .map_err(|e| e.offset_spans(span.start))?;
            let result = StatementResult {
                text: stmt_text.to_string(),
                span,
                rows,
            };
            catch_closure("the execute_each callback", || on_result(result))?;
        }
        Ok(())
    }

    /// Prepares `text`, runs it with `params` and maps its first row with `f` (as
    /// rusqlite's `Connection::query_row`); no row is an error (code `LQL-E0203`).
    ///
    /// ```no_run
    /// # fn main() -> lql::Result<()> {
    /// let conn = lql::Connection::open("smollm2-135m-instruct")?;
    /// let layers: i64 = conn.query_row("SELECT count(*) FROM layers", (), |r| r.get(0))?;
    /// let token: String = conn.query_row(
    ///     "INFER ? TOP 1",
    ///     lql::params!["The capital of France is"],
    ///     |r| r.get("token"),
    /// )?;
    /// # Ok(()) }
    /// ```
    ///
    /// Using a connection from inside one of its own callbacks is refused with code
    /// `LQL-E0202` rather than deadlocking:
    ///
    /// ```no_run
    /// # fn main() -> lql::Result<()> {
    /// let conn = lql::Connection::open("smollm2-135m-instruct")?;
    /// let err = conn
    ///     .execute_each("STATS", |_| conn.execute("STATS").map(|_| ()))
    ///     .unwrap_err();
    /// assert_eq!(err.code(), "LQL-E0202");
    /// # Ok(()) }
    /// ```
    pub fn query_row<T, P, F>(&self, text: &str, params: P, f: F) -> Result<T>
    where
        P: crate::statement::Params,
        F: FnOnce(&crate::rows::Row<'_>) -> Result<T>,
    {
        self.prepare(text)?.query_row(params, f)
    }

    /// Parses one statement and returns it ready to run, with its parameters (`?`, `?NNN`,
    /// `:name`) to be bound by [`Statement::query`]. A statement without parameters is also
    /// bound and lowered now, and re-bound only when the session changes (USE). Text with
    /// more than one statement is refused.
    pub fn prepare(&self, text: &str) -> Result<Statement<'_>> {
        let pieces = lql_grammar::split_statements(text);
        match pieces.as_slice() {
            [] => Err(Error::semantic(
                "nothing to prepare: the text holds no statement",
            )),
            [one] => {
                let stmt_text = &text[one.range()];
                Statement::new(self, stmt_text.to_string(), one.start)
            }
            [_, second, ..] => Err(Error::semantic(format!(
                "prepare takes one statement; this text holds {}",
                pieces.len()
            ))
            .with_span(second.range())
            .with_span_label("second statement")
            .with_help("use execute or execute_batch to run several statements")),
        }
    }

    /// Binds and lowers one statement's text without running it.
    pub(crate) fn prepare_plan(&self, stmt_text: &str) -> Result<crate::engine::Prepared> {
        let engine = self.engine()?;
        self.panicked.run(|| engine.prepare(stmt_text))
    }

    /// Binds and lowers a parsed statement without running it.
    pub(crate) fn prepare_parsed(
        &self,
        stmt: lql_grammar::Statement,
    ) -> Result<crate::engine::Prepared> {
        let engine = self.engine()?;
        self.panicked.run(|| engine.prepare_parsed(stmt))
    }

    /// Starts a statement (binding it first when it is parsed, or its kept plan again when
    /// the session changed since) under one hold of the session, so no USE from another
    /// thread comes between its binding and its run; returns its rows as a stream.
    pub(crate) fn start(
        &self,
        what: ToStart<'_>,
        stmt_text: &str,
        offset: usize,
        gate: Option<Gate<'_>>,
    ) -> Result<RowStream<'_>> {
        let mut engine = self.engine()?;
        self.interrupt.store(false, Ordering::SeqCst);
        let running = self.panicked.run(|| match what {
            ToStart::Kept(prepared) => {
                if prepared.version != engine.version {
                    *prepared = engine.prepare(stmt_text)?;
                }
                engine.start(prepared, stmt_text, &self.interrupt, gate)
            }
            ToStart::Parsed(stmt) => {
                let prepared = engine.prepare_parsed(*stmt)?;
                engine.start(&prepared, stmt_text, &self.interrupt, gate)
            }
        })?;
        Ok(RowStream::new(
            self,
            engine,
            stmt_text.to_string(),
            offset,
            running,
        ))
    }

    /// The flag [`InterruptHandle`] raises.
    pub(crate) fn interrupt_flag(&self) -> &Arc<AtomicBool> {
        &self.interrupt
    }

    /// Where a handler's panic during the running statement is recorded.
    pub(crate) fn panic_slot(&self) -> &PanicSlot {
        &self.panicked
    }

    /// The session version (bumped by USE), for prepared statements.
    pub(crate) fn session_version(&self) -> u64 {
        self.engine().map(|e| e.version).unwrap_or(0)
    }

    /// Runs the CPU backend's throughput benchmark on the bound model: prefill of a fixed
    /// 100-token prompt, then 64 greedy decode steps; medians over `reps` repetitions after
    /// a warm-up (`threads == 0`: one per core).
    pub fn bench(&self, threads: usize, reps: usize) -> Result<BenchReport> {
        let engine = self.engine()?;
        let model = engine
            .bound
            .as_ref()
            .ok_or_else(|| Error::semantic("no model is bound"))?
            .model()
            .clone();
        drop(engine);
        Ok(lql_exec::bench::run(model, threads, reps)?)
    }

    /// A short description of the bound model (`None` when nothing is bound).
    pub fn bound_model(&self) -> Option<String> {
        self.engine().ok().and_then(|e| e.bound_name())
    }

    /// Runs the bound layer-package stage (`USE "dir" LAYERS a-b`) from a prompt (a stage
    /// starting at layer 0) or from the previous stage's activation file. A stage that
    /// ends before the last layer writes its hidden states to `out` (an activation file,
    /// format in docs/packages.md); the last stage returns the last position's logits,
    /// bit-identical to INFER on the whole model.
    pub fn run_stage(
        &self,
        input: crate::engine::StageInput<'_>,
        out: Option<&std::path::Path>,
    ) -> Result<crate::engine::StageResult> {
        let mut engine = self.engine()?;
        self.interrupt.store(false, Ordering::SeqCst);
        self.panicked
            .run(|| crate::engine::run_stage(&mut engine, input, out))
    }

    /// The package artifacts the bound layer package mapped (repository-relative, in
    /// selection order); `None` when what is bound is not a package.
    pub fn bound_package_files(&self) -> Option<Vec<String>> {
        self.engine()
            .ok()
            .and_then(|e| crate::engine::bound_files(&e))
    }

    /// Locks the session. A thread that already holds it (a result, token or progress
    /// handler calling back into its own connection) gets an error instead of a deadlock.
    fn engine(&self) -> Result<EngineGuard<'_>> {
        let id = &self.engine as *const Mutex<Engine> as usize;
        if HELD.with(|h| h.borrow().contains(&id)) {
            return Err(Error::semantic(
                "this connection is busy: it was used from inside one of its own callbacks, \
                 or while a RowStream of it is open",
            )
            .with_code(crate::Code::Busy)
            .with_help(
                "collect the rows and run the next statement after the call returns (or the \
                 stream is dropped), or use another connection of the same Database \
                 (Database::connect)",
            ));
        }
        let guard = self.engine.lock().map_err(|_| {
            Error::internal("a statement panicked earlier; the connection is unusable")
        })?;
        HELD.with(|h| h.borrow_mut().push(id));
        Ok(EngineGuard { guard, id })
    }
}

thread_local! {
    /// The sessions this thread holds locked now (by address), to refuse re-entrant use.
    static HELD: std::cell::RefCell<Vec<usize>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// A locked session, remembered as held by this thread until dropped.
pub(crate) struct EngineGuard<'a> {
    guard: MutexGuard<'a, Engine>,
    id: usize,
}

impl std::ops::Deref for EngineGuard<'_> {
    type Target = Engine;
    fn deref(&self) -> &Engine {
        &self.guard
    }
}

impl std::ops::DerefMut for EngineGuard<'_> {
    fn deref_mut(&mut self) -> &mut Engine {
        &mut self.guard
    }
}

impl Drop for EngineGuard<'_> {
    fn drop(&mut self) {
        HELD.with(|h| {
            let mut h = h.borrow_mut();
            if let Some(i) = h.iter().rposition(|&x| x == self.id) {
                h.remove(i);
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_send_sync<T: Send + Sync>() {}

    #[test]
    fn connection_is_send_and_sync() {
        assert_send_sync::<Connection>();
        assert_send_sync::<InterruptHandle>();
    }
}
