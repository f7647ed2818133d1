//! WALK's operators — EmbedLookup, GateScan, FeatureLabels — and its rows; plus the mapping
//! of browse errors that every browse statement shares.
//!
//! `WALK "prompt" [TOP k] [LAYERS a-b] [MODE EMBEDDING | RESIDUAL]` → rows (layer, feature,
//! gate, activation, top_token, down_tokens, mode, expert). On a mixture-of-experts model the
//! scan reads expert gate rows in place: every expert in EMBEDDING mode, the experts the
//! router chose at the last position in RESIDUAL mode, plus the shared expert. The binder chose the mode (RESIDUAL when
//! the binding can run the model, else EMBEDDING) and the `mode` column says which and why;
//! RESIDUAL's Forward runs layers 0 through the last one scanned, no further.

use lql_exec::browse;
use lql_planner::{GateQuery, LayerRange};
use lql_storage::{OperandKey, Role};

use super::datum::Datum;
use super::interp::{wrong_input, Cost};
use super::Cx;
use crate::error::{Error, ErrorKind, Result};
use crate::rows::{Column, Rows};
use crate::value::Value;

/// Down tokens shown per feature.
pub(crate) const DOWN_TOKENS: usize = 5;

/// `EmbedLookup position=last`: the last token's scaled embedding row, the query of every
/// layer (no layer runs).
pub(crate) fn embed_lookup(cx: &mut Cx<'_>, input: Datum, cost: &mut Cost) -> Result<Datum> {
    let Datum::Tokens(tokens) = input else {
        return Err(wrong_input("EmbedLookup", &input));
    };
    let model = cx.model()?;
    let last = *tokens
        .last()
        .ok_or_else(|| Error::semantic("the prompt is empty: at least one token is needed"))?;
    let query = browse::query::embedding_row(model.as_ref(), last)?;
    if let Some(op) = model.operand(OperandKey::global(Role::TokenEmbedding)) {
        let rows = op.shape.get(1).copied().unwrap_or(1).max(1);
        cost.weight_bytes += (op.len / rows) as u64;
        cost.encodings.insert(op.dtype.name().to_string());
    }
    Ok(Datum::Query { tokens, query })
}

/// `GateScan layers top query`: the dot products of each layer's query with every gate
/// row, read in place in their stored encoding; the top `top` by |score| per layer.
pub(crate) fn gate_scan(
    cx: &mut Cx<'_>,
    input: Datum,
    layers: LayerRange,
    top: usize,
    query: GateQuery,
    cost: &mut Cost,
) -> Result<Datum> {
    // The effective state: features edits added and gate scales show in the scan.
    let model = cx.browse_source()?;
    let list: Vec<usize> = layers.iter().collect();
    if let Some(bank) = browse::BankLayout::of(model.as_ref()) {
        return bank_gate_scan(model.as_ref(), &bank, input, query, &list, top, cost);
    }
    let (mut result, tokens) = match (input, query) {
        (Datum::Query { tokens, query }, GateQuery::Embedding) => (
            browse::walk::scan_with(model.as_ref(), &list, top, |_| &query, None)?,
            tokens,
        ),
        (
            Datum::FfnCaptures {
                tokens,
                layers: captured,
                caps,
            },
            GateQuery::Residual,
        ) => {
            for (l, c) in captured.iter().zip(&caps) {
                if c.ffn_input.iter().any(|v| !v.is_finite()) {
                    return Err(Error::new(
                        ErrorKind::Format,
                        format!("the residual entering layer {l}'s FFN is not finite: the model's weights or scales produce NaN or infinity"),
                    )
                    .with_code(crate::Code::Numeric));
                }
            }
            let at = |l: usize| captured.iter().position(|&x| x == l);
            let missing = list.iter().find(|&&l| at(l).is_none());
            if let Some(l) = missing {
                return Err(Error::internal(format!("layer {l} was not captured")));
            }
            let r = browse::walk::scan_with(
                model.as_ref(),
                &list,
                top,
                |l| &caps[at(l).unwrap_or(0)].ffn_input,
                Some(&|l: usize, f: usize| caps[at(l)?].activation.get(f).copied()),
            )?;
            (r, tokens)
        }
        (other, _) => return Err(wrong_input("GateScan", &other)),
    };
    for l in &result.layers {
        cost.weight_bytes += l.bytes_read as u64;
        cost.encodings.insert(l.encoding.name().to_string());
        cost.notes.push(format!(
            "L{:<3} ffn_gate {} [{}×{}]  {} bytes read",
            l.layer,
            l.encoding,
            model.surface().hidden,
            l.features,
            l.bytes_read
        ));
    }
    result.tokens = tokens;
    Ok(Datum::Hits(result))
}

