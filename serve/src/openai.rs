//! The OpenAI-compatible routes: `/v1/models`, `/v1/completions`, `/v1/chat/completions`
//! and `/v1/responses`, answered in OpenAI's wire shapes (JSON, or server-sent events with
//! `stream: true`). Prompts are tokenized as `GENERATE` tokenizes them; chat messages go
//! through the model's own chat template first. `response_format` (JSON object, JSON schema)
//! and llama.cpp's `grammar` / `json_schema` constrain the output ([`crate::constraint`]);
//! `tools` in chat completions are rendered by the chat template and the answer read for
//! calls in the template's format ([`crate::tools`]); `/v1/responses` refuses `tools`.

use std::sync::Arc;
use std::time::Instant;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use lql::generation::{
    self, Event, EventSink, Finish, Outcome, PatchedModel, Steering, TokenLogprob, Work,
};
use serde_json::{json, Value};
use tokio::sync::mpsc;

use crate::error::ApiError;
use crate::pool::Slot;
use crate::routes::JsonBody;
use crate::sse::{self, Item};
use crate::state::{now_secs, AppState};
use crate::template::Message;
use crate::tools::{self, ToolCalling};
use crate::wire::{self, ChatRequest, CompletionRequest, ResponsesRequest};

/// Which wire shape a generation answers in.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Shape {
    Completion,
    Chat,
    Responses,
}

impl Shape {
    fn route(self) -> &'static str {
        match self {
            Shape::Completion => "completions",
            Shape::Chat => "chat_completions",
            Shape::Responses => "responses",
        }
    }
}

/// A checked generation: one request per choice, and the prompt each choice belongs to.
struct Job {
    reqs: Vec<generation::Request>,
    /// Prompt tokens, counted once per distinct prompt.
    prompt_tokens: usize,
    stream: bool,
    include_usage: bool,
    shape: Shape,
    /// Chat: `logprobs` was asked for.
    want_logprobs: bool,
    /// Chat: the request's tools, when its answers are read for calls.
    tools: Option<Arc<ToolCalling>>,
}

