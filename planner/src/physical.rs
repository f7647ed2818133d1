//! The physical plan: the tree of operators the engine runs for a statement (data flows
//! from the leaves to the root). It is data: the planner stays model-free, and the engine's
//! interpreter (`lql/src/engine/interp.rs`) executes exactly these nodes, each with the
//! parameters printed here. `Display` prints the EXPLAIN PLAN text: the root first, inputs
//! indented below; every node's output columns are known before it runs
//! ([`PhysicalPlan::columns`]).
//!
//! ```text
//! Rows [layer, feature, gate, activation, top_token, down_tokens, mode, expert]
//!   FeatureLabels
//!     GateScan layers=20-22 top=3 query=residual encoding=Q4_1
//!       Forward layers=0-22 capture=ffn_input@20-22 positions=last
//!         Tokenize "France"
//! ```

use crate::logical::*;
use crate::schema::{statement_columns, ColumnDef};
use lql_grammar::quote;
use std::fmt;

/// Which hidden state a gate scan is queried with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum GateQuery {
    /// The prompt's last-token embedding (LARQL's browse).
    Embedding,
    /// The residual entering each layer's FFN (after the pre-FFN norm).
    Residual,
}

/// What a forward pass records for observers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum Capture {
    /// The normalised residual entering the FFN of each of these layers (WALK MODE
    /// RESIDUAL: the layers it scans).
    FfnInput(LayerRange),
    /// Residual stream after each layer.
    Residual,
    /// Attention and FFN contributions per layer (TRACE DECOMPOSE).
    Deltas,
    /// Attention weights and FFN activity per layer (TRACE … SAVE to a trace file).
    Activity,
}

/// What a Tokenize's text is, which decides how it is encoded and whether it may be empty.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum TextRole {
    /// A prompt: encoded with the model's BOS; it must yield a token.
    Prompt,
    /// DESCRIBE's entity: encoded without BOS (its own tokens); it must yield a token.
    Entity,
    /// TOKENIZE's text: encoded with BOS; it may be empty.
    Text,
}

impl TextRole {
    /// Whether the tokenizer's BOS is added.
    pub fn bos(self) -> bool {
        self != TextRole::Entity
    }
}