/// `GateScan` over bank layers: EMBEDDING scores every expert's gate rows, RESIDUAL the
/// experts the router chose at the last position (what ran), each with the shared
/// expert; the cost notes name the expert gate rows each layer read.
fn bank_gate_scan(
    model: &dyn lql_storage::OperandSource,
    bank: &browse::BankLayout,
    input: Datum,
    query: GateQuery,
    list: &[usize],
    top: usize,
    cost: &mut Cost,
) -> Result<Datum> {
    let (mut result, tokens) = match (input, query) {
        (Datum::Query { tokens, query }, GateQuery::Embedding) => (
            browse::walk::scan_bank(model, bank, list, top, |_| (&query[..], None))?,
            tokens,
        ),
        (
            Datum::FfnCaptures {
                tokens,
                layers: captured,
                caps,
            },
            GateQuery::Residual,
        ) => {
            let mut by_layer = Vec::with_capacity(list.len());
            for &l in list {
                let i = captured
                    .iter()
                    .position(|&x| x == l)
                    .ok_or_else(|| Error::internal(format!("layer {l} was not captured")))?;
                let c = &caps[i];
                if c.ffn_input.iter().any(|v| !v.is_finite()) {
                    return Err(Error::new(
                        ErrorKind::Format,
                        format!("the residual entering layer {l}'s FFN is not finite: the model's weights or scales produce NaN or infinity"),
                    )
                    .with_code(crate::Code::Numeric));
                }
                by_layer.push((l, i));
            }
            let at = |l: usize| by_layer.iter().find(|x| x.0 == l).map_or(0, |x| x.1);
            let r = browse::walk::scan_bank(model, bank, list, top, |l| {
                let c = &caps[at(l)];
                (&c.ffn_input[..], Some(&c.routes[..]))
            })?;
            (r, tokens)
        }
        (other, _) => return Err(wrong_input("GateScan", &other)),
    };
    let hidden = model.surface().hidden;
    for l in &result.layers {
        cost.weight_bytes += l.bytes_read as u64;
        cost.encodings.insert(l.encoding.name().to_string());
        let routed: Vec<String> = l
            .experts
            .iter()
            .filter(|e| **e != browse::ExpertId::Shared)
            .map(|e| e.to_string())
            .collect();
        let shared = if l.experts.contains(&browse::ExpertId::Shared) {
            format!(" + ffn_gate_shexp [{hidden}×{}]", bank.shared_ffn)
        } else {
            String::new()
        };
        cost.notes.push(format!(
            "L{:<3} ffn_gate_exps {} experts [{}] of {} × [{hidden}×{}]{shared}  {} rows, {} bytes read in place",
            l.layer,
            l.encoding,
            routed.join(", "),
            bank.n_experts,
            bank.expert_ffn,
            l.features,
            l.bytes_read
        ));
    }
    result.tokens = tokens;
    Ok(Datum::Hits(result))
}

/// `FeatureLabels`: each hit's top output tokens, from the binding's label cache.
pub(crate) fn feature_labels(cx: &mut Cx<'_>, input: Datum, cost: &mut Cost) -> Result<Datum> {
    let Datum::Hits(hits) = input else {
        return Err(wrong_input("FeatureLabels", &input));
    };
    let model = cx.browse_source()?;
    // Bank features are numbered v1-flattened, as the label cache keys them.
    let keys: Vec<(usize, usize)> = hits.hits().map(|h| (h.layer, h.feature)).collect();
    let cache = cx.labels()?;
    let missing = cache.missing(&keys);
    let labels = cache.labels(model.as_ref(), &keys)?;
    let source = browse::LabelSource::open(model.as_ref())?.describe();
    let n = labels.len();
    cost.notes.push(match cache.stored_origin() {
        Some(seg) => format!(
            "source stored labels segment {seg} (derived from {source}): {n} labels, {} read, {missing} computed",
            n - missing.min(n)
        ),
        None => format!(
            "source {source}; computed lazily and cached per binding: {n} labels, {} from cache, {missing} computed",
            n - missing.min(n)
        ),
    });
    Ok(Datum::Labeled { hits, labels })
}

/// WALK's rows from labelled hits.
/// `mode` fills the mode column (the mode, and how it was chosen).
pub(crate) fn rows(
    cx: &mut Cx<'_>,
    input: Datum,
    columns: Vec<Column>,
    mode: &str,
) -> Result<Rows> {
    let Datum::Labeled { hits, labels } = input else {
        return Err(wrong_input("Rows", &input));
    };
    let text = cx.token_texts();
    let mut rows = Rows::new(columns);
    for (h, l) in hits.hits().zip(&labels) {
        rows.push(vec![
            Value::from(h.layer),
            Value::from(h.feature),
            Value::from(h.gate),
            h.activation.into(),
            l.top_token_id().map(&text).into(),
            Value::List(
                l.top
                    .iter()
                    .take(DOWN_TOKENS)
                    .map(|t| Value::Text(text(t.0)))
                    .collect(),
            ),
            Value::from(mode),
            h.expert.map(|e| e.column()).into(),
        ]);
    }
    Ok(rows)
}
