//! The LQL abstract syntax tree: owned types, a byte [`Span`] on every node.
//!
//! Span conventions: a statement's span is its source text without the
//! terminating `;`; an optional clause stored as `Option<Spanned<T>>` carries the
//! span of the whole clause (`TOP 5`, `LAYERS 0-14`), so semantic errors can point
//! at it; a statement argument (a prompt, a path) carries the span of its literal.
//!
//! Printing (`Display`, in `print.rs`) gives back equivalent LQL; clauses are printed
//! in a canonical order, so `parse(print(ast))` equals `ast` ignoring spans (see
//! [`SpanVisit::without_spans`] and [`Statement::eq_ignoring_spans`]).

/// A half-open byte range `start..end` into the source text.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    Default,
    PartialOrd,
    Ord,
    serde::Serialize,
    serde::Deserialize,
)]
pub struct Span {
    pub start: usize,
    pub end: usize,
}

impl Span {
    pub const fn new(start: usize, end: usize) -> Span {
        Span { start, end }
    }
    /// The smallest span covering both.
    pub fn to(self, other: Span) -> Span {
        Span::new(self.start.min(other.start), self.end.max(other.end))
    }
    pub fn len(&self) -> usize {
        self.end.saturating_sub(self.start)
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    pub fn range(&self) -> std::ops::Range<usize> {
        self.start..self.end
    }
}

/// A value with the span it came from.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Spanned<T> {
    pub value: T,
    pub span: Span,
}

impl<T> Spanned<T> {
    pub fn new(value: T, span: Span) -> Self {
        Spanned { value, span }
    }
}

/// An identifier (a column name), as written.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Ident {
    pub name: String,
    pub span: Span,
}

/// One statement; `span` is its source text (without `;`), for echoing it back.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Statement {
    pub kind: StatementKind,
    pub span: Span,
}

impl Statement {
    /// The statement's own source text.
    pub fn text<'a>(&self, src: &'a str) -> &'a str {
        src.get(self.span.range()).unwrap_or("")
    }
    /// The statement's keyword(s), e.g. `"WALK"`, `"BEGIN PATCH"`, `"EXPLAIN"`.
    pub fn name(&self) -> &'static str {
        self.kind.name()
    }
}

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum StatementKind {
    Use(Use),
    Infer(Infer),
    Generate(Generate),
    Walk(Walk),
    Describe(Describe),
    Select(Select),
    Trace(Trace),
    Patch(Patch),
    Insert(Insert),
    /// `EVALUATE EDITS FROM "facts" …`: inserts a fact set and scores it.
    EvaluateEdits(EvaluateEdits),
    /// `ANALYZE FEATURES FROM "corpus" …`: corpus statistics of every feature.
    AnalyzeFeatures(AnalyzeFeatures),
    Delete(Delete),
    Update(Update),
    /// `BEGIN PATCH "file"`
    BeginPatch(Spanned<String>),
    /// `SAVE PATCH ["file"]`: the patch being recorded, or an applied patch file's edited
    /// version written over that file.
    SavePatch(Option<Spanned<String>>),
    /// `SET name = value`: a session setting.
    Set(Spanned<Setting>),
    /// `SET STEERING = spec | OFF`: the connection's steering (None: off).
    SetSteering(Option<Spanned<SteeringSpec>>),
    /// `SAVE STEERING "file.gguf"`: the connection's steering as a llama.cpp control vector.
    SaveSteering(Spanned<String>),
    /// `WITH STEERING spec statement`: the statement's passes steered (the connection's
    /// steering set aside for it).
    Steered {
        steering: Spanned<SteeringSpec>,
        statement: Box<Statement>,
    },
    /// `APPLY PATCH "file"`
    ApplyPatch(Spanned<String>),
    /// `REMOVE PATCH "file"`
    RemovePatch(Spanned<String>),
    Diff(Diff),
    Compile(Compile),
    Extract(Extract),
    /// `REPRESENT LABELS ["c"]` | `REPRESENT "object"|ALL AS <encoding> [INTO "c"]`
    Represent(Represent),
    /// `INSPECT "c"`, `DESCRIBE OBJECT "c" "object"`, `PRECISION "c"`: answers from a
    /// container's artifact alone (index.json, graph, segment headers).
    Artifact(Artifact),
    Compact(Compact),
    /// `VERIFY ["container" [AGAINST "source"]]`
    Verify(Verify),
    Show(Show),
    /// `STATS`
    Stats,
    /// `TOKENIZE "text"`
    Tokenize(Spanned<String>),
    /// `EXPLAIN <statement>`; the inner statement is never itself an EXPLAIN. For WALK and
    /// INFER it runs the statement and shows the per-layer trace; for the others it is
    /// `EXPLAIN PLAN`.
    Explain(Box<Statement>),
    /// `EXPLAIN PLAN <statement>`: the operator tree, nothing runs.
    ExplainPlan(Box<Statement>),
    /// `EXPLAIN ANALYZE <statement>`: runs it and shows the tree with measured costs.
    ExplainAnalyze(Box<Statement>),
    /// `DESCRIBE TABLE name`: a virtual table's columns.
    DescribeTable(Spanned<Table>),
    /// `RUN STAGE "prompt" | FROM "h.bin" INTO "out.bin"`: one pipeline stage of a bound
    /// layer package, from a prompt or the previous stage's activations.
    RunStage(RunStage),
    /// `INFER FROM "h.bin" [TOP n]`: the last stage of a layer package, from the previous
    /// stage's activations to next-token probabilities.
    InferFrom(InferFrom),
}

impl StatementKind {
    pub fn name(&self) -> &'static str {
        match self {
            StatementKind::Use(_) => "USE",
            StatementKind::Infer(_) => "INFER",
            StatementKind::Generate(_) => "GENERATE",
            StatementKind::Walk(_) => "WALK",
            StatementKind::Describe(_) => "DESCRIBE",
            StatementKind::Select(_) => "SELECT",
            StatementKind::Trace(_) => "TRACE",
            StatementKind::Patch(_) => "PATCH",
            StatementKind::Insert(_) => "INSERT",
            StatementKind::EvaluateEdits(_) => "EVALUATE EDITS",
            StatementKind::AnalyzeFeatures(_) => "ANALYZE FEATURES",
            StatementKind::Delete(_) => "DELETE",
            StatementKind::Update(_) => "UPDATE",
            StatementKind::BeginPatch(_) => "BEGIN PATCH",
            StatementKind::SavePatch(_) => "SAVE PATCH",
            StatementKind::SetSteering(_) => "SET STEERING",
            StatementKind::SaveSteering(_) => "SAVE STEERING",
            StatementKind::Steered { .. } => "WITH STEERING",
            StatementKind::Set(_) => "SET",
            StatementKind::ApplyPatch(_) => "APPLY PATCH",
            StatementKind::RemovePatch(_) => "REMOVE PATCH",
            StatementKind::Diff(_) => "DIFF",
            StatementKind::Compile(_) => "COMPILE",
            StatementKind::Extract(_) => "EXTRACT",
            StatementKind::Represent(_) => "REPRESENT",
            StatementKind::Artifact(a) => a.what.name(),
            StatementKind::Compact(_) => "COMPACT",
            StatementKind::Verify(_) => "VERIFY",
            StatementKind::Show(_) => "SHOW",
            StatementKind::Stats => "STATS",
            StatementKind::Tokenize(_) => "TOKENIZE",
            StatementKind::Explain(_) => "EXPLAIN",
            StatementKind::ExplainPlan(_) => "EXPLAIN PLAN",
            StatementKind::ExplainAnalyze(_) => "EXPLAIN ANALYZE",
            StatementKind::DescribeTable(_) => "DESCRIBE TABLE",
            StatementKind::RunStage(_) => "RUN STAGE",
            StatementKind::InferFrom(_) => "INFER FROM",
        }
    }
}

