//! The physical plan: a tree of operators per statement (data flows from the leaves to
//! the root). `Display` prints the EXPLAIN text: the root first, inputs indented below.
//!
//! ```text
//! Rows [layer, feature, gate, token, down]
//!   FeatureLabels
//!     GateScan layers=0-29 top=10 query=embedding encoding=Q4_1
//!       EmbedLookup position=last
//!         Tokenize "France"
//! ```

use crate::logical::*;
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
    /// The normalised residual entering each FFN (WALK MODE RESIDUAL).
    FfnInput,
    /// Residual stream after each layer.
    Residual,
    /// Attention and FFN contributions per layer (TRACE DECOMPOSE).
    Deltas,
}

/// One physical operator.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub enum Operator {
    /// Text → token ids (with the model's BOS handling).
    Tokenize {
        text: String,
    },
    /// Embedding rows of the chosen positions.
    EmbedLookup {
        positions: Positions,
    },
    /// Runs the decoder over all prompt positions, recording `capture` at `layers`.
    Forward {
        layers: LayerRange,
        capture: Vec<Capture>,
        positions: Positions,
    },
    /// Final norm + output head on the last position.
    Head,
    Softmax,
    TopK {
        k: usize,
    },
    /// Autoregressive decoding: head → sample → forward one token, until a limit.
    DecodeLoop {
        max_tokens: usize,
        sampling: Sampling,
        stop: Vec<String>,
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
    /// Labels features with their top output tokens (down projection through the head).
    FeatureLabels,
    /// Groups feature hits into edges for an entity.
    EdgeAggregate {
        detail: Detail,
    },
    /// Per-layer logit lens (probability/rank of `target` when given).
    LogitLens {
        target: Option<String>,
    },
    /// Splits each layer's update into attention and FFN parts.
    Decompose,
    SaveTrace {
        path: String,
    },
    TableScan {
        table: Table,
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
    Project {
        columns: Vec<String>,
    },
    /// Writes edits into the overlay store (never the base files).
    OverlayInsert {
        rows: usize,
        layer: Option<usize>,
        alpha: Option<f64>,
        confidence: Option<f64>,
    },
    OverlayDelete {
        table: Table,
    },
    OverlayUpdate {
        table: Table,
        columns: Vec<String>,
    },
    PatchBegin {
        path: String,
    },
    PatchSave,
    PatchApply {
        path: String,
    },
    PatchRemove {
        path: String,
    },
    /// Opens a model (USE) or a second model for comparison.
    Open {
        target: String,
        layers: Option<LayerRange>,
        profile: Option<String>,
    },
    /// The bound model's effective state (base + overlays).
    Current,
    /// Operand-by-operand comparison of the two inputs.
    DiffOperands {
        into_patch: Option<String>,
    },
    /// Materialises the input into a new artefact (temp name, fsync, rename).
    Write {
        kind: String,
        path: String,
        encoding: Option<Encoding>,
        layers: Option<LayerRange>,
    },
    /// Physically reorganises a container.
    Compact {
        container: String,
        into: Option<String>,
    },
    /// Re-hashes payloads and checks declared against encoded operands.
    Verify {
        container: Option<String>,
    },
    /// Catalogue / container introspection.
    Inspect {
        what: String,
        like: Option<String>,
    },
    /// The statement's result rows with these columns.
    Rows {
        columns: Vec<String>,
    },
    /// A status result (no rows).
    Status,
    /// EXPLAIN: yields the inner statement's plan as text, one row per line; the
    /// inner plan is not run.
    Explain {
        plan: Box<PhysicalPlan>,
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
        fn walk<'a>(n: &'a PlanNode, out: &mut Vec<&'a Operator>) {
            for i in &n.inputs {
                walk(i, out);
            }
            out.push(&n.op);
        }
        let mut out = Vec::new();
        walk(&self.root, &mut out);
        out
    }
}