/// One physical operator.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub enum Operator {
    /// Text → token ids (with the model's BOS handling, as `role` says).
    Tokenize {
        text: String,
        role: TextRole,
    },
    /// Embedding rows of the chosen positions.
    EmbedLookup {
        positions: Positions,
    },
    /// Runs decoder layers `layers` over every prompt position (no other layer runs),
    /// recording `capture` at `positions` for the operators above.
    Forward {
        layers: LayerRange,
        capture: Vec<Capture>,
        positions: Positions,
    },
    /// Final norm + output head on the last position.
    Head,
    /// PATCH: a clean run recording `component` at every layer and position, a corrupted
    /// run, then one corrupted run per cell with the cell restored from the clean run, each
    /// scored by `metric` on the last position. Inputs: the clean prompt's tokens, then the
    /// corrupted prompt's (with noise, the one prompt's tokens, noised in the corrupted runs).
    ActivationPatch {
        corruption: PatchCorruption,
        layers: LayerRange,
        positions: PatchPositions,
        component: PatchComponent,
        metric: Option<PatchMetric>,
        /// Runs per cell, or one attribution pass for the grid.
        method: PatchMethod,
        /// Layers each cell restores, centred on its layer.
        window: usize,
    },
    /// Softmax over the vocabulary, then the `k` most likely tokens.
    TopK {
        k: usize,
    },
    /// Autoregressive decoding: head → sample → forward one token, until a limit.
    DecodeLoop {
        max_tokens: usize,
        sampling: Sampling,
        stop: Vec<String>,
        /// Tokens are sampled only from those this SCHEMA or GRAMMAR allows next.
        constraint: Option<OutputConstraint>,
    },
    Detokenize,
    /// Dot products of a query vector with every gate row of each layer; keeps `top`.
    GateScan {
        layers: LayerRange,
        top: usize,
        query: GateQuery,
        encoding: Option<String>,
        bytes_per_layer: Option<u64>,
    },
    /// Labels features with their top output tokens (down projection through the head),
    /// from the binding's label cache.
    FeatureLabels,
    /// DESCRIBE's contrastive gate scan: the entity's scores minus the mean scores of
    /// `references` reference words per layer, strong hits labelled and grouped into edges
    /// by layer band. In RESIDUAL mode each word runs layers `forward` first.
    DescribeScan {
        /// The entity described (its tokens are the input).
        entity: String,
        layers: LayerRange,
        mode: WalkMode,
        forward: Option<LayerRange>,
        references: usize,
        detail: Detail,
    },
    /// Per-layer logit lens (probability/rank of `target` when given).
    LogitLens {
        target: Option<String>,
    },
    /// Splits each layer's update into attention and FFN parts.
    Decompose,
    /// Writes the trace (a trace file, or an SVG of the lens) at `path`, recording the
    /// prompt and FOR's target it traced.
    SaveTrace {
        path: String,
        prompt: String,
        target: Option<String>,
    },
    /// Draws the rows' `recovered` as an SVG heat map (layers × cells) at `path` and passes
    /// the rows on (PATCH … SAVE).
    SaveHeatmap {
        path: String,
    },
    /// Reads a virtual table. For `features`, only `layers` × `features` (the pushdown of
    /// WHERE; `None`: all), labelling every row when `labels` is early.
    TableScan {
        table: Table,
        layers: Option<Vec<usize>>,
        features: Option<Vec<usize>>,
        labels: LabelTiming,
        /// The label columns filled (the others are not read).
        label_set: LabelSet,
        estimate: Option<ScanEstimate>,
        /// The prompt a `routes`, `attention` or `heads` scan runs.
        prompt: Option<String>,
        /// The token a `heads` scan attributes to.
        token: Option<String>,
        /// The analysed corpus a `contexts` or `histograms` scan reads.
        corpus: Option<String>,
        /// The scan stops after this many rows (a LIMIT nothing before it narrows but
        /// `filter`).
        limit: Option<usize>,
        /// WHERE, applied by the scan as it goes (a `features` scan under a LIMIT).
        filter: Option<Expr>,
    },
    Filter {
        predicate: Expr,
    },
    Sort {
        keys: Vec<SortKey>,
    },
    Limit {
        n: usize,
    },
    /// Skips the first `n` rows (OFFSET).
    Offset {
        n: usize,
    },
    /// The rows of two inputs joined: every pair for which `on` holds (all pairs without
    /// one); a LEFT join keeps each left row without a match once, the right side NULL.
    Join {
        kind: JoinKind,
        on: Option<Expr>,
        columns: Vec<ColumnDef>,
    },
    /// Another statement's rows, its plan the input (run as that statement runs alone).
    Relation {
        statement: Box<Statement>,
    },
    /// One row of no columns (SELECT without FROM).
    OneRow,
    /// An IN or scalar subquery's rows (its plan the input), an input of the operator whose
    /// expression holds it; that operator reads their first column as an IN list or a value.
    Subquery {
        statement: Box<Statement>,
    },
    /// Labels the rows that survived (features' label columns, computed late).
    LateLabels {
        /// The label columns filled (the others are not read).
        label_set: LabelSet,
    },
    /// One row per group of `keys` (one row in all without keys), with the key columns
    /// then one column per call; `columns` names them all.
    Aggregate {
        keys: Vec<Expr>,
        calls: Vec<AggCall>,
        columns: Vec<ColumnDef>,
    },
    /// Drops repeated rows, keeping the first of each.
    Distinct,
    /// The result columns, each computed by its expression over the input row.
    Project {
        columns: Vec<ColumnDef>,
        exprs: Vec<Expr>,
    },
    /// Writes edits into the overlay store (never the base files).
    /// INSERT's rows, written with the layers and aim the binder decided.
    OverlayInsert(InsertPlan),
    /// Insert a fact set batch by batch and score it (EVALUATE EDITS).
    EvaluateEdits(EvaluatePlan),
    /// Run the model over a corpus and store every feature's top contexts and activation
    /// histogram (ANALYZE FEATURES).
    AnalyzeFeatures(AnalyzePlan),
    OverlayDelete {
        table: Table,
    },
    /// UPDATE's assignments, checked by the binder, on the rows its input yields.
    OverlayUpdate {
        table: Table,
        assignments: Vec<(String, lql_grammar::Value)>,
        /// How an updated edge is written again (UPDATE edges only).
        settings: Option<EditSettings>,
    },
    PatchBegin {
        path: String,
    },
    /// Writes the recording patch (`path` None) or the named applied patch's version in
    /// force over its file.
    PatchSave {
        path: Option<String>,
    },
    /// `SET name = value`: change a session setting.
    SetSetting(crate::logical::Setting),
    /// `SET STEERING`: build the connection's steering (None: remove it).
    SetSteering {
        steering: Option<SteeringPlan>,
    },
    /// `SAVE STEERING`: write the connection's steering as a llama.cpp control vector.
    SaveSteering {
        path: String,
    },
    PatchApply {
        path: String,
    },
    PatchRemove {
        path: String,
    },
    /// USE: binds a model (a path, a layer-package stage, a container's profile, or a
    /// catalogue name) to the session, its passes on `backend`.
    Bind(UsePlan),
    /// EXTRACT's source: a GGUF file, HF folder, container or catalogue name, opened
    /// without binding it, to be copied.
    OpenSource {
        path: String,
    },
    /// DIFF's or COMPILE's other model: opened without binding it, as a model state.
    OpenModel {
        path: String,
    },
    /// The bound model's effective state (base + overlays).
    Current,
    /// Operand-by-operand comparison of the two inputs.
    DiffOperands {
        into_patch: Option<String>,
        layer: Option<usize>,
        /// The LAYER clause, where an out-of-range layer is refused.
        layer_span: Option<lql_grammar::Span>,
        limit: Option<usize>,
        physical: bool,
    },
    /// EXTRACT: writes the source as a VINDEX3 container (temp name, fsync, rename), with
    /// its labels as a derived segment WITH LABELS.
    WriteContainer(ExtractPlan),
    /// EXTRACT … FORMAT PACKAGE: slices the source GGUF into a layer package.
    WritePackage(ExtractPlan),
    /// COMPILE: writes the input model state as a GGUF, a VINDEX3 container or a layer
    /// package (temp name, fsync, rename).
    Compile(CompilePlan),
    /// Adds to a container beside what it holds: stored labels, or a representation.
    Represent {
        target: RepresentTarget,
        encoding: Option<Encoding>,
        /// Only the FFN operands.
        ffn: bool,
        /// None: the bound container.
        container: Option<String>,
    },
    /// Physically reorganises a container.
    Compact {
        container: String,
        into: Option<String>,
    },
    /// Re-hashes payloads and checks declared against encoded operands (and, with
    /// `against`, against the source they were made from).
    Verify {
        container: Option<String>,
        against: Option<String>,
    },
    /// Runs the bound layer-package stage from a prompt or an activation file: its hidden
    /// states go to `into`, or, for the last stage (`into: None`), its logits go on.
    Stage {
        input: StageInput,
        into: Option<String>,
    },
    /// SHOW: the catalogue, the bound model, or a named container (its artifact alone).
    Show(ShowPlan),
    /// INSPECT, DESCRIBE OBJECT, PRECISION: a container's artifact (index.json, graph,
    /// segment headers), no payload byte read.
    InspectArtifact {
        what: ArtifactWhat,
        container: String,
        object: Option<String>,
    },
    /// STATS: the connection's counters.
    Stats,
    /// A virtual table's columns (from the planner's schema).
    DescribeTable {
        table: Table,
    },
    /// The statement's result rows with these columns (typed), shaped from the input as
    /// `shape` says.
    Rows {
        columns: Vec<ColumnDef>,
        shape: RowShape,
    },
    /// EXPLAIN: the inner statement's tree, as text (PLAN), or run and measured (ANALYZE,
    /// and the per-layer trace of EXPLAIN WALK / INFER). `inner` is the statement the tree
    /// was lowered from: its effects (PLAN) and the parameters EXPLAIN WALK and INFER
    /// report beside the tree.
    Explain {
        mode: ExplainMode,
        plan: Box<PhysicalPlan>,
        inner: Box<LogicalPlan>,
    },
}

/// How the [`Operator::Rows`] root turns its input into the statement's rows.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub enum RowShape {
    /// The input is rows (or a table) in the declared columns already.
    AsIs,
    /// WALK's labelled hits, one row each; `mode` fills the mode column.
    Walk { mode: String },
    /// TRACE's capture: one row per position and shown stage (the embedding's when layer 0
    /// is shown, then each layer of `layers`); `target` is FOR's token, whose rank and
    /// probability fill the trajectory columns.
    Trace {
        layers: LayerRange,
        target: Option<String>,
        /// ALL: a position column first.
        positions: Positions,
    },
}

/// A node: an operator and its inputs.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct PlanNode {
    pub op: Operator,
    pub inputs: Vec<PlanNode>,
}

/// The physical plan of one statement.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct PhysicalPlan {
    /// The statement's name (as [`LogicalPlan::name`]).
    pub statement: &'static str,
    pub root: PlanNode,
}