/// `LAYERS a-b`, `LAYERS n` (first == last) or `LAYERS ALL`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum LayerSpec {
    All,
    /// Inclusive on both ends, as written (first may exceed last; the planner refuses it).
    Range {
        first: u64,
        last: u64,
    },
}

/// `USE "path" | USE MODEL "name"`, with optional `LAYERS a-b` and `PROFILE "name"`.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Use {
    pub source: UseSource,
    pub layers: Option<Spanned<LayerSpec>>,
    pub profile: Option<Spanned<String>>,
    /// `BACKEND cpu|gpu|auto`: where the forward pass runs.
    pub backend: Option<Spanned<BackendChoice>>,
}

/// Where the forward pass runs (`USE … BACKEND x`, `SET backend = 'x'`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum BackendChoice {
    /// The CPU backend (the default).
    Cpu,
    /// The GPU backend; a statement fails when no adapter can run the model.
    Gpu,
    /// The GPU backend when an adapter can run the model, else the CPU.
    Auto,
}

impl BackendChoice {
    /// The lower-case name (`cpu`, `gpu`, `auto`).
    pub fn name(self) -> &'static str {
        match self {
            BackendChoice::Cpu => "cpu",
            BackendChoice::Gpu => "gpu",
            BackendChoice::Auto => "auto",
        }
    }
}

/// What steers: a control-vector file or activation addition, scaled, on some layers.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SteeringSpec {
    pub source: SteeringSource,
    /// SCALE s (default 1).
    pub scale: Option<Spanned<f64>>,
    /// LAYERS a-b | AT LAYER l: the layers steered (a file: a filter of its layers;
    /// activation addition: the layers a difference is taken and added at).
    pub layers: Option<Spanned<LayerSpec>>,
}

/// Where steering vectors come from.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum SteeringSource {
    /// A llama.cpp control-vector GGUF.
    File(Spanned<String>),
    /// `("a", …) MINUS ("b", …)`: the mean residual of the first texts minus the second's.
    Difference {
        positive: Vec<Spanned<String>>,
        negative: Vec<Spanned<String>>,
    },
}

/// A session setting (`SET name = value`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Setting {
    /// `SET backend = 'cpu' | 'gpu' | 'auto'`
    Backend(BackendChoice),
}

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum UseSource {
    /// A GGUF file, VINDEX3 container, layer package or HF folder.
    Path(Spanned<String>),
    /// A named model from the built-in catalogue (`USE MODEL "name"`).
    Model(Spanned<String>),
}

/// `INFER "prompt" [TOP n] [GENERATE n]`
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Infer {
    pub prompt: Spanned<String>,
    pub top: Option<Spanned<i64>>,
    pub generate: Option<Spanned<i64>>,
}

/// `VERIFY ["container" [AGAINST "source"]]`; no target: the bound model.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Verify {
    pub target: Option<Spanned<String>>,
    /// The source the target was made from (a layer package against its GGUF).
    pub against: Option<Spanned<String>>,
}

/// What a pipeline stage starts from.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum StageSource {
    /// A prompt (the stage owns the input boundary).
    Prompt(Spanned<String>),
    /// `FROM "h.bin"`: the previous stage's activation file.
    File(Spanned<String>),
}

/// `RUN STAGE "prompt" | FROM "h.bin" INTO "out.bin"`
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct RunStage {
    pub input: StageSource,
    pub into: Spanned<String>,
}

/// `INFER FROM "h.bin" [TOP n]`
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct InferFrom {
    pub file: Spanned<String>,
    pub top: Option<Spanned<i64>>,
}

/// `GENERATE "prompt" [MAX n] [TEMPERATURE t] [TOP_K k] [TOP_P p] [SEED s] [STOP "…", …]
/// [SCHEMA 'json schema' | GRAMMAR 'gbnf'] [REPEAT_PENALTY r] [FREQUENCY_PENALTY f]
/// [PRESENCE_PENALTY p]`
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Generate {
    pub prompt: Spanned<String>,
    pub max: Option<Spanned<i64>>,
    pub temperature: Option<Spanned<f64>>,
    pub top_k: Option<Spanned<i64>>,
    pub top_p: Option<Spanned<f64>>,
    pub seed: Option<Spanned<i64>>,
    pub stop: Option<Spanned<Vec<String>>>,
    /// The text the generation must produce.
    pub constraint: Option<Spanned<OutputConstraint>>,
    /// Repetition penalties over the last 64 tokens (llama.cpp's and OpenAI's).
    pub repeat_penalty: Option<Spanned<f64>>,
    pub frequency_penalty: Option<Spanned<f64>>,
    pub presence_penalty: Option<Spanned<f64>>,
}

/// GENERATE's `SCHEMA` or `GRAMMAR` clause, as written.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum OutputConstraint {
    /// `SCHEMA '…'`: JSON valid against this JSON schema.
    Schema(String),
    /// `GRAMMAR '…'`: text in this GBNF grammar (llama.cpp's format).
    Grammar(String),
}

