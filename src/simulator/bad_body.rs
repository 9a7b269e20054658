//! Broken list responses, for error-handling tests.

use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};

/// Broken list responses for one schedule, for error-handling tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BadBody {
    /// `200` with a body that is not JSON.
    InvalidJson,
    /// `200` with a call whose `attempts_remaining` is a string.
    WrongTypes,
    /// `200` with a call lacking `updated_at`.
    MissingRequiredField,
    /// `200` with an HTML error page (a misconfigured proxy).
    HtmlErrorPage,
}

impl BadBody {
    pub(super) fn respond(self) -> Response {
        let json = |body: String| {
            (
                StatusCode::OK,
                [(header::CONTENT_TYPE, "application/json")],
                body,
            )
                .into_response()
        };
        match self {
            BadBody::InvalidJson => json("{\"data\": [{\"uid\": ".into()),
            BadBody::WrongTypes => json(
                r#"{"data":[{"uid":"6f1c1d9e-3a43-4c0b-9f39-0d3c5a3f2b11","status":"pending","attempts_remaining":"four","created_at":"2026-01-01T00:00:00Z","updated_at":"2026-01-01T00:00:00Z"}],"pagination":null}"#.into(),
            ),
            BadBody::MissingRequiredField => json(
                r#"{"data":[{"uid":"6f1c1d9e-3a43-4c0b-9f39-0d3c5a3f2b11","status":"pending","created_at":"2026-01-01T00:00:00Z"}],"pagination":null}"#.into(),
            ),
            BadBody::HtmlErrorPage => (
                StatusCode::OK,
                [(header::CONTENT_TYPE, "text/html")],
                "<html><body><h1>Service temporarily unavailable</h1></body></html>",
            )
                .into_response(),
        }
    }
}
