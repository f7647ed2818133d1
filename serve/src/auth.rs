//! `--api-key`: every route but `/health` and the workbench's page and assets (which hold
//! no model data; the page asks for the key) needs `Authorization: Bearer KEY` (401 with the
//! standard error shape otherwise). Keys are compared in constant time.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::error::ApiError;
use crate::state::AppState;

/// Equal strings, compared without an early exit.
fn same(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The middleware.
pub async fn require_key(State(state): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    let Some(key) = &state.config.api_key else {
        return next.run(req).await;
    };
    let path = req.uri().path();
    if path == "/health" || (state.config.ui && crate::ui::is_public(path)) {
        return next.run(req).await;
    }
    let given = req
        .headers()
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim);
    match given {
        Some(g) if same(g.as_bytes(), key.as_bytes()) => next.run(req).await,
        _ => ApiError::unauthorized().into_response(),
    }
}
