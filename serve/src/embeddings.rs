//! `POST /v1/embeddings` (OpenAI's shape) and `POST /tokenize`, `POST /detokenize`
//! (llama.cpp server's shapes).
//!
//! An embedding is the served model's final-normed hidden states mean-pooled and scaled to
//! unit length ([`lql::generation::GenerationModel::embed`]), computed on the server's own
//! executor outside the decode batch, holding a slot like any request. `input` is a
//! string, a list of strings, a list of token ids or a list of such lists (OpenAI's forms);
//! `encoding_format` `float` (default) or `base64` (little-endian f32, as the OpenAI
//! Python client decodes it).

use std::sync::Arc;
use std::time::Instant;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use base64::Engine as _;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::error::ApiError;
use crate::routes::JsonBody;
use crate::state::AppState;

/// `POST /v1/embeddings`.
#[derive(Debug, Deserialize)]
struct EmbeddingsRequest {
    input: Value,
    model: Option<String>,
    encoding_format: Option<String>,
    dimensions: Option<i64>,
}

/// `POST /tokenize`.
#[derive(Debug, Deserialize)]
struct TokenizeRequest {
    content: String,
    #[serde(default)]
    add_special: bool,
    #[serde(default)]
    with_pieces: bool,
}

/// `POST /detokenize`.
#[derive(Debug, Deserialize)]
struct DetokenizeRequest {
    tokens: Vec<i64>,
}

/// The inputs as token-id lists, each checked against the prompt limit.
fn inputs(state: &AppState, input: &Value) -> Result<Vec<Vec<u32>>, ApiError> {
    let bad = |m: &str| ApiError::invalid_param("input", m.to_string());
    let ids_of = |v: &[Value]| -> Result<Vec<u32>, ApiError> {
        v.iter()
            .map(|t| {
                t.as_u64()
                    .filter(|&i| i < state.generation.vocab_size() as u64)
                    .map(|i| i as u32)
                    .ok_or_else(|| bad("token ids are integers below the vocabulary size"))
            })
            .collect()
    };
    let texts: Vec<Vec<u32>> = match input {
        Value::String(s) => vec![encode(state, s)?],
        Value::Array(a) if a.is_empty() => return Err(bad("input is empty")),
        Value::Array(a) if a.iter().all(Value::is_string) => a
            .iter()
            .map(|s| encode(state, s.as_str().unwrap_or_default()))
            .collect::<Result<_, _>>()?,
        Value::Array(a) if a.iter().all(Value::is_number) => vec![ids_of(a)?],
        Value::Array(a) if a.iter().all(Value::is_array) => a
            .iter()
            .map(|v| ids_of(v.as_array().map(Vec::as_slice).unwrap_or_default()))
            .collect::<Result<_, _>>()?,
        _ => {
            return Err(bad(
                "input must be a string, a list of strings, a list of token ids or a list of such lists",
            ))
        }
    };
    if texts.len() > state.config.max_n.max(1) * 16 {
        return Err(bad("too many inputs in one request"));
    }
    for t in &texts {
        if t.is_empty() {
            return Err(bad("an input has no tokens"));
        }
        if t.len() > state.prompt_limit() {
            return Err(bad(&format!(
                "an input of {} tokens exceeds the limit of {}",
                t.len(),
                state.prompt_limit()
            )));
        }
    }
    Ok(texts)
}

fn encode(state: &AppState, s: &str) -> Result<Vec<u32>, ApiError> {
    state
        .tokenizer
        .encode(s, true)
        .map_err(|e| ApiError::invalid_param("input", format!("tokenizing the input: {e}")))
}

/// `POST /v1/embeddings`.
pub async fn embeddings(State(state): State<Arc<AppState>>, body: JsonBody) -> Response {
    let t0 = Instant::now();
    let out = run(&state, body).await;
    let ok = out.is_ok();
    state
        .metrics
        .request("embeddings", ok, t0.elapsed().as_secs_f64());
    match out {
        Ok(v) => Json(v).into_response(),
        Err(e) => e.into_response(),
    }
}

