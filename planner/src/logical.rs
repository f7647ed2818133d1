//! The logical plan: one variant per statement family, with resolved and validated
//! values (defaults filled in, layer ranges checked, columns resolved). Built by
//! [`crate::bind`]; lowered to operators by [`crate::lower`].

use crate::schema::ColumnDef;
pub use lql_grammar::{
    ArtifactWhat, BackendChoice, CmpOp, CompileTarget, Detail, Encoding, Expr, ExprKind,
    ExtractFormat, ExtractShape, JoinKind, ModelRef, OutputConstraint, PatchComponent, PatchMethod,
    PatchMetric, PatchPositions, Positions, RepresentTarget, Setting, ShowWhat, Statement, Table,
    Value, WalkMode,
};
use std::fmt;

/// An inclusive, validated layer range.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct LayerRange {
    pub first: usize,
    pub last: usize,
}

impl LayerRange {
    pub fn new(first: usize, last: usize) -> Self {
        LayerRange { first, last }
    }
    pub fn len(&self) -> usize {
        self.last + 1 - self.first
    }
    pub fn is_empty(&self) -> bool {
        false
    }
    pub fn contains(&self, layer: usize) -> bool {
        (self.first..=self.last).contains(&layer)
    }
    pub fn iter(&self) -> std::ops::RangeInclusive<usize> {
        self.first..=self.last
    }
}

impl fmt::Display for LayerRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.first == self.last {
            write!(f, "{}", self.first)
        } else {
            write!(f, "{}-{}", self.first, self.last)
        }
    }
}

/// What USE binds.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub enum BindTarget {
    /// A GGUF file, VINDEX3 container, layer package or HF folder.
    Path(String),
    /// A named model of the built-in catalogue.
    Catalogue(String),
}

#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct UsePlan {
    pub target: BindTarget,
    /// Bind one stage (checked against the model by the engine once opened).
    pub layers: Option<LayerRange>,
    pub profile: Option<String>,
    /// Where the forward pass runs: USE's BACKEND, else the session's setting.
    pub backend: BackendChoice,
    /// The model's path or name in the statement (errors opening it point here).
    pub source_span: lql_grammar::Span,
    /// The BACKEND clause, when written (an unavailable backend is refused there).
    pub backend_span: Option<lql_grammar::Span>,
    /// Where the passes will run: `backend` resolved against the adapters present.
    pub runs_on: RunsOn,
}

/// Where a bound model's forward passes run, as a BACKEND choice resolves: `auto` is the
/// GPU backend (ops it lacks on the host) when an adapter is present, else the CPU.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub enum RunsOn {
    Cpu,
    /// The GPU backend on `adapter` (empty when none is present: USE refuses that);
    /// `host_fallback`: ops the device lacks run on the host (`auto`).
    Gpu {
        adapter: String,
        host_fallback: bool,
    },
}

impl RunsOn {
    /// Where `choice` runs, `first_adapter` naming the first GPU adapter present (asked only
    /// when the choice may be a GPU: probing adapters is not free).
    pub fn resolve(
        choice: lql_grammar::BackendChoice,
        first_adapter: impl FnOnce() -> Option<String>,
    ) -> RunsOn {
        use lql_grammar::BackendChoice as B;
        match choice {
            B::Cpu => RunsOn::Cpu,
            B::Gpu => RunsOn::Gpu {
                adapter: first_adapter().unwrap_or_default(),
                host_fallback: false,
            },
            B::Auto => match first_adapter() {
                None => RunsOn::Cpu,
                Some(adapter) => RunsOn::Gpu {
                    adapter,
                    host_fallback: true,
                },
            },
        }
    }

    /// `cpu` or `gpu`.
    pub fn name(&self) -> &'static str {
        match self {
            RunsOn::Cpu => "cpu",
            RunsOn::Gpu { .. } => "gpu",
        }
    }
}

#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct InferPlan {
    pub prompt: String,
    /// The layers the forward pass runs (all, or the bound stage).
    pub layers: LayerRange,
    /// Number of next-token candidates (default 5).
    pub top: usize,
}