/// `WALK "prompt" [TOP k] [LAYERS a-b] [MODE EMBEDDING|RESIDUAL]`
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Walk {
    pub prompt: Spanned<String>,
    pub top: Option<Spanned<i64>>,
    pub layers: Option<Spanned<LayerSpec>>,
    pub mode: Option<Spanned<WalkMode>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum WalkMode {
    /// LARQL's browse: the prompt's last-token embedding against every layer's gates.
    Embedding,
    /// Run the model and walk the residual entering each layer's FFN.
    Residual,
}

/// `DESCRIBE "entity" [AT LAYER n | LAYERS a-b] [BRIEF|VERBOSE|RAW]`
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Describe {
    pub entity: Spanned<String>,
    pub scope: Option<Spanned<DescribeScope>>,
    pub detail: Option<Spanned<Detail>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum DescribeScope {
    AtLayer(u64),
    Layers(LayerSpec),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Detail {
    Brief,
    Verbose,
    Raw,
}

/// The virtual tables of SELECT / INSERT / DELETE / UPDATE.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum Table {
    Features,
    Edges,
    Layers,
    Tokens,
    Tensors,
    Representations,
    /// The router's choices over a prompt (`WHERE prompt = '…'`): one row per layer,
    /// position and chosen expert.
    Routes,
    /// Attention patterns over a prompt (`WHERE prompt = '…'`): one row per layer, head,
    /// query and key.
    Attention,
    /// Attention heads over a prompt (`WHERE prompt = '…'`): scores and direct logit
    /// contributions, one row per layer and head.
    Heads,
    /// Top-activating contexts of features over an analysed corpus (`WHERE corpus = '…'`).
    Contexts,
    /// Activation histograms of features over an analysed corpus (`WHERE corpus = '…'`).
    Histograms,
}

impl Table {
    pub const ALL: &'static [Table] = &[
        Table::Features,
        Table::Edges,
        Table::Layers,
        Table::Tokens,
        Table::Tensors,
        Table::Representations,
        Table::Routes,
        Table::Attention,
        Table::Heads,
        Table::Contexts,
        Table::Histograms,
    ];
    pub fn name(&self) -> &'static str {
        match self {
            Table::Features => "features",
            Table::Edges => "edges",
            Table::Layers => "layers",
            Table::Tokens => "tokens",
            Table::Tensors => "tensors",
            Table::Representations => "representations",
            Table::Routes => "routes",
            Table::Attention => "attention",
            Table::Heads => "heads",
            Table::Contexts => "contexts",
            Table::Histograms => "histograms",
        }
    }
}

/// `SELECT [DISTINCT] <items|*> [FROM from-item] [WHERE expr] [GROUP BY …] [HAVING expr]
/// [ORDER BY …] [LIMIT n] [OFFSET m]`
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Select {
    /// The span of the DISTINCT keyword when present.
    pub distinct: Option<Span>,
    pub columns: Spanned<SelectList>,
    /// What the rows come from (`None`: SELECT without FROM, one row).
    pub from: Option<FromItem>,
    /// The WHERE clause (span: the whole clause; the expression has its own span).
    pub filter: Option<Spanned<Expr>>,
    /// GROUP BY expressions (span: the whole clause).
    pub group_by: Option<Spanned<Vec<Expr>>>,
    /// The HAVING clause (span: the whole clause).
    pub having: Option<Spanned<Expr>>,
    pub order_by: Option<Spanned<Vec<OrderItem>>>,
    pub limit: Option<Spanned<i64>>,
    pub offset: Option<Spanned<i64>>,
}

/// What a SELECT reads: a model table, another statement's rows (a subquery `(SELECT …)`,
/// any statement in parentheses, or a table function `TRACE('…', FOR => ' Paris')`), or
/// a join of two of them.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum FromItem {
    Table {
        table: Spanned<Table>,
        alias: Option<Ident>,
    },
    Statement {
        statement: Box<Statement>,
        alias: Option<Ident>,
        span: Span,
    },
    Join {
        left: Box<FromItem>,
        right: Box<FromItem>,
        kind: JoinKind,
        /// `ON expr`.
        on: Option<Expr>,
        /// `USING (a, b)`.
        using: Vec<Ident>,
        span: Span,
    },
}

impl FromItem {
    pub fn span(&self) -> Span {
        match self {
            FromItem::Table { table, alias } => {
                alias.as_ref().map_or(table.span, |a| table.span.to(a.span))
            }
            FromItem::Statement { span, .. } | FromItem::Join { span, .. } => *span,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum JoinKind {
    Inner,
    Left,
    /// `CROSS JOIN` and the comma.
    Cross,
}

/// The scalar functions of SELECT (SQLite's semantics).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum ScalarFunc {
    Abs,
    Round,
    Lower,
    Upper,
    Length,
    Substr,
    Coalesce,
    Ifnull,
    Nullif,
    Trim,
    Ltrim,
    Rtrim,
    Replace,
    Instr,
    /// `min(a, b, …)` with two or more arguments (one argument is the aggregate).
    Min,
    /// `max(a, b, …)` with two or more arguments.
    Max,
}

impl ScalarFunc {
    pub const ALL: &'static [ScalarFunc] = &[
        ScalarFunc::Abs,
        ScalarFunc::Round,
        ScalarFunc::Lower,
        ScalarFunc::Upper,
        ScalarFunc::Length,
        ScalarFunc::Substr,
        ScalarFunc::Coalesce,
        ScalarFunc::Ifnull,
        ScalarFunc::Nullif,
        ScalarFunc::Trim,
        ScalarFunc::Ltrim,
        ScalarFunc::Rtrim,
        ScalarFunc::Replace,
        ScalarFunc::Instr,
        ScalarFunc::Min,
        ScalarFunc::Max,
    ];
    pub fn name(&self) -> &'static str {
        match self {
            ScalarFunc::Abs => "abs",
            ScalarFunc::Round => "round",
            ScalarFunc::Lower => "lower",
            ScalarFunc::Upper => "upper",
            ScalarFunc::Length => "length",
            ScalarFunc::Substr => "substr",
            ScalarFunc::Coalesce => "coalesce",
            ScalarFunc::Ifnull => "ifnull",
            ScalarFunc::Nullif => "nullif",
            ScalarFunc::Trim => "trim",
            ScalarFunc::Ltrim => "ltrim",
            ScalarFunc::Rtrim => "rtrim",
            ScalarFunc::Replace => "replace",
            ScalarFunc::Instr => "instr",
            ScalarFunc::Min => "min",
            ScalarFunc::Max => "max",
        }
    }
    /// The number of arguments taken: (fewest, most; `None`: any number).
    pub fn arity(&self) -> (usize, Option<usize>) {
        match self {
            ScalarFunc::Abs | ScalarFunc::Lower | ScalarFunc::Upper | ScalarFunc::Length => {
                (1, Some(1))
            }
            ScalarFunc::Round | ScalarFunc::Trim | ScalarFunc::Ltrim | ScalarFunc::Rtrim => {
                (1, Some(2))
            }
            ScalarFunc::Substr => (2, Some(3)),
            ScalarFunc::Ifnull | ScalarFunc::Nullif | ScalarFunc::Instr => (2, Some(2)),
            ScalarFunc::Replace => (3, Some(3)),
            ScalarFunc::Coalesce | ScalarFunc::Min | ScalarFunc::Max => (2, None),
        }
    }
}

/// The types `CAST(x AS type)` converts to (SQLite's affinities by name).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum CastType {
    Integer,
    Real,
    Text,
}

impl CastType {
    pub fn name(&self) -> &'static str {
        match self {
            CastType::Integer => "INTEGER",
            CastType::Real => "REAL",
            CastType::Text => "TEXT",
        }
    }
}

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum SelectList {
    All,
    Items(Vec<SelectItem>),
}

