//! Model → row: the one place that decides how a field of the service becomes a column.
//!
//! Timestamps become the warehouse's UTC text (`Timestamp::to_warehouse_text`: RFC 3339, six fraction
//! digits, `Z`); a phonetic name the service sends empty becomes NULL, as every absent value
//! is; JSON of unknown shape
//! (`delay`, `priority`, `error_details`, unknown fields) becomes JSON text; custom parameter
//! and variable values are stored as text when they are strings and as JSON text otherwise;
//! `phone_e164` is `+` and the digits of the service's phone number.

use serde_json::Value;

use crate::service::{
    Attempt, AttemptVariable, Extra, Notification, OutboundCall, Outcome, Timestamp,
};

/// The service's columns of `calls` (the derived summary columns are computed in SQL).
/// Text the call holds is borrowed, not copied: a row lives as long as its page's write.
#[derive(Debug, Clone, PartialEq)]
pub struct CallRow<'a> {
    pub uid: String,
    pub schedule_uid: &'a str,
    pub external_id: Option<&'a str>,
    pub status: &'a str,
    pub progress: Option<&'a str>,
    pub is_test_call: Option<bool>,
    pub cooldown_until: Option<String>,
    pub delay: Option<String>,
    pub priority: Option<String>,
    pub attempts_remaining: Option<i64>,
    pub retry_intervals: Option<String>,
    pub created_at: String,
    pub updated_at: String,
    pub phone_number: Option<&'a str>,
    pub phone_e164: Option<String>,
    pub full_name: Option<&'a str>,
    pub first_name: Option<&'a str>,
    pub last_name: Option<&'a str>,
    pub phonetic_full_name: Option<&'a str>,
    pub phonetic_first_name: Option<&'a str>,
    pub phonetic_last_name: Option<&'a str>,
    pub email: Option<&'a str>,
    pub event_date_time: Option<String>,
    pub extra: Option<String>,
    pub content_hash: i64,
}

/// The row of `call`, listed for the schedule whose uid is `schedule_uid` (formatted once a
/// page by the caller); `content_hash` is `call.content_hash()`, computed once by the caller.
pub fn call<'a>(schedule_uid: &'a str, call: &'a OutboundCall, content_hash: u64) -> CallRow<'a> {
    let info = &call.outbound_call_info;
    // Unknown fields of the call and of its contact info, kept together; the info's own
    // unknown fields sit under "outbound_call_info" so nothing collides. Copied only when
    // the info has some (rare): the call's own map is serialized as it is.
    let extra = if info.extra.is_empty() {
        extra_json(&call.extra)
    } else {
        let mut extra = call.extra.clone();
        extra.insert(
            "outbound_call_info".into(),
            Value::Object(info.extra.clone()),
        );
        extra_json(&extra)
    };
    CallRow {
        uid: call.uid.to_string(),
        schedule_uid,
        external_id: call.external_id.as_deref(),
        status: &call.status,
        progress: call.progress.as_deref(),
        is_test_call: call.is_test_call,
        cooldown_until: ts(call.cooldown_until),
        delay: json(call.delay.as_ref()),
        priority: json(call.priority.as_ref()),
        attempts_remaining: call.attempts_remaining,
        retry_intervals: call
            .retry_intervals
            .as_ref()
            .and_then(|r| serde_json::to_string(r).ok()),
        created_at: call.created_at.to_warehouse_text(),
        updated_at: call.updated_at.to_warehouse_text(),
        phone_number: info.phone_number.as_deref(),
        phone_e164: info.phone_number.as_deref().and_then(e164),
        full_name: info.full_name.as_deref(),
        first_name: info.first_name.as_deref(),
        last_name: info.last_name.as_deref(),
        phonetic_full_name: given(info.phonetic_full_name.as_deref()),
        phonetic_first_name: given(info.phonetic_first_name.as_deref()),
        phonetic_last_name: given(info.phonetic_last_name.as_deref()),
        email: info.email.as_deref(),
        event_date_time: ts(info.event_date_time),
        extra,
        // Stored as the same 64 bits, signed: SQLite integers are i64.
        content_hash: content_hash as i64,
    }
}