/// Sampling settings; `temperature == 0` means greedy (argmax) decoding.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Sampling {
    pub temperature: f64,
    pub top_k: Option<usize>,
    pub top_p: Option<f64>,
    pub seed: Option<u64>,
    /// Repetition penalties over the last 64 tokens of prompt and text (`None`: off).
    pub repeat_penalty: Option<f64>,
    pub frequency_penalty: Option<f64>,
    pub presence_penalty: Option<f64>,
}

impl Sampling {
    pub fn greedy() -> Self {
        Sampling {
            temperature: 0.0,
            top_k: None,
            top_p: None,
            seed: None,
            repeat_penalty: None,
            frequency_penalty: None,
            presence_penalty: None,
        }
    }
    pub fn is_greedy(&self) -> bool {
        self.temperature == 0.0
    }
}

#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct GeneratePlan {
    pub prompt: String,
    /// The layers the forward pass runs (all, or the bound stage).
    pub layers: LayerRange,
    /// Most new tokens (default 64; `INFER … GENERATE n` gives n).
    pub max_tokens: usize,
    pub sampling: Sampling,
    pub stop: Vec<String>,
    /// GENERATE's SCHEMA (checked to be JSON) or GRAMMAR clause.
    pub constraint: Option<OutputConstraint>,
}

/// How a browse statement's mode was chosen (the binder decides, once).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub enum ModeChoice {
    /// The statement's MODE clause.
    Written,
    /// No MODE clause: RESIDUAL, because the binding can run the model.
    Default,
    /// No MODE clause: EMBEDDING, because the binding cannot run the model (why).
    DefaultBrowseOnly(String),
}

impl ModeChoice {
    /// The text of WALK's `mode` column for `mode` chosen this way.
    pub fn describe(&self, mode: WalkMode) -> String {
        match self {
            ModeChoice::Written => mode.to_string(),
            ModeChoice::Default => format!("{mode} (default)"),
            ModeChoice::DefaultBrowseOnly(_) => format!("{mode} (default: browse-only binding)"),
        }
    }
}

#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct WalkPlan {
    pub prompt: String,
    /// Features kept per layer (default 10).
    pub top: usize,
    pub layers: LayerRange,
    pub mode: WalkMode,
    pub mode_choice: ModeChoice,
    /// From the catalog, for EXPLAIN.
    pub gate_encoding: Option<String>,
    pub gate_bytes_per_layer: Option<u64>,
}

impl WalkPlan {
    /// The layers a RESIDUAL walk's forward pass runs: 0 through the last layer scanned.
    pub fn forward_layers(&self) -> LayerRange {
        LayerRange::new(0, self.layers.last)
    }
}

#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct DescribePlan {
    pub entity: String,
    pub layers: LayerRange,
    /// Default BRIEF.
    pub detail: Detail,
    pub mode: WalkMode,
    pub mode_choice: ModeChoice,
}

/// One ORDER BY key: an expression over the sort's input rows (a column, or a computed
/// value such as an alias's expression or an aggregate's output column).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct SortKey {
    pub expr: Expr,
    pub descending: bool,
}

impl SortKey {
    /// A key on one column.
    pub fn column(name: &str, descending: bool) -> SortKey {
        SortKey {
            expr: Expr {
                kind: lql_grammar::ExprKind::Column(lql_grammar::Ident {
                    name: name.to_string(),
                    span: lql_grammar::Span::default(),
                }),
                span: lql_grammar::Span::default(),
            },
            descending,
        }
    }
}

/// One aggregate call computed by the Aggregate operator.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct AggCall {
    pub func: lql_grammar::AggFunc,
    /// `None` for `count(*)`.
    pub arg: Option<Expr>,
    pub distinct: bool,
}

/// GROUP BY and aggregates: the Aggregate operator's output is one row per group with the
/// key columns then one column per call (`columns`, named as printed: `count(*)`).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct AggregateSpec {
    pub keys: Vec<Expr>,
    pub calls: Vec<AggCall>,
    pub columns: Vec<ColumnDef>,
}