impl PhysicalPlan {
    /// The operators in data-flow order (leaves first), depth-first.
    pub fn operators(&self) -> Vec<&Operator> {
        let mut out = Vec::new();
        self.root.visit_post(&mut |n| out.push(&n.op));
        out
    }

    /// The columns of the statement's result, known before it runs.
    pub fn columns(&self) -> &[ColumnDef] {
        match &self.root.op {
            Operator::Rows { columns, .. } => columns,
            _ => &[],
        }
    }

    /// Warnings about the plan's cost, printed by EXPLAIN PLAN under the tree: a scan that
    /// labels every feature of every layer.
    pub fn warnings(&self) -> Vec<String> {
        /// Inputs first; `pulled`: a LIMIT above pulls this node's rows through streaming
        /// operators only, so it may stop the node early.
        fn visit(n: &PlanNode, pulled: bool, out: &mut Vec<String>) {
            let pulled_below = matches!(n.op, Operator::Limit { .. }) || (pulled && n.op.streams());
            for i in &n.inputs {
                visit(i, pulled_below, out);
            }
            if let Operator::TableScan {
                estimate: Some(e),
                filter,
                ..
            } = &n.op
            {
                // A scan that filters as it goes, or whose rows a LIMIT pulls, stops once
                // enough rows pass: it labels at most all.
                let how_many = if filter.is_some() || pulled {
                    "up to"
                } else {
                    "all"
                };
                if e.labels_everything {
                    // The advice first: a narrow table cuts the end of a long line.
                    out.push(format!(
                        "warning: add `layer = n` or `layer BETWEEN a AND b` to WHERE, or store \
                         the labels once (EXTRACT MODEL \"m.gguf\" INTO \"m.vindex\" WITH LABELS, \
                         then USE \"m.vindex\"): this scan labels {how_many} {} features ({:.1e} \
                         multiply-adds), since a label column (top_token, top_token_id, c_score, \
                         down_tokens) is read before LIMIT with no layer bound",
                        e.labels, e.label_macs as f64
                    ));
                }
            }
        }
        let mut out = Vec::new();
        visit(&self.root, false, &mut out);
        out
    }

    /// The tree's lines as EXPLAIN PLAN prints them (one per node, preorder).
    pub fn lines(&self) -> Vec<String> {
        let mut out = Vec::new();
        self.root.lines_into(0, &mut out);
        out
    }
}

impl PlanNode {
    /// Visits the nodes inputs-first (the order they execute in).
    pub fn visit_post<'a>(&'a self, f: &mut dyn FnMut(&'a PlanNode)) {
        for i in &self.inputs {
            i.visit_post(f);
        }
        f(self);
    }

    /// Nodes in preorder (the order EXPLAIN prints them), with their depth.
    pub fn preorder(&self) -> Vec<(usize, &PlanNode)> {
        fn walk<'a>(n: &'a PlanNode, d: usize, out: &mut Vec<(usize, &'a PlanNode)>) {
            out.push((d, n));
            for i in &n.inputs {
                walk(i, d + 1, out);
            }
        }
        let mut out = Vec::new();
        walk(self, 0, &mut out);
        out
    }

    fn lines_into(&self, depth: usize, out: &mut Vec<String>) {
        out.push(format!("{:width$}{}", "", self.op, width = depth * 2));
        for i in &self.inputs {
            i.lines_into(depth + 1, out);
        }
    }
}

/// Builds a linear pipeline: `ops[0]` is the leaf, the last is the root.
fn chain(ops: Vec<Operator>) -> PlanNode {
    let mut it = ops.into_iter();
    let mut node = PlanNode {
        op: it.next().unwrap_or(Operator::Rows {
            columns: Vec::new(),
            shape: RowShape::AsIs,
        }),
        inputs: Vec::new(),
    };
    for op in it {
        node = PlanNode {
            op,
            inputs: vec![node],
        };
    }
    node
}

fn model_ref_op(r: &ModelRef) -> Operator {
    match r {
        ModelRef::Current => Operator::Current,
        ModelRef::Path(p) => Operator::OpenModel { path: p.clone() },
    }
}

fn tokenize(text: &str) -> Operator {
    tokenize_as(text, TextRole::Prompt)
}

fn tokenize_as(text: &str, role: TextRole) -> Operator {
    Operator::Tokenize {
        text: text.to_string(),
        role,
    }
}