/// One item of a select list: an expression with an optional `AS alias`.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SelectItem {
    pub expr: Expr,
    pub alias: Option<Ident>,
    pub span: Span,
}

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct OrderItem {
    /// A column, an alias of the select list, or an expression.
    pub expr: Expr,
    /// As written; `None` means ascending.
    pub direction: Option<SortDirection>,
    pub span: Span,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum SortDirection {
    Asc,
    Desc,
}

/// `TRACE "prompt" [FOR "tok"] [DECOMPOSE] [LAYERS a-b] [POSITIONS LAST|ALL] [SAVE "file"]`
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Trace {
    pub prompt: Spanned<String>,
    pub target: Option<Spanned<String>>,
    /// The span of the DECOMPOSE keyword when present.
    pub decompose: Option<Span>,
    pub layers: Option<Spanned<LayerSpec>>,
    pub positions: Option<Spanned<Positions>>,
    pub save: Option<Spanned<String>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Positions {
    Last,
    All,
}

/// `PATCH "corrupted" FROM "clean" | NOISE ON "subject" [SCALE s] [SEED n]
/// [LAYERS a-b | AT LAYER l] [POSITIONS ALL|LAST|TOGETHER | POSITION p]
/// [COMPONENT resid_pre|resid_mid|attn_out|mlp_out|head [h]] [METRIC f("tok"[, "tok"])]
/// [BY RUNS|ATTRIBUTION [STEPS n]] [WINDOW n] [SAVE "map.svg"]`:
/// activation patching (AT LAYER l is LAYERS l).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Patch {
    /// The corrupted run's prompt (with NOISE, the prompt both runs share).
    pub prompt: Spanned<String>,
    pub corruption: Spanned<Corruption>,
    pub layers: Option<Spanned<LayerSpec>>,
    pub positions: Option<Spanned<PatchPositions>>,
    pub component: Option<Spanned<PatchComponent>>,
    pub metric: Option<Spanned<PatchMetric>>,
    /// BY RUNS | BY ATTRIBUTION: how each cell's effect is found (runs when absent).
    pub method: Option<Spanned<PatchMethod>>,
    /// WINDOW n: each cell restores n layers around its layer (ROME's window).
    pub window: Option<Spanned<u64>>,
    /// SAVE "file.svg": the fraction recovered drawn as a heat map.
    pub save: Option<Spanned<String>>,
}

/// How the corrupted run differs from the clean one.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum Corruption {
    /// `FROM "clean prompt"`: the clean run is another prompt of the same length.
    Prompt(Spanned<String>),
    /// `NOISE ON "subject" [SCALE s] [SEED n]`: Gaussian noise on the subject's tokens.
    Noise {
        subject: Spanned<String>,
        scale: Option<Spanned<f64>>,
        seed: Option<Spanned<i64>>,
    },
}

/// How PATCH finds each cell's effect.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum PatchMethod {
    /// `BY RUNS`: one corrupted run per cell with the cell restored (exact).
    Runs,
    /// `BY ATTRIBUTION [STEPS n]`: one clean, one corrupted and one backward pass for the
    /// whole grid, each cell (clean − corrupted) · ∂metric/∂activation (a first-order
    /// estimate); with STEPS n the gradient is averaged over n runs whose input moves from
    /// the corrupted prompt's to the clean one's (integrated gradients).
    Attribution(Option<u64>),
}

impl std::fmt::Display for PatchMethod {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PatchMethod::Runs => f.write_str("runs"),
            PatchMethod::Attribution(None) => f.write_str("attribution"),
            PatchMethod::Attribution(Some(n)) => write!(f, "attribution steps {n}"),
        }
    }
}

/// Which positions a patching grid restores, one cell each (or all together).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum PatchPositions {
    All,
    Last,
    /// Every position in one cell.
    Together,
    One(u64),
}

/// The activation a cell restores.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum PatchComponent {
    ResidPre,
    ResidMid,
    AttnOut,
    MlpOut,
    /// Attention heads' outputs (`z`): one head, or each head a cell.
    Head(Option<u64>),
}

/// What a run is scored by (on the last position's logits).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum PatchMetric {
    /// `LOGIT_DIFF("a", "b")`: logit(a) − logit(b).
    LogitDiff(String, String),
    /// `LOGIT("a")`
    Logit(String),
    /// `PROB("a")`: softmax probability.
    Prob(String),
}

/// `INSERT INTO table (c, …) VALUES (v, …)[, (…)] | FROM "facts.json"` `[AT LAYER n]
/// [ALPHA a] [CONFIDENCE c]`
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Insert {
    pub table: Spanned<Table>,
    pub columns: Vec<Ident>,
    /// Each row with the span of its parenthesised tuple.
    pub rows: Vec<Spanned<Vec<Spanned<Value>>>>,
    /// `FROM "file"`: the rows of a fact file instead (no columns, no rows).
    pub file: Option<Spanned<String>>,
    /// `INSERT INTO edges SELECT …`: the query's rows instead (no columns, no rows), its
    /// columns named entity, relation, target and optionally prompt.
    pub select: Option<Box<Select>>,
    pub at_layer: Option<Spanned<u64>>,
    pub alpha: Option<Spanned<f64>>,
    pub confidence: Option<Spanned<f64>>,
}

/// `EVALUATE EDITS FROM "facts.json" [SEQUENTIAL BATCH n] [PER FACT] [LIMIT n] [AT LAYER n]
/// [ALPHA a] [SAVE "scores.json"]`
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct EvaluateEdits {
    /// The fact file: CounterFact-shaped records or LQL's own fact files.
    pub facts: Spanned<String>,
    /// `SEQUENTIAL BATCH n`: insert the facts n at a time, scoring each batch after it.
    pub batch: Option<Spanned<i64>>,
    /// `PER FACT`: a row per fact and stage besides the aggregates.
    pub per_fact: Option<Spanned<bool>>,
    /// `LIMIT n`: the file's first n facts only.
    pub limit: Option<Spanned<i64>>,
    pub at_layer: Option<Spanned<u64>>,
    pub alpha: Option<Spanned<f64>>,
    /// `SAVE "file"`: every scored prompt's token log-probabilities, as JSON.
    pub save: Option<Spanned<String>>,
}

/// `ANALYZE FEATURES FROM "corpus.txt" [LAYERS a-b] [TOP k]`
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct AnalyzeFeatures {
    /// The corpus: a text file, one document per line.
    pub corpus: Spanned<String>,
    pub layers: Option<Spanned<LayerSpec>>,
    /// `TOP k`: contexts kept per feature.
    pub top: Option<Spanned<i64>>,
}

/// `DELETE FROM table [WHERE expr]`
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Delete {
    pub table: Spanned<Table>,
    pub filter: Option<Spanned<Expr>>,
}