/// When a features scan computes labels (an unembedding product per feature).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum LabelTiming {
    /// No label column is read.
    None,
    /// WHERE or ORDER BY reads a label column: label every scanned row.
    Early,
    /// Only the projection shows labels: label the rows that survive LIMIT.
    Late,
}

/// Which label columns of `features` a statement reads: the scan fills only these (the
/// others stay NULL, unread), so a query of `c_score` builds no token texts or lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
pub struct LabelSet {
    pub top_token: bool,
    pub top_token_id: bool,
    pub c_score: bool,
    pub down_tokens: bool,
    /// The hidden columns `gate_tokens` and `up_tokens` (filled when named).
    pub gate_tokens: bool,
    pub up_tokens: bool,
}

impl LabelSet {
    /// Every label column (`SELECT *`).
    pub const ALL: LabelSet = LabelSet {
        top_token: true,
        top_token_id: true,
        c_score: true,
        down_tokens: true,
        gate_tokens: false,
        up_tokens: false,
    };

    /// Adds the label column `name` (case-insensitive); other names are ignored.
    pub fn add(&mut self, name: &str) {
        match name.to_ascii_lowercase().as_str() {
            "top_token" => self.top_token = true,
            "top_token_id" => self.top_token_id = true,
            "c_score" => self.c_score = true,
            "down_tokens" => self.down_tokens = true,
            "gate_tokens" => self.gate_tokens = true,
            "up_tokens" => self.up_tokens = true,
            _ => {}
        }
    }
}

/// The binder's estimate of a `features` scan's work, shown by EXPLAIN.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct ScanEstimate {
    /// Rows the scan produces (layers × features after pushdown).
    pub rows: u64,
    /// Features labelled (each an unembedding product: `vocab × hidden` multiply-adds).
    pub labels: u64,
    /// Multiply-adds of the labels.
    pub label_macs: u64,
    /// Layers scanned.
    pub layers: u64,
    /// Every feature of every layer is labelled: a label column is read before LIMIT
    /// with no `layer` bound (EXPLAIN warns).
    pub labels_everything: bool,
    /// The binding's container stores every label: they are read, not computed.
    pub stored: bool,
}

/// What a table scan reads, decided by the planner's pushdown rule.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ScanSpec {
    /// Layers to scan (`None`: all), from `layer` predicates of WHERE.
    pub layers: Option<Vec<usize>>,
    /// Features to scan (`None`: all), from `feature` predicates of WHERE.
    pub features: Option<Vec<usize>>,
    pub labels: LabelTiming,
    /// The label columns the statement reads (projection pushed into the scan).
    pub label_set: LabelSet,
    /// The work of a `features` scan (`None` for the other tables).
    pub estimate: Option<ScanEstimate>,
    /// The prompt a `routes`, `attention` or `heads` scan runs (from `WHERE prompt = '…'`).
    pub prompt: Option<String>,
    /// The token a `heads` scan attributes to (from `WHERE token = '…'`; default: the
    /// prompt's top prediction).
    pub token: Option<String>,
    /// The analysed corpus a `contexts` or `histograms` scan reads (`WHERE corpus = '…'`).
    pub corpus: Option<String>,
    /// The scan may stop after this many rows (LIMIT + OFFSET of a statement that neither
    /// sorts, groups nor drops duplicates first, and filters only through `filter`).
    pub limit: Option<usize>,
    /// WHERE, applied by a `features` scan itself as it goes, a layer at a time, so that a
    /// LIMIT stops the scan (and its labelling) once enough rows pass; no Filter runs
    /// above it then.
    pub filter: Option<Expr>,
}

