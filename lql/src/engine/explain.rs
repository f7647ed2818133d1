//! EXPLAIN in its three forms, each showing the tree that really runs:
//!
//! - `EXPLAIN PLAN s` (and plain EXPLAIN of statements other than WALK and INFER): the
//!   operator tree, one line per node, then the statement's declared effects (`effects:
//!   reads the model; writes "o.gguf"; long-running`); nothing runs.
//! - `EXPLAIN ANALYZE s`: runs `s` through the interpreter and prints the same tree with,
//!   per node, rows out, wall time, operand bytes read (measured at the operand seam,
//!   `storage::meter`), encodings read and layers run.
//! - `EXPLAIN WALK …` / `EXPLAIN INFER …`: run the statement's own tree and print it with its
//!   measured costs, then the per-layer trace interpretability users read: for WALK the
//!   features with gates, activations and down tokens; for INFER (rows section, layer,
//!   item, value, detail) the prediction, the logit lens, the features firing on the real
//!   residual and the attended prompt tokens per layer, all read from a capture of the
//!   INFER's own Forward (attention weights and FFN activity at the last position).

use lql_exec::browse;
use lql_exec::trace::{self, lens};
use lql_exec::Logits;
use lql_planner::{ExplainMode, LogicalPlan, PhysicalPlan};

use super::datum::Datum;
use super::interp::{self, Executed, Mode, NodeStats};
use super::Cx;
use crate::error::{Error, Result};
use crate::rows::Rows;
use crate::value::Value;

/// Features shown per layer by EXPLAIN INFER.
pub(crate) const FEATURES_PER_LAYER: usize = 3;
/// Attended tokens shown per layer by EXPLAIN INFER.
pub(crate) const ATTENDED_PER_LAYER: usize = 3;
/// Label tokens shown per feature by EXPLAIN INFER.
const LABEL_TOKENS: usize = 3;

/// `Explain mode plan`: `plan` is lowered from `inner`.
pub(crate) fn explain(
    cx: &mut Cx<'_>,
    mode: ExplainMode,
    plan: &PhysicalPlan,
    inner: &LogicalPlan,
) -> Result<Datum> {
    let mut rows = Rows::new(cx.result_columns());
    match mode {
        ExplainMode::Plan => {
            for l in plan.lines().into_iter().chain(plan.warnings()) {
                rows.push(vec![Value::from(l)]);
            }
            // The declaration the read-only flag and the HTTP gate decide on.
            let effects = lql_planner::effects(inner).describe();
            rows.push(vec![Value::from(format!("effects: {effects}"))]);
        }
        ExplainMode::Analyze => {
            let ran = interp::run(cx, plan, Mode::Plain)?;
            for l in analyzed_lines(plan, &ran.stats) {
                rows.push(vec![Value::from(l)]);
            }
        }
        ExplainMode::Trace => match inner {
            LogicalPlan::Walk(w) => {
                let ran = interp::run(cx, plan, Mode::Plain)?;
                for l in analyzed_lines(plan, &ran.stats) {
                    rows.push(vec![Value::from(l)]);
                }
                rows.push(vec![Value::from(String::new())]);
                rows.push(vec![Value::from(format!(
                    "WALK {:?}  mode {}  top {}  layers {}",
                    w.prompt,
                    w.mode_choice.describe(w.mode),
                    w.top,
                    w.layers
                ))]);
                if let lql_planner::ModeChoice::DefaultBrowseOnly(why) = &w.mode_choice {
                    rows.push(vec![Value::from(format!(
                        "  note: MODE EMBEDDING by default: {why}"
                    ))]);
                }
                for ((_, node), s) in plan.root.preorder().into_iter().zip(&ran.stats) {
                    let op = node.op.to_string();
                    let name = op.split_whitespace().next().unwrap_or_default();
                    for note in &s.notes {
                        let line = if note.starts_with('L') {
                            format!("  {note}")
                        } else {
                            format!("{name:<20}{note}")
                        };
                        rows.push(vec![Value::from(line)]);
                    }
                }
                rows.push(vec![Value::from(String::new())]);
                for line in walk_lines(&ran.rows) {
                    rows.push(vec![Value::from(line)]);
                }
            }
            LogicalPlan::Infer(p) => {
                let ran = interp::run(cx, plan, Mode::TapTrace)?;
                for ((depth, node), s) in plan.root.preorder().into_iter().zip(&ran.stats) {
                    rows.push(vec![
                        Value::from("plan"),
                        Value::Null,
                        Value::from(format!("{:w$}{}", "", node.op, w = depth * 2)),
                        Value::from(s.millis),
                        Value::from(stats_text(s)),
                    ]);
                }
                infer_report(cx, p, &ran, &mut rows)?;
            }
            _ => {
                return Err(Error::internal(
                    "EXPLAIN's trace form is for WALK and INFER",
                ))
            }
        },
    }
    Ok(Datum::Rows(rows))
}