/// `UPDATE table SET col = value, … [WHERE expr]`
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Update {
    pub table: Spanned<Table>,
    pub assignments: Vec<Assignment>,
    pub filter: Option<Spanned<Expr>>,
}

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Assignment {
    pub column: Ident,
    pub value: Spanned<Value>,
    pub span: Span,
}

/// The current effective model (base + overlays) or a path.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum ModelRef {
    Current,
    Path(String),
}

/// `DIFF "a" "b"` · `DIFF CURRENT` · `DIFF "a" CURRENT` ·
/// `[LAYER n] [LIMIT n] [PHYSICAL] [INTO PATCH "out"]`
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Diff {
    pub left: Spanned<ModelRef>,
    pub right: Option<Spanned<ModelRef>>,
    pub into_patch: Option<Spanned<String>>,
    /// `LAYER n`: only that layer's tensors.
    pub layer: Option<Spanned<u64>>,
    pub limit: Option<Spanned<i64>>,
    /// `PHYSICAL`: byte-level rows (encoded bytes and hashes) instead of values.
    pub physical: Option<Spanned<bool>>,
}

/// `COMPILE CURRENT|"src" INTO VINDEX|PACKAGE|GGUF "out"`
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Compile {
    pub source: Spanned<ModelRef>,
    pub target: Spanned<CompileTarget>,
    pub output: Spanned<String>,
    /// `MODEL_ID "org/repo:dist"` (INTO PACKAGE).
    pub model_id: Option<Spanned<String>>,
    /// `SOURCE_REVISION "…"` (INTO PACKAGE).
    pub source_revision: Option<Spanned<String>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum CompileTarget {
    Vindex,
    Package,
    Gguf,
}

/// `EXTRACT MODEL "src" INTO "out" [FORMAT VINDEX3|PACKAGE] [ENCODING …] [LAYERS a-b]`
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Extract {
    pub source: Spanned<String>,
    pub output: Spanned<String>,
    pub format: Option<Spanned<ExtractFormat>>,
    /// `SHAPE GRAPH | BANK` (VINDEX3; default GRAPH).
    pub shape: Option<Spanned<ExtractShape>>,
    /// `GROUP n`: experts per group extent of the bank shape (seed 002 §7).
    pub group: Option<Spanned<u64>>,
    pub encoding: Option<Spanned<Encoding>>,
    pub layers: Option<Spanned<LayerSpec>>,
    /// `MODEL_ID "org/repo:dist"` (layer packages).
    pub model_id: Option<Spanned<String>>,
    /// `SOURCE_REVISION "commit"` (layer packages).
    pub source_revision: Option<Spanned<String>>,
    /// `PROJECTOR "mmproj.gguf"`, repeatable (layer packages: copied and declared).
    pub projectors: Vec<Spanned<String>>,
    /// `WITH LABELS`: store every feature's label as a derived segment.
    pub labels: Option<Spanned<bool>>,
}

/// Which artifact-only answer a statement asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum ArtifactWhat {
    Inspect,
    DescribeObject,
    Precision,
}

impl ArtifactWhat {
    /// The statement's keywords.
    pub fn name(self) -> &'static str {
        match self {
            ArtifactWhat::Inspect => "INSPECT",
            ArtifactWhat::DescribeObject => "DESCRIBE OBJECT",
            ArtifactWhat::Precision => "PRECISION",
        }
    }
}

/// `INSPECT "c"` | `DESCRIBE OBJECT "c" "object"` | `PRECISION "c"`
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Artifact {
    pub what: ArtifactWhat,
    pub container: Spanned<String>,
    /// DESCRIBE OBJECT's object id.
    pub object: Option<Spanned<String>>,
}

/// What `REPRESENT` adds to a container.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum RepresentTarget {
    /// `LABELS`: every feature's label, as a derived segment.
    Labels,
    /// `ALL`: every logical object.
    All,
    /// One logical object by id.
    Object(String),
}

/// `REPRESENT LABELS ["container"]` | `REPRESENT "object"|ALL [FFN] AS <encoding> [INTO "container"]`
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Represent {
    pub target: Spanned<RepresentTarget>,
    pub encoding: Option<Spanned<Encoding>>,
    /// `FFN`: only the objects' FFN operands are re-encoded.
    pub ffn: Option<Span>,
    /// The container (default: the bound one).
    pub container: Option<Spanned<String>>,
}

/// The on-disk shape of a VINDEX3 EXTRACT (seed 002 §5.3, §5.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum ExtractShape {
    /// `system_graph.json` + plain tensor-table segments.
    Graph,
    /// `moe_manifest.json` + LYRW v2 bank files.
    Bank,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum ExtractFormat {
    Vindex3,
    Package,
}

/// Encodings EXTRACT may write; `Source` keeps each tensor as stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Encoding {
    Source,
    F32,
    F16,
    Bf16,
    Q8_0,
}

/// `COMPACT "container" [INTO "out"]`
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Compact {
    pub container: Spanned<String>,
    pub into: Option<Spanned<String>>,
}

/// `SHOW MODELS|LAYERS|COMPONENTS|REPRESENTATIONS|TENSORS|PROFILES|PATCHES [LIKE "pattern"]`
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Show {
    pub what: Spanned<ShowWhat>,
    /// `SHOW REPRESENTATIONS|PROFILES|COMPONENTS "container"`: that container's artifact.
    pub container: Option<Spanned<String>>,
    pub like: Option<Spanned<String>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum ShowWhat {
    Models,
    /// The backends and GPU adapters present.
    Backends,
    /// The model families LQL runs, with what each supports.
    Architectures,
    Layers,
    Components,
    Representations,
    Tensors,
    Profiles,
    Patches,
    /// The virtual tables that answer SELECT.
    Tables,
    /// The bound layer package: identity, ABI, stage, artifacts, generation policy.
    Package,
    /// The bound model's FFN programmes and the maturity rung of each (seed 002 §10–11).
    Capabilities,
    /// The connection's steering vectors, per layer.
    Steering,
}

/// A literal value.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum Value {
    Int(i64),
    Float(f64),
    String(String),
    Bool(bool),
    Null,
}