impl ScanSpec {
    /// Every row, labels not computed, no prompt.
    pub fn full() -> ScanSpec {
        ScanSpec {
            layers: None,
            features: None,
            labels: LabelTiming::None,
            label_set: LabelSet::default(),
            estimate: None,
            prompt: None,
            token: None,
            corpus: None,
            limit: None,
            filter: None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct SelectPlan {
    pub source: SelectSource,
    /// Every column of the source's rows, under the names the rows carry (a table's
    /// columns; `relation.column` in a join).
    pub source_columns: Vec<ColumnDef>,
    /// The result's columns (all of the table's for `*`): alias, column name, or the
    /// expression as printed.
    pub columns: Vec<ColumnDef>,
    /// One expression per result column, over the rows Project reads (the table's, or
    /// the Aggregate's output).
    pub items: Vec<Expr>,
    /// Column names inside are normalised to the schema's.
    pub filter: Option<Expr>,
    /// GROUP BY / aggregates, when the statement has any.
    pub aggregate: Option<AggregateSpec>,
    /// HAVING, over the Aggregate's output.
    pub having: Option<Expr>,
    /// SELECT DISTINCT: Project, then Distinct, then Sort and Limit over the result.
    pub distinct: bool,
    pub order_by: Vec<SortKey>,
    pub limit: Option<usize>,
    /// Rows skipped before LIMIT counts (0: none).
    pub offset: usize,
    /// The IN and scalar subqueries of the expressions above (join conditions, WHERE, the
    /// select list, HAVING, ORDER BY), each bound once, in the order they appear.
    pub subqueries: Vec<Subquery>,
}

/// The IN and scalar subqueries of `e` with their spans, outermost first, left to right:
/// the order in which an operator holding `e` takes their rows as inputs.
pub fn subqueries_in(e: &Expr) -> Vec<(lql_grammar::Span, lql_grammar::Select)> {
    let mut out = Vec::new();
    e.walk(&mut |x| {
        if let ExprKind::InSubquery { query, .. } | ExprKind::Subquery(query) = &x.kind {
            out.push((x.span, (**query).clone()));
        }
    });
    out
}

/// An uncorrelated subquery in an expression (`x IN (SELECT …)`, `(SELECT …)` as a value),
/// bound with its statement: its plan becomes an input of each operator whose expressions
/// hold it, and runs once, before that operator reads rows.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Subquery {
    /// Where it stands in the statement (the `IN (SELECT …)` or `(SELECT …)` expression);
    /// it names the subquery in the expressions that hold it.
    pub span: lql_grammar::Span,
    /// Its statement, as EXPLAIN prints it.
    pub statement: Box<Statement>,
    pub plan: Box<LogicalPlan>,
}

/// Where a SELECT's rows come from.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub enum SelectSource {
    /// A model table, scanned with what WHERE pushed down.
    Table { table: Table, scan: ScanSpec },
    /// Another statement's rows (a subquery, a statement in parentheses, a table
    /// function); it runs as its own plan, inside this one.
    Statement {
        statement: Box<Statement>,
        plan: Box<LogicalPlan>,
    },
    /// Two sources joined; `columns` are the left's then the right's.
    Join {
        left: Box<SelectSource>,
        right: Box<SelectSource>,
        kind: JoinKind,
        /// Over `columns` (USING's equalities included); `None` for a CROSS JOIN.
        on: Option<Expr>,
        columns: Vec<ColumnDef>,
    },
    /// SELECT without FROM: one row of no columns.
    OneRow,
}

impl SelectSource {
    /// The table a plain single-table SELECT scans.
    pub fn table(&self) -> Option<(Table, &ScanSpec)> {
        match self {
            SelectSource::Table { table, scan } => Some((*table, scan)),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct TracePlan {
    pub prompt: String,
    /// FOR "token": the answer whose trajectory is followed.
    pub target: Option<String>,
    pub decompose: bool,
    /// The layers whose rows are shown.
    pub layers: LayerRange,
    /// The layers the forward pass runs (all: the final logits and the contributions that
    /// sum to them need every layer).
    pub forward: LayerRange,
    /// Default LAST.
    pub positions: Positions,
    pub save: Option<String>,
    /// The final norm and output head run after the pass: false when a LIMIT over the
    /// trace's rows needs only the first layers, so the pass stops there
    /// ([`TracePlan::stop_after`]).
    pub head: bool,
}

impl TracePlan {
    /// Narrows the trace to what its first `rows` rows need, for a LIMIT over it that
    /// nothing before it reorders or filters: the rows come one per stage in layer order
    /// (the embedding's, when shown, then each shown layer's), so only the layers up to the
    /// last row's run. Applies only where each row depends on its own layer alone: no FOR
    /// (its contributions read the final logits), no SAVE (the file holds every layer),
    /// one position (LAST). Returns whether the pass got shorter.
    pub fn stop_after(&mut self, rows: usize) -> bool {
        if self.target.is_some() || self.save.is_some() || self.positions != Positions::Last {
            return false;
        }
        let embedding_row = usize::from(self.layers.first == 0);
        // Layer rows wanted after the embedding's; at least one layer runs.
        let layer_rows = rows.saturating_sub(embedding_row).max(1);
        let last = self.layers.first.saturating_add(layer_rows - 1);
        if last >= self.layers.last || self.forward.first != 0 {
            return false;
        }
        self.layers.last = last;
        self.forward.last = last;
        self.head = false;
        true
    }
}

/// PATCH: activation patching. A clean run records `component` at every layer and
/// position; the corrupted run then runs once per cell (layer × position, × head for
/// heads) with that cell restored from the clean run, scored by `metric`.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct PatchPlan {
    /// The corrupted run's prompt (with noise, both runs' prompt).
    pub corrupted: String,
    pub corruption: PatchCorruption,
    pub layers: LayerRange,
    /// Default ALL (each position a cell).
    pub positions: PatchPositions,
    /// Default resid_pre.
    pub component: PatchComponent,
    /// None: the probability of the clean run's top token.
    pub metric: Option<PatchMetric>,
    /// Default runs (exact).
    pub method: PatchMethod,
    /// Layers each cell restores, centred on its layer (default 1).
    pub window: usize,
    /// SAVE: an SVG heat map of the fraction recovered.
    pub save: Option<String>,
}

/// A bound steering (SET STEERING, WITH STEERING): where its vectors come from, their scale
/// and the layers they go on.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct SteeringPlan {
    pub source: SteeringPlanSource,
    /// Default 1.
    pub scale: f64,
    /// A file: the layers of it kept (all when None). Activation addition: the layers a
    /// difference is taken and added at (always given).
    pub layers: Option<LayerRange>,
}

/// Where a steering's vectors come from.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub enum SteeringPlanSource {
    /// A llama.cpp control-vector GGUF.
    File(String),
    /// The mean residual of `positive` minus that of `negative`, per layer.
    Difference {
        positive: Vec<String>,
        negative: Vec<String>,
    },
}

impl std::fmt::Display for SteeringPlan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.source {
            SteeringPlanSource::File(p) => write!(f, "file={p:?}")?,
            SteeringPlanSource::Difference { positive, negative } => write!(
                f,
                "difference of {} text{} minus {}",
                positive.len(),
                if positive.len() == 1 { "" } else { "s" },
                negative.len()
            )?,
        }
        write!(f, " scale={}", self.scale)?;
        if let Some(l) = self.layers {
            write!(f, " layers={l}")?;
        }
        Ok(())
    }
}

