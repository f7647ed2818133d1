//! INFER and GENERATE: run the bound model on a raw prompt (no chat template; BOS as the
//! tokenizer's `add_bos` says). Both stop early when the interrupt handle is used.

use std::sync::Arc;

use lql_exec::{Control, FinishReason, GenerateOptions, Sampling};
use lql_planner::{GeneratePlan, InferPlan};

use super::Cx;
use crate::error::{Error, Result};
use crate::rows::{Column, Rows};
use crate::value::{Value, ValueType};

/// The columns of INFER.
pub(crate) fn infer_columns() -> Vec<Column> {
    vec![
        Column::new("rank", ValueType::Int),
        Column::new("token", ValueType::Text),
        Column::new("token_id", ValueType::Int),
        Column::new("prob", ValueType::Float),
        Column::new("logit", ValueType::Float),
    ]
}

/// The columns of GENERATE.
pub(crate) fn generate_columns() -> Vec<Column> {
    vec![
        Column::new("text", ValueType::Text),
        Column::new("token_ids", ValueType::List),
        Column::new("finish_reason", ValueType::Text),
        Column::new("prompt_tokens", ValueType::Int),
        Column::new("generated_tokens", ValueType::Int),
    ]
}

/// `INFER "prompt" [TOP n]` → (rank, token, token_id, prob, logit).
pub(crate) fn infer(cx: &mut Cx<'_>, plan: &InferPlan) -> Result<Rows> {
    let exec = cx.executor()?;
    let tok = cx.tokenizer()?;
    let ids = prompt_ids(&tok, &plan.prompt)?;
    let top = exec.infer(&ids, plan.top)?;
    let mut rows = Rows::new(infer_columns());
    for t in top {
        rows.push(vec![
            Value::from(t.rank),
            Value::from(tok.token_text(t.token_id)),
            Value::from(t.token_id),
            Value::from(t.prob),
            Value::from(t.logit),
        ]);
    }
    Ok(rows)
}

/// `GENERATE "prompt" [MAX n] [TEMPERATURE t] [TOP_K k] [TOP_P p] [SEED s] [STOP "…"]`
/// → one row (text, token_ids, finish_reason, prompt_tokens, generated_tokens).
pub(crate) fn generate(cx: &mut Cx<'_>, plan: &GeneratePlan) -> Result<Rows> {
    let exec = cx.executor()?;
    let tok = cx.tokenizer()?;
    let ids = prompt_ids(&tok, &plan.prompt)?;
    let s = &plan.sampling;
    let opts = GenerateOptions {
        max_tokens: plan.max_tokens,
        sampling: Sampling {
            temperature: s.temperature as f32,
            top_k: s.top_k.unwrap_or(0),
            top_p: s.top_p.map_or(1.0, |p| p as f32),
            seed: s.seed.unwrap_or(0),
        },
        stop: plan.stop.clone(),
        stop_at_eos: true,
        stop_ids: Vec::new(),
        decoder: Some(tok.clone() as Arc<dyn lql_exec::TokenDecoder>),
    };
    let handler = cx.engine.tokens.clone();
    let mut stream = tok.stream_decoder();
    let mut on_token = |id: u32| {
        if let Some(h) = &handler {
            match stream.push(id) {
                Ok(piece) if !piece.is_empty() => h(&piece),
                _ => {}
            }
        }
        Control::Continue
    };
    let g = exec.generate(&ids, &opts, &mut on_token)?;
    if let Some(h) = &handler {
        let rest = stream.flush();
        if !rest.is_empty() {
            h(&rest);
        }
    }
    if g.finish_reason == FinishReason::Cancelled {
        return Err(Error::interrupted());
    }
    let text = match g.text {
        Some(t) => t,
        None => tok.decode(&g.token_ids)?,
    };
    let mut rows = Rows::new(generate_columns());
    rows.push(vec![
        Value::from(text),
        Value::from(g.token_ids),
        Value::from(g.finish_reason.as_str()),
        Value::from(g.prompt_tokens),
        Value::from(g.generated_tokens),
    ]);
    Ok(rows)
}

/// The prompt's ids: raw text, BOS when the tokenizer's settings ask for it.
fn prompt_ids(tok: &lql_exec::tokenizer::Tokenizer, prompt: &str) -> Result<Vec<u32>> {
    let ids = tok.encode(prompt, true)?;
    if ids.is_empty() {
        return Err(Error::semantic(
            "the prompt is empty: at least one token is needed",
        ));
    }
    Ok(ids)
}