/// Lowers a bound statement to the operator tree the engine runs. Every decision is the
/// binder's (modes, layer ranges, pushdown); lowering only arranges operators.
pub fn lower(plan: &LogicalPlan) -> PhysicalPlan {
    use Operator as O;
    let mut ops: Vec<Operator> = match plan {
        LogicalPlan::Use(u) => vec![O::Bind(u.clone())],
        LogicalPlan::Infer(i) => vec![
            tokenize(&i.prompt),
            O::Forward {
                layers: i.layers,
                capture: vec![],
                positions: Positions::All,
            },
            O::Head,
            O::TopK { k: i.top },
            O::Detokenize,
        ],
        LogicalPlan::Generate(gp) => vec![
            tokenize(&gp.prompt),
            O::Forward {
                layers: gp.layers,
                capture: vec![],
                positions: Positions::All,
            },
            O::DecodeLoop {
                max_tokens: gp.max_tokens,
                sampling: gp.sampling.clone(),
                stop: gp.stop.clone(),
                constraint: gp.constraint.clone(),
            },
            O::Detokenize,
        ],
        LogicalPlan::Walk(w) => {
            let mut ops = vec![tokenize(&w.prompt)];
            let query = match w.mode {
                WalkMode::Embedding => {
                    ops.push(O::EmbedLookup {
                        positions: Positions::Last,
                    });
                    GateQuery::Embedding
                }
                WalkMode::Residual => {
                    ops.push(O::Forward {
                        layers: w.forward_layers(),
                        capture: vec![Capture::FfnInput(w.layers)],
                        positions: Positions::Last,
                    });
                    GateQuery::Residual
                }
            };
            ops.push(O::GateScan {
                layers: w.layers,
                top: w.top,
                query,
                encoding: w.gate_encoding.clone(),
                bytes_per_layer: w.gate_bytes_per_layer,
            });
            ops.push(O::FeatureLabels);
            ops
        }
        LogicalPlan::Describe(d) => vec![
            tokenize_as(&d.entity, TextRole::Entity),
            O::DescribeScan {
                entity: d.entity.clone(),
                layers: d.layers,
                mode: d.mode,
                forward: (d.mode == WalkMode::Residual).then(|| LayerRange::new(0, d.layers.last)),
                references: REFERENCE_WORDS,
                detail: d.detail,
            },
        ],
        LogicalPlan::Select(s) => return select_plan(s, plan),
        LogicalPlan::Patch(p) => return patch_plan(p, plan),
        LogicalPlan::Trace(t) => {
            let mut capture = vec![Capture::Residual];
            if t.decompose {
                capture.push(Capture::Deltas);
            }
            // A trace file keeps attention weights and FFN activity; an SVG does not.
            if t.save
                .as_deref()
                .is_some_and(|p| !p.to_ascii_lowercase().ends_with(".svg"))
            {
                capture.push(Capture::Activity);
            }
            let mut ops = vec![
                tokenize(&t.prompt),
                O::Forward {
                    layers: t.forward,
                    capture,
                    positions: t.positions,
                },
            ];
            if t.head {
                ops.push(O::Head);
            }
            // The lens feeds FOR's trajectory, the default rows and the SVG heatmap;
            // DECOMPOSE alone does not read it.
            let svg = t
                .save
                .as_deref()
                .is_some_and(|p| p.to_ascii_lowercase().ends_with(".svg"));
            if t.target.is_some() || !t.decompose || svg {
                ops.push(O::LogitLens {
                    target: t.target.clone(),
                });
            }
            if t.decompose {
                ops.push(O::Decompose);
            }
            if let Some(p) = &t.save {
                ops.push(O::SaveTrace {
                    path: p.clone(),
                    prompt: t.prompt.clone(),
                    target: t.target.clone(),
                });
            }
            ops
        }
        LogicalPlan::Insert(i) => match &i.query {
            // INSERT … SELECT: the query's tree is the insert's input.
            Some(q) => {
                let insert = PlanNode {
                    op: O::OverlayInsert(i.clone()),
                    inputs: vec![lower(&q.plan).root],
                };
                return rows_over(plan, insert);
            }
            None => vec![O::OverlayInsert(i.clone())],
        },
        LogicalPlan::EvaluateEdits(e) => vec![O::EvaluateEdits(e.clone())],
        LogicalPlan::AnalyzeFeatures(a) => vec![O::AnalyzeFeatures(a.clone())],
        LogicalPlan::Delete(d) => vec![
            table_scan(d.table, &ScanSpec::full()),
            O::Filter {
                predicate: d.filter.clone(),
            },
            O::OverlayDelete { table: d.table },
        ],
        LogicalPlan::Update(u) => vec![
            table_scan(u.table, &ScanSpec::full()),
            O::Filter {
                predicate: u.filter.clone(),
            },
            O::OverlayUpdate {
                table: u.table,
                assignments: u.assignments.clone(),
                settings: u.settings,
            },
        ],
        LogicalPlan::BeginPatch { path } => vec![O::PatchBegin { path: path.clone() }],
        LogicalPlan::SavePatch { path } => vec![O::PatchSave { path: path.clone() }],
        LogicalPlan::SetSteering(s) => vec![O::SetSteering {
            steering: s.clone(),
        }],
        LogicalPlan::SaveSteering { path } => vec![O::SaveSteering { path: path.clone() }],
        LogicalPlan::Set(s) => vec![O::SetSetting(*s)],
        LogicalPlan::ApplyPatch { path } => vec![O::PatchApply { path: path.clone() }],
        LogicalPlan::RemovePatch { path } => vec![O::PatchRemove { path: path.clone() }],
        LogicalPlan::Diff(d) => {
            let mut inputs = vec![chain(vec![model_ref_op(&d.left)])];
            if let Some(r) = &d.right {
                inputs.push(chain(vec![model_ref_op(r)]));
            }
            let diff = PlanNode {
                op: O::DiffOperands {
                    into_patch: d.into_patch.clone(),
                    layer: d.layer,
                    layer_span: d.layer_span,
                    limit: d.limit,
                    physical: d.physical,
                },
                inputs,
            };
            return rows_over(plan, diff);
        }
        LogicalPlan::Compile(c) => vec![model_ref_op(&c.source), O::Compile(c.clone())],
        LogicalPlan::Extract(e) => vec![
            O::OpenSource {
                path: e.source.clone(),
            },
            match e.format {
                ExtractFormat::Package => O::WritePackage(e.clone()),
                _ => O::WriteContainer(e.clone()),
            },
        ],
        LogicalPlan::Represent(r) => vec![O::Represent {
            target: r.target.clone(),
            encoding: r.encoding,
            ffn: r.ffn,
            container: r.container.clone(),
        }],
        LogicalPlan::Compact { container, into } => vec![O::Compact {
            container: container.clone(),
            into: into.clone(),
        }],
        LogicalPlan::Verify { container, against } => vec![O::Verify {
            container: container.clone(),
            against: against.clone(),
        }],
        LogicalPlan::RunStage { input, into } => vec![O::Stage {
            input: input.clone(),
            into: Some(into.clone()),
        }],
        LogicalPlan::InferFrom { file, top } => vec![
            O::Stage {
                input: StageInput::File(file.clone()),
                into: None,
            },
            O::TopK { k: *top },
            O::Detokenize,
        ],
        LogicalPlan::Show(s) => vec![O::Show(s.clone())],
        LogicalPlan::Artifact {
            what,
            container,
            object,
        } => vec![O::InspectArtifact {
            what: *what,
            container: container.clone(),
            object: object.clone(),
        }],
        LogicalPlan::Stats => vec![O::Stats],
        LogicalPlan::Tokenize { text } => vec![tokenize_as(text, TextRole::Text), O::Detokenize],
        LogicalPlan::DescribeTable { table } => vec![O::DescribeTable { table: *table }],
        LogicalPlan::Explain(e) => vec![O::Explain {
            mode: e.mode,
            plan: Box::new(lower(&e.inner)),
            inner: e.inner.clone(),
        }],
    };
    ops.push(O::Rows {
        columns: statement_columns(plan),
        shape: match plan {
            LogicalPlan::Walk(w) => RowShape::Walk {
                mode: w.mode_choice.describe(w.mode),
            },
            LogicalPlan::Trace(t) => RowShape::Trace {
                layers: t.layers,
                target: t.target.clone(),
                positions: t.positions,
            },
            _ => RowShape::AsIs,
        },
    });
    PhysicalPlan {
        statement: plan.name(),
        root: chain(ops),
    }
}

/// PATCH's tree: the patching node over the prompts it runs (two leaves, or one with noise).
fn patch_plan(p: &PatchPlan, plan: &LogicalPlan) -> PhysicalPlan {
    let leaf = |text: &str| PlanNode {
        op: tokenize(text),
        inputs: Vec::new(),
    };
    let inputs = match &p.corruption {
        PatchCorruption::Prompt { clean } => vec![leaf(clean), leaf(&p.corrupted)],
        PatchCorruption::Noise { .. } => vec![leaf(&p.corrupted)],
    };
    let mut patch = PlanNode {
        op: Operator::ActivationPatch {
            corruption: p.corruption.clone(),
            layers: p.layers,
            positions: p.positions,
            component: p.component,
            metric: p.metric.clone(),
            method: p.method,
            window: p.window,
        },
        inputs,
    };
    if let Some(path) = &p.save {
        patch = PlanNode {
            op: Operator::SaveHeatmap { path: path.clone() },
            inputs: vec![patch],
        };
    }
    rows_over(plan, patch)
}

