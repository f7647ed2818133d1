//! The interpreter: runs a [`PhysicalPlan`] node by node, inputs first, and measures each
//! node (rows out, wall time, weight bytes read, encodings read, layers run) for
//! EXPLAIN ANALYZE. It is the only way a statement runs, so the tree EXPLAIN PLAN prints is
//! the tree that ran.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use lql_exec::browse::LabelCache;
use lql_storage::meter::ReadMeter;

use lql_planner::{Operator, PhysicalPlan, PlanNode, RowShape};

use super::datum::Datum;
use super::{
    activation_patch, describe, edit, explain, heads, introspect, join, package, patch, persist,
    run, select, subquery, trace, use_model, vindex, walk, Cx,
};
use crate::error::{Error, Result};
use crate::rows::{Column, Rows};

/// How a plan runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    Plain,
    /// EXPLAIN INFER: the Forward node also captures a trace (attention and FFN activity
    /// at the last position), kept in [`Executed::tapped`]; the computation is unchanged.
    TapTrace,
}

/// What one node did.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct NodeStats {
    pub rows: usize,
    pub millis: f64,
    /// Bytes of model weights read by the node.
    pub weight_bytes: u64,
    pub encodings: BTreeSet<String>,
    /// Decoder layers the node ran (Forward, DecodeLoop per token).
    pub layers_run: usize,
    /// Feature labels the node computed (unembedding products; cached labels not counted).
    pub labels_computed: usize,
    /// Whether the node ran (a node whose input failed did not).
    pub ran: bool,
    /// Details worth showing under the tree (per-layer reads, label sources).
    pub notes: Vec<String>,
}

/// A plan that ran: its rows, and each node's stats in preorder (EXPLAIN's order).
pub(crate) struct Executed {
    pub rows: Rows,
    pub stats: Vec<NodeStats>,
    /// EXPLAIN INFER's captured trace.
    pub tapped: Option<lql_exec::trace::Trace>,
}

/// The interpreter's state during one run.
pub(crate) struct Run {
    pub mode: Mode,
    /// Stats per node, preorder index.
    pub stats: Vec<NodeStats>,
    pub tapped: Option<lql_exec::trace::Trace>,
    /// What the pulls of streams under the one being pulled now spent (`stream.rs`
    /// subtracts it, so that a stream node reports only its own work).
    pub pulled: Spent,
}

/// What an operator reports besides its output.
#[derive(Debug, Default)]
pub(crate) struct Cost {
    pub weight_bytes: u64,
    pub encodings: BTreeSet<String>,
    /// Layers the operator ran outside the executor's passes (the gradient passes of
    /// attribution patching), which the binding's layer counter does not see.
    pub layers_run: usize,
    pub notes: Vec<String>,
}

/// The binding's counters read before a piece of work: [`Probe::finish`] gives what the
/// work spent (time, operand bytes per encoding, decoder layers run, labels computed).
pub(crate) struct Probe {
    t0: Instant,
    meter: Option<(Arc<ReadMeter>, BTreeMap<&'static str, u64>)>,
    layers: Option<(Arc<AtomicU64>, u64)>,
    labels: Option<(Arc<LabelCache>, usize)>,
}

/// What a piece of work spent, measured by a [`Probe`].
#[derive(Debug, Default)]
pub(crate) struct Spent {
    pub millis: f64,
    pub bytes: BTreeMap<&'static str, u64>,
    pub layers: usize,
    pub labels: usize,
}

impl Probe {
    pub fn start(cx: &Cx<'_>) -> Probe {
        let b = cx.engine.bound.as_ref();
        Probe {
            t0: Instant::now(),
            // The operand bytes the node's kernels read, measured at the operand seam.
            meter: b.map(|b| (b.meter.clone(), b.meter.snapshot())),
            // The decoder layers its passes ran, counted by the executor as each layer runs.
            layers: b.map(|b| {
                let l = b.layers_run.clone();
                let now = l.load(Ordering::Relaxed);
                (l, now)
            }),
            // The labels its scans computed, counted by the binding's label cache.
            labels: b.map(|b| {
                let c = b.shared.labels.clone();
                let now = c.stats().computed;
                (c, now)
            }),
        }
    }

