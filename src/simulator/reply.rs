//! The simulator's replies: errors in the spec's shape (`ErrorBody`), JSON request bodies read
//! within the body limit, and uids parsed; shared by the routes and the fault layer.

use axum::Json;
use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use uuid::Uuid;

use super::validate::{self};
use crate::service::ErrorBody;

/// The body of a request that must carry JSON (`Content-Type: application/json`, spec,
/// Endpoints), read within [`BODY_LIMIT`]; every rejection is a [`Fail`] in the spec's shape.
pub struct JsonBody(pub(super) Bytes);

impl<S: Send + Sync> FromRequest<S> for JsonBody {
    type Rejection = Fail;

    async fn from_request(request: Request, state: &S) -> Result<Self, Fail> {
        let media_type = request
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split(';').next())
            .map(str::trim);
        if !media_type.is_some_and(|m| m.eq_ignore_ascii_case("application/json")) {
            return Err(fail(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "Unsupported media type",
                format!(
                    "the body must be JSON sent with Content-Type: application/json, not {}",
                    media_type.map_or("no Content-Type".into(), |m| format!("{m:?}"))
                ),
            ));
        }
        Bytes::from_request(request, state)
            .await
            .map(JsonBody)
            .map_err(|rejection| {
                let status = rejection.status();
                fail(status, status_title(status), rejection.body_text())
            })
    }
}

/// The safety net for answers axum gives by itself (405 with an empty body, a path that does
/// not decode, …): any error response that is not JSON is rewritten in the spec's error shape,
/// keeping its status and headers.
pub(super) async fn json_errors(request: Request, next: Next) -> Response {
    let method = request.method().clone();
    let path = request.uri().path().to_owned();
    let response = next.run(request).await;
    let status = response.status();
    let is_json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if !(status.is_client_error() || status.is_server_error()) || is_json {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let text = axum::body::to_bytes(body, 64 * 1024)
        .await
        .map(|b| String::from_utf8_lossy(&b).trim().to_owned())
        .unwrap_or_default();
    let detail = if status == StatusCode::METHOD_NOT_ALLOWED {
        // axum adds `Allow` outside this layer, so it is named rather than quoted.
        format!("{method} is not allowed on {path}; the Allow header lists the methods that are")
    } else if text.is_empty() {
        status.canonical_reason().unwrap_or("error").to_owned()
    } else {
        text
    };
    let rewritten = error(status, status_title(status), detail);
    parts.headers.remove(header::CONTENT_LENGTH);
    parts.headers.remove(header::CONTENT_TYPE);
    let (new_parts, body) = rewritten.into_parts();
    parts.headers.extend(new_parts.headers);
    Response::from_parts(parts, body)
}

/// The error body's `title` for a status.
fn status_title(status: StatusCode) -> &'static str {
    match status {
        StatusCode::BAD_REQUEST => "Invalid request",
        StatusCode::NOT_FOUND => "Not found",
        StatusCode::METHOD_NOT_ALLOWED => "Method not allowed",
        StatusCode::PAYLOAD_TOO_LARGE => "Payload too large",
        StatusCode::UNSUPPORTED_MEDIA_TYPE => "Unsupported media type",
        other => other.canonical_reason().unwrap_or("Error"),
    }
}

/// A response in the spec's error shape.
pub fn error(status: StatusCode, title: &str, detail: impl Into<String>) -> Response {
    Fail(status, ErrorBody::new(title, detail)).into_response()
}

/// A failed request: its status and the spec's error body.
pub struct Fail(StatusCode, ErrorBody);

impl IntoResponse for Fail {
    fn into_response(self) -> Response {
        (self.0, Json(self.1)).into_response()
    }
}

pub(super) type Reply = Result<Response, Fail>;

pub(super) fn fail(status: StatusCode, title: &str, detail: impl Into<String>) -> Fail {
    Fail(status, ErrorBody::new(title, detail))
}

pub(super) fn bad_request(body: ErrorBody) -> Fail {
    Fail(StatusCode::BAD_REQUEST, body)
}

pub(super) fn not_found_error(what: impl std::fmt::Display) -> Fail {
    fail(StatusCode::NOT_FOUND, "Not found", format!("no {what}"))
}

pub(super) async fn not_found(request: Request) -> Response {
    error(
        StatusCode::NOT_FOUND,
        "Not found",
        format!("no such endpoint: {}", request.uri().path()),
    )
}

pub(super) fn parse_uid(text: &str, what: &str) -> Result<Uuid, Fail> {
    Uuid::parse_str(text).map_err(|_| not_found_error(format!("{what} {text}")))
}

/// Parses a JSON body, or answers 400 in the spec's shape. Bodies that are not JSON at all
/// point at the whole document (`""`); the call-creation endpoints parse a `Value` here and
/// check its fields in `validate`, so that their errors point at each field.
/// A typed body, or a 400 whose error points at the offending value (the whole body when it
/// is not JSON at all; the object holding it when a field is missing).
pub(super) fn json_body<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, Fail> {
    let mut deserializer = serde_json::Deserializer::from_slice(body);
    serde_path_to_error::deserialize(&mut deserializer).map_err(|e| {
        let pointer = if e.inner().is_syntax() || e.inner().is_eof() {
            String::new()
        } else {
            json_pointer(e.path())
        };
        bad_request(
            ErrorBody::new("Invalid request", "the body is not valid for this endpoint")
                .with_error("Invalid body", e.inner().to_string(), Some(pointer)),
        )
    })
}

fn json_pointer(path: &serde_path_to_error::Path) -> String {
    use serde_path_to_error::Segment;
    path.iter()
        .fold(String::new(), |base, segment| match segment {
            Segment::Seq { index } => validate::pointer(&base, &index.to_string()),
            Segment::Map { key } => validate::pointer(&base, key),
            Segment::Enum { variant } => validate::pointer(&base, variant),
            Segment::Unknown => base,
        })
}
