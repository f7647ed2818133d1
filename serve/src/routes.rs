//! The router: every route, the body extractor that turns size and JSON failures into the
//! standard error shape (413 / 400), the API-key middleware, `/health` and `/metrics`, and
//! the JSON 404 for unknown routes.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, FromRequest, Request, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::de::DeserializeOwned;
use serde_json::json;

use crate::error::ApiError;
use crate::state::AppState;

/// A request body read under the size limit; failures are kept for the handler to answer
/// in its route's error shape.
pub struct JsonBody {
    pub bytes: Result<Bytes, ApiError>,
    /// The request's `Content-Type` (for `/v1/lql`'s text/plain form).
    pub content_type: Option<String>,
}

impl<S: Send + Sync> FromRequest<S> for JsonBody {
    type Rejection = std::convert::Infallible;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let content_type = req
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let limit = req
            .extensions()
            .get::<BodyLimit>()
            .map_or(usize::MAX, |l| l.0);
        let timeout = req
            .extensions()
            .get::<BodyTimeout>()
            .map_or(Duration::from_secs(86_400), |t| t.0);
        // A client that sends its body slower than the timeout allows is answered 408.
        let bytes = match tokio::time::timeout(timeout, Bytes::from_request(req, state)).await {
            Err(_) => Err(ApiError::body_timeout(timeout)),
            Ok(Ok(b)) => Ok(b),
            Ok(Err(r)) if r.status() == StatusCode::PAYLOAD_TOO_LARGE => {
                Err(ApiError::too_large(limit))
            }
            Ok(Err(r)) => Err(ApiError::invalid(format!(
                "reading the request body: {}",
                r.body_text()
            ))),
        };
        Ok(JsonBody {
            bytes,
            content_type,
        })
    }
}

impl JsonBody {
    /// The body as `T`: 413 when too large, 400 with serde's message when it is not valid
    /// JSON or not the expected shape.
    pub fn parse<T: DeserializeOwned>(&self) -> Result<T, ApiError> {
        let bytes = self.bytes.as_ref().map_err(Clone::clone)?;
        if bytes.is_empty() {
            return Err(ApiError::bad_json(
                "the request body is empty; a JSON object is expected",
            ));
        }
        serde_json::from_slice(bytes).map_err(|e| {
            if e.is_data() {
                ApiError::invalid(format!(
                    "the request body does not match the expected fields: {e}"
                ))
            } else {
                ApiError::bad_json(format!("the request body is not valid JSON: {e}"))
            }
        })
    }
}

/// The body limit, for the 413 message.
#[derive(Clone, Copy)]
struct BodyLimit(usize);

/// How long a request's body may take to arrive (`--body-timeout`).
#[derive(Clone, Copy)]
struct BodyTimeout(Duration);

async fn health(State(state): State<Arc<AppState>>) -> Response {
    state.metrics.request("health", true, 0.0);
    let shutting = state
        .shutting_down
        .load(std::sync::atomic::Ordering::SeqCst);
    let body = Json(json!({
        "status": if shutting { "shutting_down" } else { "ok" },
        "model": state.model_id,
        "slots_busy": state.pool.busy(),
        "slots_total": state.pool.parallel(),
        "queue_depth": state.pool.waiting(),
    }));
    if shutting {
        (StatusCode::SERVICE_UNAVAILABLE, body).into_response()
    } else {
        body.into_response()
    }
}

async fn metrics(State(state): State<Arc<AppState>>) -> Response {
    state.metrics.request("metrics", true, 0.0);
    let text = state.metrics.render(
        state.pool.busy(),
        state.pool.waiting(),
        state.pool.parallel(),
        state.sessions.len(),
        state.db.cache_bytes(),
    );
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        text,
    )
        .into_response()
}

async fn not_found() -> Response {
    ApiError::not_found("no such route").into_response()
}

/// Every route of the server.
pub fn router(state: Arc<AppState>) -> Router {
    let limit = state.config.max_body_bytes;
    let ui = if state.config.ui {
        crate::ui::routes()
    } else {
        Router::new()
    };
    Router::new()
        .route("/health", get(health))
        .route("/metrics", get(metrics))
        .route("/v1/models", get(crate::openai::models))
        .route("/v1/completions", post(crate::openai::completions))
        .route("/v1/chat/completions", post(crate::openai::chat))
        .route("/v1/responses", post(crate::openai::responses))
        .route("/v1/embeddings", post(crate::embeddings::embeddings))
        .route("/tokenize", post(crate::embeddings::tokenize))
        .route("/detokenize", post(crate::embeddings::detokenize))
        .route(
            "/v1/lql",
            post(crate::lql_http::post).get(crate::lql_http::get),
        )
        .route("/v1/lql/progress", get(crate::lql_http::progress))
        .merge(ui)
        .fallback(not_found)
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            crate::auth::require_key,
        ))
        .layer(axum::Extension(BodyLimit(limit)))
        .layer(axum::Extension(BodyTimeout(Duration::from_secs(
            state.config.body_timeout_s,
        ))))
        .layer(DefaultBodyLimit::max(limit))
        .with_state(state)
}
