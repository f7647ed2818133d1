//! The error responses: the OpenAI shape `{"error": {"message", "type", "param", "code"}}`
//! with a 4xx/5xx status for the OpenAI routes and the server's own failures, and the CLI's
//! error object (`lql::Error::to_json`) for `/v1/lql`.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

/// An error answered to a client.
#[derive(Debug, Clone)]
pub struct ApiError {
    pub status: StatusCode,
    /// OpenAI's `type`: `invalid_request_error`, `authentication_error`, …
    pub kind: &'static str,
    pub code: &'static str,
    pub message: String,
    pub param: Option<String>,
}

impl ApiError {
    pub fn new(
        status: StatusCode,
        kind: &'static str,
        code: &'static str,
        message: impl Into<String>,
    ) -> ApiError {
        ApiError {
            status,
            kind,
            code,
            message: message.into(),
            param: None,
        }
    }

    /// 400: a request that makes no sense.
    pub fn invalid(message: impl Into<String>) -> ApiError {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            "invalid_request",
            message,
        )
    }

    /// 400 naming the parameter at fault.
    pub fn invalid_param(param: &str, message: impl Into<String>) -> ApiError {
        let mut e = ApiError::invalid(message);
        e.param = Some(param.to_string());
        e
    }

    /// 400: a feature this server does not build (yet).
    pub fn not_supported(param: &str, what: impl Into<String>) -> ApiError {
        let mut e = ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            "not_supported",
            format!("not supported yet: {}", what.into()),
        );
        e.param = Some(param.to_string());
        e
    }

    /// 400: the body is not the JSON the route expects.
    pub fn bad_json(message: impl Into<String>) -> ApiError {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            "invalid_json",
            message,
        )
    }

    /// 413: the body is larger than the server accepts.
    /// 408: the body did not arrive within `--body-timeout`.
    pub fn body_timeout(after: std::time::Duration) -> ApiError {
        ApiError::new(
            StatusCode::REQUEST_TIMEOUT,
            "invalid_request_error",
            "request_timeout",
            format!(
                "the request body did not arrive within {} s",
                after.as_secs()
            ),
        )
    }

    pub fn too_large(limit: usize) -> ApiError {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "invalid_request_error",
            "request_too_large",
            format!("the request body is larger than the server accepts ({limit} bytes)"),
        )
    }

    /// 401: missing or wrong API key.
    pub fn unauthorized() -> ApiError {
        ApiError::new(
            StatusCode::UNAUTHORIZED,
            "authentication_error",
            "invalid_api_key",
            "missing or wrong API key: send `Authorization: Bearer KEY`",
        )
    }

    /// 429: every slot busy and the queue full.
    pub fn overloaded(queue: usize) -> ApiError {
        ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            "rate_limit_error",
            "server_busy",
            format!(
                "the server is busy: every slot is decoding and {queue} requests wait; retry later"
            ),
        )
    }

    /// 503: the server is shutting down.
    /// 503: over `--max-connections` (answered on the raw connection, then closed).
    pub fn too_many_connections() -> ApiError {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "server_error",
            "too_many_connections",
            "the server has too many open connections; retry later",
        )
    }

    pub fn shutting_down() -> ApiError {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "server_error",
            "shutting_down",
            "the server is shutting down",
        )
    }

    /// 404: an unknown model or route.
    pub fn not_found(message: impl Into<String>) -> ApiError {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "invalid_request_error",
            "not_found",
            message,
        )
    }

    /// 500: a failure inside the server.
    pub fn internal(message: impl Into<String>) -> ApiError {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "server_error",
            "internal_error",
            message,
        )
    }

    /// The JSON body.
    pub fn body(&self) -> serde_json::Value {
        json!({
            "error": {
                "message": self.message,
                "type": self.kind,
                "param": self.param,
                "code": self.code,
            }
        })
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, axum::Json(self.body())).into_response()
    }
}

/// The HTTP status for an LQL error on `/v1/lql`.
pub fn lql_status(e: &lql::Error) -> StatusCode {
    use lql::ErrorKind as K;
    match e.kind {
        K::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        K::Io | K::Format => StatusCode::UNPROCESSABLE_ENTITY,
        K::Interrupted => StatusCode::SERVICE_UNAVAILABLE,
        _ if e.code() == crate::access::REFUSED_CODE => StatusCode::FORBIDDEN,
        _ => StatusCode::BAD_REQUEST,
    }
}