async fn run(state: &Arc<AppState>, body: JsonBody) -> Result<Value, ApiError> {
    let req: EmbeddingsRequest = body.parse()?;
    let base64 = match req.encoding_format.as_deref() {
        None | Some("float") => false,
        Some("base64") => true,
        Some(other) => {
            return Err(ApiError::invalid_param(
                "encoding_format",
                format!("{other:?}: float or base64"),
            ))
        }
    };
    let width = state.generation.embedding_width();
    if let Some(d) = req.dimensions.filter(|&d| d != width as i64) {
        return Err(ApiError::not_supported(
            "dimensions",
            format!("dimensions {d} (the model's embeddings have {width})"),
        ));
    }
    let texts = inputs(state, &req.input)?;
    let tokens: usize = texts.iter().map(Vec::len).sum();
    let slot = state.pool.acquire().await.inspect_err(|e| {
        if e.status == StatusCode::TOO_MANY_REQUESTS {
            state.metrics.rejected_busy();
        }
    })?;
    let task_state = state.clone();
    let vectors = tokio::task::spawn_blocking(move || {
        let _slot = slot;
        texts
            .iter()
            .map(|ids| task_state.generation.embed(ids))
            .collect::<Result<Vec<_>, _>>()
    })
    .await
    .map_err(|e| ApiError::internal(format!("the embedding task failed: {e}")))?
    .map_err(|e| ApiError::internal(e.message))?;
    let data: Vec<Value> = vectors
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let embedding = if base64 {
                let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
                json!(base64::engine::general_purpose::STANDARD.encode(bytes))
            } else {
                json!(v)
            };
            json!({"object": "embedding", "index": i, "embedding": embedding})
        })
        .collect();
    Ok(json!({
        "object": "list",
        "data": data,
        "model": req.model.unwrap_or_else(|| state.model_id.clone()),
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }))
}

/// `POST /tokenize`: `{"tokens": [...]}`, with `with_pieces` `[{"id", "piece"}]`.
pub async fn tokenize(State(state): State<Arc<AppState>>, body: JsonBody) -> Response {
    let out = (|| {
        let req: TokenizeRequest = body.parse()?;
        let ids = state
            .tokenizer
            .encode(&req.content, req.add_special)
            .map_err(|e| ApiError::invalid_param("content", e.to_string()))?;
        Ok::<Value, ApiError>(if req.with_pieces {
            let pieces: Vec<Value> = ids
                .iter()
                .map(|&i| {
                    json!({"id": i, "piece": state.tokenizer.token_text(i).unwrap_or_default()})
                })
                .collect();
            json!({ "tokens": pieces })
        } else {
            json!({ "tokens": ids })
        })
    })();
    state.metrics.request("tokenize", out.is_ok(), 0.0);
    match out {
        Ok(v) => Json(v).into_response(),
        Err(e) => e.into_response(),
    }
}

/// `POST /detokenize`: `{"content": "…"}`.
pub async fn detokenize(State(state): State<Arc<AppState>>, body: JsonBody) -> Response {
    let out = (|| {
        let req: DetokenizeRequest = body.parse()?;
        let vocab = state.generation.vocab_size() as i64;
        let ids = req
            .tokens
            .iter()
            .map(|&t| {
                (0..vocab).contains(&t).then_some(t as u32).ok_or_else(|| {
                    ApiError::invalid_param(
                        "tokens",
                        format!("token {t} is not in the vocabulary (0-{})", vocab - 1),
                    )
                })
            })
            .collect::<Result<Vec<u32>, _>>()?;
        let bytes = state
            .tokenizer
            .decode_bytes(&ids)
            .map_err(|e| ApiError::invalid_param("tokens", e.to_string()))?;
        Ok::<Value, ApiError>(json!({ "content": String::from_utf8_lossy(&bytes) }))
    })();
    state.metrics.request("detokenize", out.is_ok(), 0.0);
    match out {
        Ok(v) => Json(v).into_response(),
        Err(e) => e.into_response(),
    }
}
