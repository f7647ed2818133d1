//! The workbench: a browser UI served at `/` (off under `--no-ui`). Its assets are plain
//! HTML, CSS and JavaScript modules in `serve/ui/`, built into the binary with
//! `include_str!` (no bundler, no network at build or run time). The page talks to the
//! server only through `POST /v1/lql`, so everything it shows is a statement the user can
//! copy, and the HTTP gate refuses for the page exactly what it refuses for any client.
//!
//! Routes: the page at `/`, `/console`, `/feature[/L:F]`, `/trace`, `/attention` and
//! `/edit` (deep links: the router in `app.js` picks the view from the path); the assets
//! at `/ui/<name>`; the settings the page needs at `/ui/settings.json`. These carry no
//! model data, so they are served without the API key (the page asks for the key when
//! `/v1/lql` answers 401).

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use serde_json::json;

use crate::error::ApiError;
use crate::state::AppState;

/// One built-in asset: its name under `/ui/`, content type and text.
struct Asset {
    name: &'static str,
    content_type: &'static str,
    text: &'static str,
}

const JS: &str = "text/javascript; charset=utf-8";

/// An asset of `serve/ui/`, built in.
macro_rules! asset {
    ($name:literal, $content_type:expr) => {
        Asset {
            name: $name,
            content_type: $content_type,
            text: include_str!(concat!("../ui/", $name)),
        }
    };
}

const ASSETS: &[Asset] = &[
    asset!("style.css", "text/css; charset=utf-8"),
    asset!("app.js", JS),
    asset!("api.js", JS),
    asset!("render.js", JS),
    asset!("console.js", JS),
    asset!("feature.js", JS),
    asset!("trace.js", JS),
    asset!("attention.js", JS),
    asset!("edit.js", JS),
];

const PAGE: &str = include_str!("../ui/index.html");

/// The page's paths (each serves the same page; the view follows the path).
const PAGES: &[&str] = &["/", "/console", "/feature", "/trace", "/attention", "/edit"];

/// Scripts and styles only from the server itself; inline `style` attributes (the charts'
/// colours) allowed, inline scripts not.
const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; \
                   img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'";

/// Whether `path` is one of the workbench's public routes (served without the API key).
pub fn is_public(path: &str) -> bool {
    path.starts_with("/ui/") || PAGES.contains(&path) || path.starts_with("/feature/")
}

fn headers(content_type: &'static str) -> [(header::HeaderName, &'static str); 4] {
    [
        (header::CONTENT_TYPE, content_type),
        (header::CONTENT_SECURITY_POLICY, CSP),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::CACHE_CONTROL, "no-cache"),
    ]
}

async fn page() -> Response {
    (headers("text/html; charset=utf-8"), PAGE).into_response()
}

async fn asset(Path(name): Path<String>) -> Response {
    match ASSETS.iter().find(|a| a.name == name) {
        Some(a) => (headers(a.content_type), a.text).into_response(),
        None => ApiError::not_found("no such workbench asset").into_response(),
    }
}

async fn settings(State(state): State<Arc<AppState>>) -> Response {
    let body = json!({
        "model": state.model_id,
        "read_only": state.config.read_only,
        "writes": state.config.allow_writes.is_some(),
    });
    (headers("application/json"), body.to_string()).into_response()
}

/// The workbench's routes, merged into the server's router unless `--no-ui`.
pub fn routes() -> Router<Arc<AppState>> {
    let mut r = Router::new()
        .route("/ui/settings.json", get(settings))
        .route("/ui/{name}", get(asset))
        .route("/feature/{id}", get(page));
    for p in PAGES {
        r = r.route(p, get(page));
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_module_the_page_imports_is_built_in() {
        let names: Vec<&str> = ASSETS.iter().map(|a| a.name).collect();
        for a in ASSETS.iter().filter(|a| a.name.ends_with(".js")) {
            for line in a.text.lines().filter(|l| l.starts_with("import ")) {
                let module = line
                    .rsplit("from '")
                    .next()
                    .and_then(|s| s.split('\'').next())
                    .and_then(|s| s.strip_prefix("./"))
                    .unwrap_or_else(|| panic!("{}: unexpected import {line}", a.name));
                assert!(
                    names.contains(&module),
                    "{} imports {module}, which is not served",
                    a.name
                );
            }
        }
        assert!(PAGE.contains("/ui/app.js") && PAGE.contains("/ui/style.css"));
    }
}
