//! The shape of an API refusal (docs/probe-gateway.md "HTTP API"): a
//! status, a stable code and a message, as JSON `{error, message}` (with
//! `retry_after` for a limit).

use axum::Json;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::signed::AuthRefusal;

/// The error body of every refusal.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ErrorBody {
    pub error: String,
    pub message: String,
}

/// A refusal of an API request: status, stable code, message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiRefusal {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
    /// Seconds until a limit lets the request through (a `retry_after`
    /// member and a Retry-After header).
    pub retry_after: Option<i64>,
}

impl ApiRefusal {
    pub(crate) fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
            retry_after: None,
        }
    }

    pub(crate) fn internal(e: impl std::fmt::Display) -> Self {
        tracing::error!(error = %e, "internal error");
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "internal error",
        )
    }
}

impl From<AuthRefusal> for ApiRefusal {
    fn from(r: AuthRefusal) -> Self {
        Self::new(StatusCode::UNAUTHORIZED, r.code(), r.to_string())
    }
}

impl IntoResponse for ApiRefusal {
    fn into_response(self) -> Response {
        metrics::counter!("rdv_gateway_refusals_total", "code" => self.code).increment(1);
        if let Some(secs) = self.retry_after {
            let body = json!({"error": self.code, "message": self.message, "retry_after": secs});
            return (
                self.status,
                [(header::RETRY_AFTER, secs.to_string())],
                Json(body),
            )
                .into_response();
        }
        (
            self.status,
            Json(ErrorBody {
                error: self.code.into(),
                message: self.message,
            }),
        )
            .into_response()
    }
}