/// How PATCH's corrupted run differs from its clean run.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub enum PatchCorruption {
    /// Another prompt (the clean one), of the same token count.
    Prompt { clean: String },
    /// Gaussian noise of `scale` × the embeddings' standard deviation on the tokens of the
    /// prompt's first occurrence of `subject`, drawn from `seed`.
    Noise {
        subject: String,
        scale: f64,
        seed: u64,
    },
}

/// Default NOISE SCALE: ROME's 3× the embeddings' standard deviation.
pub const DEFAULT_NOISE_SCALE: f64 = 3.0;

/// One edge to insert.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct EdgeRow {
    pub entity: String,
    pub relation: String,
    pub target: String,
    /// A sentence naming the entity whose continuation should be the target; None lets the
    /// engine build one from entity and relation.
    pub prompt: Option<String>,
}

/// INSERT with every value it runs with decided by the binder: the layers written and the
/// strength's aim, as EXPLAIN PLAN shows them.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct InsertPlan {
    pub table: Table,
    /// The rows of VALUES (none with `file`).
    pub rows: Vec<EdgeRow>,
    /// `FROM "file"`: a fact file whose rows the engine reads when the statement runs.
    pub file: Option<String>,
    /// `INSERT … SELECT`: the query whose rows are inserted (none with `rows` or `file`).
    pub query: Option<InsertQuery>,
    pub settings: EditSettings,
    pub confidence: Option<f64>,
}