/// An expression of WHERE clauses.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Expr {
    pub kind: ExprKind,
    pub span: Span,
}

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum ExprKind {
    Column(Ident),
    Literal(Value),
    Compare {
        op: CmpOp,
        left: Box<Expr>,
        right: Box<Expr>,
    },
    Like {
        expr: Box<Expr>,
        pattern: Box<Expr>,
        negated: bool,
    },
    InList {
        expr: Box<Expr>,
        list: Vec<Expr>,
        negated: bool,
    },
    Between {
        expr: Box<Expr>,
        low: Box<Expr>,
        high: Box<Expr>,
        negated: bool,
    },
    IsNull {
        expr: Box<Expr>,
        negated: bool,
    },
    Not(Box<Expr>),
    /// Two or more operands (a flat chain `a AND b AND c`).
    And(Vec<Expr>),
    /// Two or more operands (a flat chain `a OR b OR c`).
    Or(Vec<Expr>),
    /// `left op right` with `+ - * / %`.
    Arith {
        op: ArithOp,
        left: Box<Expr>,
        right: Box<Expr>,
    },
    /// Unary minus.
    Neg(Box<Expr>),
    /// An aggregate call: `count(*)` (`arg: None`), `sum(x)`, `count(DISTINCT x)`.
    Aggregate {
        func: AggFunc,
        arg: Option<Box<Expr>>,
        distinct: bool,
    },
    /// A scalar function call: `round(x, 2)`, `coalesce(a, b)`.
    Call {
        func: ScalarFunc,
        args: Vec<Expr>,
    },
    /// `CASE [operand] WHEN a THEN b … [ELSE c] END`.
    Case {
        operand: Option<Box<Expr>>,
        whens: Vec<(Expr, Expr)>,
        otherwise: Option<Box<Expr>>,
    },
    /// `CAST(x AS type)`.
    Cast {
        expr: Box<Expr>,
        to: CastType,
    },
    /// `x [NOT] IN (SELECT …)` (uncorrelated: the subquery runs once).
    InSubquery {
        expr: Box<Expr>,
        query: Box<Select>,
        negated: bool,
    },
    /// `(SELECT …)` as a value: its one column's first row (NULL when it has none).
    Subquery(Box<Select>),
}

impl ExprKind {
    /// [`ExprKind::try_map_children`] for a rewrite that cannot fail.
    pub fn map_children(&self, f: &mut dyn FnMut(&Expr) -> Expr) -> ExprKind {
        match self.try_map_children::<std::convert::Infallible>(&mut |x| Ok(f(x))) {
            Ok(kind) => kind,
            Err(never) => match never {},
        }
    }

    /// This node with each direct child expression replaced by `f(child)` (columns and
    /// literals have none and are cloned): the one structural walk behind the planner's
    /// expression rewrites.
    pub fn try_map_children<E>(
        &self,
        f: &mut dyn FnMut(&Expr) -> Result<Expr, E>,
    ) -> Result<ExprKind, E> {
        let mut b = |x: &Expr| f(x).map(Box::new);
        Ok(match self {
            ExprKind::Column(_) | ExprKind::Literal(_) => self.clone(),
            ExprKind::Compare { op, left, right } => ExprKind::Compare {
                op: *op,
                left: b(left)?,
                right: b(right)?,
            },
            ExprKind::Like {
                expr,
                pattern,
                negated,
            } => ExprKind::Like {
                expr: b(expr)?,
                pattern: b(pattern)?,
                negated: *negated,
            },
            ExprKind::InList {
                expr,
                list,
                negated,
            } => ExprKind::InList {
                expr: b(expr)?,
                list: list.iter().map(&mut *f).collect::<Result<_, E>>()?,
                negated: *negated,
            },
            ExprKind::Between {
                expr,
                low,
                high,
                negated,
            } => ExprKind::Between {
                expr: b(expr)?,
                low: b(low)?,
                high: b(high)?,
                negated: *negated,
            },
            ExprKind::IsNull { expr, negated } => ExprKind::IsNull {
                expr: b(expr)?,
                negated: *negated,
            },
            ExprKind::Not(x) => ExprKind::Not(b(x)?),
            ExprKind::Neg(x) => ExprKind::Neg(b(x)?),
            ExprKind::And(v) => ExprKind::And(v.iter().map(&mut *f).collect::<Result<_, E>>()?),
            ExprKind::Or(v) => ExprKind::Or(v.iter().map(&mut *f).collect::<Result<_, E>>()?),
            ExprKind::Arith { op, left, right } => ExprKind::Arith {
                op: *op,
                left: b(left)?,
                right: b(right)?,
            },
            ExprKind::Aggregate {
                func,
                arg,
                distinct,
            } => ExprKind::Aggregate {
                func: *func,
                arg: arg.as_deref().map(b).transpose()?,
                distinct: *distinct,
            },
            ExprKind::Call { func, args } => ExprKind::Call {
                func: *func,
                args: args.iter().map(&mut *f).collect::<Result<_, E>>()?,
            },
            ExprKind::Case {
                operand,
                whens,
                otherwise,
            } => ExprKind::Case {
                operand: operand.as_deref().map(&mut b).transpose()?,
                whens: {
                    let mut v = Vec::with_capacity(whens.len());
                    for (w, t) in whens {
                        v.push((b(w).map(|x| *x)?, b(t).map(|x| *x)?));
                    }
                    v
                },
                otherwise: otherwise.as_deref().map(&mut b).transpose()?,
            },
            ExprKind::Cast { expr, to } => ExprKind::Cast {
                expr: b(expr)?,
                to: *to,
            },
            // The subquery is its own scope: only the outer operand is mapped.
            ExprKind::InSubquery {
                expr,
                query,
                negated,
            } => ExprKind::InSubquery {
                expr: b(expr)?,
                query: query.clone(),
                negated: *negated,
            },
            ExprKind::Subquery(_) => self.clone(),
        })
    }
}

/// Arithmetic operators of the select list and WHERE.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum ArithOp {
    Add,
    Sub,
    Mul,
    Div,
    Rem,
    /// `||`: text concatenation.
    Concat,
}

impl ArithOp {
    pub fn symbol(&self) -> &'static str {
        match self {
            ArithOp::Add => "+",
            ArithOp::Sub => "-",
            ArithOp::Mul => "*",
            ArithOp::Div => "/",
            ArithOp::Rem => "%",
            ArithOp::Concat => "||",
        }
    }
}

/// The aggregate functions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum AggFunc {
    Count,
    Sum,
    Avg,
    Min,
    Max,
}

impl AggFunc {
    pub const ALL: &'static [AggFunc] = &[
        AggFunc::Count,
        AggFunc::Sum,
        AggFunc::Avg,
        AggFunc::Min,
        AggFunc::Max,
    ];
    /// The function's name, lower case as printed.
    pub fn name(&self) -> &'static str {
        match self {
            AggFunc::Count => "count",
            AggFunc::Sum => "sum",
            AggFunc::Avg => "avg",
            AggFunc::Min => "min",
            AggFunc::Max => "max",
        }
    }
}

impl Expr {
    /// The top-level conjuncts: the operands of an AND chain, else the expression itself.
    pub fn conjuncts(&self) -> Vec<&Expr> {
        match &self.kind {
            ExprKind::And(xs) => xs.iter().collect(),
            _ => vec![self],
        }
    }

    /// Whether any node of the expression is an aggregate call.
    pub fn has_aggregate(&self) -> bool {
        let mut found = false;
        self.walk(&mut |e| found |= matches!(e.kind, ExprKind::Aggregate { .. }));
        found
    }