/// Builds a linear pipeline: `ops[0]` is the leaf, the last is the root.
fn chain(ops: Vec<Operator>) -> PlanNode {
    let mut it = ops.into_iter();
    let mut node = PlanNode {
        op: it.next().unwrap_or(Operator::Status),
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

fn cols(names: &[&str]) -> Operator {
    Operator::Rows {
        columns: names.iter().map(|s| s.to_string()).collect(),
    }
}

fn model_ref_op(r: &ModelRef) -> Operator {
    match r {
        ModelRef::Current => Operator::Current,
        ModelRef::Path(p) => Operator::Open {
            target: p.clone(),
            layers: None,
            profile: None,
        },
    }
}

/// Lowers a logical plan to operators.
pub fn lower(plan: &LogicalPlan) -> PhysicalPlan {
    use Operator as O;
    let root = match plan {
        LogicalPlan::Use(u) => chain(vec![
            O::Open {
                target: match &u.target {
                    BindTarget::Path(p) => p.clone(),
                    BindTarget::Catalogue(n) => format!("catalogue:{n}"),
                },
                layers: u.layers,
                profile: u.profile.clone(),
            },
            O::Status,
        ]),
        LogicalPlan::Infer(i) => chain(vec![
            O::Tokenize {
                text: i.prompt.clone(),
            },
            O::Forward {
                layers: i.layers,
                capture: vec![],
                positions: Positions::All,
            },
            O::Head,
            O::Softmax,
            O::TopK { k: i.top },
            O::Detokenize,
            cols(&["rank", "token", "token_id", "prob", "logit"]),
        ]),
        LogicalPlan::Generate(gp) => chain(vec![
            O::Tokenize {
                text: gp.prompt.clone(),
            },
            O::Forward {
                layers: gp.layers,
                capture: vec![],
                positions: Positions::All,
            },
            O::DecodeLoop {
                max_tokens: gp.max_tokens,
                sampling: gp.sampling.clone(),
                stop: gp.stop.clone(),
            },
            O::Detokenize,
            cols(&[
                "text",
                "token_ids",
                "finish_reason",
                "prompt_tokens",
                "generated_tokens",
            ]),
        ]),
        LogicalPlan::Walk(w) => {
            let mut ops = vec![O::Tokenize {
                text: w.prompt.clone(),
            }];
            let query = match w.mode {
                WalkMode::Embedding => {
                    ops.push(O::EmbedLookup {
                        positions: Positions::Last,
                    });
                    GateQuery::Embedding
                }
                WalkMode::Residual => {
                    ops.push(O::Forward {
                        layers: LayerRange::new(0, w.layers.last),
                        capture: vec![Capture::FfnInput],
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
            ops.push(cols(&[
                "layer",
                "feature",
                "gate",
                "activation",
                "top_token",
                "down_tokens",
                "mode",
            ]));
            chain(ops)
        }
        LogicalPlan::Describe(d) => chain(vec![
            O::Tokenize {
                text: d.entity.clone(),
            },
            O::EmbedLookup {
                positions: Positions::Last,
            },
            O::GateScan {
                layers: d.layers,
                top: match d.detail {
                    Detail::Brief => 10,
                    Detail::Verbose | Detail::Raw => 30,
                },
                query: GateQuery::Embedding,
                encoding: None,
                bytes_per_layer: None,
            },
            O::FeatureLabels,
            O::EdgeAggregate { detail: d.detail },
            cols(&["relation", "target", "gate", "layers", "count", "also"]),
        ]),
        LogicalPlan::Select(s) => {
            let mut ops = vec![O::TableScan { table: s.table }];
            if let Some(f) = &s.filter {
                ops.push(O::Filter {
                    predicate: f.clone(),
                });
            }
            if !s.order_by.is_empty() {
                ops.push(O::Sort {
                    keys: s.order_by.clone(),
                });
            }
            if let Some(n) = s.limit {
                ops.push(O::Limit { n });
            }
            let names: Vec<String> = s.columns.iter().map(|c| c.name.clone()).collect();
            ops.push(O::Project {
                columns: names.clone(),
            });
            ops.push(O::Rows { columns: names });
            chain(ops)
        }
        LogicalPlan::Trace(t) => {
            let mut capture = vec![Capture::Residual];
            if t.decompose {
                capture.push(Capture::Deltas);
            }
            let mut ops = vec![
                O::Tokenize {
                    text: t.prompt.clone(),
                },
                // Every layer up to the last one shown must run; LAYERS only filters rows.
                O::Forward {
                    layers: LayerRange::new(0, t.layers.last),
                    capture,
                    positions: t.positions,
                },
                O::LogitLens {
                    target: t.target.clone(),
                },
            ];
            if t.decompose {
                ops.push(O::Decompose);
            }
            if let Some(p) = &t.save {
                ops.push(O::SaveTrace { path: p.clone() });
            }
            // The columns the engine's TRACE produces (docs/trace.md).
            let mut columns: Vec<&str> = Vec::new();
            if matches!(t.positions, Positions::All) {
                columns.push("position");
            }
            columns.push("layer");
            match (t.target.is_some(), t.decompose) {
                (false, false) => columns.extend([
                    "top_token",
                    "top_token_id",
                    "top_prob",
                    "attn_delta_norm",
                    "ffn_delta_norm",
                ]),
                (true, _) => columns.extend([
                    "rank",
                    "prob",
                    "attn_contrib",
                    "ffn_contrib",
                    "contrib",
                    "who",
                ]),
                (false, true) => {}
            }
            if t.decompose {
                columns.extend([
                    "attn_delta_norm",
                    "ffn_delta_norm",
                    "residual_norm",
                    "attn_share",
                ]);
            }
            ops.push(cols(&columns));
            chain(ops)
        }
        LogicalPlan::Insert(i) => chain(vec![
            O::OverlayInsert {
                rows: i.rows.len(),
                layer: i.layer,
                alpha: i.alpha,
                confidence: i.confidence,
            },
            O::Status,
        ]),
        LogicalPlan::Delete(d) => chain(vec![
            O::TableScan { table: d.table },
            O::Filter {
                predicate: d.filter.clone(),
            },
            O::OverlayDelete { table: d.table },
            O::Status,
        ]),
        LogicalPlan::Update(u) => chain(vec![
            O::TableScan { table: u.table },
            O::Filter {
                predicate: u.filter.clone(),
            },
            O::OverlayUpdate {
                table: u.table,
                columns: u.assignments.iter().map(|(c, _)| c.clone()).collect(),
            },
            O::Status,
        ]),
        LogicalPlan::BeginPatch { path } => {
            chain(vec![O::PatchBegin { path: path.clone() }, O::Status])
        }
        LogicalPlan::SavePatch => chain(vec![O::PatchSave, O::Status]),
        LogicalPlan::ApplyPatch { path } => {
            chain(vec![O::PatchApply { path: path.clone() }, O::Status])
        }
        LogicalPlan::RemovePatch { path } => {
            chain(vec![O::PatchRemove { path: path.clone() }, O::Status])
        }
        LogicalPlan::Diff(d) => {
            let left = chain(vec![model_ref_op(&d.left)]);
            let mut inputs = vec![left];
            if let Some(r) = &d.right {
                inputs.push(chain(vec![model_ref_op(r)]));
            }
            let diff = PlanNode {
                op: O::DiffOperands {
                    into_patch: d.into_patch.clone(),
                },
                inputs,
            };
            PlanNode {
                op: cols(&["object", "layer", "role", "change", "detail"]),
                inputs: vec![diff],
            }
        }
        LogicalPlan::Compile(c) => chain(vec![
            model_ref_op(&c.source),
            O::Write {
                kind: c.target.to_string(),
                path: c.output.clone(),
                encoding: None,
                layers: None,
            },
            O::Status,
        ]),
        LogicalPlan::Extract(e) => chain(vec![
            O::Open {
                target: e.source.clone(),
                layers: None,
                profile: None,
            },
            O::Write {
                kind: e.format.to_string(),
                path: e.output.clone(),
                encoding: Some(e.encoding),
                layers: e.layers,
            },
            O::Status,
        ]),
        LogicalPlan::Compact { container, into } => chain(vec![
            O::Compact {
                container: container.clone(),
                into: into.clone(),
            },
            O::Status,
        ]),
        LogicalPlan::Verify { container } => chain(vec![
            O::Verify {
                container: container.clone(),
            },
            cols(&["check", "object", "status", "detail"]),
        ]),
        LogicalPlan::Show(s) => chain(vec![
            O::Inspect {
                what: s.what.to_string(),
                like: s.like.clone(),
            },
            O::Rows { columns: vec![] },
        ]),
        LogicalPlan::Stats => chain(vec![
            O::Inspect {
                what: "STATS".into(),
                like: None,
            },
            cols(&["key", "value"]),
        ]),
        LogicalPlan::Tokenize { text } => chain(vec![
            O::Tokenize { text: text.clone() },
            cols(&["position", "token_id", "token"]),
        ]),
        LogicalPlan::Explain(inner) => chain(vec![
            O::Explain {
                plan: Box::new(lower(inner)),
            },
            cols(&["plan"]),
        ]),
    };
    PhysicalPlan {
        statement: plan.name(),
        root,
    }
}

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

impl fmt::Display for Operator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use Operator as O;
        match self {
            O::Tokenize { text } => write!(f, "Tokenize {}", quote(text)),
            O::EmbedLookup { positions } => {
                write!(f, "EmbedLookup position={}", positions_word(*positions))
            }
            O::Forward {
                layers,
                capture,
                positions,
            } => {
                write!(f, "Forward prefill layers={layers}")?;
                if !capture.is_empty() {
                    let c: Vec<&str> = capture
                        .iter()
                        .map(|c| match c {
                            Capture::FfnInput => "ffn_input",
                            Capture::Residual => "residual",
                            Capture::Deltas => "attn_delta+ffn_delta",
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
            O::Softmax => f.write_str("Softmax"),
            O::TopK { k } => write!(f, "TopK k={k}"),
            O::DecodeLoop {
                max_tokens,
                sampling,
                stop,
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
                if !stop.is_empty() {
                    let s: Vec<String> = stop.iter().map(|s| quote(s)).collect();
                    write!(f, " stop=[{}]", s.join(", "))?;
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
            O::EdgeAggregate { detail } => write!(f, "EdgeAggregate detail={detail}"),
            O::LogitLens { target } => {
                f.write_str("LogitLens")?;
                if let Some(t) = target {
                    write!(f, " for={}", quote(t))?;
                }
                Ok(())
            }
            O::Decompose => f.write_str("Decompose attn/ffn"),
            O::SaveTrace { path } => write!(f, "SaveTrace {}", quote(path)),
            O::TableScan { table } => write!(f, "TableScan {table}"),
            O::Filter { predicate } => write!(f, "Filter {predicate}"),
            O::Sort { keys } => {
                let k: Vec<String> = keys
                    .iter()
                    .map(|k| format!("{}{}", k.column, if k.descending { " DESC" } else { "" }))
                    .collect();
                write!(f, "Sort {}", k.join(", "))
            }
            O::Limit { n } => write!(f, "Limit {n}"),
            O::Project { columns } => write!(f, "Project {}", columns.join(", ")),
            O::OverlayInsert {
                rows,
                layer,
                alpha,
                confidence,
            } => {
                write!(f, "OverlayInsert edges rows={rows}")?;
                match layer {
                    Some(l) => write!(f, " layer={l}")?,
                    None => f.write_str(" layer=auto")?,
                }
                if let Some(a) = alpha {
                    write!(f, " alpha={a}")?;
                }
                if let Some(c) = confidence {
                    write!(f, " confidence={c}")?;
                }
                Ok(())
            }
            O::OverlayDelete { table } => write!(f, "OverlayDelete {table}"),
            O::OverlayUpdate { table, columns } => {
                write!(f, "OverlayUpdate {table} set={}", columns.join(","))
            }
            O::PatchBegin { path } => write!(f, "PatchBegin {}", quote(path)),
            O::PatchSave => f.write_str("PatchSave"),
            O::PatchApply { path } => write!(f, "PatchApply {}", quote(path)),
            O::PatchRemove { path } => write!(f, "PatchRemove {}", quote(path)),
            O::Open {
                target,
                layers,
                profile,
            } => {
                write!(f, "Open {}", quote(target))?;
                if let Some(l) = layers {
                    write!(f, " layers={l}")?;
                }
                if let Some(p) = profile {
                    write!(f, " profile={}", quote(p))?;
                }
                Ok(())
            }
            O::Current => f.write_str("Current base+overlays"),
            O::DiffOperands { into_patch } => {
                f.write_str("DiffOperands")?;
                if let Some(p) = into_patch {
                    write!(f, " into_patch={}", quote(p))?;
                }
                Ok(())
            }
            O::Write {
                kind,
                path,
                encoding,
                layers,
            } => {
                write!(f, "Write {kind} {}", quote(path))?;
                if let Some(e) = encoding {
                    write!(f, " encoding={e}")?;
                }
                if let Some(l) = layers {
                    write!(f, " layers={l}")?;
                }
                f.write_str(" (temp+fsync+rename)")
            }
            O::Compact { container, into } => {
                write!(f, "Compact {}", quote(container))?;
                if let Some(i) = into {
                    write!(f, " into={}", quote(i))?;
                }
                Ok(())
            }
            O::Verify { container } => match container {
                Some(c) => write!(f, "Verify {}", quote(c)),
                None => f.write_str("Verify current"),
            },
            O::Inspect { what, like } => {
                write!(f, "Inspect {what}")?;
                if let Some(l) = like {
                    write!(f, " like={}", quote(l))?;
                }
                Ok(())
            }
            O::Rows { columns } => {
                if columns.is_empty() {
                    f.write_str("Rows")
                } else {
                    write!(f, "Rows [{}]", columns.join(", "))
                }
            }
            O::Status => f.write_str("Status"),
            O::Explain { plan } => write!(f, "Explain {}", plan.statement),
        }
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

/// The EXPLAIN text of a bound statement (for `EXPLAIN x`, the text of `x`'s plan).
pub fn explain_text(plan: &LogicalPlan) -> String {
    match plan {
        LogicalPlan::Explain(inner) => lower(inner).to_string(),
        other => lower(other).to_string(),
    }
}

impl fmt::Display for PhysicalPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.root)
    }
}