/// `INSERT INTO edges SELECT …`: the bound query, and where each edge column is among its
/// columns (by name; their types are checked when it binds, their values when it runs).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct InsertQuery {
    pub plan: Box<LogicalPlan>,
    pub entity: usize,
    pub relation: usize,
    pub target: usize,
    pub prompt: Option<usize>,
}

/// How an edit is written, decided by the binder for INSERT and EVALUATE EDITS alike.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct EditSettings {
    /// The layer of each row's added feature: AT LAYER's, else
    /// [`crate::DEFAULT_EDIT_LAYER_FRACTION`] of the depth.
    pub layer: usize,
    /// Whether AT LAYER pinned `layer`.
    pub pinned: bool,
    /// The layer of the subject write (below `layer`; `None`: none).
    pub subject_layer: Option<usize>,
    /// The probability the edit prompt must give the target (ALPHA, default
    /// [`crate::DEFAULT_ALPHA`]).
    pub alpha: f64,
    /// Rows of distinct entities whose subject values are optimised together (1: each
    /// row's alone, the default; `LQL_EDIT_JOINT_ROWS` for measurement, docs/editing.md).
    pub joint_rows: usize,
}

/// As EXPLAIN PLAN shows them: `layer=18 subject_layer=6 alpha=0.9`.
impl std::fmt::Display for EditSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "layer={}", self.layer)?;
        if self.pinned {
            f.write_str(" (AT LAYER)")?;
        }
        match self.subject_layer {
            Some(sl) => write!(f, " subject_layer={sl}")?,
            None => f.write_str(" subject_layer=none")?,
        }
        write!(f, " alpha={}", self.alpha)?;
        if self.joint_rows > 1 {
            write!(f, " joint_rows={}", self.joint_rows)?;
        }
        Ok(())
    }
}

/// `EVALUATE EDITS`: a fact file inserted (in one batch, or `batch` at a time) and scored
/// before, after each batch and at the end.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct EvaluatePlan {
    /// The fact file.
    pub facts: String,
    /// Facts per batch (`SEQUENTIAL BATCH n`); `None`: all in one batch.
    pub batch: Option<usize>,
    /// The file's first `limit` facts only.
    pub limit: Option<usize>,
    /// A row per fact and stage besides the aggregates.
    pub per_fact: bool,
    pub settings: EditSettings,
    /// Where the scored prompts' token log-probabilities are written.
    pub save: Option<String>,
}

/// The name of a connection's unsaved edits in the patch stack (`REMOVE PATCH "(session)"`).
pub const SESSION_PATCH: &str = "(session)";

/// `ANALYZE FEATURES`: every feature of `layers` run over a corpus, its top contexts and
/// activation histogram stored per model.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct AnalyzePlan {
    /// The corpus file (one document per line).
    pub corpus: String,
    /// The layers analysed.
    pub layers: LayerRange,
    /// Contexts kept per feature.
    pub top: usize,
}

#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct DeletePlan {
    pub table: Table,
    pub filter: Expr,
}

#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct UpdatePlan {
    pub table: Table,
    pub assignments: Vec<(String, Value)>,
    pub filter: Expr,
    /// How an updated edge is written again (UPDATE edges only).
    pub settings: Option<EditSettings>,
}

#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct DiffPlan {
    pub left: ModelRef,
    /// None: compare `left` (CURRENT) against its base.
    pub right: Option<ModelRef>,
    pub into_patch: Option<String>,
    /// `LAYER n`: only that layer's tensors (checked against the models when it runs).
    pub layer: Option<usize>,
    /// The LAYER clause (a layer out of the models' range is refused there).
    pub layer_span: Option<lql_grammar::Span>,
    pub limit: Option<usize>,
    /// Byte-level rows (encoded bytes, hashes) instead of value rows.
    pub physical: bool,
}