/// The plan of `plan`'s statement: its rows, as they are, over `node`.
fn rows_over(plan: &LogicalPlan, node: PlanNode) -> PhysicalPlan {
    PhysicalPlan {
        statement: plan.name(),
        root: PlanNode {
            op: Operator::Rows {
                columns: statement_columns(plan),
                shape: RowShape::AsIs,
            },
            inputs: vec![node],
        },
    }
}

/// SELECT: the source's tree (a table scan, a statement's plan, a join of them, one row),
/// then the SQL operators over it.
fn select_plan(s: &SelectPlan, plan: &LogicalPlan) -> PhysicalPlan {
    use Operator as O;
    let mut ops = Vec::new();
    let scan_filters = s
        .source
        .table()
        .is_some_and(|(_, scan)| scan.filter.is_some());
    if let (Some(f), false) = (&s.filter, scan_filters) {
        ops.push(O::Filter {
            predicate: f.clone(),
        });
    }
    if let Some(a) = &s.aggregate {
        ops.push(O::Aggregate {
            keys: a.keys.clone(),
            calls: a.calls.clone(),
            columns: a.columns.clone(),
        });
    }
    if let Some(h) = &s.having {
        ops.push(O::Filter {
            predicate: h.clone(),
        });
    }
    let project = O::Project {
        columns: s.columns.clone(),
        exprs: s.items.clone(),
    };
    if s.distinct {
        ops.push(project.clone());
        ops.push(O::Distinct);
    }
    if !s.order_by.is_empty() {
        ops.push(O::Sort {
            keys: s.order_by.clone(),
        });
    }
    if s.offset > 0 {
        ops.push(O::Offset { n: s.offset });
    }
    if let Some(n) = s.limit {
        ops.push(O::Limit { n });
    }
    if let Some((_, scan)) = s.source.table() {
        if scan.labels == LabelTiming::Late {
            ops.push(O::LateLabels {
                label_set: scan.label_set,
            });
        }
    }
    if !s.distinct {
        ops.push(project);
    }
    ops.push(O::Rows {
        columns: statement_columns(plan),
        shape: RowShape::AsIs,
    });
    let mut node = source_node(&s.source, &s.subqueries);
    for op in ops {
        let inputs = with_subqueries(node, &op, &s.subqueries);
        node = PlanNode { op, inputs };
    }
    PhysicalPlan {
        statement: plan.name(),
        root: node,
    }
}

/// The scan of `table` that `scan` describes.
fn table_scan(table: Table, scan: &ScanSpec) -> Operator {
    Operator::TableScan {
        table,
        layers: scan.layers.clone(),
        features: scan.features.clone(),
        labels: scan.labels,
        label_set: scan.label_set,
        estimate: scan.estimate,
        prompt: scan.prompt.clone(),
        token: scan.token.clone(),
        corpus: scan.corpus.clone(),
        limit: scan.limit,
        filter: scan.filter.clone(),
    }
}

/// `input`, then the plan of each subquery of `op`'s expressions, in the order
/// [`subqueries_in`] gives.
fn with_subqueries(input: PlanNode, op: &Operator, bound: &[Subquery]) -> Vec<PlanNode> {
    let mut inputs = vec![input];
    for e in op.expressions() {
        for (span, _) in subqueries_in(e) {
            if let Some(q) = bound.iter().find(|q| q.span == span) {
                inputs.push(PlanNode {
                    op: Operator::Subquery {
                        statement: q.statement.clone(),
                    },
                    inputs: vec![lower(&q.plan).root],
                });
            }
        }
    }
    inputs
}

fn source_node(src: &SelectSource, bound: &[Subquery]) -> PlanNode {
    let leaf = |op| PlanNode {
        op,
        inputs: Vec::new(),
    };
    match src {
        SelectSource::Table { table, scan } => leaf(table_scan(*table, scan)),
        SelectSource::Statement { statement, plan } => PlanNode {
            op: Operator::Relation {
                statement: statement.clone(),
            },
            inputs: vec![lower(plan).root],
        },
        SelectSource::Join {
            left,
            right,
            kind,
            on,
            columns,
        } => {
            let op = Operator::Join {
                kind: *kind,
                on: on.clone(),
                columns: columns.clone(),
            };
            let mut inputs = with_subqueries(source_node(left, bound), &op, bound);
            inputs.insert(1, source_node(right, bound));
            PlanNode { op, inputs }
        }
        SelectSource::OneRow => leaf(Operator::OneRow),
    }
}

/// How PATCH's metric reads in EXPLAIN.
fn metric_text(m: &Option<PatchMetric>) -> String {
    match m {
        None => "prob(clean top-1)".into(),
        Some(PatchMetric::LogitDiff(a, b)) => format!("logit_diff({}, {})", quote(a), quote(b)),
        Some(PatchMetric::Logit(a)) => format!("logit({})", quote(a)),
        Some(PatchMetric::Prob(a)) => format!("prob({})", quote(a)),
    }
}

/// Reference words DESCRIBE contrasts an entity against (the executor's list has this
/// many; a test keeps them equal).
pub const REFERENCE_WORDS: usize = 8;

fn fmt_bytes(b: u64) -> String {
    const K: f64 = 1024.0;
    let f = b as f64;
    if f >= K * K * K {
        format!("{:.1} GiB", f / (K * K * K))
    } else if f >= K * K {
        format!("{:.1} MiB", f / (K * K))
    } else if f >= K {
        format!("{:.1} KiB", f / K)
    } else {
        format!("{b} B")
    }
}

impl Operator {
    /// Whether the operator takes its input rows as they are pulled, batch by batch (the
    /// row pipeline: a LIMIT above it stops the work below it); every other operator needs
    /// all of its input first.
    pub fn streams(&self) -> bool {
        matches!(
            self,
            Operator::Filter { .. }
                | Operator::Limit { .. }
                | Operator::Offset { .. }
                | Operator::Project { .. }
                | Operator::LateLabels { .. }
                | Operator::Relation { .. }
                | Operator::Rows { .. }
        )
    }

    /// The row expressions the operator evaluates (Filter's predicate, Project's items,
    /// Sort's keys, a join's condition, Aggregate's keys and arguments), in the order their
    /// subqueries' rows follow the operator's own inputs.
    pub fn expressions(&self) -> Vec<&Expr> {
        use Operator as O;
        match self {
            O::Filter { predicate } => vec![predicate],
            O::Project { exprs, .. } => exprs.iter().collect(),
            O::Sort { keys } => keys.iter().map(|k| &k.expr).collect(),
            O::Join { on, .. } => on.iter().collect(),
            O::Aggregate { keys, calls, .. } => keys
                .iter()
                .chain(calls.iter().filter_map(|c| c.arg.as_ref()))
                .collect(),
            _ => Vec::new(),
        }
    }

