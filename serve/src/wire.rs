//! OpenAI wire types: the request bodies of `/v1/completions`, `/v1/chat/completions` and
//! `/v1/responses` (fields this server reads; unknown fields are ignored as OpenAI's own
//! server ignores them), and the checks that turn them into a [`lql::generation::Request`].

use lql::generation::{Sampling, MAX_REPEAT_LAST_N};
use serde::Deserialize;
use serde_json::Value;

use crate::constraint::ConstraintFields;
use crate::error::ApiError;

/// A string or a list of strings (`prompt`, `stop`).
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

impl OneOrMany {
    pub fn into_vec(self) -> Vec<String> {
        match self {
            OneOrMany::One(s) => vec![s],
            OneOrMany::Many(v) => v,
        }
    }
}

/// Sampling fields shared by every generating route (and LQL's steering extension).
#[derive(Debug, Clone, Default, Deserialize)]
pub struct SamplingFields {
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    /// Not OpenAI's, but llama.cpp's and vLLM's.
    pub top_k: Option<i64>,
    pub seed: Option<i64>,
    /// Not OpenAI's: a llama.cpp control vector added in this request's passes only.
    pub steering: Option<SteeringField>,
    /// llama.cpp's server: reuse (and keep) the prompt's cached prefix (default true).
    pub cache_prompt: Option<bool>,
    /// Not OpenAI's: `.lqlpatch` files of the server's `--patches` folder (by file name or
    /// sha256) applied to this request only.
    pub patches: Option<Vec<String>>,
    /// OpenAI's penalties (−2 … 2), and llama.cpp's / Ollama's `repeat_penalty` and
    /// `repeat_last_n` (the window of all of them: 64 tokens by default, −1 the context).
    pub frequency_penalty: Option<f64>,
    pub presence_penalty: Option<f64>,
    pub repeat_penalty: Option<f64>,
    pub repeat_last_n: Option<i64>,
}

/// `"steering": {"vector": "file.gguf", "scale": 0.8, "layers": [10, 20]}`: a control
/// vector under `--allow-writes DIR`, its scale (1) and the layers of it kept (all).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SteeringField {
    pub vector: String,
    pub scale: Option<f64>,
    pub layers: Option<[usize; 2]>,
}

/// `stream_options`.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct StreamOptions {
    #[serde(default)]
    pub include_usage: bool,
}

/// `POST /v1/completions`.
#[derive(Debug, Clone, Deserialize)]
pub struct CompletionRequest {
    pub model: Option<String>,
    pub prompt: Value,
    pub max_tokens: Option<i64>,
    #[serde(flatten)]
    pub sampling: SamplingFields,
    /// `response_format`, and llama.cpp's `grammar` and `json_schema`.
    #[serde(flatten)]
    pub constraint: ConstraintFields,
    pub stop: Option<OneOrMany>,
    pub n: Option<i64>,
    #[serde(default)]
    pub stream: bool,
    pub stream_options: Option<StreamOptions>,
    pub logprobs: Option<i64>,
    #[serde(default)]
    pub echo: bool,
    pub best_of: Option<i64>,
    pub suffix: Option<String>,
}

/// One chat message: `content` a string or a list of parts (`{"type":"text","text":…}`).
#[derive(Debug, Clone, Deserialize)]
pub struct ChatMessage {
    pub role: String,
    #[serde(default)]
    pub content: Value,
    pub tool_calls: Option<Value>,
    /// A `tool` message: the call it answers, and the function's name.
    pub tool_call_id: Option<String>,
    pub name: Option<String>,
}

/// `POST /v1/chat/completions`.
#[derive(Debug, Clone, Deserialize)]
pub struct ChatRequest {
    pub model: Option<String>,
    pub messages: Vec<ChatMessage>,
    pub max_tokens: Option<i64>,
    pub max_completion_tokens: Option<i64>,
    #[serde(flatten)]
    pub sampling: SamplingFields,
    pub stop: Option<OneOrMany>,
    pub n: Option<i64>,
    #[serde(default)]
    pub stream: bool,
    pub stream_options: Option<StreamOptions>,
    #[serde(default)]
    pub logprobs: bool,
    pub top_logprobs: Option<i64>,
    /// `response_format`, and llama.cpp's `grammar` and `json_schema`.
    #[serde(flatten)]
    pub constraint: ConstraintFields,
    pub tools: Option<Value>,
    pub tool_choice: Option<Value>,
    pub functions: Option<Value>,
}

/// `POST /v1/responses`.
#[derive(Debug, Clone, Deserialize)]
pub struct ResponsesRequest {
    pub model: Option<String>,
    pub input: Value,
    pub instructions: Option<String>,
    pub max_output_tokens: Option<i64>,
    #[serde(flatten)]
    pub sampling: SamplingFields,
    #[serde(default)]
    pub stream: bool,
    pub text: Option<Value>,
    pub tools: Option<Value>,
    pub previous_response_id: Option<String>,
}