#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct CompilePlan {
    pub source: ModelRef,
    pub target: CompileTarget,
    pub output: String,
    /// INTO PACKAGE: the package's model coordinate and source revision.
    pub model_id: Option<String>,
    pub source_revision: Option<String>,
}

#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ExtractPlan {
    pub source: String,
    pub output: String,
    /// Default VINDEX3.
    pub format: ExtractFormat,
    /// VINDEX3's on-disk shape (default GRAPH).
    pub shape: ExtractShape,
    /// Experts per group extent of the bank shape (`None`: the writer's default).
    pub group: Option<u64>,
    /// Default SOURCE (keep each tensor's stored encoding).
    pub encoding: Encoding,
    pub layers: Option<LayerRange>,
    /// Layer packages: the model coordinate and source revision recorded in the manifest.
    pub model_id: Option<String>,
    pub source_revision: Option<String>,
    /// Layer packages: projector files to copy and declare.
    pub projectors: Vec<String>,
    /// `WITH LABELS`: store every feature's label in the container (derived segment).
    pub labels: bool,
}

/// `REPRESENT …`: what to add to which container.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct RepresentPlan {
    pub target: RepresentTarget,
    pub encoding: Option<Encoding>,
    /// `FFN`: only the FFN operands are re-encoded.
    pub ffn: bool,
    /// None: the bound container.
    pub container: Option<String>,
}

#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ShowPlan {
    pub what: ShowWhat,
    /// A named container (answered from its artifact alone); None: the bound model.
    pub container: Option<String>,
    pub like: Option<String>,
}

/// A bound, validated statement.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub enum LogicalPlan {
    Use(UsePlan),
    Infer(InferPlan),
    Generate(GeneratePlan),
    Walk(WalkPlan),
    Describe(DescribePlan),
    Select(Box<SelectPlan>),
    Trace(TracePlan),
    Patch(PatchPlan),
    Insert(InsertPlan),
    EvaluateEdits(EvaluatePlan),
    AnalyzeFeatures(AnalyzePlan),
    Delete(DeletePlan),
    Update(UpdatePlan),
    BeginPatch {
        path: String,
    },
    /// `SAVE PATCH`: the recording patch (`None`), or the named applied patch file.
    SavePatch {
        path: Option<String>,
    },
    /// SET STEERING = spec | OFF (None).
    SetSteering(Option<SteeringPlan>),
    /// SAVE STEERING "file.gguf".
    SaveSteering {
        path: String,
    },
    /// `SET name = value`: a session setting.
    Set(Setting),
    ApplyPatch {
        path: String,
    },
    RemovePatch {
        path: String,
    },
    Diff(DiffPlan),
    Compile(CompilePlan),
    Extract(ExtractPlan),
    Represent(RepresentPlan),
    /// `INSPECT`, `DESCRIBE OBJECT`, `PRECISION`: a container's artifact alone.
    Artifact {
        what: ArtifactWhat,
        container: String,
        object: Option<String>,
    },
    Compact {
        container: String,
        into: Option<String>,
    },
    /// None: verify the bound model's container. `against`: the source it was made from.
    Verify {
        container: Option<String>,
        against: Option<String>,
    },
    /// One pipeline stage of the bound layer package, its hidden states written to `into`.
    RunStage {
        input: StageInput,
        into: String,
    },
    /// The last stage of the bound layer package, from an activation file to the `top`
    /// most likely next tokens.
    InferFrom {
        file: String,
        top: usize,
    },
    Show(ShowPlan),
    Stats,
    Tokenize {
        text: String,
    },
    DescribeTable {
        table: Table,
    },
    Explain(ExplainPlan),
}

/// What a pipeline stage starts from.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub enum StageInput {
    /// A prompt (the stage owns layer 0).
    Prompt(String),
    /// The previous stage's activation file.
    File(String),
}

impl std::fmt::Display for StageInput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StageInput::Prompt(p) => write!(f, "prompt {p:?}"),
            StageInput::File(h) => write!(f, "activations {h:?}"),
        }
    }
}

