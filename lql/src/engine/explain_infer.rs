//! EXPLAIN INFER: the prediction, and why — per layer, what the residual reads as (logit
//! lens), which FFN features fire on the real residual (as WALK … MODE RESIDUAL finds
//! them, with their labels) and which prompt tokens the last position attends to.
//!
//! `EXPLAIN INFER "prompt" [TOP n]` → rows (section, layer, item, value, detail), in order:
//!
//! | section      | layer | item                       | value                  | detail                                   |
//! |--------------|-------|----------------------------|------------------------|------------------------------------------|
//! | `prediction` | null  | token (TOP n rows)         | probability            | `rank r · id i · logit x`                |
//! | `lens`       | l     | logit-lens top-1 token     | its probability        | `id i`                                   |
//! | `feature`    | l     | `layer:feature` (3 a layer)| gate pre-activation    | `act a → tok1, tok2, tok3` (label)       |
//! | `attention`  | l     | attended prompt token (3)  | weight, mean of heads  | `position p`                             |
//!
//! One forward pass with a capturing observer (last position, attention weights, gate
//! pre-activations and activations); features are the top |gate| of a gate scan of each
//! layer's normed FFN input (the browse module's `scan_with`, the same query WALK RESIDUAL
//! uses) and labels come from the binding's label cache. Attention excludes BOS/EOS
//! positions (attention sinks) when the tokenizer has them.

use lql_exec::browse;
use lql_exec::trace::{self, lens, run_trace, CaptureOptions};
use lql_exec::Logits;
use lql_planner::InferPlan;

use super::trace::{prompt_ids, trace_err};
use super::walk::{browse_err, label_cache};
use super::Cx;
use crate::error::{Error, Result};
use crate::rows::{Column, Rows};
use crate::value::{Value, ValueType};

/// Features shown per layer.
pub(crate) const FEATURES_PER_LAYER: usize = 3;
/// Attended tokens shown per layer.
pub(crate) const ATTENDED_PER_LAYER: usize = 3;
/// Label tokens shown per feature.
const LABEL_TOKENS: usize = 3;

fn columns() -> Vec<Column> {
    vec![
        Column::new("section", ValueType::Text),
        Column::new("layer", ValueType::Int),
        Column::new("item", ValueType::Text),
        Column::new("value", ValueType::Float),
        Column::new("detail", ValueType::Text),
    ]
}

/// `EXPLAIN INFER "prompt" [TOP n]`.
pub(crate) fn explain_infer(cx: &mut Cx<'_>, plan: &InferPlan) -> Result<Rows> {
    let exec = cx.executor()?;
    let tok = cx.tokenizer()?;
    let model = cx.bound()?.model.clone();
    let ids = prompt_ids(&tok, &plan.prompt)?;
    let opts = CaptureOptions {
        positions: trace::Positions::Last,
        attention: true,
        ffn_activity: true,
    };
    cx.check_cancel()?;
    let tr = run_trace(&exec, &ids, opts).map_err(trace_err)?;
    cx.check_cancel()?;
    let text = |id: u32| tok.token_text(id).unwrap_or_else(|| format!("<{id}>"));
    let mut rows = Rows::new(columns());

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
    let lens = lens::logit_lens(&exec, &tr, None).map_err(trace_err)?;
    cx.check_cancel()?;

    // Features: a gate scan of each layer's normed FFN input (WALK RESIDUAL's query).
    let src = exec.source().as_ref();
    let scan = browse::walk::scan_with(
        src,
        &layers,
        FEATURES_PER_LAYER,
        |l| tr.layers[l].ffn_input.as_slice(),
        Some(&|l: usize, f: usize| tr.layers[l].activation.as_ref()?.get(f).copied()),
    )
    .map_err(browse_err)?;
    let keys: Vec<(usize, usize)> = scan.hits().map(|h| (h.layer, h.feature)).collect();
    let labels = label_cache(&model).labels(src, &keys).map_err(browse_err)?;
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
        for (pos, w) in attended(&tr, l, &skip) {
            rows.push(vec![
                Value::from("attention"),
                Value::from(l),
                Value::from(text(tr.tokens[pos])),
                Value::Float(w),
                Value::from(format!("position {pos}")),
            ]);
        }
    }
    Ok(rows)
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