fn fmt_bytes(b: u64) -> String {
    const K: f64 = 1024.0;
    let f = b as f64;
    if f >= K * K * K {
        format!("{:.2} GiB", f / (K * K * K))
    } else if f >= K * K {
        format!("{:.2} MiB", f / (K * K))
    } else if f >= K {
        format!("{:.1} KiB", f / K)
    } else {
        format!("{b} B")
    }
}

/// A node's measured costs: `rows=5 time=12.3ms read=4.2 MiB [Q4_1,F32] layers=23`.
pub(crate) fn stats_text(s: &NodeStats) -> String {
    if !s.ran {
        return "not run".into();
    }
    let mut t = format!("rows={} time={:.2}ms", s.rows, s.millis);
    if s.weight_bytes > 0 {
        t.push_str(&format!(" read={}", fmt_bytes(s.weight_bytes)));
    }
    if !s.encodings.is_empty() {
        let e: Vec<&str> = s.encodings.iter().map(String::as_str).collect();
        t.push_str(&format!(" encodings={}", e.join(",")));
    }
    if s.layers_run > 0 {
        t.push_str(&format!(" layers_run={}", s.layers_run));
    }
    if s.labels_computed > 0 {
        t.push_str(&format!(" labels_computed={}", s.labels_computed));
    }
    t
}

/// The tree's lines with each node's costs after two spaces and `[`.
pub(crate) fn analyzed_lines(plan: &PhysicalPlan, stats: &[NodeStats]) -> Vec<String> {
    plan.lines()
        .into_iter()
        .zip(stats)
        .map(|(l, s)| format!("{l}  [{}]", stats_text(s)))
        .collect()
}

/// EXPLAIN WALK's per-layer section: one line per feature, from the walk's rows.
fn walk_lines(rows: &Rows) -> Vec<String> {
    let get = |r: &[Value], name: &str| rows.column_index(name).map(|i| r[i].clone());
    rows.rows
        .iter()
        .map(|r| {
            let down = match get(r, "down_tokens") {
                Some(Value::List(v)) => v
                    .iter()
                    .map(|t| format!("{:?}", t.to_string()))
                    .collect::<Vec<_>>()
                    .join(", "),
                _ => String::new(),
            };
            let num = |n: &str| get(r, n).and_then(|v| v.as_f64());
            // On a bank layer the feature is `E<expert>:F<n>` (`Eshared` for the shared
            // expert), `n` its v1-flattened number in the layer.
            let expert = match get(r, "expert").and_then(|v| v.as_i64()) {
                Some(-1) => "Eshared:".to_string(),
                Some(e) => format!("E{e}:"),
                None => String::new(),
            };
            format!(
                "L{:<3} {expert}F{:<5} gate={:+.3}{}  top={:?}  down=[{}]",
                get(r, "layer").map(|v| v.to_string()).unwrap_or_default(),
                get(r, "feature").map(|v| v.to_string()).unwrap_or_default(),
                num("gate").unwrap_or(f64::NAN),
                num("activation").map_or(String::new(), |a| format!("  act={a:+.3}")),
                get(r, "top_token")
                    .map(|v| v.to_string())
                    .unwrap_or_default(),
                down
            )
        })
        .collect()
}