    pub fn finish(self) -> Spent {
        Spent {
            millis: self.t0.elapsed().as_secs_f64() * 1e3,
            bytes: self
                .meter
                .map(|(m, before)| m.since(&before))
                .unwrap_or_default(),
            layers: self.layers.map_or(0, |(l, before)| {
                l.load(Ordering::Relaxed).saturating_sub(before) as usize
            }),
            labels: self
                .labels
                .map_or(0, |(c, before)| c.stats().computed.saturating_sub(before)),
        }
    }
}

impl Spent {
    pub fn add(&mut self, other: &Spent) {
        self.millis += other.millis;
        for (e, b) in &other.bytes {
            *self.bytes.entry(e).or_default() += b;
        }
        self.layers += other.layers;
        self.labels += other.labels;
    }

    /// These figures less `other`'s (a part of them).
    pub fn minus(&self, other: &Spent) -> Spent {
        Spent {
            millis: (self.millis - other.millis).max(0.0),
            bytes: self
                .bytes
                .iter()
                .map(|(e, b)| {
                    (
                        *e,
                        b.saturating_sub(other.bytes.get(e).copied().unwrap_or(0)),
                    )
                })
                .collect(),
            layers: self.layers.saturating_sub(other.layers),
            labels: self.labels.saturating_sub(other.labels),
        }
    }
}

/// Runs `plan` to its last row.
pub(crate) fn run(cx: &mut Cx<'_>, plan: &PhysicalPlan, mode: Mode) -> Result<Executed> {
    let (out, mut r) = start(cx, plan, mode)?;
    let rows = match out {
        Datum::Rows(rows) => rows,
        Datum::Stream(s) => {
            let (columns, rows) = s.drain(cx, &mut r)?;
            let mut out = Rows::new(columns);
            out.rows = rows;
            out
        }
        other => {
            return Err(Error::internal(format!(
                "the plan's root produced {} instead of rows",
                other.kind()
            )))
        }
    };
    Ok(Executed {
        rows,
        stats: r.stats,
        tapped: r.tapped,
    })
}

/// Runs `plan` up to its first row: the root's rows, finished or as a stream the caller
/// pulls (with the returned [`Run`], which records each node's work).
pub(crate) fn start(cx: &mut Cx<'_>, plan: &PhysicalPlan, mode: Mode) -> Result<(Datum, Run)> {
    let n = plan.root.preorder().len();
    let mut r = Run {
        mode,
        stats: vec![NodeStats::default(); n],
        tapped: None,
        pulled: Spent::default(),
    };
    let mut next = 0usize;
    let out = node(cx, &plan.root, &mut r, &mut next)?;
    Ok((out, r))
}

fn node(cx: &mut Cx<'_>, n: &PlanNode, r: &mut Run, next: &mut usize) -> Result<Datum> {
    let id = *next;
    *next += 1;
    let mut inputs = Vec::with_capacity(n.inputs.len());
    if let Operator::Rows { columns, .. } = &n.op {
        // The operators below answer in these columns (a statement in FROM in its own).
        let mut sub = Cx {
            engine: &mut *cx.engine,
            cancel: cx.cancel,
            text: cx.text,
            columns,
        };
        for i in &n.inputs {
            inputs.push(node(&mut sub, i, r, next)?);
        }
    } else {
        for i in &n.inputs {
            inputs.push(node(cx, i, r, next)?);
        }
    }
    // An operator that needs all of its input gets streams drained.
    if !n.op.streams() {
        inputs = inputs
            .into_iter()
            .zip(&n.inputs)
            .map(|(input, child)| match input {
                // A statement's rows stay rows; an operator's stay a table.
                Datum::Stream(s) => {
                    let (columns, rows) = s.drain(cx, r)?;
                    Ok(match child.op {
                        Operator::Rows { .. } => {
                            let mut out = Rows::new(columns);
                            out.rows = rows;
                            Datum::Rows(out)
                        }
                        _ => Datum::Table { columns, rows },
                    })
                }
                other => Ok(other),
            })
            .collect::<Result<_>>()?;
    }
    // The rows of the subqueries in the node's expressions follow its own inputs.
    let first_subquery = n
        .inputs
        .iter()
        .position(|i| matches!(i.op, Operator::Subquery { .. }))
        .unwrap_or(inputs.len());
    let subquery_rows = inputs.split_off(first_subquery);
    cx.check_cancel()?;
    let probe = Probe::start(cx);
    let mut cost = Cost::default();
    let out = if subquery_rows.is_empty() {
        operator(cx, &n.op, inputs, r, &mut cost)?
    } else {
        let op = subquery::substitute(&n.op, subquery_rows)?;
        operator(cx, &op, inputs, r, &mut cost)?
    };
    let spent = probe.finish();
    for (encoding, bytes) in spent.bytes {
        cost.weight_bytes += bytes;
        cost.encodings.insert(encoding.to_string());
    }
    let s = &mut r.stats[id];
    s.millis = spent.millis;
    s.rows = out.count();
    s.weight_bytes = cost.weight_bytes;
    s.encodings = cost.encodings;
    s.layers_run = spent.layers + cost.layers_run;
    s.labels_computed = spent.labels;
    s.notes = cost.notes;
    s.ran = true;
    // A stream's work is done as it is pulled, and recorded then.
    Ok(match out {
        Datum::Stream(s) => Datum::Stream(s.measured(id)),
        other => other,
    })
}

/// The single input of a pipeline operator.
pub(crate) fn one(inputs: Vec<Datum>, op: &str) -> Result<Datum> {
    let mut it = inputs.into_iter();
    match (it.next(), it.next()) {
        (Some(d), None) => Ok(d),
        _ => Err(Error::internal(format!("{op} takes exactly one input"))),
    }
}

/// The error for an operator given a value it does not take.
pub(crate) fn wrong_input(op: &str, d: &Datum) -> Error {
    Error::internal(format!("{op} cannot take {}", d.kind()))
}

fn operator(
    cx: &mut Cx<'_>,
    op: &Operator,
    inputs: Vec<Datum>,
    r: &mut Run,
    cost: &mut Cost,
) -> Result<Datum> {
    use Operator as O;
    match op {
        O::OpenSource { path } => vindex::open_source(cx, path),
        O::OpenModel { path } => persist::open(cx, path),
        O::Current => persist::current(cx),
        O::Compact { container, into } => persist::compact(cx, container, into.as_deref()),
        O::DiffOperands {
            into_patch,
            layer,
            layer_span,
            limit,
            physical,
        } => persist::diff_operands(
            cx,
            inputs,
            persist::DiffSpec {
                into_patch: into_patch.as_deref(),
                layer: *layer,
                layer_span: *layer_span,
                limit: *limit,
                physical: *physical,
            },
        ),
        O::Compile(plan) => persist::compile(cx, one(inputs, "Compile")?, plan),
        O::Bind(plan) => use_model::open(cx, plan),
        O::Tokenize { text, role } => run::tokenize(cx, text, *role),
        O::EmbedLookup { .. } => walk::embed_lookup(cx, one(inputs, "EmbedLookup")?, cost),
        O::Forward {
            layers,
            capture,
            positions,
        } => run::forward(cx, one(inputs, "Forward")?, *layers, capture, *positions, r),
        O::Head => run::head(cx, one(inputs, "Head")?, r),
        O::TopK { k } => run::top_k(one(inputs, "TopK")?, *k),
        O::DecodeLoop {
            max_tokens,
            sampling,
            stop,
            constraint,
        } => run::decode_loop(
            cx,
            one(inputs, "DecodeLoop")?,
            *max_tokens,
            sampling,
            stop,
            constraint.as_ref(),
        ),
        O::Detokenize => run::detokenize(cx, one(inputs, "Detokenize")?),
        O::GateScan {
            layers, top, query, ..
        } => walk::gate_scan(cx, one(inputs, "GateScan")?, *layers, *top, *query, cost),
        O::FeatureLabels => walk::feature_labels(cx, one(inputs, "FeatureLabels")?, cost),
        O::DescribeScan {
            entity,
            layers,
            mode,
            detail,
            ..
        } => describe::describe_scan(
            cx,
            one(inputs, "DescribeScan")?,
            entity,
            *layers,
            *mode,
            *detail,
        ),
        O::LogitLens { target } => {
            trace::logit_lens(cx, one(inputs, "LogitLens")?, target.as_deref())
        }
        O::Decompose => trace::decompose(one(inputs, "Decompose")?),
        O::ActivationPatch {
            corruption,
            layers,
            positions,
            component,
            metric,
            method,
            window,
        } => activation_patch::activation_patch(
            cx,
            inputs,
            activation_patch::PatchSpec {
                corruption,
                layers: *layers,
                positions: *positions,
                component: *component,
                metric: metric.as_ref(),
                method: *method,
                window: *window,
            },
            cost,
        ),
        O::SaveTrace {
            path,
            prompt,
            target,
        } => trace::save(
            cx,
            one(inputs, "SaveTrace")?,
            path,
            prompt,
            target.as_deref(),
        ),
        O::SaveHeatmap { path } => {
            activation_patch::save_heatmap(cx, one(inputs, "SaveHeatmap")?, path)
        }
        O::TableScan {
            table: lql_grammar::Table::Routes,
            prompt,
            ..
        } => select::routes_scan(cx, prompt.as_deref()),
        O::TableScan {
            table: lql_grammar::Table::Attention,
            prompt,
            ..
        } => heads::attention_scan(cx, prompt.as_deref()),
        O::TableScan {
            table: lql_grammar::Table::Contexts,
            corpus,
            layers,
            features,
            ..
        } => super::analyze::contexts_scan(
            cx,
            corpus.as_deref(),
            layers.as_deref(),
            features.as_deref(),
        ),
        O::TableScan {
            table: lql_grammar::Table::Histograms,
            corpus,
            layers,
            features,
            ..
        } => super::analyze::histograms_scan(
            cx,
            corpus.as_deref(),
            layers.as_deref(),
            features.as_deref(),
        ),
        O::TableScan {
            table: lql_grammar::Table::Heads,
            prompt,
            token,
            ..
        } => heads::heads_scan(cx, prompt.as_deref(), token.as_deref()),
        O::TableScan {
            table,
            layers,
            features,
            labels,
            label_set,
            limit,
            filter,
            ..
        } => select::table_scan(
            cx,
            *table,
            select::ScanRange {
                layers: layers.as_deref(),
                features: features.as_deref(),
                limit: *limit,
                filter: filter.as_ref(),
            },
            *labels,
            *label_set,
        ),
        O::Filter { predicate } => select::filter(one(inputs, "Filter")?, predicate),
        O::Sort { keys } => select::sort(one(inputs, "Sort")?, keys),
        O::Limit { n } => select::limit(one(inputs, "Limit")?, *n),
        O::Offset { n } => select::offset(one(inputs, "Offset")?, *n),
        O::OneRow => Ok(select::one_row()),
        O::Relation { .. } => select::relation(one(inputs, "Relation")?),
        O::Subquery { .. } => one(inputs, "Subquery"),
        O::Join { kind, on, columns } => join::join(cx, inputs, *kind, on.as_ref(), columns),
        O::LateLabels { label_set } => select::late_labels(one(inputs, "LateLabels")?, *label_set),
        O::Project { columns, exprs } => select::project(one(inputs, "Project")?, columns, exprs),
        O::Aggregate {
            keys,
            calls,
            columns,
        } => select::aggregate(cx, one(inputs, "Aggregate")?, keys, calls, columns),
        O::Distinct => select::distinct(one(inputs, "Distinct")?),
        O::WritePackage(plan) => package::write(cx, one(inputs, "WritePackage")?, plan),
        O::WriteContainer(plan) => vindex::write(cx, one(inputs, "WriteContainer")?, plan),
        O::Represent {
            target,
            encoding,
            ffn,
            container,
        } => vindex::represent(cx, target, *encoding, *ffn, container.as_deref()),
        O::Verify { container, against } => {
            vindex::verify(cx, container.as_deref(), against.as_deref())
        }
        O::Stage { input, into } => package::stage(cx, input, into.as_deref()),
        O::Show(plan) => introspect::show(cx, plan),
        O::InspectArtifact {
            what,
            container,
            object,
        } => vindex::artifact(cx, *what, container, object.as_deref()).map(Datum::Rows),
        O::Stats => introspect::stats(cx).map(Datum::Rows),
        O::DescribeTable { table } => introspect::describe_table(cx, *table),
        O::Rows { columns, shape } => rows(cx, inputs, columns, shape),
        O::Explain { mode, plan, inner } => explain::explain(cx, *mode, plan, inner),
        O::OverlayInsert(plan) => match inputs.into_iter().next() {
            Some(query) => edit::insert_queried(cx, plan, query),
            None => edit::insert(cx, plan),
        },
        O::EvaluateEdits(plan) => super::evaluate::evaluate(cx, plan),
        O::AnalyzeFeatures(plan) => super::analyze::analyze(cx, plan),
        O::OverlayDelete { table } => edit::delete(cx, one(inputs, "OverlayDelete")?, *table),
        O::OverlayUpdate {
            table: lql_grammar::Table::Edges,
            assignments,
            settings,
        } => edit::update_edges(cx, one(inputs, "OverlayUpdate")?, assignments, *settings),
        O::OverlayUpdate { assignments, .. } => {
            edit::update(cx, one(inputs, "OverlayUpdate")?, assignments)
        }
        O::PatchBegin { path } => patch::begin(cx, path),
        O::PatchSave { path: None } => patch::save(cx),
        O::PatchSave { path: Some(p) } => patch::save_applied(cx, p),
        O::SetSetting(setting) => super::backend::set(cx, *setting),
        O::SetSteering { steering } => super::steering::set(cx, steering.as_ref()),
        O::SaveSteering { path } => super::steering::save(cx, path),
        O::PatchApply { path } => patch::apply(cx, path),
        O::PatchRemove { path } => patch::remove(cx, path),
    }
}

/// The root: the statement's rows, in exactly the columns its schema declares.
fn rows(
    cx: &mut Cx<'_>,
    inputs: Vec<Datum>,
    columns: &[lql_planner::ColumnDef],
    shape: &RowShape,
) -> Result<Datum> {
    let want = super::columns_of(columns);
    let input = inputs.into_iter().next();
    if let Some(Datum::Stream(s)) = input {
        same_columns(&s.columns, &want)?;
        return Ok(Datum::Stream(s));
    }
    let rows = match input {
        None => Rows::new(want.clone()),
        Some(Datum::Rows(rows)) => rows,
        Some(Datum::Table { columns, rows }) => {
            let mut out = Rows::new(columns);
            out.rows = rows;
            out
        }
        Some(d @ Datum::Labeled { .. }) => match shape {
            RowShape::Walk { mode } => walk::rows(cx, d, want.clone(), mode)?,
            _ => return Err(wrong_input("Rows", &d)),
        },
        Some(d @ Datum::Trace { .. }) => match shape {
            RowShape::Trace {
                layers,
                target,
                positions,
            } => trace::rows(
                cx,
                d,
                want.clone(),
                trace::Shown {
                    layers: *layers,
                    target: target.as_deref(),
                    positions: *positions,
                },
            )?,
            _ => return Err(wrong_input("Rows", &d)),
        },
        Some(d) => return Err(wrong_input("Rows", &d)),
    };
    same_columns(&rows.columns, &want)?;
    Ok(Datum::Rows(rows))
}

/// Refuses rows whose columns are not the ones the statement's schema declares.
fn same_columns(got: &[Column], want: &[Column]) -> Result<()> {
    if got == want {
        return Ok(());
    }
    Err(Error::internal(format!(
        "rows of {:?} do not match the declared columns {:?}",
        got.iter().map(|c| c.name.as_str()).collect::<Vec<_>>(),
        want.iter().map(|c| c.name.as_str()).collect::<Vec<_>>()
    )))
}
