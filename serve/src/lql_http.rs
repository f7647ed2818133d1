//! LQL over HTTP: `POST /v1/lql` (a JSON body `{"statements": "…", "params": […] or {…}}`,
//! or the statements as `text/plain`) and `GET /v1/lql?q=…` (read-only statements).
//!
//! Statements run on a connection of the served database: a new one per request, or the
//! one of the client's `X-LQL-Session` (its overlays persist across its requests and never
//! reach another client). The answer is `{"results": [R, …]}`, each `R` exactly the line the
//! CLI prints with `--format json` for that statement; a failing statement answers the
//! CLI's error object `{"error": {kind, code, message, span, labels, help}}` (plus the
//! `results` of the statements before it) with a 4xx status. Request-level failures (body
//! size, JSON, API key, busy) use the standard error shape of [`crate::error::ApiError`].

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::Value as Json;

use lql::{Connection, InterruptHandle, NamedParams, Value};

use crate::error::{lql_status, ApiError};
use crate::routes::JsonBody;
use crate::state::AppState;

/// The session header.
pub const SESSION_HEADER: &str = "x-lql-session";

#[derive(Deserialize)]
struct PostBody {
    statements: String,
    #[serde(default)]
    params: Option<Json>,
}

/// `GET /v1/lql?q=…`.
#[derive(Deserialize)]
pub struct GetQuery {
    q: Option<String>,
}

/// Parameters of a prepared statement.
pub enum Params {
    Positional(Vec<Value>),
    Named(NamedParams),
}

fn to_value(v: &Json) -> Result<Value, ApiError> {
    Ok(match v {
        Json::Null => Value::Null,
        Json::Bool(b) => Value::Bool(*b),
        Json::Number(n) => match n.as_i64() {
            Some(i) => Value::Int(i),
            None => Value::Float(n.as_f64().unwrap_or(f64::NAN)),
        },
        Json::String(s) => Value::Text(s.clone()),
        _ => {
            return Err(ApiError::invalid_param(
                "params",
                "a parameter must be null, a boolean, a number or a string",
            ))
        }
    })
}

/// The `params` of a request body: a list binds `?`/`?NNN`, an object binds `:name`.
pub fn params_of(v: Option<Json>) -> Result<Option<Params>, ApiError> {
    match v {
        None | Some(Json::Null) => Ok(None),
        Some(Json::Array(a)) => Ok(Some(Params::Positional(
            a.iter().map(to_value).collect::<Result<_, _>>()?,
        ))),
        Some(Json::Object(o)) => Ok(Some(Params::Named(NamedParams(
            o.iter()
                .map(|(k, v)| {
                    let name = if k.starts_with(':') {
                        k.clone()
                    } else {
                        format!(":{k}")
                    };
                    Ok((name, to_value(v)?))
                })
                .collect::<Result<_, ApiError>>()?,
        )))),
        Some(_) => Err(ApiError::invalid_param(
            "params",
            "params must be a list (for ? and ?NNN) or an object (for :name)",
        )),
    }
}

/// Interrupts the connection's statement if the request is dropped (client gone).
struct InterruptOnDrop(Option<InterruptHandle>);

impl Drop for InterruptOnDrop {
    fn drop(&mut self) {
        if let Some(h) = self.0.take() {
            h.interrupt();
        }
    }
}

/// `GET /v1/lql/progress` with `X-LQL-Session`: the last progress report of the session's
/// statements, `{"progress": {"task", "done", "total", "unit", "finished"}}` or
/// `{"progress": null}`; answered at once, while the session's statement runs.
pub async fn progress(State(state): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    let answer = match headers.get(SESSION_HEADER).map(|v| v.to_str()) {
        None => Err(ApiError::invalid_param(
            "X-LQL-Session",
            "progress is kept per session: send X-LQL-Session",
        )),
        Some(Err(_)) => Err(ApiError::invalid_param("X-LQL-Session", "not ASCII")),
        Some(Ok(id)) => state.sessions.progress(id),
    };
    state.metrics.request("lql", answer.is_ok(), 0.0);
    match answer {
        Ok(p) => axum::Json(serde_json::json!({
            "progress": p.map(|p| serde_json::json!({
                "task": p.task,
                "done": p.done,
                "total": p.total,
                "unit": match p.unit {
                    lql::ProgressUnit::Bytes => "bytes",
                    lql::ProgressUnit::Items => "items",
                },
                "finished": p.finished,
            })),
        }))
        .into_response(),
        Err(e) => e.into_response(),
    }
}

/// `POST /v1/lql`.
pub async fn post(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    body: JsonBody,
) -> Response {
    let is_json = body
        .content_type
        .as_deref()
        .is_none_or(|c| c.starts_with("application/json"));
    let parsed = if is_json {
        body.parse::<PostBody>()
            .and_then(|b| Ok((b.statements, params_of(b.params)?)))
    } else {
        body.bytes.clone().and_then(|b| {
            String::from_utf8(b.to_vec())
                .map(|s| (s, None))
                .map_err(|_| ApiError::invalid("the statements are not UTF-8 text"))
        })
    };
    match parsed {
        Ok((text, params)) => run(state, &headers, text, params, false).await,
        Err(e) => {
            state.metrics.request("lql", false, 0.0);
            e.into_response()
        }
    }
}

/// `GET /v1/lql?q=…`.
pub async fn get(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    Query(q): Query<GetQuery>,
) -> Response {
    match q.q {
        Some(text) => run(state, &headers, text, None, true).await,
        None => {
            state.metrics.request("lql", false, 0.0);
            ApiError::invalid_param("q", "GET /v1/lql needs ?q=STATEMENTS").into_response()
        }
    }
}

