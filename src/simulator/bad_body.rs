//! Broken list responses, for error-handling tests.

use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use uuid::Uuid;

use crate::service::CallPage;

/// How deep [`BadBody::DeeplyNested`] nests its arrays: far beyond any decoder's limit
/// (serde_json's is 128), a few kilobytes on the wire.
const NESTING: usize = 5_000;

/// What [`BadBody::InvalidUtf8Name`] puts in the name before the body is written, then turns
/// into the byte 0xFF: serde_json cannot write a byte that is not UTF-8 itself. ASCII that
/// needs no escape, and that no seeded text holds.
const INVALID_BYTE_MARK: &str = "~~invalid-utf8~~";

/// Broken list responses for one schedule, for error-handling tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BadBody {
    /// `200` with a body that is not JSON.
    InvalidJson,
    /// `200` with a call lacking `updated_at`.
    MissingRequiredField,
    /// `200` with an HTML error page (a misconfigured proxy).
    HtmlErrorPage,
    /// `200` with the page as it is, except that this call's `first_name` ends in the byte
    /// 0xFF, which is not UTF-8 (a name misspelt by an old system): the body is not valid
    /// UTF-8, and so not valid JSON. The call's other fields, and the rest of the page, are
    /// the truth.
    InvalidUtf8Name(Uuid),
    /// `200` with the page as it is, except that this call's `first_name` ends in a NUL
    /// (`\u0000`, which JSON allows and PostgreSQL's text does not). The call's other fields,
    /// and the rest of the page, are the truth.
    NulInName(Uuid),
    /// `200` with a call holding, in a field of its own, arrays nested 5,000 deep:
    /// valid JSON that no decoder with a depth limit reads.
    DeeplyNested,
}

impl BadBody {
    /// Whether the response replaces the page; otherwise it is the page the simulator
    /// serves, garbled ([`Self::garble`]).
    pub(super) fn replaces_the_page(self) -> bool {
        !matches!(self, BadBody::InvalidUtf8Name(_) | BadBody::NulInName(_))
    }

    pub(super) fn respond(self) -> Response {
        match self {
            BadBody::InvalidJson => json("{\"data\": [{\"uid\": "),
            BadBody::MissingRequiredField => json(
                r#"{"data":[{"uid":"6f1c1d9e-3a43-4c0b-9f39-0d3c5a3f2b11","status":"pending","created_at":"2026-01-01T00:00:00Z"}],"pagination":null}"#,
            ),
            BadBody::HtmlErrorPage => (
                StatusCode::OK,
                [(header::CONTENT_TYPE, "text/html")],
                "<html><body><h1>Service temporarily unavailable</h1></body></html>",
            )
                .into_response(),
            BadBody::DeeplyNested => json(format!(
                r#"{{"data":[{{"uid":"6f1c1d9e-3a43-4c0b-9f39-0d3c5a3f2b11","status":"pending","created_at":"2026-01-01T00:00:00Z","updated_at":"2026-01-01T00:00:00Z","nested":{}{}}}],"pagination":null}}"#,
                "[".repeat(NESTING),
                "]".repeat(NESTING)
            )),
            BadBody::InvalidUtf8Name(_) | BadBody::NulInName(_) => {
                unreachable!("garbles the page rather than replacing it")
            }
        }
    }

    /// `page` as the list endpoint serves it, garbled as this asks.
    pub(super) fn garble(self, page: &CallPage) -> Response {
        let (call, ending) = match self {
            BadBody::InvalidUtf8Name(call) => (call, INVALID_BYTE_MARK),
            BadBody::NulInName(call) => (call, "\0"),
            _ => return self.respond(),
        };
        let mut page = page.clone();
        for listed in page.data.iter_mut().filter(|c| c.uid == call) {
            let name = &mut listed.outbound_call_info.first_name;
            *name = Some(format!("{}{ending}", name.as_deref().unwrap_or_default()));
        }
        let text = serde_json::to_string(&page).unwrap_or_default();
        let mut pieces = text.split(INVALID_BYTE_MARK);
        let mut body = pieces.next().unwrap_or_default().as_bytes().to_vec();
        for piece in pieces {
            body.push(0xFF);
            body.extend_from_slice(piece.as_bytes());
        }
        json(body)
    }
}

fn json(body: impl Into<axum::body::Body>) -> Response {
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        body.into(),
    )
        .into_response()
}