/// `(name, value)` of each custom parameter.
pub fn custom_parameters(call: &OutboundCall) -> impl Iterator<Item = (&str, Option<String>)> {
    call.outbound_call_info
        .custom_parameters
        .iter()
        .map(|(name, value)| (name.as_str(), scalar_text(value)))
}

#[derive(Debug, Clone, PartialEq)]
pub struct AttemptRow {
    pub uid: String,
    pub position: i64,
    pub status: String,
    pub started_at: Option<String>,
    pub answered_at: Option<String>,
    pub ended_at: Option<String>,
    pub duration: Option<i64>,
    pub created_at: Option<String>,
    pub updated_at: Option<String>,
    pub error_details: Option<String>,
    pub transfer_started_at: Option<String>,
    pub transfer_answered_at: Option<String>,
    pub transfer_destination: Option<String>,
    pub extra: Option<String>,
}

pub fn attempt(position: usize, a: &Attempt) -> AttemptRow {
    AttemptRow {
        uid: a.uid.to_string(),
        position: i64::try_from(position).unwrap_or(i64::MAX),
        status: a.status.clone(),
        started_at: ts(a.started_at),
        answered_at: ts(a.answered_at),
        ended_at: ts(a.ended_at),
        duration: a.duration,
        created_at: ts(a.created_at),
        updated_at: ts(a.updated_at),
        error_details: json(a.error_details.as_ref()),
        transfer_started_at: ts(a.transfer_started_at),
        transfer_answered_at: ts(a.transfer_answered_at),
        transfer_destination: a.transfer_destination.clone(),
        extra: extra_json(&a.extra),
    }
}

/// `(uid, name, created_at, extra)`.
pub fn outcome(o: &Outcome) -> (String, String, Option<String>, Option<String>) {
    (
        o.uid.to_string(),
        o.name.clone(),
        ts(o.created_at),
        extra_json(&o.extra),
    )
}

/// `(uid, name, value, status, created_at, extra)`.
#[allow(clippy::type_complexity)]
pub fn variable(
    v: &AttemptVariable,
) -> (
    String,
    String,
    Option<String>,
    Option<String>,
    Option<String>,
    Option<String>,
) {
    (
        v.uid.to_string(),
        v.name.clone(),
        v.value.as_ref().and_then(scalar_text),
        v.status.clone(),
        ts(v.created_at),
        extra_json(&v.extra),
    )
}

/// `(uid, status, message_count, delivered_at, extra)`.
pub fn notification(
    n: &Notification,
) -> (
    String,
    Option<String>,
    Option<i64>,
    Option<String>,
    Option<String>,
) {
    (
        n.uid.to_string(),
        n.status.clone(),
        n.message_count,
        ts(n.delivered_at),
        extra_json(&n.extra),
    )
}

/// The derived summary columns of `calls`, computed from the children written with the call.
/// They equal what `upsert::summarize` reads back from the child tables with SQL (a test
/// proves it), so a page write need not read its own rows back.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Summary {
    pub attempt_count: i64,
    pub last_attempt_uid: Option<String>,
    pub last_attempt_status: Option<String>,
    pub last_attempt_started_at: Option<String>,
    pub last_attempt_answered_at: Option<String>,
    pub last_attempt_ended_at: Option<String>,
    pub last_attempt_duration: Option<i64>,
    pub outcome_names: Option<String>,
    pub answered: bool,
    pub transferred: bool,
    pub notification_count: i64,
}

