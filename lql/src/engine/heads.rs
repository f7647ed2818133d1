//! The `attention` and `heads` tables: attention heads over a prompt, as rows SELECT can
//! filter, sort and aggregate. Both run the prompt once (`lql_exec::trace::heads::capture`,
//! CPU backend):
//!
//! - `SELECT … FROM attention WHERE prompt = '…'`: every layer × head × query × key ≤ query
//!   weight (TransformerLens' `cache["pattern", l]`);
//! - `SELECT … FROM heads WHERE prompt = '…' [AND token = '…']`: per layer × head the
//!   direct contribution to the token's logit at the last position (a layer's rows add up to
//!   TRACE … FOR's `attn_contrib`; the output bias, where a family has one, is its own row
//!   with head NULL) and the previous-token, duplicate-token and induction scores.

use lql_exec::trace::heads::{self, HeadsCapture};
use lql_grammar::Table;

use super::datum::Datum;
use super::trace::single_token;
use super::{table_schema, Cx};
use crate::error::{Error, Result};
use crate::value::Value;

fn run(cx: &mut Cx<'_>, table: Table, prompt: Option<&str>) -> Result<(HeadsCapture, Vec<Value>)> {
    let prompt =
        prompt.ok_or_else(|| Error::internal(format!("{} scan without a prompt", table.name())))?;
    let (tok, ids) = super::select::prompt_ids(cx, prompt)?;
    let exec = cx.executor()?;
    let cap = heads::capture(&exec, &ids)?;
    let texts = ids.iter().map(|&i| tok.token_text(i).into()).collect();
    Ok((cap, texts))
}

/// `TableScan attention prompt=…`.
pub(crate) fn attention_scan(cx: &mut Cx<'_>, prompt: Option<&str>) -> Result<Datum> {
    let columns = table_schema(Table::Attention)?;
    let (cap, texts) = run(cx, Table::Attention, prompt)?;
    let prompt = Value::from(prompt.unwrap_or_default());
    let n = cap.tokens.len();
    let mut rows = Vec::new();
    for layer in 0..cap.n_layers() {
        for head in 0..cap.n_heads {
            for q in 0..n {
                for k in 0..=q {
                    rows.push(vec![
                        prompt.clone(),
                        Value::from(layer),
                        Value::from(head),
                        Value::from(q),
                        texts[q].clone(),
                        Value::from(k),
                        texts[k].clone(),
                        Value::from(cap.weight(layer, head, q, k) as f64),
                    ]);
                }
            }
        }
    }
    Ok(Datum::Table { columns, rows })
}

/// `TableScan heads prompt=… [token=…]`.
pub(crate) fn heads_scan(
    cx: &mut Cx<'_>,
    prompt: Option<&str>,
    token: Option<&str>,
) -> Result<Datum> {
    let columns = table_schema(Table::Heads)?;
    let (cap, _) = run(cx, Table::Heads, prompt)?;
    let tok = cx.tokenizer()?;
    let target = match token {
        Some(t) => single_token(&tok, t, "token =")?,
        None => cap.logits.argmax(),
    };
    let target_text = Value::from(tok.token_text(target));
    let exec = cx.executor()?;
    let terms = heads::contributions(&exec, &cap, target)?;
    let prompt = Value::from(prompt.unwrap_or_default());
    let opt = |v: Option<f64>| v.map_or(Value::Null, Value::from);
    let mut rows = Vec::new();
    for (layer, t) in terms.iter().enumerate() {
        for (head, &c) in t.heads.iter().enumerate() {
            let s = heads::scores(&cap, layer, head);
            rows.push(vec![
                prompt.clone(),
                Value::from(layer),
                Value::from(head),
                target_text.clone(),
                Value::from(c),
                opt(s.prev_token),
                opt(s.duplicate_token),
                opt(s.induction),
            ]);
        }
        if let Some(b) = t.bias {
            rows.push(vec![
                prompt.clone(),
                Value::from(layer),
                Value::Null,
                target_text.clone(),
                Value::from(b),
                Value::Null,
                Value::Null,
                Value::Null,
            ]);
        }
    }
    Ok(Datum::Table { columns, rows })
}