/// How EXPLAIN shows a statement.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum ExplainMode {
    /// `EXPLAIN PLAN` (and plain EXPLAIN of statements other than WALK and INFER): the
    /// operator tree; nothing runs.
    Plan,
    /// `EXPLAIN ANALYZE`: runs the tree and reports per-operator rows, time, weight bytes
    /// read and encodings read.
    Analyze,
    /// `EXPLAIN WALK` / `EXPLAIN INFER`: runs the tree and shows, under it with its measured
    /// costs, the per-layer trace.
    Trace,
}

#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ExplainPlan {
    pub mode: ExplainMode,
    pub inner: Box<LogicalPlan>,
}

impl LogicalPlan {
    /// The statement's name, for messages such as "not supported yet: INSERT".
    /// `INFER … GENERATE n` binds to `Generate` and is named "GENERATE".
    pub fn name(&self) -> &'static str {
        match self {
            LogicalPlan::Use(_) => "USE",
            LogicalPlan::Infer(_) => "INFER",
            LogicalPlan::Generate(_) => "GENERATE",
            LogicalPlan::Walk(_) => "WALK",
            LogicalPlan::Describe(_) => "DESCRIBE",
            LogicalPlan::Select(_) => "SELECT",
            LogicalPlan::Trace(_) => "TRACE",
            LogicalPlan::Patch(_) => "PATCH",
            LogicalPlan::Insert(_) => "INSERT",
            LogicalPlan::EvaluateEdits(_) => "EVALUATE EDITS",
            LogicalPlan::AnalyzeFeatures(_) => "ANALYZE FEATURES",
            LogicalPlan::Delete(_) => "DELETE",
            LogicalPlan::Update(_) => "UPDATE",
            LogicalPlan::BeginPatch { .. } => "BEGIN PATCH",
            LogicalPlan::SavePatch { .. } => "SAVE PATCH",
            LogicalPlan::SetSteering(_) => "SET STEERING",
            LogicalPlan::SaveSteering { .. } => "SAVE STEERING",
            LogicalPlan::Set(_) => "SET",
            LogicalPlan::ApplyPatch { .. } => "APPLY PATCH",
            LogicalPlan::RemovePatch { .. } => "REMOVE PATCH",
            LogicalPlan::Diff(_) => "DIFF",
            LogicalPlan::Compile(_) => "COMPILE",
            LogicalPlan::Extract(_) => "EXTRACT",
            LogicalPlan::Represent(_) => "REPRESENT",
            LogicalPlan::Artifact { what, .. } => what.name(),
            LogicalPlan::Compact { .. } => "COMPACT",
            LogicalPlan::Verify { .. } => "VERIFY",
            LogicalPlan::RunStage { .. } => "RUN STAGE",
            LogicalPlan::InferFrom { .. } => "INFER FROM",
            LogicalPlan::Show(_) => "SHOW",
            LogicalPlan::Stats => "STATS",
            LogicalPlan::Tokenize { .. } => "TOKENIZE",
            LogicalPlan::DescribeTable { .. } => "DESCRIBE TABLE",
            LogicalPlan::Explain(e) => match e.mode {
                ExplainMode::Plan => "EXPLAIN PLAN",
                ExplainMode::Analyze => "EXPLAIN ANALYZE",
                ExplainMode::Trace => "EXPLAIN",
            },
        }
    }

    /// True for statements that change session or overlay state (USE, edits, patches).
    pub fn mutates_session(&self) -> bool {
        matches!(
            self,
            LogicalPlan::Use(_)
                | LogicalPlan::Insert(_)
                | LogicalPlan::EvaluateEdits(_)
                | LogicalPlan::Delete(_)
                | LogicalPlan::Update(_)
                | LogicalPlan::BeginPatch { .. }
                | LogicalPlan::SavePatch { .. }
                | LogicalPlan::Set(_)
                | LogicalPlan::SetSteering(_)
                | LogicalPlan::ApplyPatch { .. }
                | LogicalPlan::RemovePatch { .. }
        )
    }
}