fn new_id(prefix: &str) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(1);
    format!(
        "{prefix}-{:x}{:04x}",
        now_secs(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// `GET /v1/models`.
pub async fn models(State(state): State<Arc<AppState>>) -> Response {
    state.metrics.request("models", true, 0.0);
    Json(json!({
        "object": "list",
        "data": [{
            "id": state.model_id,
            "object": "model",
            "created": state.started,
            "owned_by": "lql",
            "context_length": state.generation.context_length(),
        }]
    }))
    .into_response()
}

/// Token ids of a prompt, bounded.
fn encode(state: &AppState, text: &str, param: &str) -> Result<Vec<u32>, ApiError> {
    let ids = state
        .tokenizer
        .encode(text, true)
        .map_err(|e| ApiError::invalid_param(param, format!("tokenizing the prompt: {e}")))?;
    check_prompt(state, ids, param)
}

fn check_prompt(state: &AppState, ids: Vec<u32>, param: &str) -> Result<Vec<u32>, ApiError> {
    if ids.is_empty() {
        return Err(ApiError::invalid_param(
            param,
            "the prompt is empty: at least one token is needed",
        ));
    }
    let limit = state.prompt_limit();
    if ids.len() > limit {
        let mut e = ApiError::invalid_param(
            param,
            format!(
                "the prompt is {} tokens; this server accepts at most {limit}",
                ids.len()
            ),
        );
        e.code = "context_length_exceeded";
        return Err(e);
    }
    Ok(ids)
}

/// The prompts of `/v1/completions`: a string, a list of strings, a list of token ids or a
/// list of such lists.
fn completion_prompts(state: &AppState, prompt: &Value) -> Result<Vec<Vec<u32>>, ApiError> {
    let vocab = state.tokenizer.vocab_size();
    let ids_of = |v: &[Value]| -> Result<Vec<u32>, ApiError> {
        v.iter()
            .map(|x| match x.as_u64() {
                Some(i) if (i as usize) < vocab => Ok(i as u32),
                _ => Err(ApiError::invalid_param(
                    "prompt",
                    format!("token ids must be integers below the vocabulary size {vocab}"),
                )),
            })
            .collect()
    };
    let out = match prompt {
        Value::String(s) => vec![encode(state, s, "prompt")?],
        Value::Array(items) if items.iter().all(Value::is_string) && !items.is_empty() => items
            .iter()
            .map(|s| encode(state, s.as_str().unwrap_or(""), "prompt"))
            .collect::<Result<_, _>>()?,
        Value::Array(items) if items.iter().all(Value::is_number) && !items.is_empty() => {
            vec![check_prompt(state, ids_of(items)?, "prompt")?]
        }
        Value::Array(items) if items.iter().all(Value::is_array) && !items.is_empty() => items
            .iter()
            .map(|v| check_prompt(state, ids_of(v.as_array().map_or(&[], |a| a))?, "prompt"))
            .collect::<Result<_, _>>()?,
        _ => {
            return Err(ApiError::invalid_param(
                "prompt",
                "prompt must be a string, a list of strings, a list of token ids or a list of such lists",
            ))
        }
    };
    if out.len() > state.config.max_n {
        return Err(ApiError::invalid_param(
            "prompt",
            format!("at most {} prompts per request", state.config.max_n),
        ));
    }
    Ok(out)
}

/// `POST /v1/completions`.
pub async fn completions(State(state): State<Arc<AppState>>, body: JsonBody) -> Response {
    let t0 = Instant::now();
    let job = (|| {
        let req: CompletionRequest = body.parse()?;
        if req.echo {
            return Err(ApiError::not_supported(
                "echo",
                "echo (the prompt in the completion)",
            ));
        }
        if req.suffix.as_deref().is_some_and(|s| !s.is_empty()) {
            return Err(ApiError::not_supported(
                "suffix",
                "suffix (fill in the middle)",
            ));
        }
        if req.best_of.is_some_and(|b| b > 1) {
            return Err(ApiError::not_supported("best_of", "best_of above 1"));
        }
        let prompts = completion_prompts(&state, &req.prompt)?;
        let n = wire::choices(req.n, state.config.max_n)?;
        if prompts.len() * n > state.config.max_n {
            return Err(ApiError::invalid_param(
                "n",
                format!("prompts × n must be at most {}", state.config.max_n),
            ));
        }
        let max_tokens = wire::max_tokens(
            req.max_tokens,
            16,
            state.config.max_tokens_limit,
            "max_tokens",
        )?;
        let stop = wire::stop(req.stop)?;
        let logprobs = match req.logprobs {
            None => None,
            Some(k) if (0..=20).contains(&k) => Some(k as usize),
            Some(k) => {
                return Err(ApiError::invalid_param(
                    "logprobs",
                    format!("logprobs {k} must be between 0 and 20"),
                ))
            }
        };
        let steering = steering(&state, &req.sampling)?;
        let patched = patched(&state, &req.sampling)?;
        let grammar = req.constraint.compile(&state.tokenizer)?;
        let mut reqs = Vec::new();
        for ids in &prompts {
            for i in 0..n {
                reqs.push(generation::Request {
                    prompt_ids: ids.clone(),
                    max_tokens,
                    sampling: wire::sampling(&req.sampling, i)?,
                    stop: stop.clone(),
                    logprobs,
                    steering: steering.clone(),
                    grammar: grammar.clone(),
                    cache_prompt: req.sampling.cache_prompt.unwrap_or(true),
                    patched: patched.clone(),
                });
            }
        }
        Ok(Job {
            reqs,
            prompt_tokens: prompts.iter().map(Vec::len).sum(),
            stream: req.stream,
            include_usage: req.stream_options.is_some_and(|o| o.include_usage),
            shape: Shape::Completion,
            want_logprobs: logprobs.is_some(),
            tools: None,
        })
    })();
    run_job(state, Shape::Completion, job, t0).await
}

/// The request's `steering`: a control vector read from under `--allow-writes` (as
/// `/v1/lql` reads files) and checked against the served model.
fn steering(state: &AppState, f: &wire::SamplingFields) -> Result<Option<Arc<Steering>>, ApiError> {
    let Some(s) = &f.steering else {
        return Ok(None);
    };
    let bad = |m: String| ApiError::invalid_param("steering", m);
    let Some(dir) = state.write_dir.as_deref() else {
        return Err(bad(
            "steering reads a control-vector file: start the server with --allow-writes DIR and put it under DIR".into(),
        ));
    };
    if let Some(why) = crate::access::outside(dir, &s.vector) {
        return Err(bad(format!(
            "{why}; files are read only under --allow-writes"
        )));
    }
    let scale = s.scale.unwrap_or(1.0);
    if !scale.is_finite() {
        return Err(bad(format!("scale {scale} is not finite")));
    }
    let layers = match s.layers {
        Some([a, b]) if a > b => return Err(bad(format!("layers [{a}, {b}] run backwards"))),
        Some([a, b]) => Some(a..=b),
        None => None,
    };
    let st = state
        .generation
        .steering(&s.vector, scale as f32, layers)
        .map_err(|e| bad(e.message))?;
    Ok(Some(Arc::new(st)))
}

/// The request's `patches`: that model state (`None` for the base).
fn patched(state: &AppState, f: &wire::SamplingFields) -> Result<Option<PatchedModel>, ApiError> {
    let Some(names) = f.patches.as_deref().filter(|n| !n.is_empty()) else {
        return Ok(None);
    };
    let Some(store) = &state.patches else {
        return Err(ApiError::invalid_param(
            "patches",
            "this server applies no patches: start it with --patches DIR and put the .lqlpatch files there",
        ));
    };
    store.state(names, &state.generation)
}

/// Refuses what `/v1/responses` does not build: tool calls.
fn refuse_unbuilt(tools: &Option<Value>) -> Result<(), ApiError> {
    if tools
        .as_ref()
        .is_some_and(|t| !t.is_null() && t.as_array().is_none_or(|a| !a.is_empty()))
    {
        return Err(ApiError::not_supported(
            "tools",
            "tools (tool-call output); send the request without `tools`",
        ));
    }
    Ok(())
}

fn render_chat(
    state: &AppState,
    messages: &[Message],
    tools: Option<&Value>,
) -> Result<Vec<u32>, ApiError> {
    let t = state.template.as_ref().ok_or_else(|| {
        ApiError::not_supported(
            "messages",
            "chat for a model without a chat template (tokenizer.chat_template); use /v1/completions",
        )
    })?;
    let text = t
        .render(messages, tools)
        .map_err(|e| ApiError::invalid_param("messages", e))?;
    encode(state, &text, "messages")
}

/// `POST /v1/chat/completions`.
pub async fn chat(State(state): State<Arc<AppState>>, body: JsonBody) -> Response {
    let t0 = Instant::now();
    let job = (|| {
        let req: ChatRequest = body.parse()?;
        let tool_format = state.template.as_ref().and_then(|t| t.tool_format);
        let tools =
            ToolCalling::from_request(req.tools.as_ref(), req.tool_choice.as_ref(), tool_format)?
                .map(Arc::new);
        if req.functions.is_some() {
            return Err(ApiError::not_supported(
                "functions",
                "functions (tool-call output)",
            ));
        }
        if req.messages.is_empty() {
            return Err(ApiError::invalid_param("messages", "messages is empty"));
        }
        let mut messages = Vec::with_capacity(req.messages.len());
        for (i, m) in req.messages.iter().enumerate() {
            let mut message = Message::text(
                m.role.clone(),
                wire::content_text(&m.content, &format!("messages[{i}].content"))?,
            );
            if m.role == "tool" || m.tool_calls.is_some() {
                if tool_format.is_none() {
                    return Err(ApiError::not_supported(
                        "messages",
                        "tool messages and tool calls with this model's chat template, which has no tool-call format LQL reads",
                    ));
                }
                message.tool_call_id = m.tool_call_id.clone();
                message.name = m.name.clone();
                if let Some(calls) = &m.tool_calls {
                    message.tool_calls = Some(tools::template_tool_calls(
                        calls,
                        &format!("messages[{i}].tool_calls"),
                    )?);
                }
            }
            messages.push(message);
        }
        let ids = render_chat(&state, &messages, tools.as_ref().map(|t| &t.declared))?;
        let n = wire::choices(req.n, state.config.max_n)?;
        let max_tokens = wire::max_tokens(
            req.max_completion_tokens.or(req.max_tokens),
            state.config.max_tokens_limit,
            state.config.max_tokens_limit,
            "max_tokens",
        )?;
        let stop = wire::stop(req.stop)?;
        let logprobs = match (req.logprobs, req.top_logprobs) {
            (false, None) => None,
            (false, Some(_)) => {
                return Err(ApiError::invalid_param(
                    "top_logprobs",
                    "top_logprobs needs logprobs: true",
                ))
            }
            (true, None) => Some(0),
            (true, Some(k)) if (0..=20).contains(&k) => Some(k as usize),
            (true, Some(k)) => {
                return Err(ApiError::invalid_param(
                    "top_logprobs",
                    format!("top_logprobs {k} must be between 0 and 20"),
                ))
            }
        };
        let steering = steering(&state, &req.sampling)?;
        let patched = patched(&state, &req.sampling)?;
        let mut grammar = req.constraint.compile(&state.tokenizer)?;
        if let Some(spec) = tools.as_ref().and_then(|t| t.constraint()) {
            if grammar.is_some() {
                return Err(ApiError::invalid_param(
                    "tool_choice",
                    "a required tool call cannot be combined with response_format or a grammar",
                ));
            }
            grammar = Some(crate::constraint::compile(
                &spec,
                "tools",
                &state.tokenizer,
            )?);
        }
        let mut reqs = Vec::new();
        for i in 0..n {
            reqs.push(generation::Request {
                prompt_ids: ids.clone(),
                max_tokens,
                sampling: wire::sampling(&req.sampling, i)?,
                stop: stop.clone(),
                logprobs,
                steering: steering.clone(),
                grammar: grammar.clone(),
                cache_prompt: req.sampling.cache_prompt.unwrap_or(true),
                patched: patched.clone(),
            });
        }
        Ok(Job {
            reqs,
            prompt_tokens: ids.len(),
            stream: req.stream,
            include_usage: req.stream_options.is_some_and(|o| o.include_usage),
            shape: Shape::Chat,
            want_logprobs: logprobs.is_some(),
            tools: tools.filter(|t| t.reads_calls()),
        })
    })();
    run_job(state, Shape::Chat, job, t0).await
}

/// `POST /v1/responses` (no streaming yet; no tools, no stored conversations).
pub async fn responses(State(state): State<Arc<AppState>>, body: JsonBody) -> Response {
    let t0 = Instant::now();
    let job = (|| {
        let req: ResponsesRequest = body.parse()?;
        refuse_unbuilt(&req.tools)?;
        let grammar = match req.text.as_ref().and_then(|t| t.get("format")) {
            Some(f) => match crate::constraint::response_format(f, "text.format")? {
                Some(spec) => Some(crate::constraint::compile(
                    &spec,
                    "text.format",
                    &state.tokenizer,
                )?),
                None => None,
            },
            None => None,
        };
        if req.stream {
            return Err(ApiError::not_supported(
                "stream",
                "stream: true on /v1/responses; use /v1/chat/completions to stream",
            ));
        }
        if req.previous_response_id.is_some() {
            return Err(ApiError::not_supported(
                "previous_response_id",
                "stored responses (previous_response_id)",
            ));
        }
        let mut messages = Vec::new();
        if let Some(sys) = &req.instructions {
            messages.push(Message::text("system", sys.clone()));
        }
        match &req.input {
            Value::String(s) => messages.push(Message::text("user", s.clone())),
            Value::Array(items) => {
                for (i, it) in items.iter().enumerate() {
                    let ty = it.get("type").and_then(Value::as_str).unwrap_or("message");
                    let role = it.get("role").and_then(Value::as_str);
                    match (ty, role) {
                        ("message", Some(role)) => messages.push(Message::text(
                            if role == "developer" { "system" } else { role },
                            wire::content_text(
                                it.get("content").unwrap_or(&Value::Null),
                                &format!("input[{i}].content"),
                            )?,
                        )),
                        _ => {
                            return Err(ApiError::not_supported(
                                "input",
                                format!("input items of type {ty:?} (only messages are read)"),
                            ))
                        }
                    }
                }
            }
            _ => {
                return Err(ApiError::invalid_param(
                    "input",
                    "input must be a string or a list of messages",
                ))
            }
        }
        let ids = render_chat(&state, &messages, None)?;
        let max_tokens = wire::max_tokens(
            req.max_output_tokens,
            state.config.max_tokens_limit,
            state.config.max_tokens_limit,
            "max_output_tokens",
        )?;
        Ok(Job {
            reqs: vec![generation::Request {
                prompt_ids: ids.clone(),
                max_tokens,
                sampling: wire::sampling(&req.sampling, 0)?,
                stop: Vec::new(),
                logprobs: None,
                steering: steering(&state, &req.sampling)?,
                grammar,
                cache_prompt: req.sampling.cache_prompt.unwrap_or(true),
                patched: patched(&state, &req.sampling)?,
            }],
            prompt_tokens: ids.len(),
            stream: false,
            include_usage: false,
            shape: Shape::Responses,
            want_logprobs: false,
            tools: None,
        })
    })();
    run_job(state, Shape::Responses, job, t0).await
}

/// Where the decode scheduler sends a request's events: the handler's channel, and the
/// request's slot, freed when the scheduler drops this after the last choice.
struct RequestEvents {
    tx: mpsc::UnboundedSender<Event>,
    _slot: Slot,
}

impl EventSink for RequestEvents {
    fn send(&self, event: Event) -> bool {
        self.tx.send(event).is_ok()
    }

    fn is_closed(&self) -> bool {
        self.tx.is_closed()
    }
}

/// Takes a slot (429 when the queue is full) and runs the job, answering JSON or SSE.
async fn run_job(
    state: Arc<AppState>,
    shape: Shape,
    job: Result<Job, ApiError>,
    t0: Instant,
) -> Response {
    // The route the request came in on, also when it was refused before a job was made.
    let route = shape.route();
    let job = match job {
        Ok(j) => j,
        Err(e) => {
            state
                .metrics
                .request(route, false, t0.elapsed().as_secs_f64());
            return e.into_response();
        }
    };
    if state
        .shutting_down
        .load(std::sync::atomic::Ordering::SeqCst)
    {
        return ApiError::shutting_down().into_response();
    }
    let slot = match state.pool.acquire().await {
        Ok(s) => s,
        Err(e) => {
            if e.status == StatusCode::TOO_MANY_REQUESTS {
                state.metrics.rejected_busy();
            }
            state
                .metrics
                .request(route, false, t0.elapsed().as_secs_f64());
            return e.into_response();
        }
    };
    let (tx, rx) = mpsc::unbounded_channel::<Event>();
    let work = Work {
        reqs: job.reqs.clone(),
        events: Box::new(RequestEvents { tx, _slot: slot }),
    };
    if let Err(msg) = state.pool.batcher().submit(work) {
        state
            .metrics
            .request(route, false, t0.elapsed().as_secs_f64());
        return ApiError::internal(msg).into_response();
    }
    if job.stream {
        let (stx, srx) = mpsc::channel::<Item>(64);
        tokio::spawn(stream_events(state, job, rx, stx, t0));
        sse::response(srx)
    } else {
        collect(state, job, rx, t0).await
    }
}

fn usage(job: &Job, completion: usize) -> Value {
    json!({
        "prompt_tokens": job.prompt_tokens,
        "completion_tokens": completion,
        "total_tokens": job.prompt_tokens + completion,
    })
}

fn finish_str(f: Finish) -> &'static str {
    f.as_str()
}

/// Chat `logprobs.content` entries.
fn chat_logprobs(lps: &[TokenLogprob]) -> Value {
    let content: Vec<Value> = lps
        .iter()
        .map(|t| {
            json!({
                "token": t.token,
                "logprob": t.logprob,
                "bytes": t.bytes,
                "top_logprobs": t.top.iter().map(|a| json!({
                    "token": a.token, "logprob": a.logprob, "bytes": a.bytes,
                })).collect::<Vec<_>>(),
            })
        })
        .collect();
    json!({ "content": content })
}

/// Completions `logprobs` (the legacy shape); `offset` is where this text starts.
fn completion_logprobs(lps: &[TokenLogprob], mut offset: usize) -> Value {
    let mut text_offset = Vec::with_capacity(lps.len());
    for t in lps {
        text_offset.push(offset);
        offset += t.token.len();
    }
    json!({
        "tokens": lps.iter().map(|t| t.token.clone()).collect::<Vec<_>>(),
        "token_logprobs": lps.iter().map(|t| t.logprob).collect::<Vec<_>>(),
        "top_logprobs": lps.iter().map(|t| {
            t.top.iter().map(|a| (a.token.clone(), json!(a.logprob))).collect::<serde_json::Map<_, _>>()
        }).collect::<Vec<_>>(),
        "text_offset": text_offset,
    })
}

/// A chat answer's `content`, and its `tool_calls` when the request's tools are read and
/// the text calls them (the content is then the text outside the calls).
fn chat_answer(job: &Job, text: &str, indexed: bool) -> (Value, Option<Value>) {
    match job.tools.as_ref().map(|t| t.parse(text)) {
        Some(p) if !p.calls.is_empty() => {
            (json!(p.content), Some(tool_calls_json(&p.calls, indexed)))
        }
        _ => (json!(text), None),
    }
}

/// OpenAI's `tool_calls` (with `index`, as stream deltas carry it, when `indexed`).
fn tool_calls_json(calls: &[tools::Call], indexed: bool) -> Value {
    Value::Array(
        calls
            .iter()
            .enumerate()
            .map(|(k, c)| {
                let mut v = json!({
                    "id": new_id("call"),
                    "type": "function",
                    "function": {"name": c.name, "arguments": c.arguments},
                });
                if indexed {
                    v["index"] = json!(k);
                }
                v
            })
            .collect(),
    )
}

/// Waits for every choice and answers one JSON object.
async fn collect(
    state: Arc<AppState>,
    job: Job,
    mut rx: mpsc::UnboundedReceiver<Event>,
    t0: Instant,
) -> Response {
    let route = job.shape.route();
    let mut outcomes: Vec<Option<Outcome>> = vec![None; job.reqs.len()];
    while let Some(ev) = rx.recv().await {
        match ev {
            Event::Delta { .. } => {}
            Event::Done { index, outcome } => {
                if let Some(o) = outcomes.get_mut(index) {
                    *o = Some(outcome);
                }
            }
            Event::Failed(msg) => {
                state
                    .metrics
                    .request(route, false, t0.elapsed().as_secs_f64());
                return ApiError::internal(format!("generation failed: {msg}")).into_response();
            }
        }
    }
    let outcomes: Vec<Outcome> = outcomes.into_iter().flatten().collect();
    if outcomes.len() != job.reqs.len() {
        state
            .metrics
            .request(route, false, t0.elapsed().as_secs_f64());
        if state
            .shutting_down
            .load(std::sync::atomic::Ordering::SeqCst)
        {
            return ApiError::shutting_down().into_response();
        }
        return ApiError::internal("the generation ended before every choice was answered")
            .into_response();
    }
    state.metrics.tokens(job.prompt_tokens, 0);
    let completion: usize = outcomes.iter().map(|o| o.completion_tokens).sum();
    let created = now_secs();
    let body = match job.shape {
        Shape::Completion => json!({
            "id": new_id("cmpl"),
            "object": "text_completion",
            "created": created,
            "model": state.model_id,
            "choices": outcomes.iter().enumerate().map(|(i, o)| json!({
                "index": i,
                "text": o.text,
                "logprobs": if job.want_logprobs { completion_logprobs(&o.logprobs, 0) } else { Value::Null },
                "finish_reason": finish_str(o.finish),
            })).collect::<Vec<_>>(),
            "usage": usage(&job, completion),
        }),
        Shape::Chat => json!({
            "id": new_id("chatcmpl"),
            "object": "chat.completion",
            "created": created,
            "model": state.model_id,
            "choices": outcomes.iter().enumerate().map(|(i, o)| {
                let (content, calls) = chat_answer(&job, &o.text, false);
                let mut message = json!({"role": "assistant", "content": content});
                let finish = match calls {
                    Some(calls) => {
                        message["tool_calls"] = calls;
                        "tool_calls"
                    }
                    None => finish_str(o.finish),
                };
                json!({
                    "index": i,
                    "message": message,
                    "logprobs": if job.want_logprobs { chat_logprobs(&o.logprobs) } else { Value::Null },
                    "finish_reason": finish,
                })
            }).collect::<Vec<_>>(),
            "usage": usage(&job, completion),
        }),
        Shape::Responses => {
            let o = &outcomes[0];
            json!({
                "id": new_id("resp"),
                "object": "response",
                "created_at": created,
                "status": if o.finish == Finish::Length { "incomplete" } else { "completed" },
                "incomplete_details": if o.finish == Finish::Length { json!({"reason": "max_output_tokens"}) } else { Value::Null },
                "error": null,
                "model": state.model_id,
                "output": [{
                    "type": "message",
                    "id": new_id("msg"),
                    "status": "completed",
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": o.text, "annotations": []}],
                }],
                "parallel_tool_calls": false,
                "tool_choice": "auto",
                "tools": [],
                "usage": {
                    "input_tokens": job.prompt_tokens,
                    "input_tokens_details": {"cached_tokens": 0},
                    "output_tokens": completion,
                    "output_tokens_details": {"reasoning_tokens": 0},
                    "total_tokens": job.prompt_tokens + completion,
                },
            })
        }
    };
    state
        .metrics
        .request(route, true, t0.elapsed().as_secs_f64());
    (StatusCode::OK, Json(body)).into_response()
}

/// Turns generation events into OpenAI stream chunks. Stops (dropping `rx`, which stops
/// generation) as soon as the client is gone.
async fn stream_events(
    state: Arc<AppState>,
    job: Job,
    mut rx: mpsc::UnboundedReceiver<Event>,
    tx: mpsc::Sender<Item>,
    t0: Instant,
) {
    let route = job.shape.route();
    let id = new_id(if job.shape == Shape::Chat {
        "chatcmpl"
    } else {
        "cmpl"
    });
    let created = now_secs();
    let model = state.model_id.clone();
    let chunk = |choice: Value, usage: Option<Value>| {
        let mut v = json!({
            "id": id,
            "object": if job.shape == Shape::Chat { "chat.completion.chunk" } else { "text_completion" },
            "created": created,
            "model": model,
            "choices": if choice.is_null() { json!([]) } else { json!([choice]) },
        });
        if let Some(u) = usage {
            v["usage"] = u;
        }
        v
    };
    let mut offsets = vec![0usize; job.reqs.len()];
    let mut completion = 0usize;
    let mut first = true;
    if job.shape == Shape::Chat {
        for index in 0..job.reqs.len() {
            let c = json!({"index": index, "delta": {"role": "assistant", "content": ""}, "logprobs": null, "finish_reason": null});
            if tx.send(Item::Json(chunk(c, None))).await.is_err() {
                state
                    .metrics
                    .request(route, false, t0.elapsed().as_secs_f64());
                return;
            }
        }
    }
    let mut ok = true;
    loop {
        let ev = tokio::select! {
            ev = rx.recv() => match ev {
                Some(ev) => ev,
                None => break,
            },
            // The client left while nothing was being sent (a long prefill): dropping `rx`
            // ends the request at the scheduler's next step, freeing its slot.
            () = tx.closed() => {
                state
                    .metrics
                    .request(route, false, t0.elapsed().as_secs_f64());
                return;
            }
        };
        let item = match ev {
            Event::Delta {
                index,
                text,
                logprobs,
            } => {
                if first {
                    state.metrics.first_token(t0.elapsed().as_secs_f64());
                    first = false;
                }
                let lp = if !job.want_logprobs {
                    Value::Null
                } else if job.shape == Shape::Chat {
                    chat_logprobs(&logprobs)
                } else {
                    completion_logprobs(&logprobs, offsets[index])
                };
                offsets[index] += text.len();
                // With tools read for calls, a choice's text is sent when it ends, as its
                // content or its calls.
                if job.tools.is_some() {
                    continue;
                }
                let c = if job.shape == Shape::Chat {
                    json!({"index": index, "delta": {"content": text}, "logprobs": lp, "finish_reason": null})
                } else {
                    json!({"index": index, "text": text, "logprobs": lp, "finish_reason": null})
                };
                chunk(c, None)
            }
            Event::Done { index, outcome } => {
                completion += outcome.completion_tokens;
                let mut finish = finish_str(outcome.finish);
                if job.tools.is_some() {
                    let (content, calls) = chat_answer(&job, &outcome.text, true);
                    let mut delta = json!({"content": content});
                    if let Some(calls) = calls {
                        delta["tool_calls"] = calls;
                        finish = "tool_calls";
                    }
                    let c = json!({"index": index, "delta": delta, "logprobs": null, "finish_reason": null});
                    if tx.send(Item::Json(chunk(c, None))).await.is_err() {
                        state
                            .metrics
                            .request(route, false, t0.elapsed().as_secs_f64());
                        return;
                    }
                }
                let c = if job.shape == Shape::Chat {
                    json!({"index": index, "delta": {}, "logprobs": null, "finish_reason": finish})
                } else {
                    json!({"index": index, "text": "", "logprobs": null, "finish_reason": finish_str(outcome.finish)})
                };
                chunk(c, None)
            }
            Event::Failed(msg) => {
                ok = false;
                ApiError::internal(format!("generation failed: {msg}")).body()
            }
        };
        if tx.send(Item::Json(item)).await.is_err() {
            // The client is gone: dropping `rx` stops the generation.
            state
                .metrics
                .request(route, false, t0.elapsed().as_secs_f64());
            return;
        }
    }
    state.metrics.tokens(job.prompt_tokens, 0);
    if job.include_usage {
        let _ = tx
            .send(Item::Json(chunk(
                Value::Null,
                Some(usage(&job, completion)),
            )))
            .await;
    }
    let _ = tx.send(Item::Done).await;
    state.metrics.request(route, ok, t0.elapsed().as_secs_f64());
}