    /// Calls `f` on this node and every node below it (pre-order).
    pub fn walk(&self, f: &mut dyn FnMut(&Expr)) {
        f(self);
        match &self.kind {
            ExprKind::Column(_) | ExprKind::Literal(_) => {}
            ExprKind::Compare { left, right, .. } | ExprKind::Arith { left, right, .. } => {
                left.walk(f);
                right.walk(f);
            }
            ExprKind::Like { expr, pattern, .. } => {
                expr.walk(f);
                pattern.walk(f);
            }
            ExprKind::InList { expr, list, .. } => {
                expr.walk(f);
                list.iter().for_each(|x| x.walk(f));
            }
            ExprKind::Between {
                expr, low, high, ..
            } => {
                expr.walk(f);
                low.walk(f);
                high.walk(f);
            }
            ExprKind::IsNull { expr, .. } | ExprKind::Not(expr) | ExprKind::Neg(expr) => {
                expr.walk(f)
            }
            ExprKind::And(xs) | ExprKind::Or(xs) => xs.iter().for_each(|x| x.walk(f)),
            ExprKind::Aggregate { arg, .. } => {
                if let Some(a) = arg {
                    a.walk(f)
                }
            }
            ExprKind::Call { args, .. } => args.iter().for_each(|x| x.walk(f)),
            ExprKind::Case {
                operand,
                whens,
                otherwise,
            } => {
                if let Some(o) = operand {
                    o.walk(f);
                }
                for (w, t) in whens {
                    w.walk(f);
                    t.walk(f);
                }
                if let Some(o) = otherwise {
                    o.walk(f);
                }
            }
            ExprKind::Cast { expr, .. } | ExprKind::InSubquery { expr, .. } => expr.walk(f),
            // A subquery is its own scope.
            ExprKind::Subquery(_) => {}
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum CmpOp {
    Eq,
    NotEq,
    Lt,
    LtEq,
    Gt,
    GtEq,
}

impl CmpOp {
    pub fn symbol(&self) -> &'static str {
        match self {
            CmpOp::Eq => "=",
            CmpOp::NotEq => "!=",
            CmpOp::Lt => "<",
            CmpOp::LtEq => "<=",
            CmpOp::Gt => ">",
            CmpOp::GtEq => ">=",
        }
    }
}

// ---- span visiting ----------------------------------------------------------------

/// Visits every span in a node; used to strip spans for structural comparison.
pub trait SpanVisit {
    fn visit_spans(&mut self, f: &mut dyn FnMut(&mut Span));

    /// A copy with every span set to `Span::default()`.
    fn without_spans(&self) -> Self
    where
        Self: Clone + Sized,
    {
        let mut c = self.clone();
        c.visit_spans(&mut |s| *s = Span::default());
        c
    }
}

impl Statement {
    /// Structural equality ignoring spans (the round-trip contract).
    pub fn eq_ignoring_spans(&self, other: &Statement) -> bool {
        self.without_spans() == other.without_spans()
    }
}

macro_rules! leaf {
    ($($t:ty),*) => { $(impl SpanVisit for $t { fn visit_spans(&mut self, _: &mut dyn FnMut(&mut Span)) {} })* };
}
leaf!(
    String,
    OutputConstraint,
    i64,
    u64,
    f64,
    bool,
    LayerSpec,
    WalkMode,
    DescribeScope,
    Detail,
    Table,
    SortDirection,
    Positions,
    PatchPositions,
    PatchComponent,
    PatchMetric,
    PatchMethod,
    ModelRef,
    CompileTarget,
    ExtractFormat,
    RepresentTarget,
    ArtifactWhat,
    ExtractShape,
    Encoding,
    ShowWhat,
    BackendChoice,
    Setting,
    Value,
    CmpOp,
    ArithOp,
    AggFunc,
    ScalarFunc,
    CastType,
    JoinKind
);

impl SpanVisit for Span {
    fn visit_spans(&mut self, f: &mut dyn FnMut(&mut Span)) {
        f(self)
    }
}
impl<T: SpanVisit> SpanVisit for Spanned<T> {
    fn visit_spans(&mut self, f: &mut dyn FnMut(&mut Span)) {
        f(&mut self.span);
        self.value.visit_spans(f);
    }
}
impl<T: SpanVisit> SpanVisit for Option<T> {
    fn visit_spans(&mut self, f: &mut dyn FnMut(&mut Span)) {
        if let Some(v) = self {
            v.visit_spans(f)
        }
    }
}
impl<T: SpanVisit> SpanVisit for Vec<T> {
    fn visit_spans(&mut self, f: &mut dyn FnMut(&mut Span)) {
        for v in self {
            v.visit_spans(f)
        }
    }
}
impl<T: SpanVisit> SpanVisit for Box<T> {
    fn visit_spans(&mut self, f: &mut dyn FnMut(&mut Span)) {
        (**self).visit_spans(f)
    }
}

macro_rules! fields {
    ($t:ty { $($field:ident),* }) => {
        impl SpanVisit for $t {
            fn visit_spans(&mut self, f: &mut dyn FnMut(&mut Span)) {
                $( self.$field.visit_spans(f); )*
            }
        }
    };
}
fields!(Ident { span });
fields!(Statement { kind, span });
fields!(Use {
    source,
    layers,
    profile,
    backend
});
fields!(Infer {
    prompt,
    top,
    generate
});
fields!(Generate {
    prompt,
    max,
    temperature,
    top_k,
    top_p,
    seed,
    stop,
    constraint,
    repeat_penalty,
    frequency_penalty,
    presence_penalty
});
fields!(Walk {
    prompt,
    top,
    layers,
    mode
});
fields!(Describe {
    entity,
    scope,
    detail
});
fields!(Select {
    distinct,
    columns,
    from,
    filter,
    group_by,
    having,
    order_by,
    limit,
    offset
});
impl SpanVisit for FromItem {
    fn visit_spans(&mut self, f: &mut dyn FnMut(&mut Span)) {
        match self {
            FromItem::Table { table, alias } => {
                table.visit_spans(f);
                alias.visit_spans(f);
            }
            FromItem::Statement {
                statement,
                alias,
                span,
            } => {
                statement.visit_spans(f);
                alias.visit_spans(f);
                f(span);
            }
            FromItem::Join {
                left,
                right,
                on,
                using,
                span,
                ..
            } => {
                left.visit_spans(f);
                right.visit_spans(f);
                on.visit_spans(f);
                using.visit_spans(f);
                f(span);
            }
        }
    }
}
fields!(SelectItem { expr, alias, span });
fields!(OrderItem { expr, span });
fields!(Trace {
    prompt,
    target,
    decompose,
    layers,
    positions,
    save
});
fields!(Patch {
    prompt,
    corruption,
    layers,
    positions,
    component,
    metric,
    method,
    window,
    save
});
fields!(Insert {
    table,
    columns,
    rows,
    file,
    select,
    at_layer,
    alpha,
    confidence
});
fields!(Delete { table, filter });
fields!(Update {
    table,
    assignments,
    filter
});
fields!(Assignment {
    column,
    value,
    span
});
fields!(Diff {
    left,
    right,
    into_patch,
    layer,
    limit,
    physical
});
fields!(Compile {
    source,
    target,
    output
});
fields!(Extract {
    source,
    output,
    format,
    shape,
    group,
    encoding,
    layers,
    model_id,
    source_revision,
    projectors,
    labels
});
fields!(Represent {
    target,
    encoding,
    ffn,
    container
});
fields!(Compact { container, into });
fields!(Verify { target, against });
fields!(EvaluateEdits {
    facts,
    batch,
    per_fact,
    limit,
    at_layer,
    alpha,
    save
});
fields!(AnalyzeFeatures {
    corpus,
    layers,
    top
});
fields!(RunStage { input, into });
fields!(InferFrom { file, top });
fields!(Show {
    what,
    container,
    like
});
fields!(Artifact {
    what,
    container,
    object
});
fields!(Expr { kind, span });

impl SpanVisit for UseSource {
    fn visit_spans(&mut self, f: &mut dyn FnMut(&mut Span)) {
        match self {
            UseSource::Path(s) | UseSource::Model(s) => s.visit_spans(f),
        }
    }
}
impl SpanVisit for Corruption {
    fn visit_spans(&mut self, f: &mut dyn FnMut(&mut Span)) {
        match self {
            Corruption::Prompt(s) => s.visit_spans(f),
            Corruption::Noise {
                subject,
                scale,
                seed,
            } => {
                subject.visit_spans(f);
                scale.visit_spans(f);
                seed.visit_spans(f);
            }
        }
    }
}
fields!(SteeringSpec {
    source,
    scale,
    layers
});
impl SpanVisit for SteeringSource {
    fn visit_spans(&mut self, f: &mut dyn FnMut(&mut Span)) {
        match self {
            SteeringSource::File(s) => s.visit_spans(f),
            SteeringSource::Difference { positive, negative } => {
                positive.visit_spans(f);
                negative.visit_spans(f);
            }
        }
    }
}
impl SpanVisit for StageSource {
    fn visit_spans(&mut self, f: &mut dyn FnMut(&mut Span)) {
        match self {
            StageSource::Prompt(s) | StageSource::File(s) => s.visit_spans(f),
        }
    }
}
impl SpanVisit for SelectList {
    fn visit_spans(&mut self, f: &mut dyn FnMut(&mut Span)) {
        if let SelectList::Items(c) = self {
            c.visit_spans(f)
        }
    }
}
impl SpanVisit for StatementKind {
    fn visit_spans(&mut self, f: &mut dyn FnMut(&mut Span)) {
        match self {
            StatementKind::Use(s) => s.visit_spans(f),
            StatementKind::Infer(s) => s.visit_spans(f),
            StatementKind::Generate(s) => s.visit_spans(f),
            StatementKind::Walk(s) => s.visit_spans(f),
            StatementKind::Describe(s) => s.visit_spans(f),
            StatementKind::Select(s) => s.visit_spans(f),
            StatementKind::Trace(s) => s.visit_spans(f),
            StatementKind::Patch(s) => s.visit_spans(f),
            StatementKind::Insert(s) => s.visit_spans(f),
            StatementKind::EvaluateEdits(s) => s.visit_spans(f),
            StatementKind::AnalyzeFeatures(s) => s.visit_spans(f),
            StatementKind::Delete(s) => s.visit_spans(f),
            StatementKind::Update(s) => s.visit_spans(f),
            StatementKind::BeginPatch(s)
            | StatementKind::ApplyPatch(s)
            | StatementKind::RemovePatch(s)
            | StatementKind::Tokenize(s) => s.visit_spans(f),
            StatementKind::Diff(s) => s.visit_spans(f),
            StatementKind::Compile(s) => s.visit_spans(f),
            StatementKind::Extract(s) => s.visit_spans(f),
            StatementKind::Represent(s) => s.visit_spans(f),
            StatementKind::Artifact(s) => s.visit_spans(f),
            StatementKind::Compact(s) => s.visit_spans(f),
            StatementKind::Verify(s) => s.visit_spans(f),
            StatementKind::Show(s) => s.visit_spans(f),
            StatementKind::Explain(s)
            | StatementKind::ExplainPlan(s)
            | StatementKind::ExplainAnalyze(s) => s.visit_spans(f),
            StatementKind::DescribeTable(t) => f(&mut t.span),
            StatementKind::RunStage(s) => s.visit_spans(f),
            StatementKind::InferFrom(s) => s.visit_spans(f),
            StatementKind::Set(s) => s.visit_spans(f),
            StatementKind::SetSteering(s) => s.visit_spans(f),
            StatementKind::SaveSteering(s) => s.visit_spans(f),
            StatementKind::Steered {
                steering,
                statement,
            } => {
                steering.visit_spans(f);
                statement.visit_spans(f);
            }
            StatementKind::SavePatch(s) => {
                if let Some(s) = s {
                    s.visit_spans(f)
                }
            }
            StatementKind::Stats => {}
        }
    }
}
impl SpanVisit for ExprKind {
    fn visit_spans(&mut self, f: &mut dyn FnMut(&mut Span)) {
        match self {
            ExprKind::Column(c) => c.visit_spans(f),
            ExprKind::Literal(_) => {}
            ExprKind::Compare { left, right, .. } => {
                left.visit_spans(f);
                right.visit_spans(f);
            }
            ExprKind::Like { expr, pattern, .. } => {
                expr.visit_spans(f);
                pattern.visit_spans(f);
            }
            ExprKind::InList { expr, list, .. } => {
                expr.visit_spans(f);
                list.visit_spans(f);
            }
            ExprKind::Between {
                expr, low, high, ..
            } => {
                expr.visit_spans(f);
                low.visit_spans(f);
                high.visit_spans(f);
            }
            ExprKind::IsNull { expr, .. } | ExprKind::Not(expr) => expr.visit_spans(f),
            ExprKind::And(v) | ExprKind::Or(v) => v.visit_spans(f),
            ExprKind::Arith { left, right, .. } => {
                left.visit_spans(f);
                right.visit_spans(f);
            }
            ExprKind::Neg(x) => x.visit_spans(f),
            ExprKind::Aggregate { arg, .. } => arg.visit_spans(f),
            ExprKind::Call { args, .. } => args.visit_spans(f),
            ExprKind::Case {
                operand,
                whens,
                otherwise,
            } => {
                operand.visit_spans(f);
                for (w, t) in whens {
                    w.visit_spans(f);
                    t.visit_spans(f);
                }
                otherwise.visit_spans(f);
            }
            ExprKind::Cast { expr, .. } => expr.visit_spans(f),
            ExprKind::InSubquery { expr, query, .. } => {
                expr.visit_spans(f);
                query.visit_spans(f);
            }
            ExprKind::Subquery(q) => q.visit_spans(f),
        }
    }
}