/// The summary of a call whose child rows are exactly `attempts` (rows of
/// `call.outbound_call_attempts`, in order), their `call_outcomes` and `notification_count`
/// notifications: an absent key counts as empty.
pub fn summary(call: &OutboundCall, attempts: &[AttemptRow], notification_count: i64) -> Summary {
    // SQL: ORDER BY coalesce(started_at, created_at) DESC, position DESC LIMIT 1 — NULL is the
    // smallest value in SQLite, as `None` is in Rust, and text compares bytewise in both.
    let last = attempts
        .iter()
        .max_by(|a, b| last_attempt_key(a).cmp(&last_attempt_key(b)));
    Summary {
        attempt_count: i64::try_from(attempts.len()).unwrap_or(i64::MAX),
        last_attempt_uid: last.map(|a| a.uid.clone()),
        last_attempt_status: last.map(|a| a.status.clone()),
        last_attempt_started_at: last.and_then(|a| a.started_at.clone()),
        last_attempt_answered_at: last.and_then(|a| a.answered_at.clone()),
        last_attempt_ended_at: last.and_then(|a| a.ended_at.clone()),
        last_attempt_duration: last.and_then(|a| a.duration),
        outcome_names: outcome_names(call),
        answered: attempts.iter().any(|a| a.answered_at.is_some()),
        transferred: attempts.iter().any(|a| a.transfer_started_at.is_some()),
        notification_count,
    }
}

fn last_attempt_key(a: &AttemptRow) -> (Option<&str>, i64) {
    (
        a.started_at.as_deref().or(a.created_at.as_deref()),
        a.position,
    )
}

/// Distinct outcome names, ', '-separated, ordered by the first attempt showing each, then
/// by its earliest `created_at` (NULLs first, as SQL's `min` and `ORDER BY` do), then by name.
fn outcome_names(call: &OutboundCall) -> Option<String> {
    struct Group<'a> {
        position: usize,
        first_at: Option<String>,
        name: &'a str,
    }
    let mut groups: Vec<Group<'_>> = Vec::new();
    let attempts = call.outbound_call_attempts.as_deref().unwrap_or_default();
    for (position, attempt) in attempts.iter().enumerate() {
        for o in attempt.call_outcomes.as_deref().unwrap_or_default() {
            let at = ts(o.created_at);
            match groups.iter_mut().find(|g| g.name == o.name) {
                // Attempts come in position order: a group's first position is where it began.
                Some(g) => {
                    // SQL's min() skips NULLs.
                    g.first_at = match (g.first_at.take(), at) {
                        (Some(a), Some(b)) => Some(a.min(b)),
                        (a, b) => a.or(b),
                    };
                }
                None => groups.push(Group {
                    position,
                    first_at: at,
                    name: &o.name,
                }),
            }
        }
    }
    groups
        .sort_by(|a, b| (a.position, &a.first_at, a.name).cmp(&(b.position, &b.first_at, b.name)));
    let names: Vec<&str> = groups.iter().map(|g| g.name).collect();
    (!names.is_empty()).then(|| names.join(", "))
}

/// `+` and the digits; `None` when there are no digits.
pub fn e164(phone: &str) -> Option<String> {
    let digits: String = phone.chars().filter(char::is_ascii_digit).collect();
    (!digits.is_empty()).then(|| format!("+{digits}"))
}

/// `None` for an empty text: the service sends `""` for a phonetic name it has not got.
fn given(text: Option<&str>) -> Option<&str> {
    text.filter(|t| !t.is_empty())
}

fn ts(t: Option<Timestamp>) -> Option<String> {
    t.map(Timestamp::to_warehouse_text)
}

/// JSON text of a value of unknown shape; `None` for null or absent.
fn json(value: Option<&Value>) -> Option<String> {
    value
        .filter(|v| !v.is_null())
        .and_then(|v| serde_json::to_string(v).ok())
}

/// A string as itself, null as NULL, anything else as JSON text.
fn scalar_text(value: &Value) -> Option<String> {
    match value {
        Value::Null => None,
        Value::String(s) => Some(s.clone()),
        other => serde_json::to_string(other).ok(),
    }
}