/// Text of a message's `content`: a string, or the `text` of its text parts.
pub fn content_text(content: &Value, param: &str) -> Result<String, ApiError> {
    match content {
        Value::Null => Ok(String::new()),
        Value::String(s) => Ok(s.clone()),
        Value::Array(parts) => {
            let mut out = String::new();
            for p in parts {
                let ty = p.get("type").and_then(Value::as_str).unwrap_or("");
                match (ty, p.get("text").and_then(Value::as_str)) {
                    ("text" | "input_text" | "output_text", Some(t)) => out.push_str(t),
                    _ => {
                        return Err(ApiError::not_supported(
                            param,
                            format!("content parts of type {ty:?} (only text parts are read)"),
                        ))
                    }
                }
            }
            Ok(out)
        }
        _ => Err(ApiError::invalid_param(
            param,
            "content must be a string or a list of parts",
        )),
    }
}

/// The sampler settings, checked. OpenAI's default temperature is 1.
pub fn sampling(f: &SamplingFields, choice: usize) -> Result<Sampling, ApiError> {
    let temperature = f.temperature.unwrap_or(1.0);
    if !temperature.is_finite() || !(0.0..=2.0).contains(&temperature) {
        return Err(ApiError::invalid_param(
            "temperature",
            format!("temperature {temperature} must be between 0 and 2"),
        ));
    }
    let top_p = f.top_p.unwrap_or(1.0);
    if !(top_p > 0.0 && top_p <= 1.0) {
        return Err(ApiError::invalid_param(
            "top_p",
            format!("top_p {top_p} must be in (0, 1]"),
        ));
    }
    let top_k = match f.top_k {
        None | Some(-1) | Some(0) => 0,
        Some(k) if k > 0 => k as usize,
        Some(k) => {
            return Err(ApiError::invalid_param(
                "top_k",
                format!("top_k {k} must be ≥ 0 (or -1 for no limit)"),
            ))
        }
    };
    let seed = match f.seed {
        Some(s) => s as u64,
        None => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64),
    };
    let penalty = |v: Option<f64>, name: &str| -> Result<f32, ApiError> {
        match v {
            None => Ok(0.0),
            Some(p) if (-2.0..=2.0).contains(&p) => Ok(p as f32),
            Some(p) => Err(ApiError::invalid_param(
                name,
                format!("{name} {p} must be between -2 and 2"),
            )),
        }
    };
    let repeat_penalty = match f.repeat_penalty {
        None => 1.0,
        Some(r) if r.is_finite() && r > 0.0 && r <= 100.0 => r as f32,
        Some(r) => {
            return Err(ApiError::invalid_param(
                "repeat_penalty",
                format!("repeat_penalty {r} must be in (0, 100]"),
            ))
        }
    };
    let repeat_last_n = match f.repeat_last_n {
        None => 64,
        Some(-1) => MAX_REPEAT_LAST_N,
        Some(n) if (0..=MAX_REPEAT_LAST_N as i64).contains(&n) => n as usize,
        Some(n) => {
            return Err(ApiError::invalid_param(
                "repeat_last_n",
                format!(
                    "repeat_last_n {n} must be -1 (the context) or between 0 and {}",
                    MAX_REPEAT_LAST_N
                ),
            ))
        }
    };
    Ok(Sampling {
        temperature: temperature as f32,
        top_k,
        top_p: top_p as f32,
        // Each choice of `n` samples its own stream.
        seed: seed.wrapping_add(choice as u64),
        repeat_penalty,
        frequency_penalty: penalty(f.frequency_penalty, "frequency_penalty")?,
        presence_penalty: penalty(f.presence_penalty, "presence_penalty")?,
        repeat_last_n,
    })
}

/// `max_tokens`, checked against the server's limit (`default` when absent).
pub fn max_tokens(
    v: Option<i64>,
    default: usize,
    limit: usize,
    param: &str,
) -> Result<usize, ApiError> {
    match v {
        None => Ok(default.min(limit)),
        Some(n) if n >= 0 && (n as u64) <= limit as u64 => Ok(n as usize),
        Some(n) => Err(ApiError::invalid_param(
            param,
            format!("{param} {n} must be between 0 and {limit}"),
        )),
    }
}

/// `n`, checked.
pub fn choices(n: Option<i64>, limit: usize) -> Result<usize, ApiError> {
    match n {
        None => Ok(1),
        Some(n) if n >= 1 && (n as u64) <= limit as u64 => Ok(n as usize),
        Some(n) => Err(ApiError::invalid_param(
            "n",
            format!("n {n} must be between 1 and {limit}"),
        )),
    }
}

/// `stop`, checked: at most 4 non-empty strings, as OpenAI allows.
pub fn stop(v: Option<OneOrMany>) -> Result<Vec<String>, ApiError> {
    let v = v.map(OneOrMany::into_vec).unwrap_or_default();
    if v.len() > 4 {
        return Err(ApiError::invalid_param("stop", "at most 4 stop strings"));
    }
    if v.iter().any(String::is_empty) {
        return Err(ApiError::invalid_param("stop", "a stop string is empty"));
    }
    Ok(v)
}