/// EXPLAIN INFER's sections after the plan: prediction, then per layer the lens, the
/// features and the attended tokens.
fn infer_report(
    cx: &mut Cx<'_>,
    plan: &lql_planner::InferPlan,
    ran: &Executed,
    rows: &mut Rows,
) -> Result<()> {
    let tr = ran
        .tapped
        .as_ref()
        .ok_or_else(|| Error::internal("EXPLAIN INFER ran without its capture"))?;
    let exec = cx.executor()?;
    let tok = cx.tokenizer()?;
    let text = |id: u32| tok.token_text(id).unwrap_or_else(|| format!("<{id}>"));

    // The prediction, as INFER gives it.
    let logits = Logits {
        values: tr.final_logits.clone(),
    };
    for t in logits.top(plan.top) {
        rows.push(vec![
            Value::from("prediction"),
            Value::Null,
            Value::from(text(t.token_id)),
            Value::from(t.prob),
            Value::from(format!(
                "rank {} · id {} · logit {:.3}",
                t.rank, t.token_id, t.logit
            )),
        ]);
    }
    let layers: Vec<usize> = plan.layers.iter().collect();
    let lens = lens::logit_lens(&exec, tr, None)?;
    cx.check_cancel()?;
    // Features: a gate scan of each layer's normed FFN input (WALK RESIDUAL's query).
    let src = exec.source().as_ref();
    let scan = browse::walk::scan_with(
        src,
        &layers,
        FEATURES_PER_LAYER,
        |l| tr.layers[l].ffn_input.as_slice(),
        Some(&|l: usize, f: usize| {
            // Added features (`ffn + i`) follow the base ones.
            let c = &tr.layers[l];
            let a = c.activation.as_ref()?;
            a.get(f)
                .or_else(|| c.added_activation.as_ref()?.get(f - a.len()))
                .copied()
        }),
    )?;
    let keys: Vec<(usize, usize)> = scan.hits().map(|h| (h.layer, h.feature)).collect();
    let labels = cx.labels()?.labels(src, &keys)?;
    cx.check_cancel()?;
    let skip: Vec<u32> = [tok.bos_id(), tok.eos_id()].into_iter().flatten().collect();
    let mut li = labels.iter();
    for (wl, &l) in scan.layers.iter().zip(&layers) {
        let cell = lens.cell(l + 1, 0);
        rows.push(vec![
            Value::from("lens"),
            Value::from(l),
            Value::from(text(cell.top_id)),
            Value::from(cell.top_prob),
            Value::from(format!("id {}", cell.top_id)),
        ]);
        for h in &wl.hits {
            let label = li
                .next()
                .ok_or_else(|| Error::internal("fewer labels than features"))?;
            let toks: Vec<String> = label
                .top
                .iter()
                .take(LABEL_TOKENS)
                .map(|&(id, _)| text(id))
                .collect();
            let act = h
                .activation
                .map(|a| format!("act {a:+.3} "))
                .unwrap_or_default();
            rows.push(vec![
                Value::from("feature"),
                Value::from(l),
                Value::from(format!("{}:{}", h.layer, h.feature)),
                Value::from(h.gate),
                Value::from(format!("{act}→ {}", toks.join(", "))),
            ]);
        }
        for (pos, w) in attended(tr, l, &skip) {
            rows.push(vec![
                Value::from("attention"),
                Value::from(l),
                Value::from(text(tr.tokens[pos])),
                Value::Float(w),
                Value::from(format!("position {pos}")),
            ]);
        }
    }
    Ok(())
}

/// The most-attended prompt positions of the last position at `layer` (mean over heads),
/// skipping positions holding `skip` tokens; best first.
fn attended(tr: &trace::Trace, layer: usize, skip: &[u32]) -> Vec<(usize, f64)> {
    let Some(att) = tr.layers[layer].attention.as_ref() else {
        return Vec::new();
    };
    let (h, ctx) = (tr.n_heads, tr.context);
    let mut mean = vec![0.0f64; ctx];
    for head in 0..h {
        for (p, m) in mean.iter_mut().enumerate() {
            *m += att.get(head * ctx + p).copied().unwrap_or(0.0) as f64 / h as f64;
        }
    }
    let mut order: Vec<usize> = (0..ctx)
        .filter(|&p| !skip.contains(&tr.tokens[p]))
        .collect();
    order.sort_by(|&a, &b| mean[b].total_cmp(&mean[a]).then(a.cmp(&b)));
    order
        .into_iter()
        .take(ATTENDED_PER_LAYER)
        .map(|p| (p, mean[p]))
        .collect()
}
