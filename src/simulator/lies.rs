//! A service that lies about one call of every list page, the rest of the page its truth:
//! what a faulty node, a proxy or a half-migrated service sends (issue 53). The simulator's
//! state is never touched; only the answer is.

use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::Value;
use uuid::Uuid;

use crate::service::{CallPage, Timestamp};

/// What a list page says wrongly about one of its calls: the page's first.
#[derive(Debug, Clone, PartialEq)]
pub enum Lie {
    /// The call is stamped this many seconds after the service's clock (0: the clock
    /// itself, later than every honest call yet not from the future) and listed last, where
    /// that stamp sorts: a stamp ahead of the order.
    StampAhead { secs: i64 },
    /// The call carries this uid: a call of another schedule listed in its place.
    ForeignUid(Uuid),
    /// The page's second call carries the first's uid: one uid twice in a page, the call
    /// it was hidden.
    UidTwice,
    /// The call's `field` holds this JSON value instead (`"yes"` for a boolean, `2.5` for an
    /// integer, a timestamp that does not parse, `null` for a value it needs…).
    Mistyped { field: String, value: Value },
}

impl Lie {
    /// `page`, served at `now`, with this lie told.
    pub(super) fn tell(&self, page: &CallPage, now: Timestamp) -> Response {
        let mut body = match serde_json::to_value(page) {
            Ok(body) => body,
            Err(error) => {
                return (StatusCode::INTERNAL_SERVER_ERROR, error.to_string()).into_response();
            }
        };
        if let Some(Value::Array(calls)) = body.get_mut("data") {
            self.apply(calls, now);
        }
        (
            StatusCode::OK,
            [(header::CONTENT_TYPE, "application/json")],
            body.to_string(),
        )
            .into_response()
    }

    fn apply(&self, calls: &mut Vec<Value>, now: Timestamp) {
        if calls.is_empty() {
            return;
        }
        match self {
            Lie::StampAhead { secs } => {
                let mut call = calls.remove(0);
                let stamp = Timestamp::from_unix_nanos(
                    now.unix_nanos() + i128::from(*secs) * 1_000_000_000,
                )
                .unwrap_or(now);
                call["updated_at"] = Value::String(stamp.to_rfc3339());
                calls.push(call);
            }
            Lie::ForeignUid(uid) => calls[0]["uid"] = Value::String(uid.to_string()),
            Lie::UidTwice => {
                if calls.len() > 1 {
                    calls[1]["uid"] = calls[0]["uid"].clone();
                }
            }
            Lie::Mistyped { field, value } => calls[0][field.as_str()] = value.clone(),
        }
    }
}