async fn run(
    state: Arc<AppState>,
    headers: &HeaderMap,
    text: String,
    params: Option<Params>,
    read_only: bool,
) -> Response {
    let t0 = Instant::now();
    let answer = run_inner(&state, headers, text, params, read_only).await;
    state.metrics.request(
        "lql",
        answer.status().is_success(),
        t0.elapsed().as_secs_f64(),
    );
    answer
}

// The closures handed to the connection return `lql::Error`, whose size is the engine's.
#[allow(clippy::result_large_err)]
async fn run_inner(
    state: &Arc<AppState>,
    headers: &HeaderMap,
    text: String,
    params: Option<Params>,
    read_only: bool,
) -> Response {
    let conn: Arc<Connection> = match headers.get(SESSION_HEADER) {
        Some(v) => match v
            .to_str()
            .map_err(|_| ApiError::invalid_param("X-LQL-Session", "not ASCII"))
        {
            Ok(id) => match state.sessions.get(&state.db, id) {
                Ok(c) => c,
                Err(e) => return e.into_response(),
            },
            Err(e) => return e.into_response(),
        },
        None => match state.db.connect() {
            Ok(c) => Arc::new(c),
            Err(e) => return ApiError::internal(e.to_string()).into_response(),
        },
    };
    let pieces = lql::split_statements(&text);
    let slot = match state.pool.acquire().await {
        Ok(s) => s,
        Err(e) => {
            if e.status == StatusCode::TOO_MANY_REQUESTS {
                state.metrics.rejected_busy();
            }
            return e.into_response();
        }
    };
    let guard = InterruptOnDrop(Some(conn.interrupt_handle()));
    let write_dir = state.write_dir.clone();
    let job = tokio::task::spawn_blocking(move || {
        let _slot = slot;
        let mut done: Vec<String> = Vec::new();
        let dir = write_dir.as_deref();
        if let Err(e) = check_statements(&conn, &text, dir, read_only, params.is_some()) {
            return (Err(e), done);
        }
        let gate = crate::access::gate(dir, read_only);
        let result = match params {
            Some(p) => {
                let piece = &pieces[0];
                let stmt_text = &text[piece.range()];
                conn.prepare(&text).and_then(|mut st| {
                    check_bound(&st, &p, dir, read_only)?;
                    let rows = match p {
                        Params::Positional(v) => st.query_gated(v, &gate),
                        Params::Named(n) => st.query_gated(n, &gate),
                    }?;
                    done.push(lql::statement_json(stmt_text, &rows).to_string());
                    Ok(())
                })
            }
            None => conn.execute_each_gated(&text, &gate, |r| {
                done.push(lql::statement_json(&r.text, &r.rows).to_string());
                Ok(())
            }),
        };
        (result, done)
    });
    let (result, done) = match job.await {
        Ok(r) => r,
        Err(e) => {
            return ApiError::internal(format!("the statement's thread failed: {e}"))
                .into_response()
        }
    };
    let mut guard = guard;
    guard.0 = None;
    match result {
        Ok(()) => {
            let body = format!("{{\"results\":[{}]}}", done.join(","));
            (
                [(axum::http::header::CONTENT_TYPE, "application/json")],
                body,
            )
                .into_response()
        }
        Err(e) => lql_error(&e, &done),
    }
}

/// The gate on a request's statements before any runs (each bound on `conn`, its
/// declared effects held to [`crate::access::decide`]); parameters (`with_params`) bind
/// exactly one statement, checked bound with its values by [`check_bound`]. The error is
/// the refusal, with its span. A statement that does not bind here is answered by the
/// engine when it runs; the engine runs the same gate again on each statement right
/// before it runs (`execute_each_gated`), so nothing passes unchecked.
pub fn check_statements(
    conn: &Connection,
    text: &str,
    write_dir: Option<&Path>,
    read_only: bool,
    with_params: bool,
) -> Result<(), lql::Error> {
    let pieces = lql::split_statements(text);
    if with_params && pieces.len() != 1 {
        return Err(lql::Error::semantic(format!(
            "params need exactly one statement; the text holds {}",
            pieces.len()
        ))
        .with_code(lql::Code::Parameters));
    }
    if with_params {
        return Ok(());
    }
    for piece in &pieces {
        let r = piece.range();
        if let Ok(effects) = conn.effects(&text[r.clone()]) {
            crate::access::decide(&effects, write_dir, read_only)
                .map_err(|why| crate::access::refusal(why).with_span(r))?;
        }
    }
    Ok(())
}

/// The gate on a prepared statement bound with its parameters' values: a path given as a
/// parameter is checked like one written in the statement. A statement that does not
/// bind with these values answers its error.
pub fn check_bound(
    st: &lql::Statement<'_>,
    params: &Params,
    write_dir: Option<&Path>,
    read_only: bool,
) -> Result<(), lql::Error> {
    let effects = match params {
        Params::Positional(v) => st.effects(v.clone()),
        Params::Named(n) => st.effects(n.clone()),
    }?;
    crate::access::decide(&effects, write_dir, read_only).map_err(crate::access::refusal)
}

/// The CLI's error object, with the results of the statements that ran before it.
fn lql_error(e: &lql::Error, done: &[String]) -> Response {
    let mut body = e.to_json().to_string();
    body.pop(); // the closing brace
    body.push_str(&format!(",\"results\":[{}]}}", done.join(",")));
    (
        lql_status(e),
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        body,
    )
        .into_response()
}