    /// [`Operator::expressions`], to rewrite in place (the same order).
    pub fn expressions_mut(&mut self) -> Vec<&mut Expr> {
        use Operator as O;
        match self {
            O::Filter { predicate } => vec![predicate],
            O::Project { exprs, .. } => exprs.iter_mut().collect(),
            O::Sort { keys } => keys.iter_mut().map(|k| &mut k.expr).collect(),
            O::Join { on, .. } => on.iter_mut().collect(),
            O::Aggregate { keys, calls, .. } => keys
                .iter_mut()
                .chain(calls.iter_mut().filter_map(|c| c.arg.as_mut()))
                .collect(),
            _ => Vec::new(),
        }
    }
}

impl fmt::Display for Operator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use Operator as O;
        match self {
            O::Tokenize { text, role } => {
                write!(f, "Tokenize {}", quote(text))?;
                if !role.bos() {
                    f.write_str(" bos=no")?;
                }
                Ok(())
            }
            O::EmbedLookup { positions } => {
                write!(f, "EmbedLookup position={}", positions_word(*positions))
            }
            O::Forward {
                layers,
                capture,
                positions,
            } => {
                write!(f, "Forward layers={layers}")?;
                if !capture.is_empty() {
                    let c: Vec<String> = capture
                        .iter()
                        .map(|c| match c {
                            Capture::FfnInput(l) => format!("ffn_input@{l}"),
                            Capture::Residual => "residual".into(),
                            Capture::Deltas => "attn_delta+ffn_delta".into(),
                            Capture::Activity => "attention+ffn_activity".into(),
                        })
                        .collect();
                    write!(
                        f,
                        " capture={} positions={}",
                        c.join(","),
                        positions_word(*positions)
                    )?;
                }
                Ok(())
            }
            O::Head => f.write_str("Head final_norm+output position=last"),
            O::TopK { k } => write!(f, "TopK k={k} softmax"),
            O::DecodeLoop {
                max_tokens,
                sampling,
                stop,
                constraint,
            } => {
                write!(f, "DecodeLoop max={max_tokens}")?;
                if sampling.is_greedy() {
                    f.write_str(" sampling=greedy")?;
                } else {
                    write!(f, " temperature={}", sampling.temperature)?;
                    if let Some(k) = sampling.top_k {
                        write!(f, " top_k={k}")?;
                    }
                    if let Some(p) = sampling.top_p {
                        write!(f, " top_p={p}")?;
                    }
                    if let Some(s) = sampling.seed {
                        write!(f, " seed={s}")?;
                    }
                }
                if let Some(r) = sampling.repeat_penalty {
                    write!(f, " repeat_penalty={r}")?;
                }
                if let Some(p) = sampling.frequency_penalty {
                    write!(f, " frequency_penalty={p}")?;
                }
                if let Some(p) = sampling.presence_penalty {
                    write!(f, " presence_penalty={p}")?;
                }
                if !stop.is_empty() {
                    let s: Vec<String> = stop.iter().map(|s| quote(s)).collect();
                    write!(f, " stop=[{}]", s.join(", "))?;
                }
                match constraint {
                    Some(OutputConstraint::Schema(_)) => f.write_str(" constraint=json_schema")?,
                    Some(OutputConstraint::Grammar(_)) => f.write_str(" constraint=gbnf")?,
                    None => {}
                }
                Ok(())
            }
            O::Detokenize => f.write_str("Detokenize"),
            O::GateScan {
                layers,
                top,
                query,
                encoding,
                bytes_per_layer,
            } => {
                let q = match query {
                    GateQuery::Embedding => "embedding",
                    GateQuery::Residual => "residual",
                };
                write!(f, "GateScan layers={layers} top={top} query={q}")?;
                if let Some(e) = encoding {
                    write!(f, " encoding={e}")?;
                }
                if let Some(b) = bytes_per_layer {
                    write!(
                        f,
                        " bytes/layer={} total={}",
                        fmt_bytes(*b),
                        fmt_bytes(b.saturating_mul(layers.len() as u64))
                    )?;
                }
                Ok(())
            }
            O::FeatureLabels => f.write_str("FeatureLabels"),
            O::DescribeScan {
                entity: _,
                layers,
                mode,
                forward,
                references,
                detail,
            } => {
                write!(f, "DescribeScan layers={layers} mode={mode}")?;
                if let Some(fw) = forward {
                    write!(f, " forward={fw}")?;
                }
                write!(f, " references={references} detail={detail}")
            }
            O::LogitLens { target } => {
                f.write_str("LogitLens")?;
                if let Some(t) = target {
                    write!(f, " for={}", quote(t))?;
                }
                Ok(())
            }
            O::ActivationPatch {
                corruption,
                layers,
                positions,
                component,
                metric,
                method,
                window,
            } => {
                write!(f, "ActivationPatch")?;
                if let PatchCorruption::Noise {
                    subject,
                    scale,
                    seed,
                } = corruption
                {
                    write!(f, " noise={scale}σ on={} seed={seed}", quote(subject))?;
                }
                let per = match positions {
                    PatchPositions::All => "each position",
                    PatchPositions::Last => "the last position",
                    PatchPositions::Together => "all positions together",
                    PatchPositions::One(_) => "one position",
                };
                write!(f, " layers={layers} positions=")?;
                match positions {
                    PatchPositions::One(p) => write!(f, "{p}")?,
                    PatchPositions::All => f.write_str("all")?,
                    PatchPositions::Last => f.write_str("last")?,
                    PatchPositions::Together => f.write_str("together")?,
                }
                let heads = match component {
                    PatchComponent::Head(None) => " × each head",
                    _ => "",
                };
                write!(f, " component={component} metric={}", metric_text(metric))?;
                if *window > 1 {
                    write!(f, " window={window}")?;
                }
                let grid = format!(
                    "{} layer{} × {per}{heads}",
                    layers.len(),
                    if layers.len() == 1 { "" } else { "s" }
                );
                match method {
                    PatchMethod::Runs => write!(
                        f,
                        " runs=clean + corrupted + one per cell ({grid})"
                    ),
                    PatchMethod::Attribution(None) => write!(
                        f,
                        " method=attribution runs=clean + corrupted + one backward pass (estimates {grid})"
                    ),
                    PatchMethod::Attribution(Some(n)) => write!(
                        f,
                        " method=attribution steps={n} runs=clean + corrupted + {n} interpolated forward and backward passes (estimates {grid})"
                    ),
                }
            }
            O::Decompose => f.write_str("Decompose attn/ffn"),
            O::SaveTrace { path, .. } => write!(f, "SaveTrace {}", quote(path)),
            O::SaveHeatmap { path } => write!(f, "SaveHeatmap {} value=recovered", quote(path)),
            O::TableScan {
                table,
                layers,
                features,
                labels,
                estimate,
                prompt,
                token,
                corpus,
                limit,
                filter,
                ..
            } => {
                write!(f, "TableScan {table}")?;
                if let Some(p) = prompt {
                    write!(f, " prompt={}", quote(p))?;
                }
                if let Some(c) = corpus {
                    write!(f, " corpus={}", quote(c))?;
                }
                if let Some(t) = token {
                    write!(f, " token={}", quote(t))?;
                }
                if let Some(l) = layers {
                    write!(f, " layers={}", list_text(l))?;
                }
                if let Some(x) = features {
                    write!(f, " features={}", list_text(x))?;
                }
                if let Some(p) = filter {
                    write!(f, " filter=({p})")?;
                }
                if let Some(n) = limit {
                    write!(f, " stop_after={n}")?;
                }
                match labels {
                    LabelTiming::None => {}
                    LabelTiming::Early => f.write_str(" labels=early")?,
                    LabelTiming::Late => f.write_str(" labels=late")?,
                }
                if let Some(e) = estimate {
                    write!(f, " est_rows={} layers_run=0", e.rows)?;
                    if e.labels > 0 && e.stored {
                        write!(f, " est_labels={} label_source=stored segment", e.labels)?;
                    } else if e.labels > 0 {
                        write!(
                            f,
                            " est_labels={} label_source=computed label_work={:.1e} MACs",
                            e.labels, e.label_macs as f64
                        )?;
                    }
                }
                Ok(())
            }
            O::LateLabels { .. } => f.write_str("LateLabels"),
            O::Filter { predicate } => write!(f, "Filter {predicate}"),
            O::Sort { keys } => {
                let k: Vec<String> = keys
                    .iter()
                    .map(|k| format!("{}{}", k.expr, if k.descending { " DESC" } else { "" }))
                    .collect();
                write!(f, "Sort {}", k.join(", "))
            }
            O::Limit { n } => write!(f, "Limit {n}"),
            O::Offset { n } => write!(f, "Offset {n}"),
            O::Join { kind, on, .. } => {
                f.write_str(match kind {
                    JoinKind::Inner => "Join",
                    JoinKind::Left => "LeftJoin",
                    JoinKind::Cross => "CrossJoin",
                })?;
                match on {
                    Some(on) => write!(f, " on={on}"),
                    None => Ok(()),
                }
            }
            O::Relation { statement, .. } => write!(f, "Relation {statement}"),
            O::OneRow => f.write_str("OneRow"),
            O::Subquery { statement } => write!(f, "Subquery {statement}"),
            O::Aggregate { keys, columns, .. } => {
                f.write_str("Aggregate")?;
                if !keys.is_empty() {
                    let k: Vec<String> = keys.iter().map(|k| k.to_string()).collect();
                    write!(f, " group=[{}]", k.join(", "))?;
                }
                let calls: Vec<&str> = columns[keys.len().min(columns.len())..]
                    .iter()
                    .map(|c| c.name.as_str())
                    .collect();
                write!(f, " calls=[{}]", calls.join(", "))
            }
            O::Distinct => f.write_str("Distinct"),
            O::Project { columns, exprs } => {
                let items: Vec<String> = columns
                    .iter()
                    .zip(exprs)
                    .map(|(c, e)| match &e.kind {
                        lql_grammar::ExprKind::Column(x) if x.name == c.name => c.name.clone(),
                        _ if e.to_string() == c.name => c.name.clone(),
                        _ => format!("{e} AS {}", c.name),
                    })
                    .collect();
                write!(f, "Project {}", items.join(", "))
            }
            O::OverlayInsert(i) => {
                match (&i.file, &i.query) {
                    (Some(file), _) => write!(f, "OverlayInsert edges from={}", quote(file))?,
                    (None, Some(_)) => f.write_str("OverlayInsert edges from=query")?,
                    (None, None) => write!(f, "OverlayInsert edges rows={}", i.rows.len())?,
                }
                write!(f, " {}", i.settings)?;
                if let Some(c) = i.confidence {
                    write!(f, " confidence={c}")?;
                }
                Ok(())
            }
            O::AnalyzeFeatures(a) => write!(
                f,
                "AnalyzeFeatures corpus={} layers={} top={}",
                quote(&a.corpus),
                a.layers,
                a.top
            ),
            O::EvaluateEdits(e) => {
                write!(f, "EvaluateEdits facts={}", quote(&e.facts))?;
                match e.batch {
                    Some(n) => write!(f, " batch={n}")?,
                    None => f.write_str(" batch=all")?,
                }
                if let Some(n) = e.limit {
                    write!(f, " limit={n}")?;
                }
                write!(f, " {}", e.settings)?;
                if e.per_fact {
                    f.write_str(" per_fact")?;
                }
                if let Some(p) = &e.save {
                    write!(f, " save={}", quote(p))?;
                }
                Ok(())
            }
            O::OverlayDelete { table } => write!(f, "OverlayDelete {table}"),
            O::OverlayUpdate {
                table,
                assignments,
                settings,
            } => {
                let set: Vec<String> = assignments
                    .iter()
                    .map(|(c, v)| format!("{c}={v}"))
                    .collect();
                write!(f, "OverlayUpdate {table} set {}", set.join(","))?;
                match settings {
                    Some(s) => write!(f, " {s}"),
                    None => Ok(()),
                }
            }
            O::PatchBegin { path } => write!(f, "PatchBegin {}", quote(path)),
            O::PatchSave { path: None } => f.write_str("PatchSave"),
            O::PatchSave { path: Some(p) } => write!(f, "PatchSave {}", quote(p)),
            O::SetSetting(crate::logical::Setting::Backend(b)) => {
                write!(f, "SetSetting backend={}", quote(b.name()))
            }
            O::SetSteering { steering: None } => f.write_str("SetSteering off"),
            O::SetSteering { steering: Some(s) } => write!(f, "SetSteering {s}"),
            O::SaveSteering { path } => write!(
                f,
                "SaveSteering {} format=llama.cpp-control-vector",
                quote(path)
            ),
            O::PatchApply { path } => write!(f, "PatchApply {}", quote(path)),
            O::PatchRemove { path } => write!(f, "PatchRemove {}", quote(path)),
            O::Bind(u) => {
                match &u.target {
                    BindTarget::Path(p) => write!(f, "Bind {}", quote(p))?,
                    BindTarget::Catalogue(n) => write!(f, "Bind catalogue {}", quote(n))?,
                }
                write!(f, " backend={}", u.backend.name())?;
                if u.backend.name() != u.runs_on.name() {
                    write!(f, "→{}", u.runs_on.name())?;
                }
                if let RunsOn::Gpu {
                    adapter,
                    host_fallback,
                } = &u.runs_on
                {
                    if !adapter.is_empty() {
                        write!(f, " adapter={}", quote(adapter))?;
                    }
                    if *host_fallback {
                        f.write_str(" host-fallback")?;
                    }
                }
                if let Some(l) = u.layers {
                    write!(f, " layers={l}")?;
                }
                if let Some(p) = &u.profile {
                    write!(f, " profile={}", quote(p))?;
                }
                Ok(())
            }
            O::OpenSource { path } => write!(f, "OpenSource {}", quote(path)),
            O::OpenModel { path } => write!(f, "OpenModel {}", quote(path)),
            O::Current => f.write_str("Current base+overlays"),
            O::DiffOperands {
                into_patch,
                layer,
                limit,
                physical,
                ..
            } => {
                f.write_str("DiffOperands")?;
                if *physical {
                    f.write_str(" physical")?;
                }
                if let Some(l) = layer {
                    write!(f, " layer={l}")?;
                }
                if let Some(n) = limit {
                    write!(f, " limit={n}")?;
                }
                if let Some(p) = into_patch {
                    write!(f, " into_patch={}", quote(p))?;
                }
                Ok(())
            }
            O::WriteContainer(e) => {
                f.write_str("WriteContainer VINDEX3")?;
                if e.shape == lql_grammar::ExtractShape::Bank {
                    f.write_str(" BANK")?;
                    if let Some(g) = e.group {
                        write!(f, " GROUP {g}")?;
                    }
                }
                write!(f, " {} encoding={}", quote(&e.output), e.encoding)?;
                if let Some(l) = e.layers {
                    write!(f, " layers={l}")?;
                }
                f.write_str(" (temp+fsync+rename)")?;
                if e.labels {
                    f.write_str(" + labels: every feature, batched unembedding products, stored as a derived segment")?;
                }
                Ok(())
            }
            O::WritePackage(e) => {
                write!(f, "WritePackage {}", quote(&e.output))?;
                if let Some(m) = &e.model_id {
                    write!(f, " model_id={}", quote(m))?;
                }
                if let Some(r) = &e.source_revision {
                    write!(f, " source_revision={}", quote(r))?;
                }
                if !e.projectors.is_empty() {
                    write!(f, " projectors={}", e.projectors.len())?;
                }
                f.write_str(" (fragments, README, manifest last)")
            }
            O::Compile(c) => write!(
                f,
                "Compile {} {} (temp+fsync+rename)",
                c.target,
                quote(&c.output)
            ),
            O::Represent {
                target,
                encoding,
                ffn,
                container,
            } => {
                match target {
                    RepresentTarget::Labels => f.write_str("Represent labels")?,
                    RepresentTarget::All => f.write_str("Represent all")?,
                    RepresentTarget::Object(o) => write!(f, "Represent {}", quote(o))?,
                }
                if *ffn {
                    f.write_str(" ffn")?;
                }
                if let Some(e) = encoding {
                    write!(f, " as={e}")?;
                }
                match container {
                    Some(c) => write!(f, " into={}", quote(c))?,
                    None => f.write_str(" into=current")?,
                }
                match target {
                    RepresentTarget::Labels => f.write_str(
                        " (every feature, batched unembedding products; new segment, index.json last)",
                    ),
                    _ => f.write_str(
                        " (re-encoded from the baseline into new segments beside the existing ones; index.json last)",
                    ),
                }
            }
            O::Compact { container, into } => {
                write!(f, "Compact {}", quote(container))?;
                if let Some(i) = into {
                    write!(f, " into={}", quote(i))?;
                }
                Ok(())
            }
            O::Verify { container, against } => {
                match container {
                    Some(c) => write!(f, "Verify {}", quote(c))?,
                    None => f.write_str("Verify current")?,
                }
                match against {
                    Some(a) => write!(f, " against={}", quote(a)),
                    None => Ok(()),
                }
            }
            O::Stage { input, into } => {
                write!(f, "Stage from={input}")?;
                match into {
                    Some(p) => write!(f, " into={}", quote(p)),
                    None => f.write_str(" head"),
                }
            }
            O::Show(p) => {
                write!(f, "Show {}", p.what)?;
                if let Some(c) = &p.container {
                    write!(f, " {} (index.json, graph, segment headers)", quote(c))?;
                }
                if let Some(l) = &p.like {
                    write!(f, " like={}", quote(l))?;
                }
                Ok(())
            }
            O::InspectArtifact {
                what,
                container,
                object,
            } => {
                write!(f, "InspectArtifact {} {}", what.name(), quote(container))?;
                if let Some(o) = object {
                    write!(f, " {}", quote(o))?;
                }
                f.write_str(" (index.json, graph, segment headers; no payload byte)")
            }
            O::Stats => f.write_str("Stats"),
            O::DescribeTable { table } => write!(f, "DescribeTable {table}"),
            O::Rows { columns, .. } => {
                if columns.is_empty() {
                    f.write_str("Status")
                } else {
                    let names: Vec<&str> = columns.iter().map(|c| c.name.as_str()).collect();
                    write!(f, "Rows [{}]", names.join(", "))
                }
            }
            O::Explain { mode, plan, .. } => {
                let m = match mode {
                    ExplainMode::Plan => "plan",
                    ExplainMode::Analyze => "analyze",
                    ExplainMode::Trace => "trace",
                };
                write!(f, "Explain {m} {}", plan.statement)
            }
        }
    }
}

/// A short text for a pushed-down value list: `3-5` for a run, else `[1, 4, 9]`.
fn list_text(v: &[usize]) -> String {
    match (v.first(), v.last()) {
        (Some(&a), Some(&b)) if b >= a && b - a + 1 == v.len() && v.len() > 1 => format!("{a}-{b}"),
        _ => format!("{v:?}"),
    }
}

fn positions_word(p: Positions) -> &'static str {
    match p {
        Positions::Last => "last",
        Positions::All => "all",
    }
}

impl PlanNode {
    fn fmt_indented(&self, f: &mut fmt::Formatter<'_>, depth: usize) -> fmt::Result {
        writeln!(f, "{:width$}{}", "", self.op, width = depth * 2)?;
        for i in &self.inputs {
            i.fmt_indented(f, depth + 1)?;
        }
        Ok(())
    }
}

impl fmt::Display for PlanNode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.fmt_indented(f, 0)
    }
}

impl fmt::Display for PhysicalPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.root)
    }
}