fn extra_json(extra: &Extra) -> Option<String> {
    (!extra.is_empty())
        .then(|| serde_json::to_string(extra).ok())
        .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec_call() -> OutboundCall {
        serde_json::from_value(json!({
            "uid": "6f1c1d9e-3a43-4c0b-9f39-0d3c5a3f2b11",
            "external_id": "crm-42", "status": "completed", "progress": "answered",
            "is_test_call": false, "cooldown_until": "2026-01-31T10:00:00+01:00",
            "delay": null, "priority": 3, "retry_intervals": [60, 120],
            "attempts_remaining": 0,
            "created_at": "2026-01-31T09:00:00Z", "updated_at": "2026-01-31T09:05:00.250Z",
            "outbound_call_info": {
                "phone_number": "15550100", "full_name": "Ada Lovelace", "first_name": "Ada",
                "last_name": "Lovelace", "email": "ada@example.com", "event_date_time": null,
                "custom_parameters": {"plan": "gold", "seats": 3, "note": null},
                "timezone": "Europe/London"
            },
            "outbound_call_attempts": [{
                "uid": "9b2e7a55-1111-4c0b-9f39-0d3c5a3f2b11", "status": "hangup",
                "started_at": "2026-01-31T09:01:00Z", "answered_at": null, "ended_at": "2026-01-31T09:03:00Z",
                "duration": 115, "error_details": {"code": "E1"},
                "transfer_started_at": null, "transfer_answered_at": null, "transfer_destination": null,
                "call_outcomes": [], "call_attempts_variables": [
                    {"uid": "0b2e7a55-3333-4c0b-9f39-0d3c5a3f2b11", "name": "callback", "value": true, "status": "confirmed"}
                ]
            }],
            "call_notifications": [],
            "sentiment": "positive"
        }))
        .unwrap()
    }

    #[test]
    fn call_columns() {
        let schedule = uuid::Uuid::from_u128(1).to_string();
        let spec = spec_call();
        let row = call(&schedule, &spec, spec.content_hash());
        assert_eq!(row.schedule_uid, schedule);
        assert_eq!(
            row.cooldown_until.as_deref(),
            Some("2026-01-31T09:00:00.000000Z")
        );
        assert_eq!(row.updated_at, "2026-01-31T09:05:00.250000Z");
        assert_eq!(row.delay, None);
        assert_eq!(row.priority.as_deref(), Some("3"));
        assert_eq!(row.retry_intervals.as_deref(), Some("[60,120]"));
        assert_eq!(row.phone_number, Some("15550100"));
        assert_eq!(row.phone_e164.as_deref(), Some("+15550100"));
        assert_eq!(row.is_test_call, Some(false));
        assert_eq!(
            row.extra.as_deref(),
            Some(r#"{"sentiment":"positive","outbound_call_info":{"timezone":"Europe/London"}}"#)
        );
    }

    #[test]
    fn values_of_any_json_type() {
        let c = spec_call();
        assert_eq!(
            custom_parameters(&c).collect::<Vec<_>>(),
            vec![
                ("note", None),
                ("plan", Some("gold".to_owned())),
                ("seats", Some("3".to_owned())),
            ]
        );
        let a = &c.outbound_call_attempts.as_ref().unwrap()[0];
        let v = variable(&a.call_attempts_variables.as_ref().unwrap()[0]);
        assert_eq!(v.2.as_deref(), Some("true"));
        let row = attempt(0, a);
        assert_eq!(row.error_details.as_deref(), Some(r#"{"code":"E1"}"#));
        assert_eq!(row.answered_at, None);
        assert_eq!(row.extra, None);
    }

    #[test]
    fn e164_from_any_phone_form() {
        assert_eq!(e164("15550100").as_deref(), Some("+15550100"));
        assert_eq!(e164("+44 20 7946 0958").as_deref(), Some("+442079460958"));
        assert_eq!(e164(""), None);
    }
}
